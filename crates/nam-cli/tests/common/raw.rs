//! A raw UCX peer of a test server: sends any bytes as a control message and decodes the
//! reply, to exercise what the `nam-client` library never sends.

use super::ServerProcess;
use nam_proto::{Reply, AM_ID_REPLY, AM_ID_REQUEST};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A raw UCX client that sends arbitrary bytes as control messages.
pub struct RawPeer {
    endpoint: nam_ucx::Endpoint,
    replies: Arc<Mutex<Vec<Vec<u8>>>>,
    _context: nam_ucx::Context,
}

impl RawPeer {
    pub fn connect(server: &ServerProcess) -> RawPeer {
        let context = nam_ucx::Context::with_transports(nam_ucx::Features::CLIENT, Some(&server.transports)).unwrap();
        let worker = nam_ucx::Worker::new(&context).unwrap();
        let replies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let sink = replies.clone();
        worker.set_am_handler(AM_ID_REPLY, move |m| sink.lock().unwrap().push(m.data.unwrap().to_vec())).unwrap();
        let endpoint = nam_ucx::Endpoint::connect(&worker, server.addr).unwrap();
        RawPeer { endpoint, replies, _context: context }
    }

    pub fn exchange(&self, bytes: &[u8]) -> (u16, u64, Reply) {
        self.endpoint.am_send(AM_ID_REQUEST, bytes, Duration::from_secs(5)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.endpoint.worker().progress();
            if let Some(reply) = self.replies.lock().unwrap().pop() {
                return Reply::decode(&reply).expect("the server's reply decodes");
            }
            assert!(Instant::now() < deadline, "no reply to a malformed message");
        }
    }
}
