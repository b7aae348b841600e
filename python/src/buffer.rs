//! Python's buffer protocol both ways: borrowing the bytes of any buffer-protocol object
//! (bytes, bytearray, memoryview, numpy arrays) without a copy, and exporting memory that nam
//! maps (a same-host allocation, a paged far-memory region) so numpy can view it in place.

use crate::errors::invalid;
use pyo3::ffi;
use pyo3::prelude::*;
use std::mem::MaybeUninit;
use std::os::raw::c_int;

/// The bytes of a Python object, held (and so kept alive and unresized) until dropped.
/// Only C-contiguous buffers are accepted: nam moves one contiguous byte range.
pub struct Borrowed {
    /// Boxed so its address stays fixed: the exporter may keep pointers into it.
    view: Box<ffi::Py_buffer>,
}

// SAFETY: the view's memory is owned by the exporting object, which the view keeps alive
// (it holds a reference); releasing it takes the GIL (see Drop).
unsafe impl Send for Borrowed {}

impl Borrowed {
    /// Borrows `object`'s bytes, for reading (`writable` false) or writing into them.
    pub fn new(object: &Bound<'_, PyAny>, writable: bool) -> PyResult<Borrowed> {
        let mut view: Box<MaybeUninit<ffi::Py_buffer>> = Box::new(MaybeUninit::zeroed());
        let flags = if writable { ffi::PyBUF_WRITABLE } else { ffi::PyBUF_SIMPLE };
        // SAFETY: `view` is valid for writes; on success the exporter fills it.
        if unsafe { ffi::PyObject_GetBuffer(object.as_ptr(), view.as_mut_ptr(), flags) } == -1 {
            let cause = PyErr::fetch(object.py());
            let what = if writable { "a writable, contiguous buffer" } else { "a contiguous buffer" };
            let type_name = object.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
            let error =
                invalid(format!("expected {what} (bytes-like object or numpy array), got {type_name}: {cause}"));
            error.set_cause(object.py(), Some(cause));
            return Err(error);
        }
        // SAFETY: PyObject_GetBuffer succeeded, so the view is initialised.
        let view = unsafe { Box::from_raw(Box::into_raw(view).cast::<ffi::Py_buffer>()) };
        Ok(Borrowed { view })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.view.len as usize
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: the exporter guarantees `len` contiguous bytes at `buf` while the view is held.
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.len()) }
    }

    /// The bytes, for writing (the view was taken writable).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len() == 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`; the view was requested with PyBUF_WRITABLE.
        unsafe { std::slice::from_raw_parts_mut(self.view.buf as *mut u8, self.len()) }
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        // SAFETY: the view came from PyObject_GetBuffer and is released once.
        Python::with_gil(|_| unsafe { ffi::PyBuffer_Release(&mut *self.view) });
    }
}

/// Fills `view` for a plain byte buffer of `len` bytes at `ptr`, owned by `owner`.
///
/// # Safety
/// `view` is the exporter's argument of `__getbuffer__`; `ptr..ptr+len` must stay valid
/// while `owner` lives (the view holds a reference to it).
pub unsafe fn fill(
    owner: &Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
    ptr: *mut u8,
    len: usize,
    readonly: bool,
) -> PyResult<()> {
    if ffi::PyBuffer_FillInfo(view, owner.as_ptr(), ptr.cast(), len as ffi::Py_ssize_t, readonly as c_int, flags) == -1
    {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}

/// Lets a closure that captures raw pointers run with the GIL released on the same thread.
pub struct AssertSend<T>(pub T);

// SAFETY: used only for `Python::allow_threads`, which runs the closure on the calling
// thread; the value never crosses threads.
unsafe impl<T> Send for AssertSend<T> {}
