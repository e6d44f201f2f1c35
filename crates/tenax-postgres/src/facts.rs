//! What an enqueue needs of a queue (its settings and subscribers), cached by each server.
//!
//! Every enqueue needs them, and they rarely change: read from the database each time they
//! cost two statements per request, more than the insert itself. Each server keeps them per
//! queue with the version of `tenax_facts` they were read at; every change of a queue's
//! settings or of the subscriptions advances that version in its own transaction, and the
//! insert statements store jobs only while the version their facts were read at is current
//! (`StoreError::FactsChanged` otherwise: the cache is dropped and the engine reads again).
//! So a cached answer is never trusted past a change committed before the insert, on any
//! server, and a change costs each server one refused insert, not a round trip per request.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::GenericClient;
use tenax_core::model::SubscriptionId;
use tenax_core::store::{FactsSeen, QueueFacts, StoreError};

use super::fault;
use super::rows::{queue_config_of, unid};
use super::statements::statements;
use super::transitions::query;

statements! {
    /// Advances the version: run in the transaction of every change of a queue's settings or
    /// of which subscriptions a queue has. Where such a change is one statement (deleting a
    /// queue, storing or deleting a subscription), the same update is a part of it (`WITH
    /// advanced AS`).
    pub ADVANCE = "UPDATE tenax_facts SET version = version + 1";
    /// A queue's facts and their version: one statement, so one snapshot.
    READ = "SELECT (SELECT version FROM tenax_facts),
                (SELECT config FROM tenax_queues WHERE name = $1),
                ARRAY(SELECT id FROM tenax_subscriptions WHERE queue = $1 ORDER BY id)";
}

/// The most queues whose facts a server keeps; past it, the cache starts again empty.
const MOST_QUEUES: usize = 4096;

#[derive(Debug, Default)]
pub struct FactsCache {
    queues: parking_lot::Mutex<HashMap<String, Arc<QueueFacts>>>,
}

impl FactsCache {
    pub fn get(&self, queue: &str) -> Option<Arc<QueueFacts>> {
        self.queues.lock().get(queue).cloned()
    }

    pub fn keep(&self, queue: &str, facts: Arc<QueueFacts>) {
        let mut queues = self.queues.lock();
        if queues.len() >= MOST_QUEUES && !queues.contains_key(queue) {
            queues.clear();
        }
        queues.insert(queue.to_owned(), facts);
    }

    /// Drops every entry: some may be older than the current version.
    pub fn forget(&self) {
        self.queues.lock().clear();
    }
}

/// `queue`'s facts as stored now, with their version: one statement, so one snapshot.
pub async fn read<C: GenericClient>(client: &C, queue: &str) -> Result<QueueFacts, StoreError> {
    let rows = query(client, &READ, &[&queue])
        .await
        .map_err(fault("reading a queue's settings and subscribers"))?;
    let missing = || StoreError::Corrupt("tenax_facts has no row".into());
    let row = rows.first().ok_or_else(missing)?;
    let version: i64 = row.get::<_, Option<i64>>(0).ok_or_else(missing)?;
    let config = row
        .get::<_, Option<&str>>(1)
        .map(queue_config_of)
        .transpose()?;
    let subscribers = row
        .get::<_, Vec<i64>>(2)
        .into_iter()
        .map(|s| SubscriptionId(unid(s)))
        .collect();
    Ok(QueueFacts {
        config,
        subscribers,
        seen: FactsSeen(unid(version)),
    })
}
