//! Where checkpoint objects go: a small trait with one implementation per level of the
//! checkpoint library. Every object is written once under a new name (nothing committed is
//! overwritten), so a failed or killed write never damages the last complete version.

use crate::error::StoreError;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A flat namespace of immutable objects.
pub trait Store: Send + Sync {
    /// The level's name for reports ("ram", "ssd", "nam").
    fn level(&self) -> &str;
    /// Stores `data` under `name`, durably for this level when it returns. Replaces `name`
    /// atomically if it exists.
    fn put(&self, name: &str, data: &[u8]) -> Result<(), StoreError> {
        self.put_parts(name, &[data])
    }
    /// Stores the concatenation of `parts` under `name` (like [`Store::put`]), without
    /// gathering them into one buffer first.
    fn put_parts(&self, name: &str, parts: &[&[u8]]) -> Result<(), StoreError>;
    /// The object `name`; [`StoreError::NotFound`] when there is none.
    fn get(&self, name: &str) -> Result<Vec<u8>, StoreError>;
    /// Deletes `name` (no error when absent).
    fn remove(&self, name: &str) -> Result<(), StoreError>;
    /// Makes every object stored so far durable, names included (a directory fsync on the SSD
    /// level). Called before a commit is written, so a durable commit never names an object
    /// that could be lost. Object data is durable when `put` returns, except for data
    /// segments on the SSD level, whose fsync is deferred to this call (see [`DirStore`]).
    fn sync_names(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Whether `name` exists.
    fn exists(&self, name: &str) -> Result<bool, StoreError> {
        match self.get(name) {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A directory of files: on tmpfs it is the RAM level, on a disk with `sync` the SSD level.
///
/// With `sync`, data segments (`seg-*`, `mrg-*`) are not fsync'ed one by one: `put` returns
/// once they are in the page cache and [`Store::sync_names`], which runs before every commit,
/// fsyncs them all. A checkpoint is complete only when its commit is durable, so this keeps the
/// guarantee while the background writer releases the pages it holds without waiting for the
/// disk, and the disk writes segments copied early while the application computes. Commits,
/// the head and full images are still fsync'ed before `put` returns.
pub struct DirStore {
    dir: PathBuf,
    sync: bool,
    level: String,
    /// Data segments written but not fsync'ed yet.
    unsynced: parking_lot::Mutex<Vec<std::fs::File>>,
}

impl DirStore {
    /// The RAM level: a directory on tmpfs (e.g. under /dev/shm), no fsync.
    pub fn ram(dir: impl AsRef<Path>) -> Result<DirStore, StoreError> {
        Self::open(dir.as_ref(), false, "ram")
    }

    /// The SSD level: a directory on disk; every object and the directory are fsync'ed.
    pub fn ssd(dir: impl AsRef<Path>) -> Result<DirStore, StoreError> {
        Self::open(dir.as_ref(), true, "ssd")
    }

    /// A directory named `level` in reports, whose objects are fsync'ed when `sync` (an SSD
    /// level whose configuration turned fsync off, for instance).
    pub fn with_sync(dir: impl AsRef<Path>, sync: bool, level: &str) -> Result<DirStore, StoreError> {
        Self::open(dir.as_ref(), sync, level)
    }

    fn open(dir: &Path, sync: bool, level: &str) -> Result<DirStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| io_error("create directory", dir, e))?;
        Ok(DirStore { dir: dir.to_path_buf(), sync, level: level.into(), unsynced: Default::default() })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn io_error(what: &str, path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io { what: format!("{what} {}", path.display()), source }
}

impl Store for DirStore {
    fn level(&self) -> &str {
        &self.level
    }

    fn put_parts(&self, name: &str, parts: &[&[u8]]) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let mut file = std::fs::File::create(&tmp).map_err(|e| io_error("create", &tmp, e))?;
        for data in parts {
            file.write_all(data).map_err(|e| io_error("write", &tmp, e))?;
        }
        let segment = name.starts_with("seg") || name.starts_with("mrg");
        if self.sync && !segment {
            file.sync_data().map_err(|e| io_error("fsync", &tmp, e))?;
        }
        std::fs::rename(&tmp, &path).map_err(|e| io_error("rename", &path, e))?;
        // Data segments leave their fsync and the directory's to `sync_names`, once per
        // commit; commits, the head and images are durable by name at once.
        if self.sync && segment {
            // Start the disk write now without waiting for it, so the fsync before the commit
            // finds little left to do.
            // SAFETY: sync_file_range on our open file; flags only ask to start writeback.
            unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
            self.unsynced.lock().push(file);
        } else if self.sync {
            drop(file);
            self.sync_names()?;
        }
        Ok(())
    }

    fn sync_names(&self) -> Result<(), StoreError> {
        if self.sync {
            let files = std::mem::take(&mut *self.unsynced.lock());
            for file in files {
                file.sync_data().map_err(|e| io_error("fsync a segment in", &self.dir, e))?;
            }
            let dir = std::fs::File::open(&self.dir).map_err(|e| io_error("open", &self.dir, e))?;
            dir.sync_all().map_err(|e| io_error("fsync", &self.dir, e))?;
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.dir.join(name);
        std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StoreError::NotFound { name: name.into() },
            _ => io_error("read", &path, e),
        })
    }

    fn remove(&self, name: &str) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error("remove", &path, e)),
            _ => Ok(()),
        }
    }

    fn exists(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self.dir.join(name).exists())
    }
}
