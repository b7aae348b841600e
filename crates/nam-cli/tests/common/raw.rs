//! A UCX client that speaks the wire protocol by hand (nam-ucx plus nam-proto encoders), so a
//! test can misbehave as no `nam_client::Client` would: flood without taking replies, stay
//! anonymous, send what it likes.

use nam_proto::{Reply, Request, AM_ID_REPLY, AM_ID_REQUEST};
use nam_ucx::{Context, Endpoint, Features, Worker};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One connection to one server over `transports`, with its own UCX context and worker.
pub struct RawClient {
    pub worker: Worker,
    pub endpoint: Endpoint,
    replies: Arc<Mutex<Vec<Vec<u8>>>>,
    // Declared last: dropped after the endpoint and worker.
    _context: Context,
}

impl RawClient {
    /// Starts a connection to `addr` (it completes, or fails, asynchronously).
    pub fn connect(addr: SocketAddr, transports: &str) -> nam_ucx::Result<RawClient> {
        let context = Context::with_transports(Features::CLIENT, Some(transports))?;
        let worker = Worker::new(&context)?;
        let replies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let sink = replies.clone();
        worker.set_am_handler(AM_ID_REPLY, move |m| sink.lock().unwrap().push(m.data.unwrap_or(&[]).to_vec()))?;
        let endpoint = Endpoint::connect(&worker, addr)?;
        Ok(RawClient { worker, endpoint, replies, _context: context })
    }

    /// Sends `request` with request id `id` and waits (progressing) for a reply, at most
    /// `timeout`; `None` if none came or the connection failed.
    pub fn call(&self, id: u64, request: &Request, timeout: Duration) -> Option<Reply> {
        self.replies.lock().unwrap().clear();
        self.endpoint.am_send(AM_ID_REQUEST, &request.encode(id), timeout).ok()?;
        let deadline = Instant::now() + timeout;
        loop {
            self.worker.progress();
            if let Some(bytes) = self.replies.lock().unwrap().pop() {
                return Reply::decode(&bytes).ok().map(|(_, _, reply)| reply);
            }
            if self.endpoint.failure().is_some() || Instant::now() >= deadline {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// Waits (progressing) until the server closes the connection; how long that took, or
    /// `None` if it was still open after `limit`.
    pub fn wait_closed(&self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < limit {
            self.worker.progress();
            if self.endpoint.failure().is_some() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }
}

/// A [`RawClient`] that sends any bytes as a control message and insists on a reply: what a
/// malformed message must still get.
pub struct RawPeer(RawClient);

impl RawPeer {
    /// Connects to `server` over its transports.
    pub fn connect(server: &super::ServerProcess) -> RawPeer {
        RawPeer(RawClient::connect(server.addr, &server.transports).expect("raw UCX connection"))
    }

    /// Sends `bytes` as one request and decodes the reply (kind, request id, body).
    pub fn exchange(&self, bytes: &[u8]) -> (u16, u64, Reply) {
        let RawClient { worker, endpoint, replies, .. } = &self.0;
        replies.lock().unwrap().clear();
        endpoint.am_send(AM_ID_REQUEST, bytes, Duration::from_secs(5)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            worker.progress();
            if let Some(reply) = replies.lock().unwrap().pop() {
                return Reply::decode(&reply).expect("the server's reply decodes");
            }
            assert!(Instant::now() < deadline, "no reply to a malformed message");
        }
    }
}
