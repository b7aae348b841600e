//! Two workers in one process talk through a real UCX listener: connection, active
//! messages with replies, RMA, atomics, flush, and failure after the peer closes.

use nam_ucx::{AtomicOp, Context, Endpoint, Features, Listener, MemRegion, Worker};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A message's payload and the endpoint to reply on.
type Received = (Vec<u8>, Option<nam_ucx::EndpointId>);

fn progress_until(workers: &[&Worker], mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "condition not reached within {TIMEOUT:?}");
        for w in workers {
            w.progress();
        }
    }
}

#[test]
fn connect_message_rma_atomics_and_peer_close() {
    let server_ctx = Context::new(Features::SERVER).unwrap();
    let server = Worker::new(&server_ctx).unwrap();
    let listener = Listener::bind(&server, "127.0.0.1:0".parse().unwrap()).unwrap();
    assert_ne!(listener.address().port(), 0);

    let inbox: Arc<Mutex<Vec<Received>>> = Arc::default();
    let sink = inbox.clone();
    server.set_am_handler(1, move |m| sink.lock().unwrap().push((m.data.unwrap().to_vec(), m.reply_ep))).unwrap();

    let client_ctx = Context::new(Features::CLIENT).unwrap();
    let client = Worker::new(&client_ctx).unwrap();
    let replies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let sink = replies.clone();
    client.set_am_handler(2, move |m| sink.lock().unwrap().push(m.data.unwrap().to_vec())).unwrap();
    let to_server = Endpoint::connect(&client, listener.address()).unwrap();
    let control = to_server.clone();

    let mut accepted = Vec::new();
    progress_until(&[&server, &client], || {
        accepted.extend(listener.take_requests());
        !accepted.is_empty()
    });
    let to_client = Endpoint::accept(&server, accepted.pop().unwrap()).unwrap();

    // Request and reply; the reply endpoint reported with the message is the accepted one.
    let payload = b"hello server".to_vec();
    let posted = unsafe { to_server.am_send_nbx(1, payload.as_ptr(), payload.len()).unwrap() };
    if let nam_ucx::Posted::InFlight(request) = posted {
        progress_until(&[&server, &client], || request.check().is_some());
    }
    progress_until(&[&server, &client], || !inbox.lock().unwrap().is_empty());
    let (data, reply_ep) = inbox.lock().unwrap().pop().unwrap();
    assert_eq!(data, payload);
    assert_eq!(reply_ep, Some(to_client.id()));
    let reply = b"hello client".to_vec();
    let posted = unsafe { to_client.am_send_nbx(2, reply.as_ptr(), reply.len()).unwrap() };
    if let nam_ucx::Posted::InFlight(request) = posted {
        progress_until(&[&server, &client], || request.check().is_some());
    }
    progress_until(&[&server, &client], || !replies.lock().unwrap().is_empty());
    assert_eq!(replies.lock().unwrap()[0], reply);

    // RMA into server memory goes over an endpoint to the server worker's address, the
    // path that may use shared memory; the server's progress is driven by a thread (TCP
    // emulates RMA).
    let to_server = Endpoint::connect_to_worker(&client, &server.address().unwrap(), false).unwrap();
    let region = MemRegion::allocate(&server_ctx, 1 << 20).unwrap();
    assert!(region.len() >= 1 << 20);
    let rkey = to_server.unpack_rkey(&region.pack_rkey().unwrap()).unwrap();
    let base = region.address() as u64;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server_thread = {
        let (server, stop) = (server.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                server.progress();
            }
        })
    };
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    to_server.put(&data, base + 64, &rkey, TIMEOUT).unwrap();
    to_server.flush(TIMEOUT).unwrap();
    let mut back = vec![0u8; 4096];
    to_server.get(&mut back, base + 64, &rkey, TIMEOUT).unwrap();
    assert_eq!(back, data);

    let counter = base + 8192;
    assert_eq!(to_server.atomic_fetch(AtomicOp::Add, 5, 0, counter, &rkey, TIMEOUT).unwrap(), 0);
    assert_eq!(to_server.atomic_fetch(AtomicOp::Add, 5, 0, counter, &rkey, TIMEOUT).unwrap(), 5);
    assert_eq!(to_server.atomic_fetch(AtomicOp::CompareSwap, 42, 10, counter, &rkey, TIMEOUT).unwrap(), 10);
    assert_eq!(to_server.atomic_fetch(AtomicOp::CompareSwap, 7, 10, counter, &rkey, TIMEOUT).unwrap(), 42);
    assert_eq!(to_server.atomic_fetch(AtomicOp::Swap, 1, 0, counter, &rkey, TIMEOUT).unwrap(), 42);
    to_server.atomic_post(AtomicOp::Add, 2, counter, &rkey, TIMEOUT).unwrap();
    to_server.flush(TIMEOUT).unwrap();
    assert_eq!(to_server.atomic_fetch(AtomicOp::Add, 0, 0, counter, &rkey, TIMEOUT).unwrap(), 3);
    assert!(to_server.atomic_fetch(AtomicOp::Add, 1, 0, counter + 4, &rkey, TIMEOUT).is_err());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server_thread.join().unwrap();

    // The server closes its side: the client sees a peer failure, not a hang.
    drop(rkey);
    let to_server = control;
    to_client.abort();
    let deadline = Instant::now() + TIMEOUT;
    while to_server.failure().is_none() && Instant::now() < deadline {
        server.progress();
        client.progress();
    }
    assert!(to_server.failure().is_some(), "client never saw the server close the endpoint");
    assert!(to_server.flush(TIMEOUT).is_err());
}
