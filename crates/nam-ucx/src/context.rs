//! The UCP context: one per process and purpose, shared by its workers.

use crate::constants::OVERRIDDEN_DEFAULTS;
use crate::error::{check, Error, Result};
use crate::ffi;
use std::ptr;
use std::sync::Arc;

/// Which UCP features a context enables. Ask only for what is used: some transports are
/// skipped when they cannot provide a requested feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// One-sided put/get.
    pub rma: bool,
    /// 64-bit atomics.
    pub amo64: bool,
    /// Active messages (the control plane).
    pub am: bool,
    /// Event-fd wake-up, so an idle progress loop can sleep.
    pub wakeup: bool,
}

impl Features {
    /// Everything a memory server needs: RMA target, atomics, AM and wake-up.
    pub const SERVER: Features = Features { rma: true, amo64: true, am: true, wakeup: true };
    /// Everything a client needs: it busy-polls inside its deadlines, so no wake-up.
    pub const CLIENT: Features = Features { rma: true, amo64: true, am: true, wakeup: false };

    fn mask(self) -> u64 {
        let mut mask = 0u64;
        if self.rma {
            mask |= ffi::UCP_FEATURE_RMA as u64;
        }
        if self.amo64 {
            mask |= ffi::UCP_FEATURE_AMO64 as u64;
        }
        if self.am {
            mask |= ffi::UCP_FEATURE_AM as u64;
        }
        if self.wakeup {
            mask |= ffi::UCP_FEATURE_WAKEUP as u64;
        }
        mask
    }
}

pub(crate) struct ContextInner {
    pub(crate) raw: ffi::ucp_context_h,
}

// SAFETY: a UCP context may be used from any thread; nam creates workers from it under
// its own serialization and never mutates it after creation.
unsafe impl Send for ContextInner {}
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: every worker and memory region holds an Arc to this inner, so none is alive.
        unsafe { ffi::ucp_cleanup(self.raw) };
    }
}

/// A UCP context (`ucp_context_h`): reads the `UCX_*` environment (transports, devices)
/// once and is shared by the workers and memory regions made from it.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

/// A UCX setting a caller asks for, applied like [`OVERRIDDEN_DEFAULTS`]: unless the
/// environment variable `variable` is set, configuration key `key` gets `value`.
#[derive(Debug, Clone)]
pub struct Setting {
    /// The environment variable that, when set, wins over this setting (`UCX_NET_DEVICES`).
    pub variable: &'static str,
    /// UCP's configuration key (the variable's name without `UCX_`).
    pub key: &'static std::ffi::CStr,
    /// The value.
    pub value: std::ffi::CString,
}

impl Context {
    /// Creates a context with `features`, configured from the `UCX_*` environment.
    pub fn new(features: Features) -> Result<Context> {
        Self::configured(features, None, &[])
    }

    /// Like [`Context::new`], but with `UCX_TLS` replaced by `transports` when given
    /// (for example `"tcp"` or `"sm,self,tcp"`).
    pub fn with_transports(features: Features, transports: Option<&str>) -> Result<Context> {
        Self::configured(features, transports, &[])
    }

    /// Like [`Context::with_transports`], plus `settings` (each yielding to its environment
    /// variable, as nam's [`OVERRIDDEN_DEFAULTS`] do).
    pub fn configured(features: Features, transports: Option<&str>, settings: &[Setting]) -> Result<Context> {
        check_loaded_version()?;
        let mut config: *mut ffi::ucp_config_t = ptr::null_mut();
        // SAFETY: out-pointer is valid; null prefix and file mean "environment only".
        check("ucp_config_read", unsafe { ffi::ucp_config_read(ptr::null(), ptr::null(), &mut config) })?;
        let modify = |key: &std::ffi::CStr, value: &std::ffi::CStr| {
            // SAFETY: config is live; both strings are NUL-terminated.
            let status = unsafe { ffi::ucp_config_modify(config, key.as_ptr(), value.as_ptr()) };
            check("ucp_config_modify", status)
        };
        let mut applied = Ok(());
        if let Some(tls) = transports {
            applied = std::ffi::CString::new(tls)
                .map_err(|_| crate::Error::InvalidArgument("transport list contains NUL"))
                .and_then(|value| modify(c"TLS", &value));
        }
        let chosen =
            OVERRIDDEN_DEFAULTS.into_iter().chain(settings.iter().map(|s| (s.variable, s.key, s.value.as_c_str())));
        for (variable, key, value) in chosen {
            if applied.is_err() {
                break;
            }
            if std::env::var_os(variable).is_none() {
                applied = modify(key, value);
            }
        }
        if let Err(e) = applied {
            // SAFETY: released exactly once on this path.
            unsafe { ffi::ucp_config_release(config) };
            return Err(e);
        }
        let params = ffi::ucp_params_t {
            field_mask: (ffi::UCP_PARAM_FIELD_FEATURES | ffi::UCP_PARAM_FIELD_MT_WORKERS_SHARED) as u64,
            features: features.mask(),
            mt_workers_shared: 0,
            ..Default::default()
        };
        let mut raw: ffi::ucp_context_h = ptr::null_mut();
        // SAFETY: params and config are valid for the call; raw is an out-pointer.
        let status =
            unsafe { ffi::ucp_init_version(ffi::UCP_API_MAJOR, ffi::UCP_API_MINOR, &params, config, &mut raw) };
        // SAFETY: config came from ucp_config_read and is released exactly once.
        unsafe { ffi::ucp_config_release(config) };
        check("ucp_init", status)?;
        Ok(Context { inner: Arc::new(ContextInner { raw }) })
    }
}

/// Refuses a UCX library whose `major.minor` differs from the headers nam was built with
/// ([`Error::VersionMismatch`]): an `LD_PRELOAD` or another UCX earlier in the search path
/// must not silently change the packed layouts [`crate::peer`] checks peers' bytes against.
fn check_loaded_version() -> Result<()> {
    let (mut major, mut minor, mut release) = (0u32, 0u32, 0u32);
    // SAFETY: three valid out-pointers.
    unsafe { ffi::ucp_get_version(&mut major, &mut minor, &mut release) };
    if (major, minor) == (ffi::UCP_API_MAJOR, ffi::UCP_API_MINOR) {
        return Ok(());
    }
    Err(Error::VersionMismatch {
        built: format!("{}.{}", ffi::UCP_API_MAJOR, ffi::UCP_API_MINOR),
        loaded: format!("{major}.{minor}.{release}"),
    })
}
