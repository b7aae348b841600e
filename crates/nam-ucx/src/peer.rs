//! Checks of UCX bytes that come from a peer: packed worker addresses and packed remote keys.
//!
//! UCX trusts both blindly. `ucp_ep_create` unpacks a worker address without knowing its
//! length and asserts (aborting the process) on a version it does not know;
//! `ucp_ep_rkey_unpack` takes no length at all and reads, indexes and maps whatever the
//! bytes say. So a peer's bytes are checked here against the packed layouts of the UCX
//! release nam is built with (`src/ucp/wireup/address.c` and `src/ucp/core/ucp_rkey.c` of
//! v1.22.x; `Context::new` refuses any other release at run time) *and* against this process's own address and keys: every length must lie
//! inside the buffer, the buffer must end where the layout ends, and every transport and
//! memory domain named must be one this process has, with the field sizes this process's
//! UCX packs for it (so that what each transport's unpack reads is inside the buffer).
//! What the check cannot see (the meaning of a transport's address bytes, such as a port or
//! a shared-memory segment id) is discussed in `docs/security.md`.

use crate::constants::IFACES_MAX;
use crate::error::{Error, Result};

/// Address header flags (`UCP_ADDRESS_HEADER_FLAG_*`).
const HEADER_FLAG_DEBUG_INFO: u8 = 1 << 0;
const HEADER_FLAG_WORKER_UUID: u8 = 1 << 1;
const HEADER_FLAG_CLIENT_ID: u8 = 1 << 2;
const HEADER_FLAGS_KNOWN: u8 = 0x0f;
/// `UCP_OBJECT_VERSION_V1` and `_V2`, the low 4 bits of the first byte.
const ADDRESS_V1: u8 = 0;
const ADDRESS_V2: u8 = 1;
/// `UCP_NULL_RESOURCE`: an address without transports.
const NULL_RESOURCE: u8 = 0xff;
/// Sizes of `ucp_address_packed_iface_attr_t` (v1) and `ucp_address_v2_packed_iface_attr_t`.
const IFACE_ATTR_LEN_V1: usize = 16;
const IFACE_ATTR_LEN_V2: usize = 8;
/// `UCS_MEMORY_TYPE_HOST`: the only memory type a peer's key may name.
const MEMORY_TYPE_HOST: u8 = 0;
/// `UCS_SYS_DEVICE_ID_UNKNOWN`: the system device of host memory in a packed key.
const SYS_DEVICE_UNKNOWN: u8 = 0xff;

/// One transport interface in a packed worker address.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Iface {
    md_index: u8,
    tl_name_csum: u16,
    dev_addr: Vec<u8>,
    attr: Vec<u8>,
    iface_addr_len: usize,
    ep_addrs: usize,
}

/// The structure of a packed worker address.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AddressShape {
    version: u8,
    flags: u8,
    ifaces: Vec<Iface>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn byte(&mut self, what: &str) -> std::result::Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or_else(|| format!("ends at byte {} inside {what}", self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn skip(&mut self, len: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.bytes.len()).ok_or_else(|| {
            format!("{what} of {len} bytes at byte {} runs past the end ({} bytes)", self.at, self.bytes.len())
        })?;
        let field = &self.bytes[self.at..end];
        self.at = end;
        Ok(field)
    }

    /// `ucp_address_unpack_byte_extended`: the masked value, or the next byte when v2 says so.
    fn extended(&mut self, mask: u8, version: u8, what: &str) -> std::result::Result<usize, String> {
        let value = self.byte(what)? & mask;
        if version != ADDRESS_V1 && value == mask {
            return Ok(self.byte(what)? as usize);
        }
        Ok(value as usize)
    }
}

/// Parses a packed worker address (non-unified mode, as `ucp_worker_get_address` packs it),
/// checking that every field lies inside `bytes` and that the layout ends at its end.
fn parse_address(bytes: &[u8]) -> std::result::Result<AddressShape, String> {
    let mut c = Cursor { bytes, at: 0 };
    let first = c.byte("the header")?;
    let version = first & 0x0f;
    let flags = match version {
        ADDRESS_V1 => first >> 4,
        ADDRESS_V2 => c.byte("the header")?,
        v => return Err(format!("address version {v} is not one UCX 1.22 packs (0 or 1)")),
    };
    if flags & !HEADER_FLAGS_KNOWN != 0 || flags & HEADER_FLAG_DEBUG_INFO != 0 {
        return Err(format!("header flags {flags:#x} are not ones a worker address carries here"));
    }
    if flags & HEADER_FLAG_WORKER_UUID != 0 {
        c.skip(8, "the worker uuid")?;
    }
    if flags & HEADER_FLAG_CLIENT_ID != 0 {
        c.skip(8, "the client id")?;
    }
    let mut ifaces = Vec::new();
    if bytes.get(c.at) == Some(&NULL_RESOURCE) {
        c.at += 1;
    } else {
        parse_devices(&mut c, version, &mut ifaces)?;
    }
    if c.at != bytes.len() {
        return Err(format!("the layout ends at byte {} but the address has {} bytes", c.at, bytes.len()));
    }
    Ok(AddressShape { version, flags, ifaces })
}

fn parse_devices(c: &mut Cursor<'_>, version: u8, ifaces: &mut Vec<Iface>) -> std::result::Result<(), String> {
    let md_mask = if version == ADDRESS_V1 { 0x1f } else { 0x7f };
    loop {
        let md_byte = *c.bytes.get(c.at).ok_or("ends before a device")?;
        let empty_dev = md_byte & 0x80 != 0;
        let md_index = c.extended(md_mask, version, "a memory domain index")? as u8;
        let dev_flags = *c.bytes.get(c.at).ok_or("ends before a device address length")? & 0xe0;
        let dev_addr_len = c.extended(0x1f, version, "a device address length")?;
        if dev_flags & 0x40 != 0 {
            c.byte("a path count")?;
        }
        if dev_flags & 0x20 != 0 {
            c.byte("a system device")?;
        }
        let dev_addr = c.skip(dev_addr_len, "a device address")?.to_vec();
        let mut last_tl = empty_dev;
        while !last_tl {
            if ifaces.len() >= IFACES_MAX {
                return Err(format!("more than {IFACES_MAX} transports"));
            }
            let csum = c.skip(2, "a transport name checksum")?;
            let tl_name_csum = u16::from_le_bytes([csum[0], csum[1]]);
            let attr_len = if version == ADDRESS_V1 { IFACE_ATTR_LEN_V1 } else { IFACE_ATTR_LEN_V2 };
            let attr = c.skip(attr_len, "interface attributes")?;
            let len_byte = *c.bytes.get(c.at).ok_or("ends before an interface address length")?;
            last_tl = len_byte & 0x80 != 0;
            let mut has_ep = len_byte & 0x40 != 0;
            let iface_addr_len = c.extended(0x3f, version, "an interface address length")?;
            c.skip(iface_addr_len, "an interface address")?;
            let mut ep_addrs = 0;
            while has_ep {
                ep_addrs += 1;
                if ep_addrs > 8 {
                    return Err("more than 8 endpoint addresses on one interface".into());
                }
                let len = c.byte("an endpoint address length")? as usize;
                c.skip(len, "an endpoint address")?;
                has_ep = c.byte("a lane index")? & 0x80 == 0;
            }
            ifaces.push(Iface {
                md_index,
                tl_name_csum,
                dev_addr: dev_addr.clone(),
                attr: attr.to_vec(),
                iface_addr_len,
                ep_addrs,
            });
        }
        if dev_flags & 0x80 != 0 {
            return Ok(());
        }
    }
}

/// Whether a peer's interface attributes may stand beside this process's own for the same
/// transport and device. The v1 form is three floats (overhead, bandwidth, latency) and a word
/// of priority and capability flags. The floats depend on the distance of the packing
/// process's CPU to the device (two processes bound to different sockets differ), so they
/// must only be usable: finite, not negative, a positive bandwidth (UCX asserts on a negative
/// lane score). The flags must be this process's. The v2 form (compact, fp8) must be equal.
fn attrs_compatible(version: u8, own: &[u8], theirs: &[u8]) -> bool {
    if version != ADDRESS_V1 {
        return own == theirs;
    }
    let float = |i: usize| f32::from_le_bytes([theirs[i], theirs[i + 1], theirs[i + 2], theirs[i + 3]]);
    let (overhead, bandwidth, latency) = (float(0), float(4), float(8));
    let usable = |x: f32| x.is_finite() && x >= 0.0;
    usable(overhead) && usable(latency) && usable(bandwidth) && bandwidth > 0.0 && own[12..16] == theirs[12..16]
}

/// Checks a peer's packed worker address before any of it reaches UCX: its layout must
/// parse within its length (ending exactly there), with the header version and flags of
/// `reference` (this process's own address: a peer on this host runs the same UCX), and
/// each transport it lists that `reference` lists too must be listed as there: the same
/// memory domain index, the
/// same device address (a peer on this host has this host's devices: its IP addresses, its
/// boot id for shared memory), compatible interface attributes (UCX scores lanes with their
/// floats, and asserts on a negative score: see `attrs_compatible`) and an interface address
/// of the same size. Only
/// the interface address's contents (a port, a process's segment id) are the peer's own. No
/// endpoint addresses (those belong to wire-up messages, not to a worker's address).
pub fn check_worker_address(peer: &[u8], reference: &[u8]) -> Result<()> {
    let bad = |reason: String| Error::Malformed { what: "worker address", reason };
    let own = parse_address(reference).map_err(|r| bad(format!("this process's own address does not parse: {r}")))?;
    let theirs = parse_address(peer).map_err(bad)?;
    if (theirs.version, theirs.flags) != (own.version, own.flags) {
        return Err(bad(format!(
            "version {} with flags {:#x}, where this UCX packs version {} with flags {:#x}",
            theirs.version, theirs.flags, own.version, own.flags
        )));
    }
    // A transport may sit on several devices (TCP on each network interface): any of this
    // process's will do. A transport this process does not have is never reachable (UCX
    // compares the name checksum with its own transports first), so only its bounds matter.
    for iface in &theirs.ifaces {
        if iface.ep_addrs != 0 {
            return Err(bad(format!("transport {:#06x} carries endpoint addresses", iface.tl_name_csum)));
        }
        if !own.ifaces.iter().any(|o| o.tl_name_csum == iface.tl_name_csum) {
            continue;
        }
        let known = own.ifaces.iter().any(|o| {
            (o.tl_name_csum, o.md_index, &o.dev_addr, o.iface_addr_len)
                == (iface.tl_name_csum, iface.md_index, &iface.dev_addr, iface.iface_addr_len)
                && attrs_compatible(theirs.version, &o.attr, &iface.attr)
        });
        if !known {
            return Err(bad(format!(
                "transport {:#06x} on memory domain {} (device address {:02x?}, attributes {:02x?}, {}-byte \
                 interface address) is not as this host's UCX packs it",
                iface.tl_name_csum, iface.md_index, iface.dev_addr, iface.attr, iface.iface_addr_len
            )));
        }
    }
    Ok(())
}

/// What a packed remote key may hold: for each memory domain index of this process's UCX
/// context, the size of the key blob its component packs (`rkey_packed_size`, a property of
/// the memory domain). Learnt from keys this process packs itself ([`RkeyLayout::learn`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RkeyLayout {
    sizes: Vec<Option<u8>>,
}

impl RkeyLayout {
    /// The layout of `context`'s memory domains, learnt from keys of two probe regions it
    /// maps: one UCX allocates (shared-memory domains pack keys for it) and one registered
    /// from this process's heap (domains that register memory).
    pub fn of_context(context: &crate::Context) -> Result<RkeyLayout> {
        let mut layout = RkeyLayout::default();
        let probe = crate::MemRegion::allocate(context, 4096)?;
        layout.learn(&probe.pack_rkey()?)?;
        let mut heap = vec![0u8; 8192];
        // SAFETY: `heap` outlives `registered`, dropped at the end of this block.
        let registered = unsafe { crate::MemRegion::register(context, heap.as_mut_ptr(), heap.len())? };
        layout.learn(&registered.pack_rkey()?)?;
        drop(registered);
        drop(heap);
        Ok(layout)
    }

    /// Adds the memory domains of a key this process packed (`MemRegion::pack_rkey`).
    pub fn learn(&mut self, own_packed: &[u8]) -> Result<()> {
        for (md, blob) in
            parse_rkey(own_packed).map_err(|reason| Error::Malformed { what: "own remote key", reason })?
        {
            if self.sizes.len() <= md {
                self.sizes.resize(md + 1, None);
            }
            match self.sizes[md] {
                Some(size) if size as usize != blob.len() => {
                    return Err(Error::Malformed {
                        what: "own remote key",
                        reason: format!("memory domain {md} packs {} and {size} bytes", blob.len()),
                    })
                }
                _ => self.sizes[md] = Some(blob.len() as u8),
            }
        }
        Ok(())
    }

    /// Checks a peer's packed remote key against the layout: `u64` memory-domain map, a
    /// memory type (host only), then for each bit of the map a size byte and that many bytes,
    /// ending exactly at the end of the key; every memory domain named must be one this
    /// layout has, with its size. (A domain this process has but did not pack a probe key for
    /// is refused too: UCX would unpack its blob if the endpoint reaches it, and the shared
    /// memory components assert on a bad one.) [`crate::Endpoint::unpack_peer_rkey`] also
    /// hands UCX the key followed by zeros, so no component reads past it.
    pub fn check(&self, peer: &[u8]) -> Result<()> {
        let bad = |reason: String| Error::Malformed { what: "remote key", reason };
        for (md, blob) in parse_rkey(peer).map_err(bad)? {
            match self.sizes.get(md).copied().flatten() {
                Some(size) if size as usize == blob.len() => {}
                Some(size) => {
                    return Err(bad(format!(
                        "memory domain {md}'s key has {} bytes; this UCX packs {size}",
                        blob.len()
                    )))
                }
                None => {
                    return Err(bad(format!(
                        "memory domain {md} is not one this UCX packs keys for (are the peer's UCX_TLS \
                         the server's?)"
                    )))
                }
            }
        }
        Ok(())
    }
}

/// Splits a packed key into (memory domain index, blob), checking bounds and the end.
fn parse_rkey(bytes: &[u8]) -> std::result::Result<Vec<(usize, &[u8])>, String> {
    let mut c = Cursor { bytes, at: 0 };
    let map = u64::from_le_bytes(c.skip(8, "the memory domain map")?.try_into().expect("8 bytes"));
    let mem_type = c.byte("the memory type")?;
    if mem_type != MEMORY_TYPE_HOST {
        return Err(format!("memory type {mem_type} is not host memory"));
    }
    let mut blobs = Vec::new();
    for md in (0..64).filter(|b| map & (1u64 << b) != 0) {
        let len = c.byte("a key size")? as usize;
        blobs.push((md, c.skip(len, "a memory domain's key")?));
    }
    // Since UCX 1.20 a non-empty key ends with the system device of its memory. A known device
    // is followed by distances that UCX reads until a terminator, whatever the key's length:
    // host memory has none, and a peer's key may not name one.
    if map != 0 {
        let sys_dev = c.byte("the system device")?;
        if sys_dev != SYS_DEVICE_UNKNOWN {
            return Err(format!("system device {sys_dev:#04x} is not host memory's (unknown, 0xff)"));
        }
    }
    if c.at != bytes.len() {
        return Err(format!("the layout ends at byte {} but the key has {} bytes", c.at, bytes.len()));
    }
    Ok(blobs)
}
