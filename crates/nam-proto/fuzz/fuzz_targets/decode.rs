//! Every control-message decoder of nam-proto on arbitrary bytes: it may refuse them, it must
//! never panic, and whatever it accepts must re-encode to the same bytes (the reserved header
//! field aside, which receivers ignore) and decode again to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nam_proto::{decode_header, Reply, Request, HEADER_LEN};

/// Offset of the header's reserved field (docs/protocol.md, "Header").
const RESERVED_AT: usize = 20;

fn assert_same_but_reserved(encoded: &[u8], original: &[u8]) {
    assert_eq!(encoded.len(), original.len(), "re-encoded length differs");
    assert_eq!(encoded[..RESERVED_AT], original[..RESERVED_AT], "re-encoded header differs");
    assert_eq!(encoded[HEADER_LEN..], original[HEADER_LEN..], "re-encoded body differs");
}

fuzz_target!(|bytes: &[u8]| {
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
});
