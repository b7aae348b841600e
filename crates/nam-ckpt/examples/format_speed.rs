//! Times the pieces of a RAM-level checkpoint write (for tuning; not a benchmark report).
use nam_ckpt::format::{self, ChunkParity, Footer, WriteOptions};
use std::time::Instant;

fn main() {
    let data: Vec<u8> = (0..64usize << 20).map(|i| (i * 7) as u8).collect();
    let mut dst = vec![0u8; data.len()];
    let t = Instant::now();
    dst.copy_from_slice(&data);
    println!("memcpy (first touch) {:.2} GB/s", data.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
    let t = Instant::now();
    for _ in 0..4 {
        dst.copy_from_slice(std::hint::black_box(&data));
        std::hint::black_box(&mut dst);
    }
    println!("memcpy {:.2} GB/s", 4.0 * data.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
    for p in [1, 2] {
        let t = Instant::now();
        let shards: Vec<&[u8]> = data.chunks(65536).take(16).collect();
        for _ in 0..64 {
            reed_solomon_simd::encode(16, p, &shards).unwrap();
        }
        println!("rs 16+{p} {:.2} GB/s", data.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    {
        use std::io::{Seek, Write};
        let path = "/dev/shm/nam-overwrite";
        std::fs::write(path, &data).unwrap();
        let t = Instant::now();
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.seek(std::io::SeekFrom::Start(0)).unwrap();
        f.write_all(&data).unwrap();
        println!("tmpfs overwrite existing {:.2} GB/s", data.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
        std::fs::remove_file(path).unwrap();
    }
    let t = Instant::now();
    let c: u32 = data.chunks(65536).map(crc32c::crc32c).fold(0, |a, b| a ^ b);
    println!("crc32c {:.2} GB/s ({c})", data.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
    let t = Instant::now();
    let shards: Vec<&[u8]> = data.chunks(65536).take(16).collect();
    for _ in 0..64 {
        reed_solomon_simd::encode(16, 2, &shards).unwrap();
    }
    println!("rs 16+2 {:.2} GB/s", data.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
    for dir in ["/dev/shm", "/var/tmp"] {
        for parity in [None, Some(ChunkParity { data: 16, parity: 2 })] {
            let path = std::path::Path::new(dir).join("nam-format-speed.ckpt");
            let footer = Footer {
                name: "s".into(),
                version: 1,
                rank: 0,
                ranks: 1,
                regions: vec![(1, data.len() as u64)],
                files: vec![],
                chunk: 0,
                crcs: vec![],
                parity: None,
                parity_crcs: vec![],
            };
            let mapped = dir == "/dev/shm";
            let spare = std::path::Path::new(dir).join("nam-format-speed.spare");
            let opts = WriteOptions { chunk: 65536, parity, fsync: false, mapped, recycle: Some(spare.clone()) };
            format::write(&path, &[&data], footer.clone(), &opts).unwrap();
            std::fs::rename(&path, &spare).unwrap();
            let t = Instant::now();
            format::write(&path, &[&data], footer, &opts).unwrap();
            println!(
                "{dir} parity={} {:.2} GB/s",
                parity.is_some(),
                data.len() as f64 / t.elapsed().as_secs_f64() / 1e9
            );
            let t = Instant::now();
            std::fs::write(&path, &data).unwrap();
            println!("{dir} plain overwrite-new-file {:.2} GB/s", data.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
            std::fs::remove_file(&path).unwrap();
        }
    }
}
