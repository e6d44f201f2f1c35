//! The servers sharing the database: each writes its row every [`BEAT`]; those seen within
//! [`ALIVE`] are counted, so that a limit set for the whole cluster can be shared among them
//! (see [`crate::store::StoreLifecycle::servers`]). Rows of servers gone a minute are removed
//! by whichever server sees them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::Pool;
use super::transitions::{execute, query};

/// How often a server writes its row.
pub const BEAT: Duration = Duration::from_secs(1);
/// A server not seen for this long is not counted. Keep in step with docs/postgres.md.
const ALIVE: &str = "5 seconds";

/// Writes this server's row and counts the live servers into `count`, every [`BEAT`].
pub async fn beat(pool: Pool, server: i64, count: Arc<AtomicUsize>) {
    let mut ticks = tokio::time::interval(BEAT);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match once(&pool, server).await {
            Ok(live) => count.store(live.max(1), Ordering::Relaxed),
            Err(error) => {
                tracing::debug!(%error, "counting the servers failed; keeping the last count");
            }
        }
    }
}

async fn once(pool: &Pool, server: i64) -> Result<usize, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    execute(
        &client,
        "INSERT INTO tenax_servers (id, seen_at) VALUES ($1, now())
         ON CONFLICT (id) DO UPDATE SET seen_at = now()",
        &[&server],
    )
    .await
    .map_err(|e| super::fault("writing this server's row")(e).to_string())?;
    let rows = query(
        &client,
        &format!(
            "WITH gone AS (
                 DELETE FROM tenax_servers WHERE seen_at < now() - interval '1 minute'
             )
             SELECT count(*) FROM tenax_servers WHERE seen_at > now() - interval '{ALIVE}'"
        ),
        &[],
    )
    .await
    .map_err(|e| super::fault("counting the servers")(e).to_string())?;
    Ok(rows
        .first()
        .and_then(|r| usize::try_from(r.get::<_, i64>(0)).ok())
        .unwrap_or(1))
}

/// Removes this server's row: it is gone at once rather than after [`ALIVE`].
pub async fn leave(pool: &Pool, server: i64) {
    if let Ok(client) = pool.get().await {
        let _ = execute(
            &client,
            "DELETE FROM tenax_servers WHERE id = $1",
            &[&server],
        )
        .await;
    }
}

/// How many servers wrote their row within [`ALIVE`]: the servers using the database now.
pub async fn live(client: &tokio_postgres::Client) -> Result<usize, crate::store::StoreError> {
    let row = client
        .query_one(
            &format!(
                "SELECT count(*) FROM tenax_servers WHERE seen_at > now() - interval '{ALIVE}'"
            ),
            &[],
        )
        .await
        .map_err(super::fault("counting the servers"))?;
    Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}
