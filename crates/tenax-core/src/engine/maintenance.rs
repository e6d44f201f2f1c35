//! The maintenance loop: promotes scheduled jobs when due, enqueues the jobs of schedules'
//! ticks, expires leases, deletes expired jobs and subscriptions, purges finished jobs past
//! their retention, and forgets the activity counts of minutes over a day old. It sleeps until
//! the next known due time (at most a second), and wakes early when an earlier time is
//! scheduled.
//!
//! It works only while the store grants this server the lead ([`crate::store::StoreLifecycle::lead`]),
//! so that on a store shared by several servers one of them does it at a time. The embedded
//! store always grants it. Every server, leading or not, adds its activity counts to the store
//! every [`ACTIVITY_FLUSH_EVERY`] and records when tokens were last used.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Engine;
use crate::model::activity::{MINUTE_MS, MINUTES, window};

/// The most work one pass does per kind, so one pass never holds the store for long.
const BATCH: usize = 50_000;
/// Retention runs at most this often.
const PURGE_EVERY_MS: u64 = 1_000;
/// The longest the loop sleeps.
const MAX_SLEEP_MS: u64 = 1_000;

/// Tokens' last use is written at most this often.
const TOKEN_USE_EVERY: Duration = Duration::from_secs(60);

/// How often a server adds its activity counts to the store: another server's figures lag
/// this server's by about this much. Keep in step with docs/postgres.md.
pub const ACTIVITY_FLUSH_EVERY: Duration = Duration::from_secs(2);

/// Runs until `shutdown` turns true.
pub async fn run(engine: Arc<Engine>, mut shutdown: watch::Receiver<bool>) {
    let mut last_purge = 0;
    let mut token_use_flushed = tokio::time::Instant::now();
    let mut activity_flushed = tokio::time::Instant::now();
    loop {
        if activity_flushed.elapsed() >= ACTIVITY_FLUSH_EVERY {
            activity_flushed = tokio::time::Instant::now();
            if let Err(error) = engine.flush_activity().await {
                tracing::warn!(%error, "adding this server's activity counts to the store failed; they are kept for the next try");
            }
        }
        if token_use_flushed.elapsed() >= TOKEN_USE_EVERY {
            token_use_flushed = tokio::time::Instant::now();
            if let Err(error) = engine.flush_token_use().await {
                tracing::warn!(%error, "recording when tokens were last used failed");
            }
        }
        let schedule = engine.signals().schedule.notified();
        tokio::pin!(schedule);
        schedule.as_mut().enable();

        let leading = match engine.store.lead().await {
            Ok(leading) => leading,
            Err(error) => {
                tracing::warn!(%error, "asking the store for the maintenance lead failed");
                false
            }
        };
        engine.this_server.set_leads(leading);
        let now = engine.now_ms();
        let busy = leading && pass(&engine, now, &mut last_purge).await;
        if *shutdown.borrow() {
            return;
        }
        let sleep_ms = if busy {
            0
        } else if !leading {
            MAX_SLEEP_MS
        } else {
            let next = match engine.store.next_wakeup().await {
                Ok(next) => next.unwrap_or(u64::MAX),
                Err(error) => {
                    tracing::warn!(%error, "asking the store for its next due time failed");
                    u64::MAX
                }
            };
            next.saturating_sub(engine.now_ms()).min(MAX_SLEEP_MS)
        };
        // A manual clock does not move by itself: poll it often so tests that advance it see
        // promotions promptly.
        let sleep_ms = if engine.clock.is_manual() {
            sleep_ms.min(5)
        } else {
            sleep_ms
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
            () = &mut schedule => {}
            _ = shutdown.changed() => {
                // Last uses seen since the last flush are not lost by a clean stop.
                if let Err(error) = engine.flush_token_use().await {
                    tracing::warn!(%error, "recording when tokens were last used failed");
                }
                return;
            }
        }
    }
}

/// One pass at time `now`; true if a batch was full (more work is waiting).
pub async fn pass(engine: &Engine, now: u64, last_purge: &mut u64) -> bool {
    let promoted = match engine.store.promote_due(now, BATCH).await {
        Ok(n) => n,
        Err(error) => {
            tracing::error!(%error, "promoting due jobs failed");
            0
        }
    };
    match engine.fire_due_schedules(now).await {
        Ok(0) => {}
        Ok(enqueued) => tracing::debug!(enqueued, "schedules' ticks enqueued their jobs"),
        Err(error) => tracing::error!(%error, "handling the schedules' ticks failed"),
    }
    let expired = match engine.expire_leases(now, BATCH).await {
        Ok(n) => n,
        Err(error) => {
            tracing::error!(%error, "expiring leases failed");
            0
        }
    };
    if expired > 0 {
        tracing::info!(expired, "leases expired; jobs returned to ready");
    }
    let gone = match engine.store.expire_jobs(now, BATCH).await {
        Ok(n) => n,
        Err(error) => {
            tracing::error!(%error, "deleting expired jobs failed");
            0
        }
    };
    let mut purged = 0;
    if now.saturating_sub(*last_purge) >= PURGE_EVERY_MS {
        // Once a minute: the minutes before the day the activity is read over.
        if now / MINUTE_MS != *last_purge / MINUTE_MS {
            let (oldest, _) = window(MINUTES, now);
            if let Err(error) = engine.store.purge_activity(oldest).await {
                tracing::error!(%error, "forgetting old activity counts failed");
            }
        }
        *last_purge = now;
        match engine.expire_subscriptions().await {
            Ok(expired) if !expired.is_empty() => {
                let ids: Vec<String> = expired.iter().map(ToString::to_string).collect();
                tracing::info!(
                    subscriptions = %ids.join(","),
                    "subscriptions expired and were deleted"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "deleting expired subscriptions failed"),
        }
        // Leases the book still holds past the longest an attempt can be held ended without
        // the engine (their jobs were deleted in flight, or a stream closed).
        let held_since = now.saturating_sub(engine.settings.max_attempt_ms.saturating_mul(2));
        engine.metrics.leases.forget_taken_before(held_since);
        if let Some(tracing) = &engine.tracing {
            tracing.book.forget_taken_before(held_since);
        }
        let completed_before = now.saturating_sub(engine.settings.completed_retention_ms);
        let dead_before = now.saturating_sub(engine.settings.dead_retention_ms);
        match engine
            .store
            .purge_finished(completed_before, dead_before, BATCH)
            .await
        {
            Ok(n) => purged = n,
            Err(error) => tracing::error!(%error, "purging finished jobs failed"),
        }
    }
    promoted == BATCH || expired == BATCH || gone == BATCH || purged == BATCH
}
