//! The delivery loop: a supervisor that keeps one runner per subscription, and the runners.
//!
//! A runner takes its subscription's ready deliveries as leases, never more at once than the
//! subscription's and the endpoint's concurrency bounds allow, nor faster than its throttle,
//! and sends each in its own task. Deliveries wait in the store while the bounds are full:
//! nothing is dropped. Disabled subscriptions' queues are paused, so their deliveries wait too.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::task::JoinSet;

use super::Deliveries;
use super::health::Verdict;
use super::send::Sender;
use super::throttle::Throttle;
use crate::engine::{ChangeError, Engine};
use crate::model::{AttemptResult, Subscription, SubscriptionId};
use crate::store::{Ack, StoreError, TakenJob};

/// Most deliveries one runner takes in one go.
const BATCH: usize = 64;
/// Longest a runner waits for work before it looks at its subscription again.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// How long in-flight requests may finish when the server stops; the rest are abandoned and
/// sent again after the restart.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Runs until `stop` turns true.
pub async fn run(
    engine: Arc<Engine>,
    deliveries: Arc<Deliveries>,
    mut stop: watch::Receiver<bool>,
) {
    let sender = match Sender::new(&deliveries.config) {
        Ok(sender) => Arc::new(sender),
        Err(error) => {
            tracing::error!(%error, "cannot build the webhook HTTP client; no deliveries will be sent");
            return;
        }
    };
    let mut runners: std::collections::HashMap<SubscriptionId, tokio::task::JoinHandle<()>> =
        std::collections::HashMap::new();
    loop {
        let changed = engine.signals().subscriptions.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // A runner ends when its subscription is gone: so does what is known of its health.
        runners.retain(|id, runner| {
            let running = !runner.is_finished();
            if !running {
                deliveries.health.forget(*id);
            }
            running
        });
        match engine.subscriptions(None).await {
            Ok(subscriptions) => {
                for subscription in subscriptions {
                    runners.entry(subscription.id).or_insert_with(|| {
                        tokio::spawn(run_subscription(
                            engine.clone(),
                            deliveries.clone(),
                            sender.clone(),
                            subscription.id,
                            stop.clone(),
                        ))
                    });
                }
            }
            Err(error) => tracing::error!(%error, "listing subscriptions failed; retrying"),
        }
        tokio::select! {
            () = &mut changed => {}
            () = tokio::time::sleep(IDLE_POLL) => {}
            _ = stop.wait_for(|stopping| *stopping) => break,
        }
    }
    for (_, runner) in runners {
        let _ = runner.await;
    }
}

/// One subscription's runner: ends when the subscription is deleted or the server stops.
async fn run_subscription(
    engine: Arc<Engine>,
    deliveries: Arc<Deliveries>,
    sender: Arc<Sender>,
    id: SubscriptionId,
    mut stop: watch::Receiver<bool>,
) {
    let started = Instant::now();
    // The throttle counts in time since the runner started: rates are about real time.
    let elapsed_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let lease_ms = deliveries.config.timeout_ms.saturating_add(60_000);
    let mut throttle: Option<Throttle> = None;
    let mut in_flight = JoinSet::new();
    loop {
        while in_flight.try_join_next().is_some() {}
        if *stop.borrow() {
            break;
        }
        let changed = engine.signals().subscriptions.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // Registered before looking for work, so a delivery that becomes ready meanwhile wakes
        // the runner.
        let ready = engine.signals().ready.notified();
        tokio::pin!(ready);
        ready.as_mut().enable();
        let subscription = match engine.subscription(id).await {
            Ok(Some(subscription)) => subscription,
            Ok(None) => break,
            Err(error) => {
                tracing::error!(%error, id = id.0, "reading the subscription failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(IDLE_POLL) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
        };
        let Ok(url) = url::Url::parse(&subscription.endpoint) else {
            tracing::error!(id = id.0, endpoint = %subscription.endpoint, "subscription endpoint is not a URL");
            break;
        };
        if !subscription.enabled {
            tokio::select! {
                () = &mut changed => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        // Limits are for the whole cluster: this server keeps its share.
        let servers = engine.servers();
        // Room under the subscription's own bound; when full, wait for a request to end.
        let own_bound = subscription.max_concurrency.map_or(usize::MAX, |n| {
            usize::try_from(super::share(n, servers)).unwrap_or(usize::MAX)
        });
        let room = own_bound.saturating_sub(in_flight.len()).min(BATCH);
        if room == 0 {
            tokio::select! {
                _ = in_flight.join_next() => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        // Room under the endpoint's bound: wait for one permit, then take what is free.
        let endpoint = deliveries.endpoint_bound(&url, servers);
        let first = tokio::select! {
            permit = endpoint.clone().acquire_owned() => permit,
            _ = stop.changed() => continue,
        };
        let Ok(first) = first else { break };
        let mut permits: Vec<OwnedSemaphorePermit> = vec![first];
        while permits.len() < room {
            match endpoint.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        // The throttle: as many as its tokens allow; with none, wait for the next one.
        let rate = subscription
            .throttle_per_second
            .map(|r| super::share(r, servers));
        if let Some(rate) = rate.and_then(NonZeroU32::new) {
            let now = elapsed_ms();
            let bucket = throttle.get_or_insert_with(|| Throttle::new(rate, now));
            if bucket.rate() != rate {
                bucket.set_rate(rate, now);
            }
            let granted = bucket.take(permits.len(), now);
            if granted == 0 {
                let wait = bucket.next_token_at(now).saturating_sub(now).max(1);
                drop(permits);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            permits.truncate(granted);
        } else {
            throttle = None;
        }
        // Takes what is ready now, without waiting: an idle runner must not sit on the
        // endpoint's permits (its other subscriptions would wait for them) nor on throttle
        // tokens, and must see changes to its subscription at once.
        let taken = engine.take_deliveries(id, permits.len(), lease_ms).await;
        let jobs = match taken {
            Ok(jobs) => jobs,
            Err(error) => {
                tracing::error!(%error, id = id.0, "taking deliveries failed");
                tokio::time::sleep(IDLE_POLL).await;
                continue;
            }
        };
        if let Some(bucket) = throttle.as_mut() {
            bucket.give_back(permits.len().saturating_sub(jobs.len()));
        }
        if jobs.is_empty() {
            drop(permits);
            tokio::select! {
                () = &mut ready => {}
                () = &mut changed => {}
                () = tokio::time::sleep(IDLE_POLL) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let subscription = Arc::new(subscription);
        for (job, permit) in jobs.into_iter().zip(permits) {
            in_flight.spawn(deliver(
                engine.clone(),
                deliveries.clone(),
                sender.clone(),
                subscription.clone(),
                job,
                permit,
            ));
        }
    }
    // Lets requests in flight finish briefly; abandoned ones keep their leases, which expire
    // (or vanish with the process), and are sent again.
    let _ = tokio::time::timeout(STOP_GRACE, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    in_flight.abort_all();
}

/// Sends one delivery and records how it went.
async fn deliver(
    engine: Arc<Engine>,
    deliveries: Arc<Deliveries>,
    sender: Arc<Sender>,
    subscription: Arc<Subscription>,
    job: TakenJob,
    permit: OwnedSemaphorePermit,
) {
    let now = engine.now_ms();
    let attempt = sender.attempt(&subscription, &job, now).await;
    drop(permit);
    let failed = attempt.result != AttemptResult::Delivered;
    let ack = Ack {
        id: job.id,
        lease: job.lease_token,
    };
    match engine.finish_delivery(subscription.id, ack, attempt).await {
        Ok(_) => {}
        // Deleted, replayed or expired meanwhile: someone else owns it now.
        Err(
            error @ (StoreError::NotFound(_)
            | StoreError::LeaseLost { .. }
            | StoreError::NotInFlight { .. }),
        ) => tracing::debug!(%error, "delivery changed while it was sent"),
        Err(error) => tracing::error!(%error, delivery = job.id.0, "recording a delivery failed"),
    }
    let disable_after = subscription
        .auto_disable_after_ms
        .unwrap_or(deliveries.config.auto_disable_after_ms);
    let verdict = deliveries
        .health
        .record(&subscription, failed, now, disable_after);
    // Atomic changes of the health fields alone: a concurrent update of the subscription's
    // other fields (through the API) is kept, and so are these.
    let patched = match verdict {
        Verdict::Unchanged => return,
        Verdict::Marks(marks) => {
            engine
                .update_subscription(subscription.id, |current| {
                    let mut s = current.clone();
                    s.health = marks;
                    Ok::<_, StoreError>(Some(s))
                })
                .await
        }
        Verdict::Disable(marks, reason) => {
            tracing::warn!(
                subscription = subscription.id.0,
                %reason,
                "subscription disabled"
            );
            engine
                .update_subscription(subscription.id, |current| {
                    let mut s = current.clone();
                    s.health = marks;
                    s.enabled = false;
                    s.disabled_reason = Some(reason.clone());
                    Ok::<_, StoreError>(Some(s))
                })
                .await
        }
    };
    match patched {
        Ok(_) | Err(ChangeError::Store(StoreError::NoSubscription(_))) => {}
        Err(ChangeError::Store(error) | ChangeError::Refused(error)) => {
            tracing::warn!(%error, id = subscription.id.0, "storing subscription health failed");
        }
    }
}
