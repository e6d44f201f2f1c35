//! Moving queues between pools (`tenax queues move`; docs/postgres.md, "Moving queues"): the
//! order of the steps, and what makes a move safe to run again. Each step's statements are
//! `tenax_postgres::moves`'.
//!
//! 1. The catalogue records the move, and every server loads it: from then on a server looks
//!    up each id of the source in the source's forwards before it routes it there.
//! 2. The source fences the queues: no row of them is written there again (a server routing
//!    by the old placement is answered "unavailable", and tries again).
//! 3. The rows are copied to the target, and replaced on the source by forwards.
//! 4. The catalogue places the queues on the target and says the move is finished; servers
//!    read placements again when they load it.
//!
//! A move that stops anywhere leaves its queues fenced (their writes unavailable) until it is
//! run again, which picks it up where it stopped: the catalogue keeps it as unfinished, and
//! the source remembers whether it copied them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenax_core::model::pool::{Moved, PoolError};
use tenax_core::model::subscription::delivery_queue;
use tenax_core::store::{StoreError, SubscriptionStore};
use tenax_postgres::moves::{MoveRecord, copy_moved};

use super::{Member, PooledStore};

/// How long a move waits for every server to load it before fencing: past it, a server
/// that did not has gone longer without the catalogue than it routes on what it knew. Keep in
/// step with the catalogue's `placeable_after!`.
const LOADED_WITHIN: Duration = Duration::from_secs(10);

/// What a move is to do.
enum Plan {
    /// Nothing to copy: none of the queues holds anything away from the target (they are
    /// placed there now).
    Nothing,
    Copy(MoveRecord),
}

impl PooledStore {
    pub(crate) async fn move_queues(
        &self,
        queues: Vec<String>,
        to: &str,
    ) -> Result<Moved, StoreError> {
        self.confirm().await?;
        let pools = self.pools.read().clone();
        let target = pools
            .slots
            .iter()
            .find(|s| s.member.number != 0 && s.name == to)
            .ok_or_else(|| StoreError::Pool(PoolError::NoPool(to.to_owned())))?;
        if !target.ready {
            return Err(StoreError::unavailable(
                format!("pool {to:?} does not take queues yet"),
                std::io::Error::other(
                    "a new pool takes queues once every server has loaded it: a few seconds",
                ),
            ));
        }
        let target_number = target.member.number;
        let record = match self.catalogue.unfinished_move().await? {
            Some(record) => {
                // The same move asked again (its queues on the target already left out).
                let same = record.target == target_number
                    && record.queues.iter().all(|q| queues.contains(q));
                if !same {
                    return Err(self.unfinished(record).await);
                }
                record
            }
            None => match self.plan(&queues, target_number).await? {
                Plan::Nothing => {
                    return Ok(Moved {
                        queues,
                        from: None,
                        to: to.to_owned(),
                        ..Moved::default()
                    });
                }
                Plan::Copy(record) => match self.catalogue.begin_move(record).await? {
                    Some(record) => record,
                    None => match self.catalogue.unfinished_move().await? {
                        // Another began meanwhile.
                        Some(other) => return Err(self.unfinished(other).await),
                        None => return Err(moved_meanwhile()),
                    },
                },
            },
        };
        self.confirm().await?;
        self.await_loaded().await?;
        let source = self.numbered(record.source).await?;
        let target = self.numbered(record.target).await?;
        source.fence_moved(&record.fenced, record.target).await?;
        let copied = copy_moved(&source, &target, &record.fenced, record.target).await?;
        self.catalogue.finish_move(&record, copied.below).await?;
        self.confirm().await?;
        let (from, _) = self.pool_named(record.source).await;
        tracing::info!(queues = ?record.queues, from, to, jobs = copied.jobs,
                       subscriptions = copied.subscriptions, "queues moved");
        Ok(Moved {
            queues: record.queues,
            from: Some(from),
            to: to.to_owned(),
            jobs: copied.jobs,
            subscriptions: copied.subscriptions,
        })
    }

    /// The move of `queues` to pool `target`: from the one pool they are on, with their
    /// deliveries' queues, refused while anything ties them to a queue that stays.
    async fn plan(&self, queues: &[String], target: u8) -> Result<Plan, StoreError> {
        let mut source: Option<(Arc<Member>, &String)> = None;
        let mut placed = Vec::new();
        for queue in queues {
            let member = match self.placed(queue).await? {
                Some(member) => member,
                // Never written to: placed on the target now, with nothing to move, unless the
                // catalogue's database holds something of it from before the pools.
                None if self.held_by_catalogue(queue).await? => {
                    let number = self.catalogue.place(queue, 0).await?;
                    self.numbered(number).await?
                }
                None => {
                    let seen = self.placed_generation();
                    let number = self.catalogue.place(queue, target).await?;
                    self.remember(queue, number, seen);
                    if number == target {
                        continue;
                    }
                    // Placed elsewhere meanwhile, by another server.
                    self.numbered(number).await?
                }
            };
            if member.number == target {
                continue;
            }
            match &source {
                Some((first, name)) if first.number != member.number => {
                    return Err(StoreError::Pool(PoolError::MoveAcrossPools {
                        first: (*name).clone(),
                        second: queue.clone(),
                    }));
                }
                Some(_) => {}
                None => source = Some((member.clone(), queue)),
            }
            placed.push(queue.clone());
        }
        let Some((source, _)) = source else {
            return Ok(Plan::Nothing);
        };
        let mut fenced = placed.clone();
        for queue in &placed {
            for subscription in source.subscriptions(Some(queue)).await? {
                fenced.push(delivery_queue(subscription.id));
            }
        }
        if let Some(link) = source.move_links(&fenced).await?.into_iter().next() {
            return Err(StoreError::Pool(PoolError::Tied {
                queue: link.queue,
                other: link.other,
                how: link.how.to_owned(),
            }));
        }
        Ok(Plan::Copy(MoveRecord {
            id: 0,
            queues: placed,
            fenced,
            source: source.number,
            target,
        }))
    }

    /// Waits until every live server has loaded the pools this one has (so each knows of the
    /// move), or [`LOADED_WITHIN`].
    async fn await_loaded(&self) -> Result<(), StoreError> {
        let version = self.pools.read().version;
        let began = Instant::now();
        while !self.catalogue.all_loaded(version).await? && began.elapsed() < LOADED_WITHIN {
            // Servers say so in the catalogue only: there is nothing to be told by.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The refusal of a move while `record` is not finished.
    async fn unfinished(&self, record: MoveRecord) -> StoreError {
        let (to, _) = self.pool_named(record.target).await;
        StoreError::Pool(PoolError::MoveUnfinished {
            queues: record.queues,
            to,
        })
    }
}

fn moved_meanwhile() -> StoreError {
    StoreError::unavailable(
        "moving queues",
        std::io::Error::other("another move began and finished meanwhile: run this one again"),
    )
}
