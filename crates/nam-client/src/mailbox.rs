//! Mailboxes: many-to-one queues of small messages in server memory (the packetizer and
//! mailbox of Ploumidis et al. 2023, §4.4). The owner creates one and hands out its global
//! address; senders of the same protection domain open it by that address and send with
//! one-sided operations only: a compare-and-swap on `tail` takes a ticket, a put with a
//! signal fills the slot (its `seq` word last); the owner polls the slot's `seq` word,
//! reads the message and frees slots in batches by publishing `head`. The server does no
//! work per message; its domain check guards who may open the mailbox. The byte layout is
//! [`nam_proto::mailbox`] (and `docs/protocol.md`).
//!
//! The protocol is written once, over the [`Path`] the client's path table gives the
//! mailbox's memory: on the same host the mailbox is mapped and its steps are plain loads,
//! stores and CPU atomics ([`Path::Direct`]); over RMA they are UCX atomics and a put with a
//! signal. A server reached through messages ([`Path::Messages`]) executes each send whole
//! (claim and fill in one request), as it executes every operation on that path. All three
//! kinds of sender share one mailbox: the CPU's atomics on mapped words are the atomics
//! UCX's shared-memory transport and the server use.

use crate::allocation::{AllocOptions, Allocation};
use crate::client::Client;
use crate::constants::{MAILBOX_PUBLISH_DIVISOR, MAILBOX_SLEEP_MAX, MAILBOX_SPIN_POLLS};
use crate::error::{Error, Result};
use crate::path::{Atomic, Path, SignalPut};
use crate::signal::SignalOp;
use nam_proto::gas::GasRequest;
use nam_proto::mailbox::*;
use nam_proto::{AtomicKind, GlobalAddress, Request, Status};
use std::time::{Duration, Instant};

/// A mailbox's bytes as this client reaches them: the allocation, the header's offset in
/// it, the geometry and the path of every step.
#[derive(Debug)]
struct Memory {
    allocation: Allocation,
    base: u64,
    layout: MailboxLayout,
    path: Path,
}

impl Memory {
    /// The mailbox at `base` of `allocation` (range checked here), reached as `client`'s
    /// path table says for the allocation's words.
    fn new(client: &Client, allocation: Allocation, base: u64, layout: MailboxLayout) -> Result<Memory> {
        allocation.target(base, layout.total_len() as usize)?;
        let path = client.word_path(&allocation);
        Ok(Memory { allocation, base, layout, path })
    }

    /// The memory's words as `client` reaches them.
    fn on<'a>(&'a self, client: &'a Client) -> Reach<'a> {
        Reach { client, memory: self }
    }
}

/// The steps of the protocol on a mailbox's memory, at offsets from its header. The one
/// implementation outside tests is [`Reach`] (a [`Path`] of the client's table).
trait Words {
    /// A plain read of a word (no read-modify-write: pollers must not take the line away
    /// from writers); acquire where the memory is this process's.
    fn load(&self, at: u64) -> Result<u64>;
    /// Compare-and-swap; returns the old word.
    fn compare_swap(&self, at: u64, compare: u64, value: u64) -> Result<u64>;
    /// Stores a word for other processes to see (release).
    fn store(&self, at: u64, value: u64) -> Result<()>;
    /// Reads bytes.
    fn get(&self, at: u64, buffer: &mut [u8]) -> Result<()>;
    /// Writes `data` at `at`, then (ordered after it) sets the word at `signal` to `value`.
    fn put_signal(&self, at: u64, data: &[u8], signal: u64, value: u64) -> Result<()>;
    /// Whether one get reads its range as a snapshot (see [`Path::gets_are_snapshots`]).
    fn gets_are_snapshots(&self) -> bool;
}

/// A mailbox's memory reached through the client's path for it.
struct Reach<'a> {
    client: &'a Client,
    memory: &'a Memory,
}

impl Words for Reach<'_> {
    fn load(&self, at: u64) -> Result<u64> {
        let m = self.memory;
        m.path.load(&self.client.session, &m.allocation, m.base + at)
    }
    fn compare_swap(&self, at: u64, compare: u64, value: u64) -> Result<u64> {
        let m = self.memory;
        let atomic = Atomic { op: AtomicKind::CompareSwap, value, compare };
        m.path.atomic(&self.client.session, &m.allocation, m.base + at, atomic)
    }
    fn store(&self, at: u64, value: u64) -> Result<()> {
        let m = self.memory;
        let atomic = Atomic { op: AtomicKind::Swap, value, compare: 0 };
        m.path.atomic(&self.client.session, &m.allocation, m.base + at, atomic).map(drop)
    }
    fn get(&self, at: u64, buffer: &mut [u8]) -> Result<()> {
        let m = self.memory;
        m.path.get(&self.client.session, &m.allocation, m.base + at, buffer)
    }
    fn put_signal(&self, at: u64, data: &[u8], signal: u64, value: u64) -> Result<()> {
        let m = self.memory;
        let (offset, word_offset) = (m.base + at, m.base + signal);
        let put = SignalPut {
            data: &m.allocation,
            offset,
            bytes: data,
            word: &m.allocation,
            word_offset,
            value,
            op: SignalOp::Set,
        };
        m.path.put_signal(&self.client.session, put)
    }
    fn gets_are_snapshots(&self) -> bool {
        self.memory.path.gets_are_snapshots()
    }
}

/// What one compare-and-swap on `tail` gave a sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// This ticket's slot is the sender's.
    Ticket(u64),
    /// Every slot holds a message the owner has not consumed (as far as `head` says).
    Full,
    /// Another sender took the ticket tried; the sender's guess of `tail` is corrected.
    Lost,
}

/// One attempt to take the next ticket, if a slot is free. `tail` is the caller's guess
/// (corrected by a lost compare-and-swap), `head` its cached `head` (re-read only when the
/// mailbox looks full, so polling owners are not disturbed).
fn claim(words: &impl Words, layout: MailboxLayout, tail: &mut u64, head: &mut u64) -> Result<Claim> {
    let slots = layout.slots as u64;
    let mut t = *tail;
    if t.wrapping_sub(*head) >= slots {
        *head = words.load(MAILBOX_HEAD_AT)?;
        // tail >= head always: a guess below head is merely stale.
        t = t.max(*head);
        if t - *head >= slots {
            *tail = t;
            return Ok(Claim::Full);
        }
    }
    let old = words.compare_swap(MAILBOX_TAIL_AT, t, t + 1)?;
    if old == t {
        *tail = t + 1;
        Ok(Claim::Ticket(t))
    } else {
        *tail = old;
        Ok(Claim::Lost)
    }
}

/// Fills ticket `ticket`'s slot: length and sender, payload, then `seq` (ordered last).
/// `scratch` is reused between messages.
fn fill(
    words: &impl Words,
    layout: MailboxLayout,
    (ticket, sender): (u64, u32),
    data: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<()> {
    debug_assert!(data.len() <= layout.slot_size as usize);
    scratch.clear();
    scratch.extend_from_slice(&(data.len() as u32).to_le_bytes());
    scratch.extend_from_slice(&sender.to_le_bytes());
    scratch.extend_from_slice(data);
    let slot = layout.slot_at(ticket);
    words.put_signal(slot + 8, scratch, slot, ticket + 1)
}

/// The message of ticket `head`, if complete: copies it into `buffer` (at least the slot
/// size) and returns its sender and length. The slot stays the owner's until it publishes a
/// `head` above `head`. Where gets are snapshots, one get of the whole slot (into
/// `whole`); elsewhere the `seq` word first, then (its writer stored `seq` last) the rest.
fn take(
    words: &impl Words,
    layout: MailboxLayout,
    head: u64,
    buffer: &mut [u8],
    whole: &mut Vec<u8>,
) -> Result<Option<(u32, usize)>> {
    let slot = layout.slot_at(head);
    let slot_size = layout.slot_size as usize;
    // Length in the meta word's low half, bounded by the slot against a corrupt word.
    let meta = |meta: u64| ((meta >> 32) as u32, (meta as u32 as usize).min(slot_size));
    let payload = MAILBOX_SLOT_HEADER_LEN as usize;
    if words.gets_are_snapshots() {
        whole.resize(payload + slot_size, 0);
        words.get(slot, whole)?;
        let word = |at: usize| u64::from_le_bytes(whole[at..at + 8].try_into().expect("8 bytes"));
        if word(0) != head + 1 {
            return Ok(None);
        }
        let (sender, len) = meta(word(8));
        buffer[..len].copy_from_slice(&whole[payload..payload + len]);
        return Ok(Some((sender, len)));
    }
    if words.load(slot)? != head + 1 {
        return Ok(None);
    }
    let (sender, len) = meta(words.load(slot + 8)?);
    words.get(slot + payload as u64, &mut buffer[..len])?;
    Ok(Some((sender, len)))
}

/// The receiving end, held by the owner (who alone advances `head`).
#[derive(Debug)]
pub struct Mailbox {
    memory: Memory,
    /// Messages consumed.
    head: u64,
    /// The `head` senders see.
    published: u64,
    address: GlobalAddress,
    /// A whole slot, for paths that read one in a single snapshot.
    slot_buffer: Vec<u8>,
}

/// A sending end, opened by address.
#[derive(Debug)]
pub struct MailboxSender {
    memory: Memory,
    /// Last seen `head` (only grows, so a stale value errs on the side of "full").
    head: u64,
    /// Guess of `tail`, corrected by each compare-and-swap.
    tail: u64,
    /// Length, sender and payload of the message being sent.
    scratch: Vec<u8>,
    /// This process's id (`getpid` is a system call; not made per message).
    pid: u32,
}

/// One received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Process id of the sender.
    pub sender: u32,
    /// The payload.
    pub data: Vec<u8>,
}

impl Mailbox {
    /// Creates a mailbox of `slots` slots (a power of two) of `slot_size` payload bytes each
    /// (see [`MAILBOX_SLOT_SIZE_DEFAULT`]) on server `server` (`None`: round robin).
    pub fn create(client: &Client, slots: u32, slot_size: u32, server: Option<usize>) -> Result<Mailbox> {
        let layout = MailboxLayout::new(slot_size, slots)
            .ok_or(Error::InvalidArgument("mailbox slots must be a power of two up to 2^20, slot size 1..=64 KiB"))?;
        let allocation = client.alloc(layout.total_len(), &AllocOptions { server, ..Default::default() })?;
        client.put_sync(&allocation, 0, &layout.encode_header())?;
        let address = client.global_address(&allocation, 0)?;
        let memory = Memory::new(client, allocation, 0, layout)?;
        Ok(Mailbox { memory, head: 0, published: 0, address, slot_buffer: Vec::new() })
    }

    /// The address senders open it by.
    pub fn address(&self) -> GlobalAddress {
        self.address
    }

    /// Its geometry.
    pub fn layout(&self) -> MailboxLayout {
        self.memory.layout
    }

    /// Whether it is polled with plain loads of the mapped mailbox (same host).
    pub fn is_mapped(&self) -> bool {
        self.memory.path == Path::Direct
    }

    /// The next message, if one is complete; never waits. Messages come in ticket order,
    /// so each sender's in the order it sent them.
    pub fn try_recv(&mut self, client: &Client) -> Result<Option<Message>> {
        let mut buffer = vec![0u8; self.memory.layout.slot_size as usize];
        Ok(self.try_recv_into(client, &mut buffer)?.map(|(sender, len)| {
            buffer.truncate(len);
            Message { sender, data: buffer }
        }))
    }

    /// As [`Mailbox::try_recv`], into `buffer` (at least the slot size): returns the sender
    /// and the message length.
    pub fn try_recv_into(&mut self, client: &Client, buffer: &mut [u8]) -> Result<Option<(u32, usize)>> {
        let slot_size = self.memory.layout.slot_size as usize;
        if buffer.len() < slot_size {
            return Err(Error::InvalidArgument("receive buffer shorter than the mailbox's slot size"));
        }
        let layout = self.memory.layout;
        let words = self.memory.on(client);
        let received = take(&words, layout, self.head, buffer, &mut self.slot_buffer)?;
        // Free slots in batches; and when idle, publish what is left so senders waiting on a
        // full mailbox see it.
        if received.is_some() {
            self.head += 1;
        }
        let batch = (layout.slots as u64 / MAILBOX_PUBLISH_DIVISOR).max(1);
        if self.head - self.published >= batch || (received.is_none() && self.published != self.head) {
            words.store(MAILBOX_HEAD_AT, self.head)?;
            self.published = self.head;
        }
        Ok(received)
    }

    /// Waits up to `timeout` for the next message ([`Error::WaitTimeout`] after it).
    pub fn recv(&mut self, client: &Client, timeout: Duration) -> Result<Message> {
        let deadline = Instant::now() + timeout;
        let mut polls = 0u32;
        loop {
            if let Some(message) = self.try_recv(client)? {
                return Ok(message);
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout { timeout_ms: timeout.as_millis() as u64, last: self.head });
            }
            polls = polls.saturating_add(1);
            if polls > MAILBOX_SPIN_POLLS {
                let micros = (polls / MAILBOX_SPIN_POLLS) as u64;
                std::thread::sleep(Duration::from_micros(micros).min(MAILBOX_SLEEP_MAX));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Frees the mailbox's memory (senders then fail with a typed error).
    pub fn destroy(self, client: &Client) -> Result<()> {
        client.free(&self.memory.allocation)
    }
}

impl MailboxSender {
    /// Opens the mailbox at `address` (the server checks the protection domain).
    pub fn open(client: &Client, address: GlobalAddress) -> Result<MailboxSender> {
        let (allocation, base) = client.resolve(address)?;
        if !base.is_multiple_of(8) {
            return Err(Error::Misaligned { offset: base });
        }
        let mut header = [0u8; MAILBOX_HEADER_LEN as usize];
        client.get(&allocation, base, &mut header)?;
        let layout = MailboxLayout::decode_header(&header)
            .ok_or(Error::InvalidArgument("the global address does not point to a mailbox"))?;
        let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap());
        let (head, tail) = (word(MAILBOX_HEAD_AT as usize), word(MAILBOX_TAIL_AT as usize));
        let memory = Memory::new(client, allocation, base, layout)?;
        let scratch = Vec::with_capacity(8 + layout.slot_size as usize);
        Ok(MailboxSender { memory, head, tail, scratch, pid: std::process::id() })
    }

    /// Whether messages go by plain stores into the mapped mailbox (same host).
    pub fn is_mapped(&self) -> bool {
        self.memory.path == Path::Direct
    }

    /// Releases this sender's hold on the mailbox's memory (which lives while its owner or
    /// any sender holds it).
    pub fn close(self, client: &Client) -> Result<()> {
        client.free(&self.memory.allocation)
    }

    /// Sends `data` (at most the slot size). A full mailbox gives [`Error::MailboxFull`] at
    /// once and writes nothing: retry later. Returns when the message is in the slot.
    pub fn send(&mut self, client: &Client, data: &[u8]) -> Result<()> {
        if data.len() > self.memory.layout.slot_size as usize {
            return Err(Error::InvalidArgument("message longer than the mailbox's slot size"));
        }
        if self.memory.path == Path::Messages {
            return self.send_executed_by_server(client, data);
        }
        let layout = self.memory.layout;
        let words = self.memory.on(client);
        let mut deadline = None;
        let ticket = loop {
            match claim(&words, layout, &mut self.tail, &mut self.head)? {
                Claim::Ticket(ticket) => break ticket,
                Claim::Full => return Err(Error::MailboxFull { slots: layout.slots }),
                Claim::Lost => {
                    // Lost a race to another sender; the clock is read only then.
                    let timeout = client.config().timeout;
                    if Instant::now() >= *deadline.get_or_insert_with(|| Instant::now() + timeout) {
                        return Err(Error::WaitTimeout { timeout_ms: timeout.as_millis() as u64, last: self.tail });
                    }
                    std::hint::spin_loop();
                }
            }
        };
        fill(&words, layout, (ticket, self.pid), data, &mut self.scratch)
    }

    /// The message path: the server claims and fills the slot in one request.
    fn send_executed_by_server(&mut self, client: &Client, data: &[u8]) -> Result<()> {
        let request = Request::Gas(GasRequest::MailboxSend {
            handle: self.memory.allocation.handle,
            offset: self.memory.base,
            sender: self.pid,
            data: data.to_vec(),
        });
        let server = self.memory.allocation.server;
        match client.lock().call(server, &request, "mailbox send", client.config().timeout) {
            Ok(_) => Ok(()),
            Err(Error::Refused { status: Status::MailboxFull, .. }) => {
                Err(Error::MailboxFull { slots: self.memory.layout.slots })
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A mailbox in ordinary memory, stepped as a mapped one is (plain loads and stores,
    /// `seq` last): the protocol without a server.
    struct Local(RefCell<Vec<u8>>, bool);

    impl Local {
        fn new(layout: MailboxLayout, snapshots: bool) -> Local {
            let mut bytes = vec![0u8; layout.total_len() as usize];
            bytes[..MAILBOX_HEADER_LEN as usize].copy_from_slice(&layout.encode_header());
            Local(RefCell::new(bytes), snapshots)
        }
        fn word(&self, at: u64) -> u64 {
            u64::from_le_bytes(self.0.borrow()[at as usize..at as usize + 8].try_into().unwrap())
        }
        fn set(&self, at: u64, value: u64) {
            self.0.borrow_mut()[at as usize..at as usize + 8].copy_from_slice(&value.to_le_bytes());
        }
    }

    impl Words for Local {
        fn load(&self, at: u64) -> Result<u64> {
            Ok(self.word(at))
        }
        fn compare_swap(&self, at: u64, compare: u64, value: u64) -> Result<u64> {
            let old = self.word(at);
            if old == compare {
                self.set(at, value);
            }
            Ok(old)
        }
        fn store(&self, at: u64, value: u64) -> Result<()> {
            self.set(at, value);
            Ok(())
        }
        fn get(&self, at: u64, buffer: &mut [u8]) -> Result<()> {
            buffer.copy_from_slice(&self.0.borrow()[at as usize..at as usize + buffer.len()]);
            Ok(())
        }
        fn put_signal(&self, at: u64, data: &[u8], signal: u64, value: u64) -> Result<()> {
            self.0.borrow_mut()[at as usize..at as usize + data.len()].copy_from_slice(data);
            self.set(signal, value);
            Ok(())
        }
        fn gets_are_snapshots(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn tickets_come_in_order_and_a_full_mailbox_refuses_without_writing() {
        for snapshots in [false, true] {
            let layout = MailboxLayout::new(16, 2).unwrap();
            let m = Local::new(layout, snapshots);
            let (mut tail, mut head, mut scratch, mut whole) = (0, 0, Vec::new(), Vec::new());
            for i in 0..2u8 {
                assert_eq!(claim(&m, layout, &mut tail, &mut head).unwrap(), Claim::Ticket(i as u64));
                fill(&m, layout, (i as u64, 7), &[i; 16], &mut scratch).unwrap();
            }
            assert_eq!(claim(&m, layout, &mut tail, &mut head).unwrap(), Claim::Full);
            let mut buffer = [0u8; 16];
            assert_eq!(take(&m, layout, 0, &mut buffer, &mut whole).unwrap(), Some((7, 16)));
            assert_eq!(buffer, [0; 16]);
            // Not yet published: still full for senders.
            assert_eq!(claim(&m, layout, &mut tail, &mut head).unwrap(), Claim::Full);
            m.store(MAILBOX_HEAD_AT, 1).unwrap();
            assert_eq!(claim(&m, layout, &mut tail, &mut head).unwrap(), Claim::Ticket(2));
            assert_eq!(take(&m, layout, 1, &mut buffer, &mut whole).unwrap(), Some((7, 16)));
            assert_eq!(buffer, [1; 16], "the refused claim overwrote nothing");
            assert_eq!(take(&m, layout, 2, &mut buffer, &mut whole).unwrap(), None, "claimed but not filled");
            fill(&m, layout, (2, 9), b"abc", &mut scratch).unwrap();
            assert_eq!(take(&m, layout, 2, &mut buffer, &mut whole).unwrap(), Some((9, 3)));
        }
    }

    #[test]
    fn a_stale_tail_guess_is_corrected_by_the_compare_and_swap() {
        let layout = MailboxLayout::new(8, 4).unwrap();
        let m = Local::new(layout, false);
        let (mut a, mut b, mut head) = (0, 0, 0);
        assert_eq!(claim(&m, layout, &mut a, &mut head).unwrap(), Claim::Ticket(0));
        assert_eq!(claim(&m, layout, &mut b, &mut head).unwrap(), Claim::Lost, "b's guess 0 was stale");
        assert_eq!(claim(&m, layout, &mut b, &mut head).unwrap(), Claim::Ticket(1), "corrected by the loss");
        assert_eq!(claim(&m, layout, &mut a, &mut head).unwrap(), Claim::Lost);
        assert_eq!(claim(&m, layout, &mut a, &mut head).unwrap(), Claim::Ticket(2));
    }

    #[test]
    fn a_corrupt_length_is_cut_to_the_slot() {
        let layout = MailboxLayout::new(16, 2).unwrap();
        let m = Local::new(layout, false);
        let slot = layout.slot_at(0);
        m.put_signal(slot + 8, &(1000u64 | 9 << 32).to_le_bytes(), slot, 1).unwrap();
        let mut buffer = [0u8; 16];
        assert_eq!(take(&m, layout, 0, &mut buffer, &mut Vec::new()).unwrap(), Some((9, 16)));
    }
}
