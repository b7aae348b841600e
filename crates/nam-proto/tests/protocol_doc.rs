//! Keeps `docs/protocol.md` honest. The worked examples, the status table and the limits
//! table in the document are rendered here from the real encoder and the real constants;
//! the test fails when the document does not contain them verbatim, and prints the block
//! to paste in. A format change therefore fails here until the document is updated.
//!
//! Print every generated block: `cargo test -p nam-proto --test protocol_doc -- --nocapture`.

use nam_proto::limits::*;
use nam_proto::{
    decode_header, Alloc, AllocReply, Hello, HelloReply, Reply, Request, Status, StatusReply, TenantUsage,
    TrafficReport, ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED, AM_ID_REPLY, AM_ID_REQUEST, HEADER_LEN, REPLY_BIT,
};
use std::fmt::Write as _;

/// How one field of an example is shown.
#[derive(Clone, Copy)]
enum Field {
    U16(&'static str),
    U32(&'static str),
    U64(&'static str),
    /// A `str16`: its `u16` length, then the UTF-8 bytes.
    Str16(&'static str),
    /// A `bytes32`: its `u32` length, then the bytes.
    Bytes32(&'static str),
}

const HEADER: [Field; 6] = [
    Field::U32("magic"),
    Field::U16("version"),
    Field::U16("kind"),
    Field::U64("request_id"),
    Field::U32("body_len"),
    Field::U32("reserved"),
];
const ALLOC_REQUEST_BODY: [Field; 4] =
    [Field::U64("size"), Field::U64("align"), Field::U32("flags"), Field::Str16("name")];
const ALLOC_REPLY_BODY: [Field; 6] = [
    Field::U16("status"),
    Field::U64("handle"),
    Field::U64("size"),
    Field::U64("remote_addr"),
    Field::U32("flags"),
    Field::Bytes32("rkey"),
];
const ERROR_REPLY_BODY: [Field; 2] = [Field::U16("status"), Field::Str16("message")];

/// Bytes shown on one line of a field breakdown.
const BYTES_PER_LINE: usize = 8;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |acc, &b| (acc << 8) | u64::from(b))
}

/// Appends the lines of one field at `pos` (`len` bytes, wrapped) and moves `pos` past it.
fn field_lines(out: &mut String, bytes: &[u8], pos: &mut usize, len: usize, name: &str, value: &str) {
    for (i, part) in bytes[*pos..*pos + len].chunks(BYTES_PER_LINE).enumerate() {
        let (name, value) = if i == 0 { (name, value) } else { ("", "") };
        let text = format!("{:>4}  {:<24} {:<16} {}", *pos + i * BYTES_PER_LINE, hex(part), name, value);
        writeln!(out, "{}", text.trim_end()).unwrap();
    }
    *pos += len;
}

/// One line per field (long fields wrap): offset, bytes, field name, value read back from
/// the bytes. Panics if the layout does not cover the message exactly.
fn breakdown(bytes: &[u8], layout: &[Field]) -> String {
    let mut out = format!("{:>4}  {:<24} {:<16} {}\n", "off", "bytes", "field", "value");
    let mut pos = 0;
    for field in layout {
        match *field {
            Field::U16(name) | Field::U32(name) | Field::U64(name) => {
                let len = match field {
                    Field::U16(_) => 2,
                    Field::U32(_) => 4,
                    _ => 8,
                };
                let v = le(&bytes[pos..pos + len]);
                let value = if matches!(name, "magic" | "kind" | "flags") {
                    format!("0x{v:0width$x}", width = 2 * len)
                } else if v > 0xffff {
                    format!("0x{v:x}")
                } else {
                    v.to_string()
                };
                field_lines(&mut out, bytes, &mut pos, len, name, &value);
            }
            Field::Str16(name) | Field::Bytes32(name) => {
                let width = if matches!(field, Field::Str16(_)) { 2 } else { 4 };
                let len = le(&bytes[pos..pos + width]) as usize;
                field_lines(&mut out, bytes, &mut pos, width, &format!("{name}.len"), &len.to_string());
                let text = match field {
                    Field::Str16(_) => format!("{:?}", std::str::from_utf8(&bytes[pos..pos + len]).unwrap()),
                    _ => String::new(),
                };
                field_lines(&mut out, bytes, &mut pos, len, name, &text);
            }
        }
    }
    assert_eq!(pos, bytes.len(), "the example layout must cover the whole message");
    out
}

/// A plain dump, 32 bytes a line, for `xxd -r -p`.
fn plain(bytes: &[u8]) -> String {
    bytes.chunks(32).map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n").collect()
}

fn example(title: &str, bytes: &[u8], layout: &[Field]) -> String {
    format!(
        "{title}, {} bytes:\n\n```text\n{}```\n\nThe same bytes as one hex string:\n\n```text\n{}```\n",
        bytes.len(),
        breakdown(bytes, layout),
        plain(bytes)
    )
}

fn alloc_request() -> (u64, Request) {
    let alloc = Alloc { size: 4096, align: 0, flags: ALLOC_FLAG_SHARED, name: "ckpt".to_string() };
    (7, Request::Alloc(alloc))
}

/// The reply a server gives to [`alloc_request`]: handle 1 at pool offset 0x1000 of a pool
/// mapped at 0x7f5a_2c40_0000, with a made-up 8-byte key (a real packed UCX key is longer
/// and opaque).
fn alloc_reply() -> Reply {
    Reply::Alloc(AllocReply {
        handle: 1,
        size: 4096,
        remote_addr: 0x7f5a_2c40_0000 + 0x1000,
        flags: ALLOC_FLAG_SHARED,
        rkey: (0xa0..0xa8).collect(),
    })
}

fn header_then(body: &[Field]) -> Vec<Field> {
    HEADER.iter().chain(body).copied().collect()
}

fn worked_examples() -> String {
    let (id, request) = alloc_request();
    let request_bytes = request.encode(id);
    assert_eq!(Request::decode(&request_bytes).unwrap(), (id, request.clone()));
    let reply = alloc_reply();
    let reply_bytes = reply.encode(request.kind(), id);
    assert_eq!(Reply::decode(&reply_bytes).unwrap(), (request.kind(), id, reply));

    // The same request with version 2 in its header: the server answers as `Server::answer`
    // does, with VersionMismatch under the request's own kind and id.
    let mut foreign = request_bytes.clone();
    foreign[4..6].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
    let error = decode_header(&foreign).unwrap_err();
    let (foreign_kind, foreign_id) = nam_proto::peek_foreign_version(&foreign).expect("magic and id are readable");
    assert_eq!((foreign_kind, foreign_id), (request.kind(), id));
    let malformed = Reply::Error { status: Status::VersionMismatch, message: error.to_string() };
    let malformed_bytes = malformed.encode(foreign_kind, foreign_id);
    assert_eq!(Reply::decode(&malformed_bytes).unwrap(), (foreign_kind, foreign_id, malformed));

    [
        example(
            "Alloc request (request id 7, 4096 bytes, default alignment, shared, named \"ckpt\")",
            &request_bytes,
            &header_then(&ALLOC_REQUEST_BODY),
        ),
        example(
            "Its reply (handle 1, remote address 0x7f5a2c401000, an 8-byte example rkey)",
            &reply_bytes,
            &header_then(&ALLOC_REPLY_BODY),
        ),
        example(
            "The reply to that request sent with version 2 in its header",
            &malformed_bytes,
            &header_then(&ERROR_REPLY_BODY),
        ),
    ]
    .join("\n")
}

/// Rows of the status table: each document row starts with one of these (a further column
/// may follow).
fn status_rows() -> Vec<String> {
    Status::ALL.iter().map(|s| format!("| {} | `{:?}` | {} |", s.code(), s, s.describe())).collect()
}

/// Rows of the constants table: each document row starts with one of these.
fn constant_rows() -> Vec<String> {
    let rows: [(&str, String); 22] = [
        ("PROTOCOL_VERSION", PROTOCOL_VERSION.to_string()),
        ("MESSAGE_MAGIC", format!("0x{MESSAGE_MAGIC:08x}")),
        ("HEADER_LEN", HEADER_LEN.to_string()),
        ("MESSAGE_LEN_MAX", MESSAGE_LEN_MAX.to_string()),
        ("AM_ID_REQUEST", AM_ID_REQUEST.to_string()),
        ("AM_ID_REPLY", AM_ID_REPLY.to_string()),
        ("REPLY_BIT", format!("0x{REPLY_BIT:04x}")),
        ("ALLOC_FLAG_SHARED", format!("0x{ALLOC_FLAG_SHARED:x}")),
        ("ALLOC_FLAG_PERSISTENT", format!("0x{ALLOC_FLAG_PERSISTENT:x}")),
        ("NAME_LEN_MAX", NAME_LEN_MAX.to_string()),
        ("TENANT_NAME_LEN_MAX", TENANT_NAME_LEN_MAX.to_string()),
        ("TOKEN_LEN_MAX", TOKEN_LEN_MAX.to_string()),
        ("CLIENT_NAME_LEN_MAX", CLIENT_NAME_LEN_MAX.to_string()),
        ("SERVER_NAME_LEN_MAX", SERVER_NAME_LEN_MAX.to_string()),
        ("ERROR_TEXT_LEN_MAX", ERROR_TEXT_LEN_MAX.to_string()),
        ("RKEY_LEN_MAX", RKEY_LEN_MAX.to_string()),
        ("WORKER_ADDRESS_LEN_MAX", WORKER_ADDRESS_LEN_MAX.to_string()),
        ("TENANTS_MAX", TENANTS_MAX.to_string()),
        ("ALLOC_SIZE_MAX", ALLOC_SIZE_MAX.to_string()),
        ("ALIGN_MIN", ALIGN_MIN.to_string()),
        ("ALIGN_MAX", ALIGN_MAX.to_string()),
        ("HANDLES_PER_CLIENT_MAX", HANDLES_PER_CLIENT_MAX.to_string()),
    ];
    rows.iter().map(|(name, value)| format!("| `{name}` | {value} |")).collect()
}

fn document() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn assert_documented(what: &str, block: &str) {
    println!("---- {what} ----\n{block}");
    assert!(
        document().contains(block),
        "docs/protocol.md does not contain the current {what}; replace it with:\n\n{block}"
    );
}

fn assert_rows_documented(what: &str, rows: &[String]) {
    let doc = document();
    let missing: Vec<&String> = rows.iter().filter(|row| !doc.lines().any(|l| l.starts_with(row.as_str()))).collect();
    for row in rows {
        println!("{row}");
    }
    assert!(missing.is_empty(), "docs/protocol.md lacks these rows of the {what} (stale or missing):\n{missing:#?}");
}

#[test]
fn worked_examples_match_the_encoder() {
    assert_documented("worked examples", &worked_examples());
}

#[test]
fn status_table_matches_the_code() {
    assert_rows_documented("status table", &status_rows());
}

#[test]
fn constants_table_matches_the_code() {
    assert_rows_documented("constants table", &constant_rows());
}

fn body_len(bytes: &[u8]) -> usize {
    bytes.len() - HEADER_LEN
}

/// The body sizes the document gives per message, at the limits, and its "at most" figures.
#[test]
fn body_sizes_match_the_document() {
    let s = |n: usize| "s".repeat(n);
    let hello = Request::Hello(Hello {
        tenant: s(TENANT_NAME_LEN_MAX),
        token: s(TOKEN_LEN_MAX),
        client_name: s(CLIENT_NAME_LEN_MAX),
        pid: 1,
    });
    let alloc = Request::Alloc(Alloc { size: 1, align: 0, flags: 0, name: s(NAME_LEN_MAX) });
    let open = Request::Open { name: s(NAME_LEN_MAX) };
    let hello_reply = Reply::Hello(HelloReply {
        client_id: 1,
        lease_ms: 1,
        capacity: 1,
        server_name: s(SERVER_NAME_LEN_MAX),
        worker_address: vec![0; WORKER_ADDRESS_LEN_MAX],
        host_id: s(HOST_ID_LEN_MAX),
    });
    let alloc_reply =
        Reply::Alloc(AllocReply { handle: 1, size: 1, remote_addr: 1, flags: 0, rkey: vec![0; RKEY_LEN_MAX] });
    let sizes = [
        ("Hello", body_len(&hello.encode(1)), 10 + TENANT_NAME_LEN_MAX + TOKEN_LEN_MAX + CLIENT_NAME_LEN_MAX),
        ("Alloc", body_len(&alloc.encode(1)), 22 + NAME_LEN_MAX),
        ("Open", body_len(&open.encode(1)), 2 + NAME_LEN_MAX),
        (
            "Hello reply",
            body_len(&hello_reply.encode(1, 1)),
            34 + SERVER_NAME_LEN_MAX + WORKER_ADDRESS_LEN_MAX + HOST_ID_LEN_MAX,
        ),
        ("Alloc reply", body_len(&alloc_reply.encode(2, 1)), 34 + RKEY_LEN_MAX),
    ];
    let doc = document();
    for (what, encoded, formula) in sizes {
        assert_eq!(encoded, formula, "{what}: the document's formula disagrees with the encoder");
        assert!(doc.contains(&format!("at most {encoded}")), "{what}: the document lacks \"at most {encoded}\"");
    }
    let fixed = [
        ("Free", body_len(&Request::Free { handle: 1 }.encode(1)), 8),
        ("Status", body_len(&Request::Status.encode(1)), 0),
        ("Goodbye", body_len(&Request::Goodbye(TrafficReport::default()).encode(1)), 40),
        ("Done", body_len(&Reply::Done.encode(4, 1)), 2),
    ];
    for (what, encoded, documented) in fixed {
        assert_eq!(encoded, documented, "{what}: the document's size disagrees with the encoder");
    }
    // Status reply: 212 + S + sum(26 + L(name)) + sum(36 + L(tenant) + L(group)); error: 4 + L(message).
    let status = Reply::Status(StatusReply {
        server_name: s(3),
        tenants: vec![
            TenantUsage { name: s(5), used: 1, quota: 2, allocations: 3 },
            TenantUsage { name: s(0), used: 1, quota: 2, allocations: 3 },
        ],
        ..Default::default()
    });
    assert_eq!(body_len(&status.encode(5, 1)), 212 + 3 + (26 + 5) + 26);
    let group = nam_proto::ckpt::CkptGroupStatus { tenant: s(2), name: s(7), ..Default::default() };
    let with_group = Reply::Status(StatusReply { server_name: s(3), ckpt_groups: vec![group], ..Default::default() });
    assert_eq!(body_len(&with_group.encode(5, 1)), 212 + 3 + (36 + 2 + 7));
    let error = Reply::Error { status: Status::Internal, message: s(9) };
    assert_eq!(body_len(&error.encode(5, 1)), 4 + 9);
}
