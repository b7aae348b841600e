//! The control-message decoders on hostile input, on stable Rust (the cargo-fuzz target in
//! `fuzz/` needs nightly): random bytes and mutated valid messages (bit flips, truncation at
//! every length, appended bytes, lying length fields) never panic; whatever decodes
//! re-encodes to the same message; valid requests and replies round-trip exactly; every
//! variable-length field is refused one byte past its limit.

use nam_proto::codec::Writer;
use nam_proto::limits::*;
use nam_proto::{
    decode_header, truncate_utf8, Alloc, AllocReply, AtomicKind, DecodeError, Hello, HelloReply, Reply, Request,
    Status, StatusReply, TenantUsage, TrafficReport, HEADER_LEN, REPLY_BIT,
};
use proptest::collection::vec;
use proptest::prelude::*;

/// Offset of the header's `body_len` field (docs/protocol.md, "Header").
const BODY_LEN_AT: usize = 16;
/// Offset of the header's `reserved` field, which receivers do not check.
const RESERVED_AT: usize = 20;

// ---- strategies ----------------------------------------------------------------------------

/// Any string whose UTF-8 encoding is at most `max` bytes, with the limit itself likely.
fn text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "\\PC{0,12}",
        2 => vec(any::<char>(), 0..=max).prop_map(move |c| truncate_utf8(&c.into_iter().collect::<String>(), max).to_string()),
        1 => Just("n".repeat(max)),
        1 => Just("é".repeat(max / 2)),
    ]
}

/// Bytes of at most `max`; `full` makes the full length possible (slower to mutate).
fn blob(max: usize, full: bool) -> BoxedStrategy<Vec<u8>> {
    if full {
        prop_oneof![4 => vec(any::<u8>(), 0..64), 1 => vec(any::<u8>(), max..=max)].boxed()
    } else {
        vec(any::<u8>(), 0..64).boxed()
    }
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![any::<u64>(), Just(0), Just(u64::MAX), 0..4096u64]
}

fn traffic() -> impl Strategy<Value = TrafficReport> {
    (number(), number(), number(), number(), number()).prop_map(|(puts, gets, atomics, bytes_put, bytes_got)| {
        TrafficReport { puts, gets, atomics, bytes_put, bytes_got }
    })
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (text(TENANT_NAME_LEN_MAX), text(TOKEN_LEN_MAX), text(CLIENT_NAME_LEN_MAX), any::<u32>())
            .prop_map(|(tenant, token, client_name, pid)| Request::Hello(Hello { tenant, token, client_name, pid })),
        (number(), number(), any::<u32>(), text(NAME_LEN_MAX))
            .prop_map(|(size, align, flags, name)| Request::Alloc(Alloc { size, align, flags, name })),
        text(NAME_LEN_MAX).prop_map(|name| Request::Open { name }),
        number().prop_map(|handle| Request::Free { handle }),
        Just(Request::Status),
        traffic().prop_map(Request::Goodbye),
        (number(), number(), vec(any::<u8>(), 0..512)).prop_map(|(handle, offset, data)| Request::Put {
            handle,
            offset,
            data
        }),
        (number(), number(), 0..=DATA_CHUNK_MAX as u32).prop_map(|(handle, offset, len)| Request::Get {
            handle,
            offset,
            len
        }),
        (
            number(),
            number(),
            proptest::sample::select(vec![AtomicKind::FetchAdd, AtomicKind::Swap, AtomicKind::CompareSwap]),
            number(),
            number()
        )
            .prop_map(|(handle, offset, op, value, compare)| Request::Atomic {
                handle,
                offset,
                op,
                value,
                compare
            }),
    ]
}

fn tenant() -> impl Strategy<Value = TenantUsage> {
    (text(TENANT_NAME_LEN_MAX), number(), number(), number()).prop_map(|(name, used, quota, allocations)| TenantUsage {
        name,
        used,
        quota,
        allocations,
    })
}

fn ckpt_group() -> impl Strategy<Value = nam_proto::ckpt::CkptGroupStatus> {
    (text(TENANT_NAME_LEN_MAX), text(NAME_LEN_MAX), number(), any::<u32>(), any::<u32>(), number(), number()).prop_map(
        |(tenant, name, id, ranks, joined, bytes, complete_epoch)| nam_proto::ckpt::CkptGroupStatus {
            id,
            tenant,
            name,
            ranks,
            joined,
            bytes,
            complete_epoch,
        },
    )
}

fn status_reply() -> impl Strategy<Value = StatusReply> {
    (text(SERVER_NAME_LEN_MAX), vec(number(), 11), traffic(), vec(tenant(), 0..6), vec(ckpt_group(), 0..3)).prop_map(
        |(server_name, n, reported, tenants, ckpt_groups)| StatusReply {
            server_name,
            capacity: n[0],
            used: n[1],
            allocations: n[2],
            clients: n[3],
            clients_lingering: n[4],
            clients_total: n[5],
            requests: n[6],
            request_errors: n[7],
            bytes_in: n[8],
            bytes_out: n[9],
            leases_reclaimed: n[10],
            reported,
            tenants,
            resources: Box::new(nam_proto::ResourceReport {
                reply_bytes_max: n[0],
                client_reply_bytes_max: n[1],
                reply_bytes_queued: n[2],
                reply_bytes_high: n[3],
                connections_max: n[4],
                clients_cut_off: n[5],
                connections_refused: n[6],
                sockets_reaped: n[7],
            }),
            ckpt_groups_total: ckpt_groups.len() as u64,
            ckpt_groups,
        },
    )
}

fn error_status() -> impl Strategy<Value = Status> {
    proptest::sample::select(&Status::ALL[1..])
}

/// A reply with the kind of a request it can answer: `(request kind, reply)`.
fn reply(full: bool) -> impl Strategy<Value = (u16, Reply)> {
    let alloc_kind = proptest::sample::select(vec![Request::Alloc(dummy_alloc()).kind(), open_kind()]);
    let done_kind = proptest::sample::select(vec![free_kind(), goodbye_kind(), 7]);
    prop_oneof![
        (
            number(),
            number(),
            number(),
            text(SERVER_NAME_LEN_MAX),
            blob(WORKER_ADDRESS_LEN_MAX, full),
            text(HOST_ID_LEN_MAX)
        )
            .prop_map(|(client_id, lease_ms, capacity, server_name, worker_address, host_id)| {
                let hello = HelloReply { client_id, lease_ms, capacity, server_name, worker_address, host_id };
                (hello_kind(), Reply::Hello(hello))
            }),
        (alloc_kind, number(), number(), number(), any::<u32>(), blob(RKEY_LEN_MAX, full)).prop_map(
            |(kind, handle, size, remote_addr, flags, rkey)| {
                (kind, Reply::Alloc(AllocReply { handle, size, remote_addr, flags, rkey }))
            }
        ),
        done_kind.prop_map(|kind| (kind, Reply::Done)),
        vec(any::<u8>(), 0..512).prop_map(|data| (8, Reply::Data(data))),
        number().prop_map(|old| (9, Reply::Value(old))),
        status_reply().prop_map(|s| (Request::Status.kind(), Reply::Status(s))),
        // An error answers any kind, even one the server did not know (kind 0: no header).
        (0..REPLY_BIT, error_status(), text(ERROR_TEXT_LEN_MAX))
            .prop_map(|(kind, status, message)| (kind, Reply::Error { status, message })),
    ]
}

fn dummy_alloc() -> Alloc {
    Alloc { size: 1, align: 0, flags: 0, name: String::new() }
}
fn hello_kind() -> u16 {
    Request::Hello(Hello { tenant: String::new(), token: String::new(), client_name: String::new(), pid: 0 }).kind()
}
fn open_kind() -> u16 {
    Request::Open { name: String::new() }.kind()
}
fn free_kind() -> u16 {
    Request::Free { handle: 0 }.kind()
}
fn goodbye_kind() -> u16 {
    Request::Goodbye(TrafficReport::default()).kind()
}

/// Any valid message, encoded.
fn message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (request(), any::<u64>()).prop_map(|(r, id)| r.encode(id)),
        (reply(false), any::<u64>()).prop_map(|((kind, r), id)| r.encode(kind, id)),
    ]
}

/// A header that passes `decode_header`, with `kind` and a random body behind it.
fn framed(kind: u16, request_id: u64, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(HEADER_LEN + body.len());
    w.u32(MESSAGE_MAGIC);
    w.u16(PROTOCOL_VERSION);
    w.u16(kind);
    w.u64(request_id);
    w.u32(body.len() as u32);
    w.u32(0);
    let mut bytes = w.finish();
    bytes.extend_from_slice(body);
    bytes
}

// ---- checks ----------------------------------------------------------------------------------

fn set_body_len(bytes: &mut [u8], len: usize) {
    bytes[BODY_LEN_AT..BODY_LEN_AT + 4].copy_from_slice(&(len as u32).to_le_bytes());
}

/// The same message, except the reserved header field (which receivers ignore).
fn assert_same_but_reserved(encoded: &[u8], original: &[u8]) {
    assert_eq!(encoded.len(), original.len(), "re-encoded length differs");
    assert_eq!(encoded[..RESERVED_AT], original[..RESERVED_AT], "re-encoded header differs");
    assert_eq!(encoded[HEADER_LEN..], original[HEADER_LEN..], "re-encoded body differs");
}

/// Feeds `bytes` to every decoder. Whatever decodes must re-encode to the same bytes and
/// decode again to the same value. Returns whether anything decoded.
fn decode_all(bytes: &[u8]) -> bool {
    let header = decode_header(bytes);
    if let Ok((_, body)) = &header {
        assert_eq!(body.len() + HEADER_LEN, bytes.len());
    }
    let request = Request::decode(bytes);
    if let Ok((id, r)) = &request {
        let again = r.encode(*id);
        assert_same_but_reserved(&again, bytes);
        assert_eq!(Request::decode(&again).as_ref(), Ok(&(*id, r.clone())));
    }
    let reply = Reply::decode(bytes);
    if let Ok((kind, id, r)) = &reply {
        let again = r.encode(*kind, *id);
        assert_same_but_reserved(&again, bytes);
        assert_eq!(Reply::decode(&again).as_ref(), Ok(&(*kind, *id, r.clone())));
    }
    assert!(!(request.is_ok() && reply.is_ok()), "bytes decode both as a request and as a reply");
    if header.is_err() {
        assert!(request.is_err() && reply.is_err(), "a message without a valid header decoded");
    }
    request.is_ok() || reply.is_ok()
}

/// Values a lying length or count field is likely to take.
fn lie() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        Just(0),
        Just(1),
        Just(u16::MAX as u32),
        Just(u32::MAX),
        Just(MESSAGE_LEN_MAX as u32),
        proptest::sample::select(vec![
            NAME_LEN_MAX,
            TENANT_NAME_LEN_MAX,
            TOKEN_LEN_MAX,
            CLIENT_NAME_LEN_MAX,
            SERVER_NAME_LEN_MAX,
            ERROR_TEXT_LEN_MAX,
            RKEY_LEN_MAX,
            WORKER_ADDRESS_LEN_MAX,
            TENANTS_MAX,
        ])
        .prop_flat_map(|limit| (limit as u32 - 1)..=(limit as u32 + 1)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..128)) {
        decode_all(&bytes);
    }

    #[test]
    fn random_bodies_behind_a_valid_header_never_panic(
        kind in prop_oneof![1..=6u16, (1..=6u16).prop_map(|k| k | REPLY_BIT), any::<u16>()],
        id in any::<u64>(),
        body in vec(any::<u8>(), 0..160),
    ) {
        decode_all(&framed(kind, id, &body));
    }

    #[test]
    fn requests_round_trip(r in request(), id in any::<u64>()) {
        let bytes = r.encode(id);
        prop_assert_eq!(Request::decode(&bytes), Ok((id, r.clone())));
        prop_assert!(Reply::decode(&bytes).is_err());
        prop_assert_eq!(decode_header(&bytes).map(|(h, _)| (h.kind, h.request_id)), Ok((r.kind(), id)));
    }

    #[test]
    fn replies_round_trip((kind, r) in reply(true), id in any::<u64>()) {
        let bytes = r.encode(kind, id);
        prop_assert!(bytes.len() <= MESSAGE_LEN_MAX);
        prop_assert_eq!(Reply::decode(&bytes), Ok((kind, id, r.clone())));
        prop_assert!(Request::decode(&bytes).is_err());
    }

    #[test]
    fn bit_flips_never_panic(bytes in message(), flips in vec((any::<prop::sample::Index>(), 0..8u8), 1..4)) {
        let mut bytes = bytes;
        for (at, bit) in flips {
            let at = at.index(bytes.len());
            bytes[at] ^= 1 << bit;
        }
        decode_all(&bytes);
    }

    #[test]
    fn every_truncation_is_refused(bytes in message()) {
        for len in 0..bytes.len() {
            prop_assert!(!decode_all(&bytes[..len]), "a {len}-byte prefix decoded");
        }
        // Truncated again, now with a header that agrees: the body itself is cut short.
        for len in HEADER_LEN..bytes.len() {
            let mut cut = bytes[..len].to_vec();
            set_body_len(&mut cut, len - HEADER_LEN);
            prop_assert!(!decode_all(&cut), "a {len}-byte prefix with a matching body_len decoded");
        }
    }

    #[test]
    fn appended_bytes_are_refused(bytes in message(), extra in vec(any::<u8>(), 1..32)) {
        let mut longer = bytes.clone();
        longer.extend_from_slice(&extra);
        let mismatch = matches!(decode_header(&longer), Err(DecodeError::LengthMismatch { .. }));
        prop_assert!(mismatch);
        prop_assert!(!decode_all(&longer));
        set_body_len(&mut longer, bytes.len() + extra.len() - HEADER_LEN);
        prop_assert!(decode_header(&longer).is_ok());
        let request = Request::decode(&longer).err();
        let reply = Reply::decode(&longer).err();
        let trailing = DecodeError::TrailingBytes { extra: extra.len() };
        prop_assert!(request.as_ref() == Some(&trailing) || reply.as_ref() == Some(&trailing), "{request:?} {reply:?}");
        prop_assert!(!decode_all(&longer));
    }

    #[test]
    fn lying_body_len_is_refused(bytes in message(), declared in lie()) {
        let actual = bytes.len() - HEADER_LEN;
        prop_assume!(declared as usize != actual);
        let mut bytes = bytes;
        set_body_len(&mut bytes, declared as usize);
        prop_assert_eq!(
            decode_header(&bytes).err(),
            Some(DecodeError::LengthMismatch { declared: declared as usize, actual })
        );
        prop_assert!(!decode_all(&bytes));
    }

    /// Overwrites two or four bytes anywhere in the body: the length prefixes of strings and
    /// byte fields, the status code, the tenant count.
    #[test]
    fn lying_fields_in_the_body_never_panic(
        bytes in message(),
        at in any::<prop::sample::Index>(),
        wide in any::<bool>(),
        value in lie(),
    ) {
        let width = if wide { 4 } else { 2 };
        prop_assume!(bytes.len() >= HEADER_LEN + width);
        let at = HEADER_LEN + at.index(bytes.len() - HEADER_LEN - width + 1);
        let mut bytes = bytes;
        bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        decode_all(&bytes);
    }
}

// ---- limits, one byte past each --------------------------------------------------------------

fn too_long(field: &'static str, len: usize, max: usize) -> DecodeError {
    DecodeError::TooLong { field, len, max }
}

fn hello(tenant: usize, token: usize, client_name: usize) -> Request {
    Request::Hello(Hello {
        tenant: "t".repeat(tenant),
        token: "k".repeat(token),
        client_name: "c".repeat(client_name),
        pid: 1,
    })
}

#[test]
fn request_strings_at_their_limit_decode_and_one_byte_more_is_refused() {
    let cases = [
        (
            hello(TENANT_NAME_LEN_MAX, 0, 0),
            hello(TENANT_NAME_LEN_MAX + 1, 0, 0),
            too_long("tenant", TENANT_NAME_LEN_MAX + 1, TENANT_NAME_LEN_MAX),
        ),
        (
            hello(0, TOKEN_LEN_MAX, 0),
            hello(0, TOKEN_LEN_MAX + 1, 0),
            too_long("token", TOKEN_LEN_MAX + 1, TOKEN_LEN_MAX),
        ),
        (
            hello(0, 0, CLIENT_NAME_LEN_MAX),
            hello(0, 0, CLIENT_NAME_LEN_MAX + 1),
            too_long("client_name", CLIENT_NAME_LEN_MAX + 1, CLIENT_NAME_LEN_MAX),
        ),
        (
            Request::Open { name: "n".repeat(NAME_LEN_MAX) },
            Request::Open { name: "n".repeat(NAME_LEN_MAX + 1) },
            too_long("name", NAME_LEN_MAX + 1, NAME_LEN_MAX),
        ),
        (
            Request::Alloc(Alloc { name: "n".repeat(NAME_LEN_MAX), ..dummy_alloc() }),
            Request::Alloc(Alloc { name: "n".repeat(NAME_LEN_MAX + 1), ..dummy_alloc() }),
            too_long("name", NAME_LEN_MAX + 1, NAME_LEN_MAX),
        ),
    ];
    for (at_limit, over, error) in cases {
        assert_eq!(Request::decode(&at_limit.encode(3)), Ok((3, at_limit)));
        assert_eq!(Request::decode(&over.encode(3)), Err(error));
    }
}

#[test]
fn reply_fields_at_their_limit_decode_and_one_byte_more_is_refused() {
    let hello = |n: usize| {
        Reply::Hello(HelloReply {
            client_id: 1,
            lease_ms: 2,
            capacity: 3,
            server_name: String::new(),
            worker_address: vec![7; n],
            host_id: String::new(),
        })
    };
    let alloc = |n: usize| Reply::Alloc(AllocReply { handle: 1, size: 2, remote_addr: 3, flags: 0, rkey: vec![7; n] });
    let tenants = |count: usize, name: usize| {
        Reply::Status(StatusReply {
            tenants: vec![TenantUsage { name: "t".repeat(name), used: 1, quota: 2, allocations: 3 }; count],
            ..StatusReply::default()
        })
    };
    let status_kind = Request::Status.kind();
    let alloc_kind = Request::Alloc(dummy_alloc()).kind();
    let cases = [
        (
            hello_kind(),
            hello(WORKER_ADDRESS_LEN_MAX),
            hello(WORKER_ADDRESS_LEN_MAX + 1),
            too_long("worker_address", WORKER_ADDRESS_LEN_MAX + 1, WORKER_ADDRESS_LEN_MAX),
        ),
        (alloc_kind, alloc(RKEY_LEN_MAX), alloc(RKEY_LEN_MAX + 1), too_long("rkey", RKEY_LEN_MAX + 1, RKEY_LEN_MAX)),
        (
            status_kind,
            tenants(1, TENANT_NAME_LEN_MAX),
            tenants(1, TENANT_NAME_LEN_MAX + 1),
            too_long("tenant_name", TENANT_NAME_LEN_MAX + 1, TENANT_NAME_LEN_MAX),
        ),
        (
            status_kind,
            tenants(TENANTS_MAX, 0),
            tenants(TENANTS_MAX + 1, 0),
            too_long("tenants", TENANTS_MAX + 1, TENANTS_MAX),
        ),
    ];
    for (kind, at_limit, over, error) in cases {
        assert_eq!(Reply::decode(&at_limit.encode(kind, 3)), Ok((kind, 3, at_limit)));
        assert_eq!(Reply::decode(&over.encode(kind, 3)), Err(error));
    }
}

#[test]
fn texts_the_server_writes_are_cut_to_their_limit_on_a_character_boundary() {
    let long = "é".repeat(ERROR_TEXT_LEN_MAX);
    let bytes = Reply::Error { status: Status::Internal, message: long.clone() }.encode(free_kind(), 1);
    let Ok((_, _, Reply::Error { message, .. })) = Reply::decode(&bytes) else { panic!("error reply did not decode") };
    assert_eq!(message, truncate_utf8(&long, ERROR_TEXT_LEN_MAX));
    assert!(message.len() <= ERROR_TEXT_LEN_MAX && message.len() + "é".len() > ERROR_TEXT_LEN_MAX);

    let name = "s".repeat(SERVER_NAME_LEN_MAX + 10);
    let bytes =
        Reply::Status(StatusReply { server_name: name, ..StatusReply::default() }).encode(Request::Status.kind(), 1);
    let Ok((_, _, Reply::Status(s))) = Reply::decode(&bytes) else { panic!("status reply did not decode") };
    assert_eq!(s.server_name.len(), SERVER_NAME_LEN_MAX);
}

#[test]
fn oversized_invalid_and_foreign_messages_are_refused_with_the_cause() {
    let status = Request::Status.encode(1);

    let mut huge = Request::Status.encode(1);
    huge.resize(MESSAGE_LEN_MAX + 1, 0);
    set_body_len(&mut huge, MESSAGE_LEN_MAX + 1 - HEADER_LEN);
    assert_eq!(decode_header(&huge).err(), Some(too_long("message", MESSAGE_LEN_MAX + 1, MESSAGE_LEN_MAX)));

    let mut magic = status.clone();
    magic[0] ^= 0xff;
    assert!(matches!(decode_header(&magic), Err(DecodeError::BadMagic { .. })));

    let mut version = status.clone();
    version[4..6].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
    assert_eq!(
        decode_header(&version).err(),
        Some(DecodeError::Version { found: PROTOCOL_VERSION + 1, expected: PROTOCOL_VERSION })
    );

    let unknown = framed(0x7fff, 1, &[]);
    assert_eq!(Request::decode(&unknown).err(), Some(DecodeError::UnknownKind { kind: 0x7fff }));
    assert_eq!(Reply::decode(&unknown).err(), Some(DecodeError::UnknownKind { kind: 0x7fff }));

    // Codes have gaps (ranges reserved per feature): the first one no status uses.
    let code = (0u16..).find(|c| Status::from_code(*c).is_none()).unwrap();
    let bad_status = framed(Request::Status.kind() | REPLY_BIT, 1, &code.to_le_bytes());
    assert_eq!(Reply::decode(&bad_status).err(), Some(DecodeError::UnknownStatus { code }));

    let mut utf8 = Request::Open { name: "ab".into() }.encode(1);
    let last = utf8.len() - 1;
    utf8[last] = 0xff;
    assert_eq!(Request::decode(&utf8).err(), Some(DecodeError::InvalidUtf8 { field: "name" }));
}

/// A Status reply lists the server's checkpoint groups after its tenants, and they come back
/// as sent; without groups the reply is byte for byte what it was before groups were listed.
#[test]
fn status_replies_carry_checkpoint_groups() {
    use nam_proto::ckpt::CkptGroupStatus;
    let group = CkptGroupStatus {
        id: 3,
        tenant: "t".into(),
        name: "job-4x1-set0".into(),
        ranks: 4,
        joined: 0,
        bytes: 32 << 20,
        complete_epoch: 7,
    };
    let status = StatusReply { ckpt_groups: vec![group.clone()], ckpt_groups_total: 1, ..StatusReply::default() };
    let kind = Request::Status.kind();
    let bytes = Reply::Status(status.clone()).encode(kind, 1);
    let (_, _, decoded) = Reply::decode(&bytes).expect("decodes");
    assert_eq!(decoded, Reply::Status(status));
    let without = Reply::Status(StatusReply::default()).encode(kind, 1);
    assert_eq!(bytes.len() - without.len(), 8 + 2 + 1 + 2 + 12 + 4 + 4 + 8 + 8);

    // A total below the entries listed is a lie, refused by name (the encoder never writes one).
    let total_at = without.len() - 12;
    let mut lying = bytes.clone();
    lying[total_at..total_at + 8].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(
        Reply::decode(&lying),
        Err(DecodeError::TotalBelowListed { field: "ckpt_groups_total", total: 0, listed: 1 })
    );
}
