//! The memory-server level: each object is a persistent named allocation on a `nam serve`,
//! reached through nam-client (so UCX is the transport). The first 8 bytes of an allocation
//! hold the object's length; allocations outlive the client, so a restarted process opens
//! them by name.

use crate::constants::{REPLACE_RETRY_PAUSE, REPLACE_WAIT_MAX};
use crate::error::StoreError;
use crate::store::Store;
use nam_client::{AllocOptions, Client, Error as ClientError, Status};

const LEN_BYTES: usize = 8;

/// Objects as allocations named `<prefix>/<name>` on the client's servers.
pub struct NamStore {
    client: Client,
    prefix: String,
}

impl NamStore {
    /// A store whose objects are named `<prefix>/<name>`.
    pub fn new(client: Client, prefix: &str) -> NamStore {
        NamStore { client, prefix: prefix.into() }
    }

    fn full(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }
}

fn client_error(what: &str, name: &str, source: ClientError) -> StoreError {
    StoreError::Server { what: format!("{what} {name}"), source: Box::new(source) }
}

fn is_not_found(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { status: Status::NameNotFound, .. })
}

impl Store for NamStore {
    fn level(&self) -> &str {
        "nam"
    }

    fn put_parts(&self, name: &str, parts: &[&[u8]]) -> Result<(), StoreError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        // Names are written once, except `head`: free the old one first.
        self.remove(name)?;
        let full = self.full(name);
        let options = AllocOptions { persistent: true, ..AllocOptions::shared(&full) };
        let deadline = std::time::Instant::now() + REPLACE_WAIT_MAX;
        let alloc = loop {
            match self.client.alloc((LEN_BYTES + total) as u64, &options) {
                // A killed writer (the process before a restart) still holds the old object
                // until the server's lease of vanished clients ends: retry until then.
                Err(ClientError::Refused { status: Status::NameExists, .. })
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(REPLACE_RETRY_PAUSE);
                    self.remove(name)?;
                }
                other => break other.map_err(|e| client_error("allocate", &full, e))?,
            }
        };
        // Data first, then the length: a torn object reads as shorter or empty, and the
        // object checksums reject it.
        let mut offset = LEN_BYTES as u64;
        for data in parts.iter().filter(|p| !p.is_empty()) {
            self.client.put(&alloc, offset, data).map_err(|e| client_error("put", &full, e))?;
            offset += data.len() as u64;
        }
        self.client.flush().map_err(|e| client_error("flush", &full, e))?;
        self.client.put_sync(&alloc, 0, &(total as u64).to_le_bytes()).map_err(|e| client_error("put", &full, e))?;
        self.client.flush().map_err(|e| client_error("flush", &full, e))
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let full = self.full(name);
        let alloc = match self.client.open(&full) {
            Err(e) if is_not_found(&e) => return Err(StoreError::NotFound { name: name.into() }),
            other => other.map_err(|e| client_error("open", &full, e))?,
        };
        let mut len = [0u8; LEN_BYTES];
        self.client.get(&alloc, 0, &mut len).map_err(|e| client_error("get", &full, e))?;
        let len = u64::from_le_bytes(len);
        if len > alloc.size() - LEN_BYTES as u64 {
            return Err(StoreError::Corrupt { name: name.into(), why: format!("length {len} exceeds allocation") });
        }
        let mut data = vec![0u8; len as usize];
        if len > 0 {
            self.client.get(&alloc, LEN_BYTES as u64, &mut data).map_err(|e| client_error("get", &full, e))?;
        }
        Ok(data)
    }

    fn remove(&self, name: &str) -> Result<(), StoreError> {
        let full = self.full(name);
        match self.client.open(&full) {
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(client_error("open", &full, e)),
            Ok(alloc) => {
                // Opening took a reference: drop it, then the persistent one.
                self.client.free(&alloc).map_err(|e| client_error("free", &full, e))?;
                match self.client.open(&full) {
                    Ok(again) => self.client.free(&again).map_err(|e| client_error("free", &full, e)),
                    Err(e) if is_not_found(&e) => Ok(()),
                    Err(e) => Err(client_error("open", &full, e)),
                }
            }
        }
    }
}
