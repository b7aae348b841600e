//! `nam_mailbox_t` and `nam_mailbox_sender_t`: many-to-one queues of small messages in server
//! memory. The owner creates one and hands out its address (`nam_mailbox_address`);
//! senders of the same tenant open it by that address.

use crate::client::nam_t;
use crate::ffi::{deref, deref_mut, guard, sink, source, write_optional, Failure};
use crate::global::nam_gaddr_t;
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{Mailbox, MailboxSender};
use std::ffi::c_void;
use std::time::Duration;

/// The receiving end of a mailbox (opaque), held by its owner. Destroy it with
/// `nam_mailbox_destroy` before `nam_finalize`.
pub struct nam_mailbox_t {
    nam: *const nam_t,
    mailbox: Mailbox,
}

/// A sending end of a mailbox (opaque). Close it with `nam_mailbox_sender_close` before
/// `nam_finalize`.
pub struct nam_mailbox_sender_t {
    nam: *const nam_t,
    sender: MailboxSender,
}

/// Creates a mailbox of `slots` slots (a power of two) of `slot_size` payload bytes (0:
/// 64) on any server. Blocking, at most the client's timeout.
///
/// # Safety
/// `nam` is NULL or a live client; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_mailbox_create(
    nam: *mut nam_t,
    slots: u32,
    slot_size: u32,
    out: *mut *mut nam_mailbox_t,
) -> nam_status_t {
    guard("nam_mailbox_create", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let nam = deref(nam, "nam")?;
        let size = if slot_size == 0 { nam_client::MAILBOX_SLOT_SIZE_DEFAULT } else { slot_size };
        let mailbox = Mailbox::create(&nam.client, slots, size, None)?;
        *out = Box::into_raw(Box::new(nam_mailbox_t { nam, mailbox }));
        Ok(NAM_OK)
    })
}

/// The address senders open the mailbox by.
///
/// # Safety
/// `mailbox` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_mailbox_address(mailbox: *const nam_mailbox_t, out: *mut nam_gaddr_t) -> nam_status_t {
    guard("nam_mailbox_address", || {
        let out = deref_mut(out, "out")?;
        *out = deref(mailbox, "mailbox")?.mailbox.address().into();
        Ok(NAM_OK)
    })
}

/// Receives the next message into `buf` (`cap` bytes, at least the slot size): `*len` its
/// length, `*sender` (if not NULL) the sender's process id. Waits up to `timeout_ms` (0:
/// only looks) and then returns `NAM_ERR_WAIT_TIMEOUT`.
///
/// # Safety
/// `mailbox` is NULL or live and not used by another thread; `buf` is writable for `cap`
/// bytes; `len` is NULL or writable; `sender` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_mailbox_recv(
    mailbox: *mut nam_mailbox_t,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    sender: *mut u32,
    timeout_ms: u64,
) -> nam_status_t {
    guard("nam_mailbox_recv", || {
        let len = deref_mut(len, "len")?;
        let mailbox = deref_mut(mailbox, "mailbox")?;
        let buffer = sink(buf, cap)?;
        let nam = &*mailbox.nam;
        let deadline = std::time::Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Some((from, n)) = mailbox.mailbox.try_recv_into(&nam.client, buffer)? {
                *len = n;
                write_optional(sender, from);
                return Ok(NAM_OK);
            }
            if std::time::Instant::now() >= deadline {
                return Err(Failure::Client(nam_client::Error::WaitTimeout { timeout_ms, last: 0 }));
            }
            std::thread::yield_now();
        }
    })
}

/// Frees the mailbox (its memory lives on while a sender still holds it).
///
/// # Safety
/// `mailbox` is NULL or live; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn nam_mailbox_destroy(mailbox: *mut nam_mailbox_t) -> nam_status_t {
    guard("nam_mailbox_destroy", || {
        deref(mailbox, "mailbox")?;
        let mailbox = Box::from_raw(mailbox);
        mailbox.mailbox.destroy(&(*mailbox.nam).client)?;
        Ok(NAM_OK)
    })
}

/// Opens the mailbox at `addr` for sending (the server checks the protection domain:
/// another tenant's mailbox gives `NAM_ERR_DOMAIN`).
///
/// # Safety
/// `nam` is NULL or a live client; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_mailbox_sender_open(
    nam: *mut nam_t,
    addr: nam_gaddr_t,
    out: *mut *mut nam_mailbox_sender_t,
) -> nam_status_t {
    guard("nam_mailbox_sender_open", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let nam = deref(nam, "nam")?;
        let sender = MailboxSender::open(&nam.client, addr.into())?;
        *out = Box::into_raw(Box::new(nam_mailbox_sender_t { nam, sender }));
        Ok(NAM_OK)
    })
}

/// Sends `len` bytes (at most the slot size). A full mailbox gives `NAM_ERR_MAILBOX_FULL`
/// at once, nothing written: retry later.
///
/// # Safety
/// `sender` is NULL or live and not used by another thread; `buf` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_mailbox_send(
    sender: *mut nam_mailbox_sender_t,
    buf: *const c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_mailbox_send", || {
        let sender = deref_mut(sender, "sender")?;
        let nam = &*sender.nam;
        sender.sender.send(&nam.client, source(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// Closes a sending end (releasing its hold on the mailbox's memory).
///
/// # Safety
/// `sender` is NULL or live; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn nam_mailbox_sender_close(sender: *mut nam_mailbox_sender_t) -> nam_status_t {
    guard("nam_mailbox_sender_close", || {
        deref(sender, "sender")?;
        let sender = Box::from_raw(sender);
        sender.sender.close(&(*sender.nam).client)?;
        Ok(NAM_OK)
    })
}
