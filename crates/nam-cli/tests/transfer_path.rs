//! Transfer-path choice against a real `nam serve` on this host: transfers up to the
//! crossover take the direct load/store path, larger ones UCX RMA (both sides of a
//! configured crossover, data intact either way); without configuration the crossover is
//! measured on connecting, for puts, and gets are direct at every size; a server reached
//! over TCP has no direct path at all.

mod common;

use common::ServerProcess;
use nam_client::{AllocOptions, Client};

#[test]
fn transfers_take_the_direct_path_up_to_the_crossover_and_rma_above() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "8MiB"]);
    let mut config = server.config();
    config.direct_max_bytes = Some(1024);
    let client = Client::connect(config).unwrap();
    let split = client.transfer_path(0).expect("a same-host server has a transfer-path split");
    assert_eq!((split.direct_max_bytes, split.measured), (1024, false));
    let a = client.alloc(8192, &AllocOptions::default()).unwrap();
    assert!(a.is_direct());
    let small: Vec<u8> = (0..1024u32).map(|i| i as u8).collect();
    let large: Vec<u8> = (0..1025u32).map(|i| (i * 7) as u8).collect();
    client.put_sync(&a, 0, &small).unwrap();
    assert_eq!((client.direct_traffic().puts, client.traffic().puts), (1, 1), "1024 bytes: direct");
    client.put_sync(&a, 2048, &large).unwrap();
    assert_eq!((client.direct_traffic().puts, client.traffic().puts), (1, 2), "1025 bytes: RMA");
    let mut back = vec![0u8; 1025];
    client.get(&a, 2048, &mut back).unwrap();
    assert_eq!(back, large, "RMA get of what RMA put");
    client.get(&a, 0, &mut back[..1024]).unwrap();
    assert_eq!(&back[..1024], &small[..], "direct get of what the direct path put");
    assert_eq!((client.direct_traffic().gets, client.traffic().gets), (1, 2));
    // The other side sees the same bytes whichever path wrote them.
    let other = server.client();
    let (view, offset) = other.resolve(client.global_address(&a, 2048).unwrap()).unwrap();
    other.get(&view, offset, &mut back).unwrap();
    assert_eq!(back, large);
}

#[test]
fn the_crossover_is_measured_on_connecting_and_absent_over_tcp() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "8MiB"]);
    let split = server.client().transfer_path(0).expect("measured");
    assert!(split.measured);
    let sizes: Vec<u64> = split.probes.iter().map(|p| p.0).collect();
    assert_eq!(sizes.first(), Some(&4));
    assert_eq!(sizes.last(), Some(&nam_client::path::PROBE_BYTES_MAX));
    assert!(split.probes.iter().all(|&(_, d, r)| d > 0.0 && r > 0.0));
    assert_eq!(split.direct_max_bytes, nam_client::path::crossover(&split.probes));
    // A measured crossover is the puts'; gets from mapped memory are direct at every size.
    let client = server.client();
    let a = client.alloc(1 << 20, &AllocOptions::default()).unwrap();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 13) as u8).collect();
    client.put_sync(&a, 0, &data).unwrap();
    let mut back = vec![0u8; 1 << 20];
    client.get(&a, 0, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!((client.direct_traffic().gets, client.traffic().gets), (1, 1), "a 1 MiB get: direct");
    let tcp = ServerProcess::start("tcp", &["--capacity", "8MiB"]);
    assert!(tcp.client().transfer_path(0).is_none());
}

#[test]
fn read_in_place_hands_out_the_mapped_bytes_on_the_direct_path_only() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "8MiB"]);
    let mut config = server.config();
    config.direct_max_bytes = Some(1024);
    let client = Client::connect(config).unwrap();
    let a = client.alloc(8192, &AllocOptions::default()).unwrap();
    let data: Vec<u8> = (0..1024u32).map(|i| (i * 3) as u8).collect();
    client.put_sync(&a, 4096, &data).unwrap();
    // SAFETY: read_in_place promises `len` readable bytes at the address during the call.
    let copy = |src: *const u8| unsafe { std::slice::from_raw_parts(src, 1024) }.to_vec();
    let got = client.read_in_place(&a, 4096, 1024, copy).unwrap();
    assert_eq!(got.as_deref(), Some(&data[..]), "the bytes where they lie");
    assert_eq!(client.direct_traffic().gets, 1, "counted as a direct get");
    let rma = client.read_in_place(&a, 0, 1025, |_| unreachable!("above the crossover: RMA")).unwrap();
    assert!(rma.is_none());
    let out = client.read_in_place(&a, 8000, 1024, |_| unreachable!("out of bounds"));
    assert!(matches!(out, Err(nam_client::Error::OutOfBounds { .. })), "{out:?}");
    let tcp = ServerProcess::start("tcp", &["--capacity", "8MiB"]);
    let remote = tcp.client();
    let b = remote.alloc(4096, &AllocOptions::default()).unwrap();
    assert!(remote.read_in_place(&b, 0, 4096, |_| unreachable!("over TCP: no mapping")).unwrap().is_none());
}
