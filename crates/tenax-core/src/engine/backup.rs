//! Backups of the store while it serves (`POST /api/admin/backup`): the store writes a
//! consistent copy into a directory of its own, and the engine hands it over as a
//! [`BackupCopy`], which removes the directory when dropped (once sent, or when sending
//! failed).

use std::path::{Path, PathBuf};

use super::{Engine, EngineError};
use crate::model::backup::BackupManifest;
use crate::store::StoreError;

/// A backup written by the store, in a directory that is removed when this is dropped.
#[derive(Debug)]
pub struct BackupCopy {
    dir: PathBuf,
    pub manifest: BackupManifest,
}

impl BackupCopy {
    /// The directory holding the backup's files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for BackupCopy {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot remove a sent backup");
        }
    }
}

impl Engine {
    /// Writes a backup of the store while writes go on. `None`: the store is backed up with
    /// its own tools (PostgreSQL).
    pub async fn backup(&self) -> Result<Option<BackupCopy>, EngineError> {
        let store = self.store.clone();
        let now_ms = self.clock.now_ms();
        let made = tokio::task::spawn_blocking(move || store.backup(now_ms))
            .await
            .map_err(|e| EngineError::from(StoreError::storage("writing a backup", e)))?;
        match made {
            None => Ok(None),
            Some(Ok((dir, manifest))) => Ok(Some(BackupCopy { dir, manifest })),
            Some(Err(error)) => Err(error.into()),
        }
    }
}
