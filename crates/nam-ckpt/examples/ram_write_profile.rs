//! Times the RAM level's writer against memcpy of the same bytes, in one process
//! (`cargo run --release -p nam-ckpt --example ram_write_profile -- [MiB] [dir]`): medians of
//! wall time and of CPU time (which leaves out time the process waited for a core on a loaded
//! machine). `ONLY=par` or `ONLY=nopar` runs one of the two layouts (16+2 parity, none);
//! `CHUNK=bytes` sets the chunk size (default 64 KiB). A profiling aid, not the benchmark:
//! `nam-bench ckpt-policy` measures the target under MPI.

use nam_ckpt::format::{self, ChunkParity, Footer, WriteOptions};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mib: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let dir = std::path::PathBuf::from(std::env::args().nth(2).unwrap_or_else(|| "/dev/shm/nam-prof".into()));
    std::fs::create_dir_all(&dir).unwrap();
    let size = mib << 20;
    let src: Vec<u8> = (0..size).map(|i| (i as u64).wrapping_mul(0x9e3779b97f4a7c15).rotate_left(17) as u8).collect();
    let mut dst = vec![0u8; size];
    dst.copy_from_slice(&src);
    let footer = Footer {
        name: "p".into(),
        version: 1,
        rank: 0,
        ranks: 1,
        regions: vec![(1, size as u64)],
        files: vec![],
        chunk: 0,
        crcs: vec![],
        parity: None,
        parity_code: Default::default(),
        parity_crcs: vec![],
    };
    // One file pair per layout: a recycled file's mapping is reused only at the same size.
    let path = |p: bool| dir.join(format!("cur-{p}.ckpt"));
    let spare = |p: bool| dir.join(format!("spare-{p}.ckpt"));
    let opts = |parity: Option<ChunkParity>| WriteOptions {
        mapped: true,
        recycle: Some(spare(parity.is_some())),
        chunk: std::env::var("CHUNK").ok().and_then(|c| c.parse().ok()).unwrap_or(64 << 10),
        parity,
        fsync: false,
    };
    let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
    let only = std::env::var("ONLY").unwrap_or_default();
    // (wall, CPU) seconds of each layout's writes; memcpy and standalone CRC32C wall seconds.
    let (mut par, mut nopar, mut copy, mut crc) = ((vec![], vec![]), (vec![], vec![]), vec![], vec![]);
    for _ in 0..40 {
        pause();
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        copy.push(t.elapsed().as_secs_f64());
        for (with_parity, times) in [(false, &mut nopar), (true, &mut par)] {
            if only == if with_parity { "nopar" } else { "par" } {
                continue;
            }
            pause();
            let parity = with_parity.then_some(ChunkParity { data: 16, parity: 2 });
            let (t, cpu) = (Instant::now(), nam_ckpt::cpu::Stopwatch::start());
            format::write(&path(with_parity), &[&src], footer.clone(), &opts(parity)).unwrap();
            times.0.push(t.elapsed().as_secs_f64());
            times.1.push(cpu.cpu_seconds());
            std::fs::rename(path(with_parity), spare(with_parity)).unwrap();
        }
        pause();
        let t = Instant::now();
        std::hint::black_box(nam_proto::checksum::crc32c(&src));
        crc.push(t.elapsed().as_secs_f64());
    }
    let gbps = |s: Vec<f64>| size as f64 / median(s) / 1e9;
    println!("memcpy                   {:.2} GB/s", gbps(copy));
    for (name, (wall, cpu)) in [("16+2 parity", par), ("no parity", nopar)] {
        if !wall.is_empty() {
            println!("write, {name:<11} wall {:.2} GB/s, CPU {:.2} GB/s", gbps(wall), gbps(cpu));
        }
    }
    println!("crc32c (crc-fast) from memory       {:.2} GB/s", gbps(crc));
    for width in [8192usize, 65536] {
        // Reed-Solomon 16+2 over one cached 1 MiB stripe, as many times as the data has stripes.
        let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(16, 2, width).unwrap();
        let t = Instant::now();
        for _ in 0..size >> 20 {
            for at in (0..65536).step_by(width) {
                for c in 0..16 {
                    enc.add_original_shard(&src[c * 65536 + at..][..width]).unwrap();
                }
                std::hint::black_box(enc.encode().unwrap().recovery(0));
            }
        }
        println!("reed-solomon 16+2, {width:>5} B columns, cached: {:.2} GB/s", gbps(vec![t.elapsed().as_secs_f64()]));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
