//! Every control message a peer can send or a server can answer, as raw bytes: the header
//! decoder, the request decoder (every kind: hello, alloc, open, free, status, goodbye, put,
//! get, atomic, the checkpoint and global-address kinds), the put fast path the server
//! takes before it, the reply decoder the client uses, and the mailbox header read from the
//! pool. Decoders may refuse; they must not panic, and what they accept must encode back to
//! the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nam_proto::{decode_header, decode_put, peek_foreign_version, Reply, Request};

fuzz_target!(|bytes: &[u8]| {
    let _ = peek_foreign_version(bytes);
    let _ = decode_header(bytes);
    if let Ok(Some(put)) = decode_put(bytes) {
        assert!(put.data.len() <= nam_proto::limits::DATA_CHUNK_MAX, "a put larger than a chunk");
    }
    if let Ok((id, request)) = Request::decode(bytes) {
        let again = Request::decode(&request.encode(id)).expect("an accepted request re-encodes");
        assert_eq!(again, (id, request), "request round trip");
    }
    if let Ok((kind, id, reply)) = Reply::decode(bytes) {
        let again = Reply::decode(&reply.encode(kind & !nam_proto::REPLY_BIT, id));
        assert!(again.is_ok(), "an accepted reply re-encodes: {reply:?} -> {again:?}");
    }
    if let Some(head) = bytes.get(..nam_proto::mailbox::MAILBOX_HEADER_LEN as usize) {
        let _ = nam_proto::mailbox::MailboxLayout::decode_header(head);
    }
});
