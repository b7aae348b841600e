//! One chain on several levels: every object goes to each level's store, so each level holds
//! a whole base plus increments and a restart can fall back from one level to the next.

use nam_incr::format::{decode_head, HEAD};
use nam_incr::{Store, StoreError};
use std::sync::Arc;

/// Writes to every store; reads from the first that has the object.
pub struct Tee {
    stores: Vec<Arc<dyn Store>>,
    name: String,
}

impl Tee {
    /// Over `stores`, written in this order.
    pub fn new(stores: Vec<Arc<dyn Store>>) -> Tee {
        let name = stores.iter().map(|s| s.level()).collect::<Vec<_>>().join("+");
        Tee { stores, name }
    }

    /// The newest head of all levels: a level may have lost its newest checkpoints (a RAM
    /// level after a reboot), and the engine must number its next one after every level's.
    fn newest_head(&self) -> Result<Vec<u8>, StoreError> {
        let mut best: Option<((u32, u32), Vec<u8>)> = None;
        for store in &self.stores {
            match store.get(HEAD) {
                Ok(bytes) => {
                    let Ok(at) = decode_head(&bytes) else { continue };
                    if best.as_ref().is_none_or(|(b, _)| at > *b) {
                        best = Some((at, bytes));
                    }
                }
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        best.map(|(_, b)| b).ok_or_else(|| StoreError::NotFound { name: HEAD.into() })
    }
}

impl Store for Tee {
    fn level(&self) -> &str {
        &self.name
    }

    fn put_parts(&self, name: &str, parts: &[&[u8]]) -> Result<(), StoreError> {
        self.stores.iter().try_for_each(|s| s.put_parts(name, parts))
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        if name == HEAD {
            return self.newest_head();
        }
        for store in &self.stores {
            match store.get(name) {
                Err(StoreError::NotFound { .. }) => continue,
                other => return other,
            }
        }
        Err(StoreError::NotFound { name: name.into() })
    }

    fn remove(&self, name: &str) -> Result<(), StoreError> {
        self.stores.iter().try_for_each(|s| s.remove(name))
    }

    fn sync_names(&self) -> Result<(), StoreError> {
        self.stores.iter().try_for_each(|s| s.sync_names())
    }

    fn exists(&self, name: &str) -> Result<bool, StoreError> {
        for store in &self.stores {
            if store.exists(name)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
