//! The status vocabulary: every client error and every server refusal has exactly one code,
//! codes are distinct, and every code has a string. Plus the boundary's handling of NULL.

use nam::*;
use nam_client::{Error, Status};
use nam_status_t::*;
use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::ptr;

/// One value of every `nam_client::Error` variant, `Refused` aside (it carries a `Status`
/// and is covered through `Status::ALL`). `status_of_error` matches without a wildcard, so
/// a new variant fails to compile there; this list must then grow too.
fn one_error_per_variant() -> Vec<(&'static str, Error)> {
    let addr = "127.0.0.1:1".parse().unwrap();
    let ucx = nam_ucx::Error::Closed;
    vec![
        ("NoServers", Error::NoServers),
        ("Config", Error::Config("x".into())),
        ("Connect", Error::Connect { addr, source: ucx.clone() }),
        ("Timeout", Error::Timeout { addr, what: "alloc", timeout_ms: 1 }),
        ("Transport", Error::Transport { addr, what: "put", source: ucx }),
        ("Protocol", Error::Protocol { addr, source: nam_proto::DecodeError::BadMagic { found: 0 } }),
        ("UnexpectedReply", Error::UnexpectedReply { addr, what: "open" }),
        ("OutOfBounds", Error::OutOfBounds { offset: 1, len: 2, size: 2 }),
        ("Freed", Error::Freed { handle: 1 }),
        ("Misaligned", Error::Misaligned { offset: 1 }),
        ("InvalidArgument", Error::InvalidArgument("x")),
        ("WaitTimeout", Error::WaitTimeout { timeout_ms: 1, last: 0 }),
        ("UnknownServer", Error::UnknownServer { tag: 1 }),
        ("MailboxFull", Error::MailboxFull { slots: 4 }),
    ]
}

fn refused(status: Status) -> Error {
    Error::Refused { addr: "127.0.0.1:1".parse().unwrap(), what: "alloc", status, message: "m".into() }
}

/// The client-side checks that mean the same as a server refusal share its code.
const SHARED_MEANING: [(&str, Status); 5] = [
    ("OutOfBounds", Status::OutOfBounds),
    ("Freed", Status::FreedHandle),
    ("InvalidArgument", Status::InvalidArgument),
    ("UnknownServer", Status::WrongServer),
    ("MailboxFull", Status::MailboxFull),
];

#[test]
fn codes_are_distinct_and_have_strings() {
    let all = nam_status_t::all();
    let values: HashSet<i32> = all.iter().map(|s| *s as i32).collect();
    assert_eq!(values.len(), all.len(), "two codes share a value");
    assert_eq!(NAM_OK as i32, 0);
    assert_eq!(NAM_IN_PROGRESS as i32, 1);
    let mut strings = HashSet::new();
    for status in all {
        assert_eq!(nam_status_t::from_code(status as i32), Some(status));
        if status != NAM_OK && status != NAM_IN_PROGRESS {
            assert!((status as i32) < 0, "{status:?} is an error and must be negative");
        }
        let text = unsafe { CStr::from_ptr(nam_status_string(status as i32)) }.to_str().unwrap();
        assert!(!text.is_empty() && text != "unknown status", "{status:?} has no string");
        assert!(strings.insert(text), "{status:?} shares its string {text:?}");
    }
    for unknown in [2, -54, -1000, i32::MIN, i32::MAX] {
        let text = unsafe { CStr::from_ptr(nam_status_string(unknown)) };
        assert_eq!(text.to_str().unwrap(), "unknown status");
    }
}

#[test]
fn every_refusal_has_exactly_one_code() {
    let mut seen: HashMap<nam_status_t, Status> = HashMap::new();
    for status in Status::ALL {
        let code = status_of_refusal(status);
        if status == Status::Ok {
            assert_eq!(code, NAM_OK);
            assert_eq!(status_of_error(&refused(status)), NAM_ERR_UNEXPECTED_REPLY);
            continue;
        }
        assert!((code as i32) < 0, "refusal {status:?} maps to non-error {code:?}");
        assert_eq!(status_of_error(&refused(status)), code, "Refused({status:?}) and {status:?} differ");
        if let Some(other) = seen.insert(code, status) {
            panic!("{status:?} and {other:?} share {code:?}");
        }
    }
}

#[test]
fn every_client_error_has_exactly_one_code() {
    let refusal_codes: HashMap<nam_status_t, Status> =
        Status::ALL.into_iter().filter(|s| *s != Status::Ok).map(|s| (status_of_refusal(s), s)).collect();
    let mut seen: HashMap<nam_status_t, &str> = HashMap::new();
    for (variant, error) in one_error_per_variant() {
        let code = status_of_error(&error);
        assert!((code as i32) < 0, "{variant} maps to non-error {code:?}");
        assert_ne!(code, NAM_ERR_INTERNAL, "{variant}: NAM_ERR_INTERNAL is reserved for panics");
        if let Some(other) = seen.insert(code, variant) {
            panic!("{variant} and {other} share {code:?}");
        }
        match refusal_codes.get(&code) {
            None => {}
            Some(status) => assert!(
                SHARED_MEANING.contains(&(variant, *status)),
                "{variant} shares {code:?} with refusal {status:?} without meaning the same"
            ),
        }
    }
    // Every code but OK, IN_PROGRESS, UNEXPECTED_REPLY's Ok-refusal alias and INTERNAL is
    // reachable from some error or refusal: nothing in the enum is dead.
    let far_codes = far_errors().iter().map(status_of_far_error).collect::<Vec<_>>();
    let ckpt_codes: Vec<nam_status_t> =
        one_ckpt_error_per_variant().iter().map(|(_, e)| status_of_ckpt_error(e)).collect();
    let reachable: HashSet<nam_status_t> =
        seen.keys().chain(refusal_codes.keys()).chain(far_codes.iter()).chain(ckpt_codes.iter()).copied().collect();
    for code in nam_status_t::all() {
        if ![NAM_OK, NAM_IN_PROGRESS, NAM_ERR_INTERNAL].contains(&code) {
            assert!(reachable.contains(&code), "{code:?} is reached by no error");
        }
    }
}

/// One value of every `nam_ckpt::CkptError` variant (`status_of_ckpt_error` has no
/// wildcard, so a new variant fails to compile there; this list must then grow too).
fn one_ckpt_error_per_variant() -> Vec<(&'static str, nam_ckpt::CkptError)> {
    use nam_ckpt::CkptError as E;
    let io = || std::io::Error::other("x");
    vec![
        ("Config", E::Config("x".into())),
        ("UnknownKey", E::UnknownKey("x".into())),
        ("Directory", E::Directory { path: "/x".into(), reason: "x".into() }),
        ("RamTooSmall", E::RamTooSmall { bytes: 2, limit: 1 }),
        ("Region", E::Region { id: 1, reason: "x".into() }),
        ("UnknownRegion", E::UnknownRegion(1)),
        ("NoCheckpoint", E::NoCheckpoint(String::new())),
        ("RankCount", E::RankCount { written: 2, now: 1 }),
        ("Corrupt", E::Corrupt("x".into())),
        ("Unrecoverable", E::Unrecoverable("x".into())),
        ("Layout", E::layout("xor", "x")),
        ("SizeMismatch", E::SizeMismatch { id: 1, stored: 1, protected: 2 }),
        ("Flush", E::Flush { path: "/x".into(), reason: "x".into() }),
        ("Io", E::io("read", "/x", io())),
        ("State", E::State("x".into())),
    ]
}

#[test]
fn every_checkpoint_error_has_exactly_one_code() {
    let mut seen: HashMap<nam_status_t, &str> = HashMap::new();
    for (variant, error) in one_ckpt_error_per_variant() {
        let code = status_of_ckpt_error(&error);
        assert!((code as i32) < 0 && code != NAM_ERR_INTERNAL, "{variant} maps to {code:?}");
        if let Some(other) = seen.insert(code, variant) {
            panic!("{variant} and {other} share {code:?}");
        }
    }
    // Errors that mean what the client library's or the engine's codes mean share them.
    use nam_ckpt::CkptError as E;
    assert_eq!(status_of_ckpt_error(&E::Config("x".into())), NAM_ERR_CONFIG);
    assert_eq!(status_of_ckpt_error(&E::Unrecoverable("x".into())), NAM_ERR_CKPT_UNRECOVERABLE);
    assert_eq!(status_of_ckpt_error(&E::Corrupt("x".into())), NAM_ERR_CKPT_CORRUPTED);
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(nam_last_error_message()) }.to_str().unwrap().to_string()
}

#[test]
fn null_arguments_are_invalid_not_crashes() {
    unsafe {
        assert_eq!(nam_init(ptr::null(), ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        assert!(last_error().contains("nam_init: argument `out` is NULL"), "{}", last_error());
        let mut nam = ptr::null_mut();
        let config = nam_config_t {
            servers: ptr::null(),
            tenant: ptr::null(),
            token: ptr::null(),
            transports: ptr::null(),
            name: ptr::null(),
            timeout_ms: 0,
            connect_timeout_ms: 0,
        };
        assert_eq!(nam_init(&config, &mut nam), NAM_ERR_INVALID_ARGUMENT);
        assert!(nam.is_null());
        assert!(last_error().contains("config->servers"), "{}", last_error());
        let config = nam_config_t { servers: cs(b"not an address\0"), ..config };
        assert_eq!(nam_init(&config, &mut nam), NAM_ERR_CONFIG);
        let config = nam_config_t { servers: cs(b" , \0"), ..config };
        assert_eq!(nam_init(&config, &mut nam), NAM_ERR_NO_SERVERS);
        assert_eq!(nam_finalize(ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_flush(ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_fence(ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        let mut alloc = ptr::null_mut();
        assert_eq!(nam_malloc(ptr::null_mut(), 64, ptr::null(), &mut alloc), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_malloc(ptr::null_mut(), 64, ptr::null(), ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_open(ptr::null_mut(), cs(b"x\0"), &mut alloc), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_free(ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_alloc_release(ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_alloc_size(ptr::null()), 0);
        let mut byte = 0u8;
        let buf = (&mut byte as *mut u8).cast();
        assert_eq!(nam_put_sync(ptr::null_mut(), 0, buf, 1), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_get_sync(ptr::null_mut(), 0, buf, 1), NAM_ERR_INVALID_ARGUMENT);
        let mut request = ptr::null_mut();
        assert_eq!(nam_put(ptr::null_mut(), 0, buf, 1, &mut request), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_get(ptr::null_mut(), 0, buf, 1, &mut request), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_get(ptr::null_mut(), 0, buf, 1, ptr::null_mut()), NAM_ERR_INVALID_ARGUMENT);
        assert!(request.is_null());
        assert_eq!(nam_test(ptr::null_mut()), NAM_OK, "a NULL request completed at once");
        assert_eq!(nam_wait(ptr::null_mut()), NAM_OK, "a NULL request completed at once");
        let mut word = 0;
        assert_eq!(nam_atomic_fetch_add(ptr::null_mut(), 0, 1, &mut word), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_atomic_cswap(ptr::null_mut(), 0, 1, 2, &mut word), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_atomic_swap(ptr::null_mut(), 0, 1, &mut word), NAM_ERR_INVALID_ARGUMENT);
        assert_eq!(nam_atomic_fetch(ptr::null_mut(), 0, &mut word), NAM_ERR_INVALID_ARGUMENT);
        let signal = nam_signal_op_t::NAM_SIGNAL_ADD as i32;
        assert_eq!(nam_put_signal(ptr::null_mut(), 0, buf, 1, ptr::null_mut(), 0, 1, signal), NAM_ERR_INVALID_ARGUMENT);
        let cmp = nam_cmp_t::NAM_CMP_EQ as i32;
        assert_eq!(nam_wait_until(ptr::null_mut(), 0, cmp, 1, 10, &mut word), NAM_ERR_INVALID_ARGUMENT);
        assert!(last_error().starts_with("nam_wait_until: argument `alloc` is NULL"), "{}", last_error());
    }
}

#[test]
fn a_server_that_is_not_there_is_a_connect_error_within_the_deadline() {
    let config = nam_config_t {
        servers: cs(b"127.0.0.1:1\0"),
        tenant: ptr::null(),
        token: ptr::null(),
        transports: cs(b"tcp\0"),
        name: cs(b"capi-test\0"),
        timeout_ms: 500,
        connect_timeout_ms: 500,
    };
    let mut nam = ptr::null_mut();
    let started = std::time::Instant::now();
    let status = unsafe { nam_init(&config, &mut nam) };
    assert!(matches!(status, NAM_ERR_CONNECT | NAM_ERR_TIMEOUT | NAM_ERR_TRANSPORT), "{status:?}: {}", last_error());
    assert!(nam.is_null());
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(last_error().starts_with("nam_init: "), "{}", last_error());
}

fn cs(bytes: &'static [u8]) -> *const std::ffi::c_char {
    CStr::from_bytes_with_nul(bytes).expect("NUL-terminated").as_ptr()
}

/// One far-memory error of each kind that has a code of its own.
fn far_errors() -> Vec<nam_farmem::Error> {
    use nam_farmem::Error as E;
    vec![
        E::BudgetTooSmall { budget_bytes: 1, unit_bytes: 4096 },
        E::Unaligned { addr: 1, len: 1, span_bytes: 64 },
        E::UserfaultfdNotPermitted { reason: "EPERM".into() },
        E::System { what: "mmap", source: std::sync::Arc::new(std::io::Error::from_raw_os_error(12)) },
        E::HugePagesUnavailable { needed: 4, free: 0, page_bytes: 2 << 20 },
    ]
}

#[test]
fn far_memory_errors_have_their_own_codes() {
    let codes: HashSet<nam_status_t> = far_errors().iter().map(status_of_far_error).collect();
    assert_eq!(codes.len(), far_errors().len(), "two far-memory errors share a code");
    for code in codes {
        assert!((code as i32) <= -32, "{code:?} should be one of the far-memory codes");
    }
    let range = nam_farmem::Error::OutOfRange { addr: 0, len: 8, size: 4 };
    assert_eq!(status_of_far_error(&range), NAM_ERR_OUT_OF_BOUNDS);
}
