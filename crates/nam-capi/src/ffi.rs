//! The boundary: every exported function runs its body through `guard`, which turns
//! failures into codes, records their text for `nam_last_error_message`, and catches panics.

use crate::status::{nam_status_t, set_last_error, status_of_error};
use nam_client::Error;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Why a call failed before or inside the client library.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client library failed.
    Client(Error),
    /// A required pointer argument was NULL.
    Null(&'static str),
    /// An argument is invalid for another reason.
    Invalid(String),
    /// The far-memory library failed.
    Far(nam_farmem::Error),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Client(error)
    }
}

impl Failure {
    fn status(&self) -> nam_status_t {
        match self {
            Failure::Client(error) => status_of_error(error),
            Failure::Null(_) | Failure::Invalid(_) => nam_status_t::NAM_ERR_INVALID_ARGUMENT,
            Failure::Far(error) => crate::status::status_of_far_error(error),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Client(error) => write!(f, "{error}"),
            Failure::Null(argument) => write!(f, "argument `{argument}` is NULL"),
            Failure::Invalid(text) => f.write_str(text),
            Failure::Far(error) => write!(f, "{error}"),
        }
    }
}

pub(crate) type Outcome = Result<nam_status_t, Failure>;

/// Runs the body of the exported function `call`: `Ok(code)` is returned as is, a failure
/// becomes its code with its text recorded, a panic becomes `NAM_ERR_INTERNAL`.
pub(crate) fn guard(call: &'static str, body: impl FnOnce() -> Outcome) -> nam_status_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status)) => status,
        Ok(Err(failure)) => fail(call, &failure),
        Err(panic) => {
            let cause = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".into());
            set_last_error(format!("{call}: internal error in libnam (panic: {cause})"));
            nam_status_t::NAM_ERR_INTERNAL
        }
    }
}

/// Records `failure` of `call` and returns its code.
pub(crate) fn fail(call: &'static str, failure: &Failure) -> nam_status_t {
    set_last_error(format!("{call}: {failure}"));
    failure.status()
}

/// `ptr` as a reference, or a NULL-argument failure naming `argument`.
///
/// # Safety
/// A non-NULL `ptr` must point to a live `T` for the chosen lifetime.
pub(crate) unsafe fn deref<'a, T>(ptr: *const T, argument: &'static str) -> Result<&'a T, Failure> {
    ptr.as_ref().ok_or(Failure::Null(argument))
}

/// `ptr` as a mutable reference, or a NULL-argument failure naming `argument`.
///
/// # Safety
/// A non-NULL `ptr` must point to a live `T` not aliased for the chosen lifetime.
pub(crate) unsafe fn deref_mut<'a, T>(ptr: *mut T, argument: &'static str) -> Result<&'a mut T, Failure> {
    ptr.as_mut().ok_or(Failure::Null(argument))
}

/// Writes `value` to `out` unless `out` is NULL (optional outputs).
///
/// # Safety
/// A non-NULL `out` must be valid for writes.
pub(crate) unsafe fn write_optional<T>(out: *mut T, value: T) {
    if !out.is_null() {
        out.write(value);
    }
}

/// A C string argument as UTF-8; `None` for NULL.
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string.
pub(crate) unsafe fn optional_str<'a>(ptr: *const c_char, argument: &'static str) -> Result<Option<&'a str>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    CStr::from_ptr(ptr)
        .to_str()
        .map(Some)
        .map_err(|_| Failure::Invalid(format!("argument `{argument}` is not valid UTF-8")))
}

/// A required C string argument as UTF-8.
///
/// # Safety
/// As `optional_str`.
pub(crate) unsafe fn required_str<'a>(ptr: *const c_char, argument: &'static str) -> Result<&'a str, Failure> {
    optional_str(ptr, argument)?.ok_or(Failure::Null(argument))
}

/// The bytes of a source buffer; NULL is accepted only with `len == 0`.
///
/// # Safety
/// A non-NULL `buf` must be valid for reads of `len` bytes for the chosen lifetime.
pub(crate) unsafe fn source<'a>(buf: *const std::ffi::c_void, len: usize) -> Result<&'a [u8], Failure> {
    match (buf.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Failure::Null("buf")),
        (false, _) => Ok(std::slice::from_raw_parts(buf.cast(), len)),
    }
}

/// The bytes of a destination buffer; NULL is accepted only with `len == 0`.
///
/// # Safety
/// A non-NULL `buf` must be valid for writes of `len` bytes, unaliased, for the lifetime.
pub(crate) unsafe fn sink<'a>(buf: *mut std::ffi::c_void, len: usize) -> Result<&'a mut [u8], Failure> {
    match (buf.is_null(), len) {
        (_, 0) => Ok(&mut []),
        (true, _) => Err(Failure::Null("buf")),
        (false, _) => Ok(std::slice::from_raw_parts_mut(buf.cast(), len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_internal_with_its_cause() {
        let status = guard("nam_test_call", || panic!("boom {}", 7));
        assert_eq!(status, nam_status_t::NAM_ERR_INTERNAL);
        let text = unsafe { CStr::from_ptr(crate::nam_last_error_message()) }.to_str().unwrap().to_string();
        assert_eq!(text, "nam_test_call: internal error in libnam (panic: boom 7)");
    }

    #[test]
    fn a_failure_records_call_and_cause() {
        let status = guard("nam_x", || Err(Failure::Client(Error::Misaligned { offset: 4 })));
        assert_eq!(status, nam_status_t::NAM_ERR_MISALIGNED);
        let text = unsafe { CStr::from_ptr(crate::nam_last_error_message()) }.to_str().unwrap().to_string();
        assert_eq!(text, "nam_x: offset 4 is not 8-byte aligned, as 64-bit atomics need");
        assert_eq!(guard("nam_y", || Ok(nam_status_t::NAM_OK)), nam_status_t::NAM_OK);
        let again = unsafe { CStr::from_ptr(crate::nam_last_error_message()) }.to_str().unwrap().to_string();
        assert_eq!(again, text, "success does not clear the last error");
    }

    #[test]
    fn the_last_error_pointer_stays_valid_and_long_texts_are_cut() {
        let pointer = crate::nam_last_error_message();
        guard("nam_a", || Err(Failure::Invalid("é".repeat(2000))));
        let text = unsafe { CStr::from_ptr(pointer) }.to_str().expect("cut at a character boundary");
        assert!(text.starts_with("nam_a: éé") && text.len() <= 1023, "{} bytes", text.len());
        guard("nam_b", || Err(Failure::Null("buf")));
        assert_eq!(unsafe { CStr::from_ptr(pointer) }.to_str().unwrap(), "nam_b: argument `buf` is NULL");
    }
}
