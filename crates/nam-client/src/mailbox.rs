//! Mailboxes: many-to-one queues of small messages in server memory (the packetizer and
//! mailbox of Ploumidis et al. 2023 §4.4). The owner creates one and hands out its global address;
//! senders of the same protection domain open it by that address and send with one-sided
//! operations only: a compare-and-swap takes a ticket, a put with a signal fills the slot.
//! The server does no work per message; its domain check guards who may open the mailbox.
//! Three ways, one protocol: on the same host the mailbox is mapped and both ends use plain
//! loads and stores ([`crate::mailbox_mapped`]); over RMA the same steps are UCX atomics and
//! a put with a signal; a server reached through messages delivers each message itself.
//! The byte layout is [`nam_proto::mailbox`] (and `docs/protocol.md`).

use crate::allocation::{AllocOptions, Allocation};
use crate::client::{Client, HEALTH_CHECK_OPS};
use crate::error::{Error, Result};
use crate::link::DataPath;
use crate::mailbox_mapped::{ClaimError, MappedMailbox};
use crate::signal::{Signal, SignalOp};
use nam_proto::gas::GasRequest;
use nam_proto::mailbox::*;
use nam_proto::GlobalAddress;
use nam_proto::{Request, Status};
use std::time::{Duration, Instant};

/// The receiving end, held by the owner (who alone advances `head`).
#[derive(Debug)]
pub struct Mailbox {
    allocation: Allocation,
    layout: MailboxLayout,
    /// The server is reached through messages, which it executes one at a time: one get
    /// reads a slot consistently.
    by_message: bool,
    /// Messages consumed.
    head: u64,
    /// The `head` senders see.
    published: u64,
    address: GlobalAddress,
    /// The mailbox mapped here (same host), if it is.
    mapped: Option<MappedMailbox>,
    /// Empty polls of the mapped mailbox (which never reach UCX): every
    /// [`HEALTH_CHECK_OPS`]th progresses the worker, so a dead server is noticed.
    idle_polls: u32,
}

/// A sending end, opened by address.
#[derive(Debug)]
pub struct MailboxSender {
    allocation: Allocation,
    base: u64,
    layout: MailboxLayout,
    /// Last seen `head` (only grows, so a stale value errs on the side of "full").
    head: u64,
    /// Guess of `tail`, corrected by each compare-and-swap.
    tail: u64,
    scratch: Vec<u8>,
    /// This process's id (`getpid` is a system call; not made per message).
    pid: u32,
    /// The server is reached through messages: it delivers each message in one request.
    by_message: bool,
    /// The mailbox mapped here (same host), if it is.
    mapped: Option<MappedMailbox>,
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
        let by_message = client.data_path(allocation.server) == Some(DataPath::Messages);
        let mapped = mapping(client, &allocation, 0, layout)?;
        Ok(Mailbox { allocation, layout, by_message, head: 0, published: 0, address, mapped, idle_polls: 0 })
    }

    /// The address senders open it by.
    pub fn address(&self) -> GlobalAddress {
        self.address
    }

    /// Its geometry.
    pub fn layout(&self) -> MailboxLayout {
        self.layout
    }

    /// Whether it is polled with plain loads of the mapped mailbox (same host).
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// The next message, if one is complete; never waits. Messages come in ticket order,
    /// so each sender's in the order it sent them.
    pub fn try_recv(&mut self, client: &Client) -> Result<Option<Message>> {
        let mut buffer = vec![0u8; self.layout.slot_size as usize];
        Ok(self.try_recv_into(client, &mut buffer)?.map(|(sender, len)| {
            buffer.truncate(len);
            Message { sender, data: buffer }
        }))
    }

    /// As [`Mailbox::try_recv`], into `buffer` (at least the slot size): returns the sender
    /// and the message length.
    pub fn try_recv_into(&mut self, client: &Client, buffer: &mut [u8]) -> Result<Option<(u32, usize)>> {
        let slot_size = self.layout.slot_size as usize;
        if buffer.len() < slot_size {
            return Err(Error::InvalidArgument("receive buffer shorter than the mailbox's slot size"));
        }
        if let Some(mapped) = self.mapped {
            return self.try_recv_mapped(client, mapped, buffer);
        }
        let slot = self.layout.slot_at(self.head);
        if self.by_message {
            return self.try_recv_by_message(client, slot, buffer);
        }
        let mut word = [0u8; 8];
        // A plain aligned load, not an atomic read-modify-write: polling must not take the
        // line away from the sender.
        client.get(&self.allocation, slot, &mut word)?;
        if u64::from_le_bytes(word) != self.head + 1 {
            if self.published != self.head {
                self.publish_head(client)?;
            }
            return Ok(None);
        }
        let mut meta = [0u8; 8];
        client.get(&self.allocation, slot + 8, &mut meta)?;
        let len = (u32::from_le_bytes(meta[0..4].try_into().unwrap()) as usize).min(slot_size);
        let sender = u32::from_le_bytes(meta[4..8].try_into().unwrap());
        client.get(&self.allocation, slot + MAILBOX_SLOT_HEADER_LEN, &mut buffer[..len])?;
        self.consumed(client)?;
        Ok(Some((sender, len)))
    }

    /// Plain loads of the mapped slot: the `seq` word, then (if complete) the message.
    fn try_recv_mapped(
        &mut self,
        client: &Client,
        mapped: MappedMailbox,
        buffer: &mut [u8],
    ) -> Result<Option<(u32, usize)>> {
        match mapped.take(self.head, buffer) {
            Some((sender, len)) => {
                client.count_direct_get(len);
                self.head += 1;
                if self.head - self.published >= (self.layout.slots as u64 / 4).max(1) {
                    mapped.publish_head(self.head);
                    self.published = self.head;
                }
                Ok(Some((sender, len)))
            }
            None => {
                // Checked here, not per message: a failed server's mapping may still read
                // as an empty mailbox.
                client.direct_base(&self.allocation, "mailbox receive")?;
                if self.published != self.head {
                    mapped.publish_head(self.head);
                    self.published = self.head;
                }
                self.idle_polls = self.idle_polls.wrapping_add(1);
                if self.idle_polls.is_multiple_of(HEALTH_CHECK_OPS) {
                    client.check_health();
                }
                Ok(None)
            }
        }
    }

    /// One get of the whole slot: the server executes it between, never during, deliveries.
    fn try_recv_by_message(&mut self, client: &Client, slot: u64, buffer: &mut [u8]) -> Result<Option<(u32, usize)>> {
        let slot_size = self.layout.slot_size as usize;
        let mut whole = vec![0u8; MAILBOX_SLOT_HEADER_LEN as usize + slot_size];
        client.get(&self.allocation, slot, &mut whole)?;
        if u64::from_le_bytes(whole[0..8].try_into().unwrap()) != self.head + 1 {
            if self.published != self.head {
                self.publish_head(client)?;
            }
            return Ok(None);
        }
        let len = (u32::from_le_bytes(whole[8..12].try_into().unwrap()) as usize).min(slot_size);
        let sender = u32::from_le_bytes(whole[12..16].try_into().unwrap());
        buffer[..len].copy_from_slice(&whole[16..16 + len]);
        self.consumed(client)?;
        Ok(Some((sender, len)))
    }

    /// Counts a message consumed (its slot is free for the ticket `head + slots` once
    /// `head` is published).
    fn consumed(&mut self, client: &Client) -> Result<()> {
        self.head += 1;
        if self.head - self.published >= (self.layout.slots as u64 / 4).max(1) {
            self.publish_head(client)?;
        }
        Ok(())
    }

    fn publish_head(&mut self, client: &Client) -> Result<()> {
        client.swap(&self.allocation, MAILBOX_HEAD_AT, self.head)?;
        self.published = self.head;
        Ok(())
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
            if polls > 1024 {
                std::thread::sleep(Duration::from_micros((polls as u64 / 1024).min(200)));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Frees the mailbox's memory (senders then fail with a typed error).
    pub fn destroy(self, client: &Client) -> Result<()> {
        client.free(&self.allocation)
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
        allocation.target(base, layout.total_len() as usize)?;
        let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap());
        let (head, tail) = (word(MAILBOX_HEAD_AT as usize), word(MAILBOX_TAIL_AT as usize));
        let scratch = Vec::with_capacity(8 + layout.slot_size as usize);
        let by_message = client.data_path(allocation.server) == Some(DataPath::Messages);
        let mapped = mapping(client, &allocation, base, layout)?;
        let pid = std::process::id();
        Ok(MailboxSender { allocation, base, layout, head, tail, scratch, pid, by_message, mapped })
    }

    /// Whether messages go by plain stores into the mapped mailbox (same host).
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// One compare-and-swap claims a slot; plain stores fill it, the last one its `seq`.
    fn send_mapped(&mut self, client: &Client, mapped: MappedMailbox, data: &[u8]) -> Result<()> {
        client.direct_base(&self.allocation, "mailbox send")?;
        client.count_direct_atomic();
        let mut deadline = None;
        let ticket = loop {
            match mapped.claim(&mut self.tail, &mut self.head) {
                Ok(ticket) => break ticket,
                Err(ClaimError::Full) => return Err(Error::MailboxFull { slots: self.layout.slots }),
                Err(ClaimError::Contended) => {
                    let timeout = client.config.timeout;
                    if Instant::now() >= *deadline.get_or_insert_with(|| Instant::now() + timeout) {
                        let timeout_ms = timeout.as_millis() as u64;
                        return Err(Error::WaitTimeout { timeout_ms, last: self.tail });
                    }
                    std::thread::yield_now();
                }
            }
        };
        mapped.fill(ticket, self.pid, data);
        Ok(())
    }

    fn send_by_message(&mut self, client: &Client, data: &[u8]) -> Result<()> {
        let request = Request::Gas(GasRequest::MailboxSend {
            handle: self.allocation.handle,
            offset: self.base,
            sender: self.pid,
            data: data.to_vec(),
        });
        match client.lock().call(self.allocation.server, &request, "mailbox send", client.config.timeout) {
            Ok(_) => Ok(()),
            Err(Error::Refused { status: Status::MailboxFull, .. }) => {
                Err(Error::MailboxFull { slots: self.layout.slots })
            }
            Err(e) => Err(e),
        }
    }

    /// Releases this sender's hold on the mailbox's memory (which lives while its owner or
    /// any sender holds it).
    pub fn close(self, client: &Client) -> Result<()> {
        client.free(&self.allocation)
    }

    /// Sends `data` (at most the slot size). A full mailbox gives [`Error::MailboxFull`] at
    /// once and writes nothing: retry later. Returns when the message is in the slot.
    pub fn send(&mut self, client: &Client, data: &[u8]) -> Result<()> {
        if data.len() > self.layout.slot_size as usize {
            return Err(Error::InvalidArgument("message longer than the mailbox's slot size"));
        }
        if let Some(mapped) = self.mapped {
            return self.send_mapped(client, mapped, data);
        }
        if self.by_message {
            return self.send_by_message(client, data);
        }
        let slots = self.layout.slots as u64;
        let mut deadline = None;
        let ticket = loop {
            let mut t = self.tail;
            if t.wrapping_sub(self.head) >= slots {
                self.head = client.fetch(&self.allocation, self.base + MAILBOX_HEAD_AT)?;
                // tail >= head always: a guess below head is merely stale.
                t = t.max(self.head);
                if t - self.head >= slots {
                    return Err(Error::MailboxFull { slots: self.layout.slots });
                }
            }
            let old = client.compare_swap(&self.allocation, self.base + MAILBOX_TAIL_AT, t, t + 1)?;
            if old == t {
                break t;
            }
            self.tail = old;
            // Lost a race to another sender; the clock is read only then.
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + client.config.timeout);
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout { timeout_ms: client.config.timeout.as_millis() as u64, last: old });
            }
        };
        self.tail = ticket + 1;
        self.scratch.clear();
        self.scratch.extend_from_slice(&(data.len() as u32).to_le_bytes());
        self.scratch.extend_from_slice(&self.pid.to_le_bytes());
        self.scratch.extend_from_slice(data);
        let slot = self.base + self.layout.slot_at(ticket);
        let signal = Signal { word: &self.allocation, offset: slot, value: ticket + 1, op: SignalOp::Set };
        client.put_signal(&self.allocation, slot + 8, &self.scratch, signal)
    }
}

/// The mailbox at offset `base` of `allocation` as mapped here, if its pool is.
fn mapping(
    client: &Client,
    allocation: &Allocation,
    base: u64,
    layout: MailboxLayout,
) -> Result<Option<MappedMailbox>> {
    let Some(local) = client.direct_base(allocation, "mailbox open")? else { return Ok(None) };
    allocation.target(base, layout.total_len() as usize)?;
    // SAFETY: the allocation is mapped at `local` (64-byte aligned) while this client holds
    // it, `base` is 8-byte aligned and the mailbox lies inside it (checked above); the
    // header at `base` describes `layout`.
    Ok(Some(unsafe { MappedMailbox::new(local + base as usize, layout) }))
}
