//! The server's administration: a backup of the embedded store, streamed as a tar archive
//! (docs/operations.md, "Backups"). Only an admin token that is not scoped may: a backup holds
//! every queue, the tokens' hashes and the sealed secrets.
//!
//! The client chooses no path: the server writes the copy into its own data directory, sends
//! it, and removes it when the answer ends, sent or not ([`tenax_core::engine::BackupCopy`]).

use std::io::Write;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use tenax_core::engine::{Backup, BackupCopy};
use tenax_core::model::backup::{MANIFEST_FILE, STORE_FILE};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::openapi::Refusals;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(backup))
}

/// How much of the archive is sent at a time.
const CHUNK: usize = 256 * 1024;

/// Takes a backup of the embedded store while the server goes on serving, and answers it as a
/// tar archive of `tenax.redb` and `backup.json` (its moment, counts and SHA-256). On
/// PostgreSQL: 409, use the database's own tools.
#[utoipa::path(post, path = "/admin/backup", operation_id = "backup", tag = "admin",
    responses(
        (status = 200, description = "The backup: a tar archive of `tenax.redb` and \
            `backup.json`; `tenax backup` unpacks and checks it, `tenax restore` restores it",
            body = String, content_type = "application/x-tar"),
        (status = 409, description = "`not_embedded`: the server runs on PostgreSQL, back it \
            up with pg_dump or pg_basebackup (docs/postgres.md); `backup_in_progress`: another \
            backup is being taken or sent", body = super::openapi::ErrorBody),
        Refusals))]
async fn backup(State(state): State<AppState>) -> Result<Response, ApiError> {
    let copy = match state.engine.backup().await? {
        Backup::Made(copy) => copy,
        Backup::NotHere => {
            return Err(ApiError::conflict(
                "not_embedded",
                "this server runs on PostgreSQL, which Tenax does not back up: use pg_dump or \
                 pg_basebackup (docs/postgres.md, \"Backups\")",
            ));
        }
        Backup::Busy => {
            return Err(ApiError::conflict(
                "backup_in_progress",
                "another backup is being taken or sent: this server takes one at a time; ask \
                 again when it is done",
            ));
        }
    };
    let name = format!(
        "tenax-backup-{}.tar",
        copy.manifest.moment.taken_at.replace(':', "")
    );
    let (sender, receiver) = mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || send_archive(copy, sender));
    Ok((
        [
            (CONTENT_TYPE, "application/x-tar".to_owned()),
            (
                CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        Body::from_stream(ReceiverStream::new(receiver)),
    )
        .into_response())
}

/// Writes the archive of `copy` into `sender`, the store's file first and the manifest last,
/// then drops the copy (which removes its directory and lets the next backup begin) before the
/// answer ends: a client that has read it whole may ask for another at once. A failure ends
/// the answer with an error, so the client sees a cut archive, never a short one that looks
/// whole.
fn send_archive(copy: BackupCopy, sender: mpsc::Sender<std::io::Result<Bytes>>) {
    let mut archive = tar::Builder::new(Chunks {
        sender: sender.clone(),
        buffer: Vec::with_capacity(CHUNK),
    });
    let written = [STORE_FILE, MANIFEST_FILE]
        .iter()
        .try_for_each(|name| archive.append_path_with_name(copy.dir().join(name), name))
        .and_then(|()| archive.into_inner())
        .and_then(|mut chunks| chunks.flush());
    if let Err(error) = written {
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            tracing::warn!(%error, "sending a backup failed");
            let _ = sender.blocking_send(Err(error));
        } else {
            tracing::info!("the client stopped receiving a backup before its end");
        }
    }
    drop(copy);
    drop(sender);
}

/// The answer's body, written in chunks of [`CHUNK`] bytes.
struct Chunks {
    sender: mpsc::Sender<std::io::Result<Bytes>>,
    buffer: Vec<u8>,
}

impl Write for Chunks {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.flush()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        self.sender.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the client stopped receiving",
            )
        })
    }
}
