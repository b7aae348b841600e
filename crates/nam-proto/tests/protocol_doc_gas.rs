//! Keeps the "Global addresses, mailboxes and allreduce" section of `docs/protocol.md`
//! honest: its examples are rendered here from the real encoders and its layout tables from
//! the real constants; the test fails (printing the text to paste in) when the document
//! does not contain them verbatim.
//!
//! Print every block: `cargo test -p nam-proto --test protocol_doc_gas -- --nocapture`.

use nam_proto::gas::{
    DomainReply, GasRequest, KIND_DOMAIN, KIND_MAILBOX_SEND, KIND_REDUCE_ATTACH, KIND_REDUCE_KICK, KIND_RESOLVE,
};
use nam_proto::mailbox::*;
use nam_proto::reduce::*;
use nam_proto::{GlobalAddress, Reply, Request};

fn document() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn assert_documented(what: &str, block: &str) {
    println!("---- {what} ----\n{block}");
    assert!(document().contains(block), "docs/protocol.md lacks the current {what}; replace it with:\n\n{block}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.chunks(32).map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n").collect()
}

fn example() -> GlobalAddress {
    GlobalAddress::new(0x1a2b_3c4d, 2, 7, 0x1000).unwrap()
}

#[test]
fn the_address_example_matches_the_encoder() {
    let a = example();
    let bytes = a.to_bytes();
    let text = format!(
        "```text\n{a}\nbytes  {}\n       offset {:02x?} handle {:02x?} domain {:02x?} server {:02x?}\n```\n",
        hex(&bytes).trim_end(),
        &bytes[0..5],
        &bytes[5..10],
        &bytes[10..12],
        &bytes[12..16]
    );
    assert_documented("global address example", &text);
}

#[test]
fn the_message_examples_match_the_encoder() {
    let messages = [
        ("Domain request (kind 32, request id 3)", Request::Gas(GasRequest::Domain).encode(3)),
        (
            "its reply (server tag 0x1a2b3c4d, domain 2)",
            Reply::Domain(DomainReply { server_tag: 0x1a2b_3c4d, domain: 2 }).encode(KIND_DOMAIN, 3),
        ),
        (
            "Resolve request for that address (kind 33, request id 4)",
            Request::Gas(GasRequest::Resolve { address: example() }).encode(4),
        ),
        (
            "ReduceAttach request (kind 34, request id 5: group \"world\", 8 ranks, rank 3, 1 MiB chunks)",
            Request::Gas(GasRequest::ReduceAttach { name: "world".into(), ranks: 8, rank: 3, chunk_bytes: 1 << 20 })
                .encode(5),
        ),
        (
            "ReduceKick request (kind 35, request id 6, group handle 9)",
            Request::Gas(GasRequest::ReduceKick { handle: 9 }).encode(6),
        ),
        (
            "MailboxSend request (kind 36, request id 7: handle 7, mailbox at offset 0, sender 4242, \"ping\")",
            Request::Gas(GasRequest::MailboxSend { handle: 7, offset: 0, sender: 4242, data: b"ping".to_vec() })
                .encode(7),
        ),
    ];
    assert_eq!(
        [KIND_DOMAIN, KIND_RESOLVE, KIND_REDUCE_ATTACH, KIND_REDUCE_KICK, KIND_MAILBOX_SEND],
        [32, 33, 34, 35, 36]
    );
    let blocks: Vec<String> =
        messages.iter().map(|(title, b)| format!("{title}, {} bytes:\n\n```text\n{}```\n", b.len(), hex(b))).collect();
    assert_documented("message examples", &blocks.join("\n"));
}

#[test]
fn the_layout_tables_match_the_constants() {
    let rows = [
        ("MAILBOX_MAGIC", format!("0x{MAILBOX_MAGIC:016x}")),
        ("MAILBOX_HEADER_LEN", MAILBOX_HEADER_LEN.to_string()),
        ("MAILBOX_SLOT_SIZE_AT", MAILBOX_SLOT_SIZE_AT.to_string()),
        ("MAILBOX_SLOTS_AT", MAILBOX_SLOTS_AT.to_string()),
        ("MAILBOX_TAIL_AT", MAILBOX_TAIL_AT.to_string()),
        ("MAILBOX_HEAD_AT", MAILBOX_HEAD_AT.to_string()),
        ("MAILBOX_SLOT_HEADER_LEN", MAILBOX_SLOT_HEADER_LEN.to_string()),
        ("MAILBOX_SLOT_SIZE_DEFAULT", MAILBOX_SLOT_SIZE_DEFAULT.to_string()),
        ("MAILBOX_SLOT_SIZE_MAX", MAILBOX_SLOT_SIZE_MAX.to_string()),
        ("MAILBOX_SLOTS_MAX", MAILBOX_SLOTS_MAX.to_string()),
        ("GROUP_RESULT_AT", GROUP_RESULT_AT.to_string()),
        ("GROUP_ARRIVED_AT", GROUP_ARRIVED_AT.to_string()),
        ("GROUP_ASLEEP_AT", GROUP_ASLEEP_AT.to_string()),
        ("GROUP_DESCRIPTORS_AT", GROUP_DESCRIPTORS_AT.to_string()),
        ("GROUP_DESCRIPTOR_LEN", GROUP_DESCRIPTOR_LEN.to_string()),
        ("ROUND_ABORTED", format!("0x{ROUND_ABORTED:x}")),
        ("REDUCE_RANKS_MAX", nam_proto::gas::REDUCE_RANKS_MAX.to_string()),
        ("REDUCE_CHUNK_MAX", nam_proto::gas::REDUCE_CHUNK_MAX.to_string()),
    ];
    let doc = document();
    let missing: Vec<String> = rows
        .iter()
        .map(|(name, value)| format!("| `{name}` | {value} |"))
        .filter(|row| !doc.lines().any(|l| l.starts_with(row.as_str())))
        .collect();
    assert!(missing.is_empty(), "docs/protocol.md lacks these rows (stale or missing):\n{missing:#?}");
    let mailbox = MailboxLayout::new(64, 8).unwrap();
    assert_eq!((mailbox.stride(), mailbox.slot_at(0), mailbox.total_len()), (128, 128, 128 + 8 * 128));
    let group = GroupLayout { ranks: 8, chunk_bytes: 4096 };
    assert_eq!((group.descriptor_at(7), group.data_at(), group.result_data_at()), (288, 320, 320 + 8 * 4096));
    assert!(doc.contains("8 ranks of 4096 bytes: descriptors at 64..320, deposits at 320.., the result at 33088"));
}
