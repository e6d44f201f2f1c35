//! Backups of the store while it serves (`POST /api/admin/backup`): the store writes a
//! consistent copy into a directory of its own, and the engine hands it over as a
//! [`BackupCopy`], which removes the directory when dropped (once sent, or when sending
//! failed). One backup at a time: a second, asked for while one is written or sent, is
//! refused rather than queued (each costs the store's size on disk until sent).

use std::path::{Path, PathBuf};

use super::{Engine, EngineError};
use crate::model::backup::BackupManifest;
use crate::store::StoreError;

/// What a request for a backup got.
#[derive(Debug)]
pub enum Backup {
    Made(BackupCopy),
    /// The store is backed up with its own tools (PostgreSQL).
    NotHere,
    /// Another backup is being written or sent.
    Busy,
}

/// A backup written by the store, in a directory that is removed when this is dropped.
#[derive(Debug)]
pub struct BackupCopy {
    dir: PathBuf,
    pub manifest: BackupManifest,
    /// Held until the backup is sent: one at a time.
    _turn: tokio::sync::OwnedSemaphorePermit,
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
    /// Writes a backup of the store while writes go on.
    pub async fn backup(&self) -> Result<Backup, EngineError> {
        let Ok(turn) = self.backups.clone().try_acquire_owned() else {
            return Ok(Backup::Busy);
        };
        let store = self.store.clone();
        let now_ms = self.clock.now_ms();
        let made = tokio::task::spawn_blocking(move || store.backup(now_ms))
            .await
            .map_err(|e| EngineError::from(StoreError::storage("writing a backup", e)))?;
        match made {
            None => Ok(Backup::NotHere),
            Some(Ok((dir, manifest))) => Ok(Backup::Made(BackupCopy {
                dir,
                manifest,
                _turn: turn,
            })),
            Some(Err(error)) => Err(error.into()),
        }
    }
}
