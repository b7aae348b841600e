//! nam's errors as Python exceptions: `nam.NamError`, carrying the C API's status code and
//! name, with one subclass per status so that callers may catch exactly one kind.

use nam::{nam_status_t, status_of_error, status_of_far_error};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;
use std::collections::HashMap;
use std::ffi::CString;

pyo3::create_exception!(
    nam,
    NamError,
    PyException,
    "A nam call failed. `status` is the C API's code (negative, as in nam.h), `status_name` its \
     name (e.g. 'NAM_ERR_FREED'), `description` its short meaning; str() is the exact cause."
);

/// The subclass of `NamError` of each status code, made once when the module loads.
static SUBCLASSES: GILOnceCell<HashMap<i32, Py<PyType>>> = GILOnceCell::new();

/// `NAM_ERR_OUT_OF_BOUNDS` -> `OutOfBoundsError`.
fn class_name(status: nam_status_t) -> String {
    let name = format!("{status:?}");
    let words = name.trim_start_matches("NAM_ERR_").split('_');
    let mut out: String = words
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map(|c| c.to_string() + &chars.as_str().to_lowercase()).unwrap_or_default()
        })
        .collect();
    out.push_str("Error");
    out
}

/// The text of a status's description without the C string's terminating NUL.
pub fn describe(status: nam_status_t) -> &'static str {
    status.describe().trim_end_matches('\0')
}

/// Makes one subclass of `NamError` per error status, adds them and `NamError` to `module`,
/// and the codes as `ERR_*` integer constants.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let base = py.get_type::<NamError>();
    module.add("NamError", &base)?;
    let mut classes = HashMap::new();
    for status in nam_status_t::all() {
        if (status as i32) >= 0 {
            continue;
        }
        let name = class_name(status);
        let qualified = CString::new(format!("nam.{name}")).expect("status names have no NUL");
        let doc = CString::new(format!("{status:?}: {}.", describe(status))).expect("descriptions have no NUL");
        let class = PyErr::new_type(py, &qualified, Some(&doc), Some(&base), None)?;
        module.add(name.as_str(), class.bind(py))?;
        module.add(format!("{status:?}").trim_start_matches("NAM_"), status as i32)?;
        classes.insert(status as i32, class);
    }
    // The module loads once per interpreter; a second set would be the same classes.
    let _ = SUBCLASSES.set(py, classes);
    Ok(())
}

/// The exception of `status` with the message `message` and the attributes `status`,
/// `status_name` and `description` set.
pub fn exception(status: nam_status_t, message: String) -> PyErr {
    Python::with_gil(|py| {
        let message = if message.is_empty() { describe(status).to_string() } else { message };
        let class = SUBCLASSES.get(py).and_then(|m| m.get(&(status as i32))).map(|c| c.bind(py).clone());
        let class = class.unwrap_or_else(|| py.get_type::<NamError>());
        let error = PyErr::from_type(class, (message,));
        let value = error.value(py);
        // Setting attributes on a fresh exception instance cannot fail short of memory
        // exhaustion, where the exception itself still says what went wrong.
        let _ = value.setattr("status", status as i32);
        let _ = value.setattr("status_name", format!("{status:?}"));
        let _ = value.setattr("description", describe(status));
        error
    })
}

/// A client-library error as its typed exception.
pub fn client_error(error: nam_client::Error) -> PyErr {
    exception(status_of_error(&error), error.to_string())
}

/// A far-memory error as its typed exception.
pub fn far_error(error: nam_farmem::Error) -> PyErr {
    exception(status_of_far_error(&error), error.to_string())
}

/// An invalid argument found by the binding itself (before any nam call).
pub fn invalid(message: String) -> PyErr {
    exception(nam_status_t::NAM_ERR_INVALID_ARGUMENT, message)
}

/// Converts a client result into a Python result.
pub trait OrRaise<T> {
    /// `Ok` as is, an error as its exception.
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for nam_client::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(client_error)
    }
}

impl<T> OrRaise<T> for nam_farmem::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(far_error)
    }
}
