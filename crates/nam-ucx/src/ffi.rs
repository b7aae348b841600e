//! Raw UCP bindings generated at build time by bindgen from `<ucp/api/ucp.h>`.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code, missing_docs)]
#![allow(clippy::all)]
include!(concat!(env!("OUT_DIR"), "/ucp_bindings.rs"));
