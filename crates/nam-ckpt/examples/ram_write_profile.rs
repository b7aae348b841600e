//! Times the RAM level's writer against memcpy of the same bytes, in one process
//! (`cargo run --release -p nam-ckpt --example ram_write_profile -- [MiB] [dir]`).

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
    let (mut copy, mut full, mut nopar, mut crc) = (vec![], vec![], vec![], vec![]);
    let (mut cpu_par, mut cpu_nopar) = (vec![], vec![]);
    let only = std::env::var("ONLY").unwrap_or_default();
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        copy.push(t.elapsed().as_secs_f64());
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t = Instant::now();
        let cpu = nam_ckpt::cpu::Stopwatch::start();
        if only != "par" {
            format::write(&path(false), &[&src], footer.clone(), &opts(None)).unwrap();
            nopar.push(t.elapsed().as_secs_f64());
            cpu_nopar.push(cpu.cpu_seconds());
            std::fs::rename(path(false), spare(false)).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t = Instant::now();
        let cpu = nam_ckpt::cpu::Stopwatch::start();
        if only != "nopar" {
            format::write(&path(true), &[&src], footer.clone(), &opts(Some(ChunkParity { data: 16, parity: 2 })))
                .unwrap();
            full.push(t.elapsed().as_secs_f64());
            cpu_par.push(cpu.cpu_seconds());
            std::fs::rename(path(true), spare(true)).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t = Instant::now();
        std::hint::black_box(crc32c::crc32c(&src));
        crc.push(t.elapsed().as_secs_f64());
    }
    let gbps = |s: f64| size as f64 / s / 1e9;
    for width in [0usize; 0] {
        // Reed-Solomon 16+2 over one cached 1 MiB stripe, as many times as the data has stripes.
        let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(16, 2, width).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t = Instant::now();
        for _ in 0..size >> 20 {
            for at in (0..65536).step_by(width) {
                for c in 0..16 {
                    enc.add_original_shard(&src[c * 65536 + at..][..width]).unwrap();
                }
                std::hint::black_box(enc.encode().unwrap().recovery(0));
            }
        }
        println!("rs 16+2 w={width:<6} {:.2} GB/s (cached stripe)", gbps(t.elapsed().as_secs_f64()));
    }
    println!("memcpy          {:.2} GB/s", gbps(median(copy.clone())));
    if !full.is_empty() {
        println!("write (parity)  {:.2} GB/s", gbps(median(full)));
    }
    if !nopar.is_empty() {
        println!("write (no par)  {:.2} GB/s", gbps(median(nopar)));
    }
    if !cpu_par.is_empty() {
        println!("write (parity) CPU  {:.2} GB/s", gbps(median(cpu_par)));
    }
    if !cpu_nopar.is_empty() {
        println!("write (no par) CPU  {:.2} GB/s", gbps(median(cpu_nopar)));
    }
    println!("crc32c (DRAM)   {:.2} GB/s", gbps(median(crc)));
    let _ = std::fs::remove_dir_all(&dir);
}
