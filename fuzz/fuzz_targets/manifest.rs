//! The manifest of a file-backed pool (a file the server's Unix user can edit): the first
//! byte chooses the pool's capacity, the rest is the JSON the server would read at start.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Some((&choice, json)) = bytes.split_first() else { return };
    let capacity = 1u64 << (12 + choice % 29);
    nam_server::fuzzing::manifest(json, capacity);
});
