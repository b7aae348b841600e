//! Far memory through the explicit API against real `nam serve` processes: data integrity
//! against a local model under random access with evictions (one and three servers, UCX
//! shared memory and TCP), and the faults: a dead server, out-of-range and unaligned
//! accesses, a budget below one set, a server out of capacity with dirty lines.

mod common;

use common::ServerProcess;
use nam_client::{Client, ClientConfig};
use nam_farmem::{DestMode, Error, FarConfig, FarMemory, PrefetchConfig};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

/// One UCX client at a time in this process: UCX 1.13's async thread can replay a missed
/// event of a worker torn down (a killed server's endpoints) into another worker alive in
/// a parallel test (openucx/ucx#9942), so the tests run one after the other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn start(n: usize, transports: &str, extra: &[&str]) -> Vec<ServerProcess> {
    (0..n).map(|_| ServerProcess::start(transports, extra)).collect()
}

fn client(servers: &[ServerProcess]) -> Arc<Client> {
    let mut config = ClientConfig::new(servers.iter().map(|s| s.addr).collect());
    config.transports = Some(servers[0].transports.clone());
    config.timeout = Duration::from_secs(3);
    Arc::new(Client::connect(config).expect("connect"))
}

/// Random reads and writes of random lengths, some whole lines, checked against a Vec; a
/// quarter of them through the streaming bulk calls, mixed with the cached ones.
fn random_against_model(far: &mut FarMemory, model: &mut [u8], ops: usize, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let size = model.len() as u64;
    let line = far.config().line_bytes;
    for i in 0..ops {
        let len = match rng.gen_range(0..4) {
            0 => 8,
            1 => line as usize,
            2 => rng.gen_range(1..3 * line as usize),
            _ => rng.gen_range(1..64),
        };
        // Half the accesses are sequential runs so the prefetcher has streams to find.
        let addr =
            if i % 2 == 0 { rng.gen_range(0..size - len as u64) } else { (i as u64 * line) % (size - len as u64) };
        let (a, b) = (addr as usize, addr as usize + len);
        let bulk = rng.gen_bool(0.25);
        if rng.gen_bool(0.3) {
            in_place_op(far, model, &mut rng, (addr, len));
        } else if rng.gen_bool(0.5) {
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if bulk {
                far.write_bulk(addr, &data).unwrap();
            } else {
                far.write(addr, &data).unwrap();
            }
            model[a..b].copy_from_slice(&data);
        } else {
            let mut got = vec![0u8; len];
            if bulk {
                far.read_bulk(addr, &mut got).unwrap();
            } else {
                far.read(addr, &mut got).unwrap();
            }
            assert_eq!(got, model[a..b], "read of {len} bytes at {addr:#x} differs from the model (op {i})");
        }
    }
}

/// One access through the in-place calls: pieces read in place (checked), a zip that
/// updates or overwrites a destination range from a source range, or a batched fetch.
fn in_place_op(far: &mut FarMemory, model: &mut [u8], rng: &mut rand::rngs::StdRng, (addr, len): (u64, usize)) {
    let a = addr as usize;
    match rng.gen_range(0..3) {
        0 => {
            let mut got = Vec::with_capacity(len);
            far.for_each_piece(addr, len, |at, piece| {
                assert_eq!(at, got.len());
                got.extend_from_slice(piece);
            })
            .unwrap();
            assert_eq!(got, model[a..a + len], "pieces of {len} bytes at {addr:#x} differ from the model");
        }
        1 => {
            let src = rng.gen_range(0..model.len() - len);
            if src.abs_diff(a) < len {
                return; // overlapping ranges: pieces would see their own earlier updates
            }
            let mode = if rng.gen_bool(0.5) { DestMode::Update } else { DestMode::Overwrite };
            let before = model[a..a + len].to_vec();
            far.zip_pieces_mut((src as u64, addr), len, mode, |x, y| match mode {
                DestMode::Update => y.iter_mut().zip(x).for_each(|(y, x)| *y = y.wrapping_add(*x)),
                DestMode::Overwrite => y.copy_from_slice(x),
            })
            .unwrap();
            let source = model[src..src + len].to_vec();
            for ((m, b), x) in model[a..a + len].iter_mut().zip(&before).zip(&source) {
                *m = if mode == DestMode::Update { b.wrapping_add(*x) } else { *x };
            }
        }
        _ => {
            let ranges: Vec<(u64, usize)> =
                (0..8).map(|k| ((addr + k * 4099) % (model.len() - len) as u64, len)).collect();
            far.fetch_ranges(&ranges).unwrap();
        }
    }
}

fn check_all(far: &mut FarMemory, model: &[u8]) {
    let mut got = vec![0u8; model.len()];
    far.read(0, &mut got).unwrap();
    assert!(got == model, "far memory differs from the model after write-back and refetch");
}

#[test]
fn explicit_api_keeps_data_under_random_access_with_evictions() {
    let _serial = serial();
    for (transports, servers) in [("sm,self,tcp", 1), ("sm,self,tcp", 3), ("tcp", 3)] {
        let procs = start(servers, transports, &[]);
        let far_bytes = 1 << 20;
        for (line, meta) in [(4096u64, 0usize), (256, 64)] {
            let mut config = FarConfig::new(far_bytes, far_bytes / 8);
            config.line_bytes = line;
            config.ways = 4;
            config.metadata_cache_entries = meta;
            config.prefetch = PrefetchConfig { depth: 8, ..Default::default() };
            let mut far = FarMemory::new(client(&procs), config).unwrap();
            let mut model = vec![0u8; far_bytes as usize];
            random_against_model(&mut far, &mut model, 1000, line + servers as u64);
            far.flush().unwrap();
            far.invalidate().unwrap();
            check_all(&mut far, &model);
            let s = far.stats();
            assert!(s.evictions > 0 && s.writebacks > 0, "{transports} x{servers}: no evictions: {s:?}");
            assert!(s.prefetches > 0 && s.prefetch_hits > 0, "{transports} x{servers}: prefetcher idle: {s:?}");
            assert!(s.full_line_writes > 0 && s.inflight_max > 1, "{s:?}");
            if meta > 0 {
                assert!(s.metadata_hits > 0, "{s:?}");
            }
        }
    }
}

/// Over TCP the source's misses are read into the staging copy (bypassing full dirty sets);
/// over shared memory, where the servers' pools are mapped here, they are read in place.
#[test]
fn in_place_chunks_bypass_full_dirty_sets_and_keep_data() {
    let _serial = serial();
    for transports in ["tcp", "sm,self,tcp"] {
        let procs = start(2, transports, &[]);
        in_place_sweep(&procs, transports == "tcp");
    }
}

fn in_place_sweep(procs: &[ServerProcess], staged: bool) {
    let n = 64 * 1024;
    let mut config = FarConfig::new(1 << 20, 64 << 10);
    config.line_bytes = 1024;
    config.ways = 4;
    let mut far = FarMemory::new(client(procs), config).unwrap();
    let x = far.alloc_array::<u32>(n).unwrap();
    let y = far.alloc_array::<u32>(n).unwrap();
    let xs: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    x.write(&mut far, 0, &xs).unwrap();
    far.invalidate().unwrap();
    let mut model = vec![7u32; n];
    y.zip_chunks_mut(&mut far, &x, 0..n, DestMode::Overwrite, |_, _, ys| ys.fill(7)).unwrap();
    let before = far.stats();
    for pass in 0..3u32 {
        // y (256 KiB) is four times the budget: every set fills with dirty y lines, so x's
        // misses must be read without evicting them.
        y.zip_chunks_mut(&mut far, &x, 0..n, DestMode::Update, |at, xs, ys| {
            for (i, (y, x)) in ys.iter_mut().zip(xs).enumerate() {
                *y = y.wrapping_add(x ^ pass ^ (at + i) as u32);
            }
        })
        .unwrap();
        for (i, m) in model.iter_mut().enumerate() {
            *m = m.wrapping_add(xs[i] ^ pass ^ i as u32);
        }
    }
    // The updates fetch y's missing lines ahead as part of the request: the prefetcher, on
    // in this configuration, is not trained by them.
    let updates = far.stats();
    assert_eq!(updates.prefetches, before.prefetches, "range updates trained the prefetcher: {updates:?}");
    let mut got = Vec::with_capacity(n);
    y.for_each_chunk(&mut far, 0..n, |at, chunk| {
        assert_eq!(at, got.len());
        got.extend_from_slice(chunk);
    })
    .unwrap();
    assert!(got == model, "in-place SAXPY-like passes differ from the model");
    far.flush().unwrap();
    far.invalidate().unwrap();
    let mut back = vec![0u32; n];
    y.read(&mut far, 0, &mut back).unwrap();
    assert!(back == model, "written-back data differs from the model");
    let s = far.stats();
    if staged {
        assert!(s.bypassed > 0 && s.in_place == 0 && s.writebacks > 0, "no staged bypass of full dirty sets: {s:?}");
    } else {
        // Every pass after the first reads all of x (64 lines of 1 KiB per 64 KiB) in place.
        assert!(s.in_place >= 3 * 256 && s.bypassed == 0 && s.writebacks > 0, "x not read in place: {s:?}");
    }
    let odd = nam_farmem::FarArray::<u32>::at(x.addr() + 2, 4);
    assert!(matches!(odd.for_each_chunk(&mut far, 0..4, |_, _| ()), Err(Error::NotViewable { .. })));
}

/// A sweep whose destination fits the budget (SAXPY at 50% local memory): once y is
/// resident, the computation gets runs of adjacent lines at once, x read in place in the
/// server's pool except where the cache holds a newer (dirty) copy of an x line, which must
/// be read from the cache and ends the run.
#[test]
fn runs_of_resident_lines_keep_data_and_newer_cached_lines_win() {
    let _serial = serial();
    let procs = start(1, "sm,self,tcp", &[]);
    let n = 64 * 1024;
    let mut config = FarConfig::new(1 << 20, 512 << 10);
    config.line_bytes = 1024;
    let mut far = FarMemory::new(client(&procs), config).unwrap();
    let x = far.alloc_array::<u32>(n).unwrap();
    let y = far.alloc_array::<u32>(n).unwrap();
    let mut xs: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    x.write(&mut far, 0, &xs).unwrap();
    y.write(&mut far, 0, &vec![1u32; n]).unwrap();
    far.invalidate().unwrap();
    // Newer values of a few x lines, left dirty in the cache: the pool still has the old ones.
    for at in [300usize, 5000, 40_000] {
        let newer: Vec<u32> = (0..256).map(|i| 0xdead_0000 + i).collect();
        x.write(&mut far, at, &newer).unwrap();
        xs[at..at + 256].copy_from_slice(&newer);
    }
    let mut model = vec![1u32; n];
    let mut longest = 0;
    for pass in 0..3u32 {
        y.zip_chunks_mut(&mut far, &x, 0..n, DestMode::Update, |at, xs, ys| {
            longest = longest.max(ys.len());
            for (i, (y, x)) in ys.iter_mut().zip(xs).enumerate() {
                *y = y.wrapping_add(x ^ pass ^ (at + i) as u32);
            }
        })
        .unwrap();
        for (i, m) in model.iter_mut().enumerate() {
            *m = m.wrapping_add(xs[i] ^ pass ^ i as u32);
        }
    }
    assert!(longest > 256, "resident lines were handed out one line at a time ({longest} elements at most)");
    for (array, expected) in [(&y, &model), (&x, &xs)] {
        let (mut got, mut longest) = (Vec::with_capacity(n), 0);
        array
            .for_each_chunk(&mut far, 0..n, |at, chunk| {
                assert_eq!(at, got.len());
                longest = longest.max(chunk.len());
                got.extend_from_slice(chunk);
            })
            .unwrap();
        assert!(got == *expected, "runs read differ from the model");
        assert!(longest > 256, "no run of lines was read at once");
    }
    far.flush().unwrap();
    far.invalidate().unwrap();
    let mut back = vec![0u32; n];
    y.read(&mut far, 0, &mut back).unwrap();
    assert!(back == model, "written-back data differs from the model");
}

#[test]
fn typed_arrays_round_trip_and_check_their_bounds() {
    let _serial = serial();
    let procs = start(2, "sm,self,tcp", &[]);
    let mut far = FarMemory::new(client(&procs), FarConfig::new(8 << 20, 256 << 10)).unwrap();
    let xs = far.alloc_array::<f64>(100_000).unwrap();
    let values: Vec<f64> = (0..100_000).map(|i| i as f64 * 0.5).collect();
    xs.write(&mut far, 0, &values).unwrap();
    xs.set(&mut far, 77, -1.0).unwrap();
    far.flush().unwrap();
    far.invalidate().unwrap();
    assert_eq!(xs.get(&mut far, 77).unwrap(), -1.0);
    assert_eq!(xs.get(&mut far, 99_999).unwrap(), 99_999.0 * 0.5);
    assert!(matches!(xs.get(&mut far, 100_000), Err(Error::OutOfRange { .. })));
    assert!(matches!(far.alloc_array::<u64>(1 << 20), Err(Error::OutOfRange { .. })));
}

#[test]
fn bad_input_gets_typed_errors_and_changes_nothing() {
    let _serial = serial();
    let procs = start(1, "sm,self,tcp", &[]);
    let c = client(&procs);
    let mut small = FarConfig::new(1 << 20, 1000);
    small.line_bytes = 4096;
    assert!(matches!(FarMemory::new(c.clone(), small), Err(Error::BudgetTooSmall { budget_bytes: 1000, .. })));
    let mut odd = FarConfig::new(1 << 20, 1 << 20);
    odd.line_bytes = 1000;
    assert!(matches!(FarMemory::new(c.clone(), odd), Err(Error::Config(_))));
    let mut far = FarMemory::new(c, FarConfig::new(1 << 20, 256 << 10)).unwrap();
    far.write(100, b"kept").unwrap();
    let err = far.write((1 << 20) - 2, b"past the end").unwrap_err();
    assert!(matches!(err, Error::OutOfRange { size: 1048576, .. }), "{err}");
    assert!(matches!(far.read(u64::MAX - 1, &mut [0u8; 4]), Err(Error::OutOfRange { .. })));
    let spans = far.spans();
    assert!(matches!(spans.read(100, &mut [0u8; 4096]), Err(Error::Unaligned { span_bytes: 4096, .. })));
    assert!(matches!(spans.write(4096, &[0u8; 100]), Err(Error::Unaligned { .. })));
    let mut back = [0u8; 4];
    far.read(100, &mut back).unwrap();
    assert_eq!(&back, b"kept");
}

#[test]
fn a_dead_server_is_named_and_the_other_servers_data_is_intact() {
    let _serial = serial();
    // Over TCP: on shared memory the client keeps reading a killed server's pool mapping
    // until its next health check, which is correct data, not a failure to report.
    let mut procs = start(2, "tcp", &[]);
    let far_bytes = 1 << 20;
    let mut far = FarMemory::new(client(&procs), FarConfig::new(far_bytes, 128 << 10)).unwrap();
    let model: Vec<u8> = (0..far_bytes).map(|i| (i * 7 % 251) as u8).collect();
    far.write(0, &model).unwrap();
    far.flush().unwrap();
    far.invalidate().unwrap();
    let dead = procs[1].addr;
    procs[1].kill();
    // Pages interleave: even pages on server 0, odd pages on server 1.
    let mut page = vec![0u8; 4096];
    let err = far.read(4096, &mut page).unwrap_err();
    match &err {
        Error::Server { server: 1, addr, .. } => assert_eq!(*addr, dead),
        other => panic!("expected an error naming server 1, got {other}"),
    }
    assert!(err.to_string().contains(&dead.to_string()));
    for p in (0..far_bytes / 4096).step_by(2) {
        far.read(p * 4096, &mut page).unwrap();
        assert_eq!(page, model[(p * 4096) as usize..][..4096], "page {p} on the live server");
    }
}

#[test]
fn a_full_server_keeps_dirty_lines_local_and_reports_it() {
    let _serial = serial();
    let procs = start(1, "sm,self,tcp", &["--capacity", "1MiB"]);
    // 4 MiB of far space in 1 MiB... the chunk of the only extent does not fit.
    let far_bytes = 4 << 20;
    let mut far = FarMemory::new(client(&procs), FarConfig::new(far_bytes, far_bytes)).unwrap();
    let model: Vec<u8> = (0..256 << 10).map(|i: u32| (i % 253) as u8).collect();
    far.write(0, &model).unwrap();
    let err = far.flush().unwrap_err();
    assert!(matches!(err, Error::OutOfCapacity { server: 0, .. }), "{err}");
    assert!(err.to_string().contains("dirty data stays local"));
    let mut back = vec![0u8; model.len()];
    far.read(0, &mut back).unwrap();
    assert!(back == model, "dirty data was lost");
    assert!(far.stats().writebacks == 0);
}
