//! A backup of the embedded store: a directory holding a copy of its file (`tenax.redb`) and
//! this manifest (`backup.json`), which says what the copy is and how to check it.
//!
//! The copy is one consistent state of the store: every commit up to the write-ahead log's
//! record `moment.wal_lsn`, and none after. The secrets key is not in it (docs/security.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The manifest's file name in a backup directory.
pub const MANIFEST_FILE: &str = "backup.json";

/// The store's file in a backup directory (the embedded store's own file name).
pub const STORE_FILE: &str = "tenax.redb";

/// The manifest's own format: a reader refuses a higher one.
pub const MANIFEST_FORMAT: u64 = 1;

/// What `backup.json` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackupManifest {
    /// This manifest's format ([`MANIFEST_FORMAT`]).
    pub manifest_format: u64,
    /// The store file's format (the `format_version` of its `meta` table): a Tenax that reads
    /// an older one only restores it.
    pub store_format: u64,
    /// The version of the Tenax that made the backup.
    pub tenax_version: String,
    pub moment: BackupMoment,
    /// The file in the backup directory (`tenax.redb`).
    pub file: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The SHA-256 of the file, in lowercase hex.
    pub sha256: String,
    /// How many rows each table of the file holds, by table name.
    pub rows: BTreeMap<String, u64>,
}

/// When a backup was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackupMoment {
    /// The last write-ahead log record in the copy: every commit acknowledged before the backup
    /// began is at or before it.
    pub wal_lsn: u64,
    /// The server's clock when the copy's state was read, in milliseconds since the Unix epoch.
    pub taken_at_ms: u64,
    /// The same, in RFC 3339.
    pub taken_at: String,
}
