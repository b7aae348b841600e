//! The manifest of a file-backed pool: the persistent allocations it holds, written
//! atomically whenever they change and read back at start, so a restarted server finds
//! them; a backing file with data but no manifest is refused rather than handed out anew.

use super::ServerError;
use crate::manager::{Manager, Manifest};
use std::path::PathBuf;

/// Where the manifest of a backing file lives.
pub fn manifest_path_for(backing: &std::path::Path) -> PathBuf {
    let mut name = backing.as_os_str().to_owned();
    name.push(".manifest.json");
    PathBuf::from(name)
}

fn read_manifest(path: &std::path::Path) -> Result<Option<Manifest>, ServerError> {
    let err = |message: String| ServerError::Manifest { path: path.into(), message };
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| err(format!("corrupt: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(format!("cannot read: {e}"))),
    }
}

/// Restores the persistent allocations the manifest at `path` lists, or refuses a non-empty
/// `backing` file that has none.
pub(super) fn restore_manifest(
    manager: &mut Manager,
    backing: &std::path::Path,
    path: &std::path::Path,
    capacity: u64,
) -> Result<(), ServerError> {
    let Some(manifest) = read_manifest(path)? else {
        return refuse_unlisted_backing(backing, path);
    };
    check_manifest_capacity(path, &manifest, capacity)?;
    manager.restore(&manifest).map_err(|message| ServerError::Manifest { path: path.into(), message })?;
    log::info!("restored {} persistent allocations from {}", manifest.allocations.len(), path.display());
    Ok(())
}

/// A backing file with data but no manifest: its allocations cannot be found, and starting
/// on it would hand its bytes out again as new, zeroed allocations. Refused, unless the
/// operator asks for a fresh pool.
fn refuse_unlisted_backing(backing: &std::path::Path, manifest: &std::path::Path) -> Result<(), ServerError> {
    let len = match std::fs::metadata(backing) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ServerError::Manifest {
                path: manifest.into(),
                message: format!("cannot stat the backing file {}: {e}", backing.display()),
            })
        }
    };
    if len == 0 {
        return Ok(());
    }
    Err(ServerError::Manifest {
        path: manifest.into(),
        message: format!(
            "missing, but the backing file {} holds {len} bytes: its allocations cannot be found without it. \
             Restore the manifest, or start with --reinit-pool to discard the pool's contents and start empty",
            backing.display()
        ),
    })
}

fn check_manifest_capacity(path: &std::path::Path, manifest: &Manifest, capacity: u64) -> Result<(), ServerError> {
    if manifest.capacity > capacity {
        return Err(ServerError::Manifest {
            path: path.into(),
            message: format!("written for a {}-byte pool; start with --capacity of at least that", manifest.capacity),
        });
    }
    Ok(())
}

/// Writes the manifest atomically: a temporary file, fsync, rename.
pub(super) fn write_manifest(path: &std::path::Path, manifest: &Manifest) -> Result<(), ServerError> {
    use std::io::Write;
    let err = |message: String| ServerError::Manifest { path: path.into(), message };
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(manifest).map_err(|e| err(e.to_string()))?;
    // Names and sizes of every tenant's allocations: the server's user only.
    let _ = std::fs::remove_file(&tmp); // a leftover may have other permissions
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(crate::constants::BACKING_FILE_MODE)
        .open(&tmp)
        .map_err(|e| err(format!("cannot create {}: {e}", tmp.display())))?;
    file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(|e| err(format!("cannot write: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| err(format!("cannot rename into place: {e}")))
}
