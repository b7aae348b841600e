//! The memory-blade span service (Mao 2020 Ch. 6) over nam's one-sided operations.
//!
//! A span read is a GET of `span_bytes` from the (server, allocation, offset) the extent
//! table gives; a span write is a PUT. Mao 2020's transaction id becomes the UCX request,
//! its response code the `Result`; several spans in flight are non-blocking GETs waited
//! together. The mapping of every field is in `docs/protocol.md`.

use crate::error::{Error, Result};
use crate::extent::ExtentTable;
use nam_client::{AllocOptions, Client, Op};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Span reads and writes over the servers of one client.
pub struct SpanService {
    client: Arc<Client>,
    table: Mutex<ExtentTable>,
    span_bytes: u64,
    /// The far address space size (fixed; read on every span without the table lock).
    far_bytes: u64,
    /// A put was issued since the last fence: a get must not overtake it.
    unfenced: AtomicBool,
    /// A put took UCX RMA (not the direct path) since the last flush: memory read in place
    /// ([`SpanService::mapped`]) may not show it yet.
    unflushed_rma: AtomicBool,
}

impl SpanService {
    /// A service for `far_bytes` of far memory striped over every server of `client`.
    pub fn new(client: Arc<Client>, far_bytes: u64, span_bytes: u64, interleave_bytes: u64) -> SpanService {
        let table = ExtentTable::new(far_bytes, client.server_count(), interleave_bytes);
        let far_bytes = table.far_bytes();
        SpanService {
            client,
            table: Mutex::new(table),
            span_bytes,
            far_bytes,
            unfenced: AtomicBool::new(false),
            unflushed_rma: AtomicBool::new(false),
        }
    }

    /// The span size.
    pub fn span_bytes(&self) -> u64 {
        self.span_bytes
    }

    /// The far address space size.
    pub fn far_bytes(&self) -> u64 {
        self.far_bytes
    }

    /// The client underneath.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// Checks that `[addr, addr + len)` is whole spans inside the far address space.
    pub fn check_span(&self, addr: u64, len: u64) -> Result<()> {
        let size = self.far_bytes();
        if addr.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::OutOfRange { addr, len, size });
        }
        if !addr.is_multiple_of(self.span_bytes) || !len.is_multiple_of(self.span_bytes) || len == 0 {
            return Err(Error::Unaligned { addr, len, span_bytes: self.span_bytes });
        }
        Ok(())
    }

    /// Reads the spans at `addr` into `buffer` (whole spans).
    pub fn read(&self, addr: u64, buffer: &mut [u8]) -> Result<()> {
        self.read_many(&mut [(addr, buffer)])
    }

    /// Reads several span ranges with all their GETs in flight at once.
    pub fn read_many(&self, requests: &mut [(u64, &mut [u8])]) -> Result<()> {
        for (addr, buf) in requests.iter() {
            self.check_span(*addr, buf.len() as u64)?;
        }
        self.order_after_puts()?;
        let table = self.table.lock();
        let mut ops: Vec<(usize, Op<'_>)> = Vec::with_capacity(requests.len());
        let mut first_error = None;
        for (addr, buf) in requests.iter_mut() {
            let mut rest: &mut [u8] = buf;
            for piece in pieces(&table, *addr, rest.len()) {
                let (dst, tail) = std::mem::take(&mut rest).split_at_mut(piece.len);
                rest = tail;
                let Some(alloc) = table.chunk(piece.extent, piece.server) else {
                    dst.fill(0); // never written: zeros, no fetch
                    continue;
                };
                match self.client.get_nb(alloc, piece.offset, dst) {
                    Ok(op) => ops.push((piece.server, op)),
                    Err(e) => {
                        first_error.get_or_insert(self.server_error(piece.server, "span read", e));
                    }
                }
            }
        }
        for (server, op) in ops {
            if let Err(e) = op.wait() {
                first_error.get_or_insert(self.server_error(server, "span read", e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Reads the spans `[addr, addr + len)` where they lie when they are one stretch of one
    /// server's pool mapped into this process (shared memory, `Client::read_in_place`):
    /// calls `read` with the address of their first byte and returns `Some` of its result.
    /// `Ok(None)` (and `read` not called) when they are not: spread over several servers,
    /// never written (no chunk yet), or reached through UCX; then use [`SpanService::read`].
    /// Saves the copy into a buffer for a caller that copies them once more anyway.
    pub fn read_in_place<R>(&self, addr: u64, len: usize, read: impl FnOnce(*const u8) -> R) -> Result<Option<R>> {
        self.check_span(addr, len as u64)?;
        self.order_after_puts()?;
        let table = self.table.lock();
        let Some(piece) = one_piece(&table, addr, len) else { return Ok(None) };
        let Some(alloc) = table.chunk(piece.extent, piece.server) else { return Ok(None) };
        self.client
            .read_in_place(alloc, piece.offset, len, read)
            .map_err(|e| self.server_error(piece.server, "span read", e))
    }

    /// Writes whole spans at `addr`, allocating the chunks they fall in on first write.
    /// On error nothing is promised about the spans, and the caller keeps its data.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.check_span(addr, data.len() as u64)?;
        let mut table = self.table.lock();
        let mut done = 0usize;
        for piece in pieces(&table, addr, data.len()) {
            if table.chunk(piece.extent, piece.server).is_none() {
                self.allocate(&mut table, piece.extent, piece.server)?;
            }
            let alloc = table.chunk(piece.extent, piece.server).expect("allocated above");
            self.unfenced.store(true, Ordering::Release);
            if !self.client.takes_direct_path(alloc, piece.len) {
                self.unflushed_rma.store(true, Ordering::Release);
            }
            // A span write is a write-back: the data is for the server, so it is put with
            // streaming stores (no read of the destination lines, the cache kept).
            self.client
                .put_streaming(alloc, piece.offset, &data[done..done + piece.len])
                .map_err(|e| self.server_error(piece.server, "span write", e))?;
            done += piece.len;
        }
        Ok(())
    }

    /// Remote completion of every span write so far.
    pub fn flush(&self) -> Result<()> {
        for server in 0..self.client.server_count() {
            self.client.flush_server(server).map_err(|e| self.server_error(server, "flush", e))?;
        }
        self.unfenced.store(false, Ordering::Release);
        self.unflushed_rma.store(false, Ordering::Release);
        Ok(())
    }

    /// Where the bytes from `addr` lie in this process when they can be read in place,
    /// without a copy, and how many of them (at least `min_len`, at most `max_len`, whole
    /// spans): one stretch of one chunk that has been written, on a server whose pool is
    /// mapped here (UCX shared memory's direct path). `None` otherwise (the caller reads a
    /// copy: network transports, never-written chunks, a stretch shorter than `min_len`).
    /// The bytes stay there while this service lives; puts made since through UCX RMA are
    /// only visible there after a flush ([`SpanService::loads_need_flush`]).
    pub fn mapped(&self, addr: u64, min_len: usize, max_len: usize) -> Result<Option<(*const u8, usize)>> {
        self.check_span(addr, min_len as u64)?;
        if self.loads_need_flush() {
            self.flush()?; // loads see puts that went through UCX only once they completed
        }
        let table = self.table.lock();
        let max_len = (max_len as u64).min(table.far_bytes() - addr) as usize;
        let first = first_piece(&table, addr, max_len.max(min_len));
        let len = first.len / self.span_bytes as usize * self.span_bytes as usize;
        if len < min_len {
            return Ok(None);
        }
        let Some(alloc) = table.chunk(first.extent, first.server) else { return Ok(None) };
        let at = self
            .client
            .mapped(alloc, first.offset, len)
            .map_err(|e| self.server_error(first.server, "span read", e))?;
        Ok(at.map(|p| (p, len)))
    }

    /// Whether a put went through UCX RMA since the last flush, so that memory read in place
    /// may not show it yet.
    #[inline]
    pub fn loads_need_flush(&self) -> bool {
        self.unflushed_rma.load(Ordering::Acquire)
    }

    /// Frees every chunk on the servers.
    pub fn release(&self) -> Result<()> {
        let table = self.table.lock();
        let mut result = Ok(());
        for alloc in table.allocations() {
            if let Err(e) = self.client.free(alloc) {
                result = result.and(Err(self.server_error(alloc.server(), "free", e)));
            }
        }
        result
    }

    /// UCX does not order a GET after a PUT on the same endpoint: a fence does.
    fn order_after_puts(&self) -> Result<()> {
        if self.unfenced.swap(false, Ordering::AcqRel) {
            self.client.fence().map_err(|e| self.server_error(0, "fence", e))?;
        }
        Ok(())
    }

    fn allocate(&self, table: &mut ExtentTable, extent: usize, server: usize) -> Result<()> {
        let bytes = table.chunk_bytes(extent);
        let options = AllocOptions { align: 4096, server: Some(server), ..Default::default() };
        match self.client.alloc(bytes, &options) {
            Ok(a) => {
                table.set_chunk(extent, server, a);
                Ok(())
            }
            Err(source) => {
                use nam_proto::Status;
                let addr = self.client.config().servers[server];
                match source.server_status() {
                    Some(Status::PoolExhausted | Status::QuotaExceeded) => {
                        Err(Error::OutOfCapacity { server, addr, bytes, source: Box::new(source) })
                    }
                    _ => Err(Error::Server { server, addr, what: "extent allocation", source: Box::new(source) }),
                }
            }
        }
    }

    fn server_error(&self, server: usize, what: &'static str, source: nam_client::Error) -> Error {
        Error::Server { server, addr: self.client.config().servers[server], what, source: Box::new(source) }
    }
}

/// The first stretch of [`pieces`]`(table, addr, len)`, without walking the rest.
fn first_piece(table: &ExtentTable, addr: u64, len: usize) -> Piece {
    let p = table.locate(addr);
    let end = addr + len as u64;
    let mut piece = Piece { extent: p.extent, server: p.server, offset: p.offset, len: 0 };
    let mut at = addr;
    while at < end {
        let q = table.locate(at);
        if q.extent != piece.extent || q.server != piece.server || q.offset != piece.offset + piece.len as u64 {
            break;
        }
        let n = q.granule_left.min(end - at) as usize;
        piece.len += n;
        at += n as u64;
    }
    piece
}

/// A stretch of far memory contiguous in one chunk of one server.
struct Piece {
    extent: usize,
    server: usize,
    offset: u64,
    len: usize,
}

/// `[addr, addr + len)` as one piece if it is contiguous in one chunk of one server.
fn one_piece(table: &ExtentTable, addr: u64, len: usize) -> Option<Piece> {
    let first = table.locate(addr);
    let mut piece = Piece { extent: first.extent, server: first.server, offset: first.offset, len: 0 };
    let (mut at, end) = (addr, addr + len as u64);
    while at < end {
        let p = table.locate(at);
        if p.extent != piece.extent || p.server != piece.server || p.offset != piece.offset + piece.len as u64 {
            return None;
        }
        let n = p.granule_left.min(end - at);
        piece.len += n as usize;
        at += n;
    }
    Some(piece)
}

/// Cuts `[addr, addr + len)` into the stretches each contiguous in one chunk: consecutive
/// interleaving granules that land next to each other on the same server (always, with one
/// server) become one transfer, so a long span costs one GET or PUT per server.
fn pieces(table: &ExtentTable, addr: u64, len: usize) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut at = addr;
    let end = addr + len as u64;
    while at < end {
        let p = table.locate(at);
        let n = p.granule_left.min(end - at) as usize;
        match out.last_mut() {
            Some(last)
                if last.extent == p.extent && last.server == p.server && last.offset + last.len as u64 == p.offset =>
            {
                last.len += n
            }
            _ => out.push(Piece { extent: p.extent, server: p.server, offset: p.offset, len: n }),
        }
        at += n as u64;
    }
    out
}
