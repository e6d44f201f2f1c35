//! The last count of the backlog (jobs by queue and state), kept between scrapes.
//!
//! The store's count may be costly on a large shared database: it is made again only once the
//! last one is older than [`RECOUNT_FACTOR`] times the time it took, so counting takes at most
//! about 1/20 of the time whatever the scrape interval and the table sizes (the embedded store
//! counts from memory in microseconds, so every scrape counts anew). Concurrent scrapes share
//! one count. The scrape says how to count (`api/scrape.rs`, through the engine); this module
//! says when.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::UnixMs;
use crate::model::Backlog;

/// A count is reused until it is this many times as old as it took to make.
pub const RECOUNT_FACTOR: u32 = 20;

/// Each queue's backlog, and when its first job in line became ready.
pub type Counts = Vec<(Backlog, Option<UnixMs>)>;

#[derive(Debug, Default)]
pub struct BacklogCache {
    last: tokio::sync::Mutex<Option<Counted>>,
}

/// One count, and when it was made.
#[derive(Debug, Clone)]
pub struct Counted {
    pub at: Instant,
    pub took: Duration,
    pub backlog: Arc<Counts>,
}

impl BacklogCache {
    /// The backlog, counted now by `count` unless the last count is still young enough; `None`
    /// if the store could not count and there is no earlier count. `count` is polled only when
    /// a count is due, under the lock, so concurrent scrapes wait for one count.
    pub async fn get(
        &self,
        count: impl Future<Output = Result<Counts, impl std::fmt::Display>>,
    ) -> Option<Counted> {
        let mut last = self.last.lock().await;
        let fresh = last
            .as_ref()
            .is_some_and(|c| c.at.elapsed() < c.took * RECOUNT_FACTOR);
        if !fresh {
            let started = Instant::now();
            match count.await {
                Ok(backlog) => {
                    *last = Some(Counted {
                        at: Instant::now(),
                        took: started.elapsed(),
                        backlog: Arc::new(backlog),
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "counting jobs for the metrics failed");
                }
            }
        }
        last.clone()
    }
}
