//! A parity-slot header as stored in the pool (writable by any process that maps it): the
//! first 4 bytes choose the group's rank count and the slot's allocation length, the rest is
//! the stored header and size table.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Some((choice, stored)) = bytes.split_first_chunk::<4>() else { return };
    let ranks = 1 + u32::from(u16::from_le_bytes([choice[0], choice[1]]) % 1024);
    // From a page to 2^40 bytes, in powers of two and in between.
    let slot_len = (4096u64 << (choice[2] % 29)) + u64::from(choice[3]) * 4096;
    nam_server::fuzzing::slot_header(stored, ranks, slot_len);
});
