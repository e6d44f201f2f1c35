//! The PostgreSQL store's side of secrets at rest (`tenax_core::store::sealed`), done by every
//! server as it opens the store, on the connection that migrated the schema:
//!
//! - `tenax_secrets_key` holds the id of the key that seals the store. A server whose keys lack
//!   it is refused: its key file is not the other servers'. So is a server that cannot open a
//!   stored subscription, before it sends or signs anything.
//! - Every subscription kept in clear (by an earlier release) or sealed with another key than
//!   this server's sealing key is sealed with it; then that key is recorded. This is how a
//!   rotation completes across a cluster (docs/security.md): once every server seals with the
//!   new key and has restarted, nothing is left sealed with the old one.
//! - After sealing subscriptions that were in clear, the table is rewritten (`VACUUM FULL`),
//!   so that the old row versions holding them are not left in its files.
//!
//! - The payload data key of encrypted queues (`tenax_payload_key`) is made by the first server
//!   that opens the store, sealed with the sealing key, and sealed again with it when another
//!   key sealed it (a rotation re-seals this key, never the payloads); every server opens the
//!   one key the row holds.
//!
//! Servers opening at the same moment take turns (an advisory lock), so that two servers given
//! different keys cannot both record theirs: the second finds the first's and is refused before
//! it seals anything. Servers already running may change subscriptions meanwhile: one is
//! rewritten only if its body is still the one read (a change made meanwhile is kept, sealed by
//! the server that made it).

use tenax_core::secrets::{KeyId, Keyring, PayloadKey};
use tenax_core::store::StoreError;
use tenax_core::store::sealed::{from_stored, payload_key_from_stored, payload_key_to_stored};
use tokio_postgres::Client;

use super::fault;
use super::rows::{id, stored_subscription};
use super::schema::{ADVISORY_LOCK, ADVISORY_UNLOCK};
use super::statements::statements;

/// What an open found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sealing {
    /// Subscriptions sealed with the sealing key by this open.
    pub sealed: usize,
    /// Of those, how many were in clear.
    pub in_clear: usize,
}

/// The key recorded as the store's, if any.
pub async fn recorded_key(client: &Client) -> Result<Option<KeyId>, StoreError> {
    let row = client
        .query_opt(RECORDED_KEY.text(), &[])
        .await
        .map_err(fault("reading the store's secrets key"))?;
    row.map(|r| {
        r.get::<_, String>(0)
            .parse::<KeyId>()
            .map_err(|e| StoreError::Corrupt(format!("tenax_secrets_key: {e}")))
    })
    .transpose()
}

/// The advisory lock held while a server checks and seals at open ("tenax-sk").
const SEALING_LOCK: i64 = 0x7465_6e61_782d_736b;

/// Checks that `keys` open the store, seals what is not sealed with the sealing key, and
/// records that key as the store's, under [`SEALING_LOCK`]; answers with the payload data key
/// (made if the store had none).
pub async fn seal_at_rest(
    client: &mut Client,
    keys: &Keyring,
) -> Result<(Sealing, PayloadKey), StoreError> {
    let what = "sealing the subscriptions' secrets";
    client
        .execute(ADVISORY_LOCK.text(), &[&SEALING_LOCK])
        .await
        .map_err(fault(what))?;
    let sealed = seal_locked(client, keys).await;
    // The lock goes with the session too, should this fail.
    let unlocked = client
        .execute(ADVISORY_UNLOCK.text(), &[&SEALING_LOCK])
        .await
        .map_err(fault(what));
    let sealed = sealed?;
    unlocked?;
    Ok(sealed)
}

async fn seal_locked(
    client: &mut Client,
    keys: &Keyring,
) -> Result<(Sealing, PayloadKey), StoreError> {
    let what = "sealing the subscriptions' secrets";
    if let Some(recorded) = recorded_key(client).await?.filter(|r| !keys.holds(*r)) {
        return Err(StoreError::Secrets(format!(
            "the database's webhook secrets are sealed with key {recorded}, which the secrets \
             key file {} does not hold (it holds {}): every server sharing the database needs \
             the same key file (--secrets-key-file)",
            keys.source(),
            keys.ids()
        )));
    }
    let current = keys.current().id();
    let rows = client
        .query(SUBSCRIPTIONS.text(), &[])
        .await
        .map_err(fault(what))?;
    let mut done = Sealing::default();
    for row in &rows {
        let body: &str = row.get(0);
        let opened = from_stored(body.as_bytes(), keys)?;
        if opened.sealed_with == Some(current) {
            continue;
        }
        let stored = stored_subscription(&opened.subscription, keys)?;
        let changed = client
            .execute(
                RESEAL.text(),
                &[&id(opened.subscription.id.0), &body, &stored],
            )
            .await
            .map_err(fault(what))?;
        if changed == 1 {
            done.sealed += 1;
            done.in_clear += usize::from(opened.sealed_with.is_none());
        }
    }
    let payload_key = payload_key(client, keys).await?;
    client
        .execute(RECORD_KEY.text(), &[&current.to_string()])
        .await
        .map_err(fault(what))?;
    if done.in_clear > 0 {
        // The old row versions held the secrets in clear: a new copy of the table leaves them
        // behind. The table is small; the lock it takes lasts as long as the copy.
        client
            .batch_execute(REWRITE_SUBSCRIPTIONS.text())
            .await
            .map_err(fault(
                "rewriting tenax_subscriptions without its old row versions",
            ))?;
    }
    if done.sealed > 0 {
        tracing::info!(
            subscriptions = done.sealed,
            in_clear = done.in_clear,
            key = %current,
            "sealed the subscriptions' secrets with the secrets key"
        );
    }
    Ok((done, payload_key))
}

/// The store's payload data key, made if it has none, and sealed again if another key than
/// the sealing key sealed it. Called under [`SEALING_LOCK`], so two servers opening together
/// never make two keys; the insert still leaves an existing row alone, and the row is read back.
async fn payload_key(client: &Client, keys: &Keyring) -> Result<PayloadKey, StoreError> {
    let what = "storing the payload data key";
    let read = async || -> Result<Option<String>, StoreError> {
        Ok(client
            .query_opt(PAYLOAD_KEY.text(), &[])
            .await
            .map_err(fault(what))?
            .map(|row| row.get(0)))
    };
    let stored = match read().await? {
        Some(stored) => stored,
        None => {
            let key = PayloadKey::generate()
                .map_err(|e| StoreError::storage("making the payload data key", e))?;
            let body = String::from_utf8_lossy(&payload_key_to_stored(&key, keys)?).into_owned();
            client
                .execute(MAKE_PAYLOAD_KEY.text(), &[&body])
                .await
                .map_err(fault(what))?;
            read().await?.ok_or_else(|| {
                StoreError::Corrupt("tenax_payload_key holds no row after one was made".into())
            })?
        }
    };
    let (key, sealed_with) = payload_key_from_stored(stored.as_bytes(), keys)?;
    if sealed_with != keys.current().id() {
        let body = String::from_utf8_lossy(&payload_key_to_stored(&key, keys)?).into_owned();
        client
            .execute(RESEAL_PAYLOAD_KEY.text(), &[&body, &stored])
            .await
            .map_err(fault(what))?;
    }
    Ok(key)
}

/// For `tenax secrets rotate-key`: how many servers use `database` now, once its schema is
/// this version's.
pub async fn servers_using(database: &super::Database) -> Result<usize, StoreError> {
    with_client(database, async |client| {
        super::schema::migrate(client).await?;
        super::servers::live(client).await
    })
    .await
}

/// For `tenax secrets rotate-key`: [`seal_at_rest`] with `keys`, on a connection of its own
/// (no server is started).
pub async fn reseal(database: &super::Database, keys: &Keyring) -> Result<Sealing, StoreError> {
    with_client(database, async |client| {
        seal_at_rest(client, keys).await.map(|(sealing, _)| sealing)
    })
    .await
}

/// Runs `work` on a connection of its own, closed after.
async fn with_client<T>(
    database: &super::Database,
    work: impl AsyncFnOnce(&mut Client) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let (mut client, connection) = database.connect().await.map_err(fault(format!(
        "connecting to PostgreSQL {}",
        database.said()
    )))?;
    let driver = tokio::spawn(connection);
    let done = work(&mut client).await;
    drop(client);
    let _ = driver.await;
    done
}

statements! {
    RECORDED_KEY = "SELECT key_id FROM tenax_secrets_key";
    SUBSCRIPTIONS = "SELECT body FROM tenax_subscriptions ORDER BY id";
    /// A subscription sealed again (`$3`), unless its body changed since it was read (`$2`).
    RESEAL = "UPDATE tenax_subscriptions SET body = $3 WHERE id = $1 AND body = $2";
    PAYLOAD_KEY = "SELECT body FROM tenax_payload_key";
    /// The first data key; a row made meanwhile is kept (and read back).
    MAKE_PAYLOAD_KEY = "INSERT INTO tenax_payload_key (body) VALUES ($1)
             ON CONFLICT (single) DO NOTHING";
    /// The data key sealed again (`$1`), unless another server changed its row since (`$2`).
    RESEAL_PAYLOAD_KEY = "UPDATE tenax_payload_key SET body = $1 WHERE body = $2";
    RECORD_KEY = "INSERT INTO tenax_secrets_key (key_id) VALUES ($1)
             ON CONFLICT (single) DO UPDATE SET key_id = excluded.key_id";
    /// A new copy of the table, without the old row versions (sent alone: not in a
    /// transaction).
    REWRITE_SUBSCRIPTIONS = "VACUUM FULL tenax_subscriptions";
}
