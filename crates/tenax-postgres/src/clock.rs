//! Samples PostgreSQL's clock for this server's estimate of it ([`DatabaseTime`]): once when
//! the store opens, before anything is decided, then every [`SAMPLE_EVERY`]. Each round asks a
//! few times on one connection and offers every answer: the estimate keeps the one with the
//! tightest bound (the shortest round trip), so one slow answer does not spoil it. A round
//! that fails (the database cannot be reached) changes nothing: the estimate counts on from
//! its last sample.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenax_core::clock::database::{DatabaseTime, Sample};

use super::Pool;
use super::statements::statements;

/// How often the clock is sampled. Between samples the estimate's bound grows by
/// [`tenax_core::clock::database::DRIFT_PPM`] of the time: 2 ms at most over this.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Questions per round.
const ROUND: usize = 3;

statements! {
    /// The database's time, in microseconds since the Unix epoch, read when the statement
    /// runs (not when its transaction began, as `now()` would be).
    ASK = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8";
}

/// One round of samples on `client`, offered to `time`.
pub async fn round(
    client: &tokio_postgres::Client,
    time: &DatabaseTime,
) -> Result<(), tokio_postgres::Error> {
    // Prepared first, so that each round trip measured is one statement's.
    let statement = client.prepare(ASK.text()).await?;
    for _ in 0..ROUND {
        let sent = Instant::now();
        let row = client.query_one(&statement, &[]).await?;
        let received = Instant::now();
        time.offer(Sample {
            sent,
            received,
            database_us: row.try_get(0)?,
        });
    }
    Ok(())
}

/// Samples every [`SAMPLE_EVERY`], until the task is aborted (when the store closes).
pub async fn follow(pool: Pool, time: Arc<DatabaseTime>) {
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once, and the store has just sampled.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let sampled = match pool.get().await {
            Ok(client) => round(&client, &time)
                .await
                .map_err(|e| super::fault("sampling PostgreSQL's clock")(e).to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = sampled {
            // The other work on the database says so more loudly.
            tracing::debug!(%error, "sampling PostgreSQL's clock failed; counting on from the last sample");
        }
    }
}
