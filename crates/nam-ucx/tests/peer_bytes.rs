//! A peer's packed worker addresses and remote keys are checked before they reach UCX:
//! real ones pass, every truncation, extension and malformed header is refused with a typed
//! error, and mutated ones that pass the check are unpacked by UCX without harm.

use nam_ucx::{check_worker_address, Context, Endpoint, Error, Features, MemRegion, RkeyLayout, Worker};

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn refused(result: nam_ucx::Result<()>) -> bool {
    match result {
        Err(Error::Malformed { reason, .. }) => {
            assert!(!reason.is_empty());
            true
        }
        Err(other) => panic!("unexpected error kind: {other}"),
        Ok(()) => false,
    }
}

#[test]
fn worker_addresses_are_checked_against_this_ucx() {
    let server_ctx = Context::new(Features::SERVER).unwrap();
    let server = Worker::new(&server_ctx).unwrap();
    let own = server.address().unwrap();
    let client_ctx = Context::new(Features::CLIENT).unwrap();
    let client = Worker::new(&client_ctx).unwrap();
    let peer = client.address().unwrap();
    check_worker_address(&own, &own).unwrap();
    check_worker_address(&peer, &own).unwrap();
    for len in 0..peer.len() {
        assert!(refused(check_worker_address(&peer[..len], &own)), "truncated to {len} bytes");
    }
    let mut longer = peer.clone();
    longer.push(0);
    assert!(refused(check_worker_address(&longer, &own)));
    let mut version = peer.clone();
    version[0] |= 0x0f;
    let message = check_worker_address(&version, &own).unwrap_err().to_string();
    assert!(message.contains("version 15"), "{message}");

    // Mutations that pass the check do not crash UCX when it connects to them.
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut passed = 0;
    for _ in 0..2000 {
        let mut mutated = peer.clone();
        for _ in 0..1 + xorshift(&mut state) % 3 {
            let i = (xorshift(&mut state) % mutated.len() as u64) as usize;
            mutated[i] ^= 1 + (xorshift(&mut state) % 255) as u8;
        }
        if check_worker_address(&mutated, &own).is_ok() && passed < 5 {
            passed += 1;
            let _ = Endpoint::connect_to_peer_worker(&server, &mutated, &own, false);
            server.progress();
        }
    }
    let mut garbage = vec![0u8; 300];
    for _ in 0..2000 {
        let len = (xorshift(&mut state) % 300) as usize;
        for b in garbage.iter_mut().take(len) {
            *b = xorshift(&mut state) as u8;
        }
        assert!(refused(check_worker_address(&garbage[..len], &own)), "random {len} bytes passed");
    }
}

#[test]
fn remote_keys_are_checked_against_this_ucx() {
    let server_ctx = Context::new(Features::SERVER).unwrap();
    let server = Worker::new(&server_ctx).unwrap();
    let layout = RkeyLayout::of_context(&server_ctx).unwrap();
    let client_ctx = Context::new(Features::CLIENT).unwrap();
    let client = Worker::new(&client_ctx).unwrap();
    let region = MemRegion::allocate(&client_ctx, 1 << 16).unwrap();
    let packed = region.pack_rkey().unwrap();
    layout.check(&packed).unwrap();
    for len in 0..packed.len() {
        assert!(refused(layout.check(&packed[..len])), "truncated to {len} bytes");
    }
    let mut longer = packed.clone();
    longer.push(0);
    assert!(refused(layout.check(&longer)));
    let mut device_memory = packed.clone();
    device_memory[8] = 1;
    assert!(refused(layout.check(&device_memory)));
    let mut unknown_md = packed.clone();
    unknown_md[7] |= 0x80;
    assert!(refused(layout.check(&unknown_md)), "a map bit without its blob");
    unknown_md.push(3);
    unknown_md.extend([7, 7, 7]);
    assert!(refused(layout.check(&unknown_md)), "a memory domain this process does not pack keys for");

    // Keys that pass the check, however mutated, unpack without crashing the process.
    let endpoint =
        Endpoint::connect_to_peer_worker(&server, &client.address().unwrap(), &server.address().unwrap(), false)
            .unwrap();
    let mut state = 0x2545f4914f6cdd1du64;
    let mut unpacked = 0;
    for _ in 0..5000 {
        let mut mutated = packed.clone();
        let i = (xorshift(&mut state) % mutated.len() as u64) as usize;
        mutated[i] ^= 1 + (xorshift(&mut state) % 255) as u8;
        match endpoint.unpack_peer_rkey(&mutated, &layout) {
            Ok(key) => {
                unpacked += 1;
                let _ = key.local_ptr(region.address() as u64);
            }
            Err(e) => assert!(matches!(e, Error::Malformed { .. } | Error::Ucx { .. }), "{e}"),
        }
    }
    // Over TCP the key is only a map, a type, an empty blob and the system device: no
    // mutation passes.
    let map = u64::from_le_bytes(packed[..8].try_into().unwrap());
    let blob_bytes = packed.len() - 9 - map.count_ones() as usize - usize::from(map != 0);
    assert!(
        blob_bytes == 0 || unpacked > 0,
        "no mutation passed the check: the layout is stricter than UCX's own keys"
    );
}
