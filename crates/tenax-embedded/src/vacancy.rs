//! Whether a data directory's store is free for work done while no server runs (`tenax repair`,
//! `tenax secrets rotate-key`): redb locks the file of a store that a server has open.

use std::path::Path;

use crate::FILE_NAME;

/// Why a data directory's store cannot be worked on offline.
#[derive(Debug, thiserror::Error)]
pub enum Occupied {
    #[error("{} holds no store (no {FILE_NAME})", .0.display())]
    NoStore(std::path::PathBuf),
    #[error("a server has the store in {} open", .0.display())]
    InUse(std::path::PathBuf),
    #[error("opening {}: {source}", .path.display())]
    Unreadable {
        path: std::path::PathBuf,
        source: redb::DatabaseError,
    },
}

/// Answers whether the store in `dir` exists and no server has it open.
pub fn check_free(dir: &Path) -> Result<(), Occupied> {
    let path = dir.join(FILE_NAME);
    if !path.exists() {
        return Err(Occupied::NoStore(dir.to_path_buf()));
    }
    match redb::Database::open(&path) {
        Ok(_) => Ok(()),
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => Err(Occupied::InUse(dir.to_path_buf())),
        Err(source) => Err(Occupied::Unreadable { path, source }),
    }
}
