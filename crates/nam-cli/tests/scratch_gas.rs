mod common;
use common::ServerProcess;
use nam_client::*;
use std::time::Instant;
#[test]
fn scratch() {
    let transports = std::env::var("T").unwrap_or("sm,self,tcp".into());
    let server = ServerProcess::start(&transports, &["--capacity", "64MiB"]);
    let clients: Vec<Client> = (0..2).map(|_| server.client()).collect();
    std::thread::scope(|s| {
        for (rank, client) in clients.iter().enumerate() {
            s.spawn(move || {
                let mut g = ReduceGroup::attach(client, "x", 2, rank as u32, 4096, 0).unwrap();
                let send = [1u8; 4];
                let mut recv = [0u8; 4];
                for _ in 0..10 {
                    g.allreduce(client, ReduceOp::Sum, DataType::I32, &send, &mut recv).unwrap();
                }
                let t = Instant::now();
                for _ in 0..200 {
                    g.allreduce(client, ReduceOp::Sum, DataType::I32, &send, &mut recv).unwrap();
                }
                println!("rank {rank}: {:.1} us", t.elapsed().as_secs_f64() * 1e6 / 200.0);
                let a = client.alloc(64, &AllocOptions::default()).unwrap();
                let t = Instant::now();
                for _ in 0..200 {
                    client.status(0).unwrap();
                }
                println!("rank {rank}: status rtt {:.1} us", t.elapsed().as_secs_f64() * 1e6 / 200.0);
                let _ = a;
            });
        }
    });
}
