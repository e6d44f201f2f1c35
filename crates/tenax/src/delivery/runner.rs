//! The delivery loop: a supervisor that keeps one runner per subscription, and the runners.
//!
//! A runner takes its subscription's ready deliveries as leases, never more at once than the
//! subscription's and the endpoint's concurrency bounds allow, nor faster than its throttle,
//! and sends each in its own task. Deliveries wait in the store while the bounds are full:
//! nothing is dropped. Disabled subscriptions' queues are paused, so their deliveries wait too.
//! So do the deliveries of an endpoint that asked for a pause or whose circuit breaker is open
//! (but for the breaker's one probe), and retries over their subscription's retry budget:
//! none of them uses an attempt ([`super::backpressure`], [`super::budget`]).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::task::JoinSet;

use super::Deliveries;
use super::backpressure::{self, Gate, Hold, ProbeEnd};
use super::budget::is_retry;
use super::health::Verdict;
use super::send::Sender;
use super::throttle::Throttle;
use crate::clock::UnixMs;
use crate::engine::{ChangeError, Engine};
use crate::metrics::webhooks::HeldReason;
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
    let watcher = tokio::spawn(watch_endpoints(engine.clone(), deliveries.clone()));
    loop {
        let changed = engine.signals().subscriptions.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // A runner ends when its subscription is gone: so does what is known of its health.
        runners.retain(|id, runner| {
            let running = !runner.is_finished();
            if !running {
                deliveries.health.forget(*id);
                deliveries.budgets.forget(*id);
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
    // Awaited once aborted: an aborted task is dropped only when the runtime gets to it, and
    // until then it holds the engine, and with it the store (whose file stays locked).
    watcher.abort();
    let _ = watcher.await;
}

/// Marks this server's endpoint states for reading again whenever the store says one changed.
async fn watch_endpoints(engine: Arc<Engine>, deliveries: Arc<Deliveries>) {
    loop {
        // Registered before marking, so a change in between is heard.
        let changed = engine.signals().endpoints.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        deliveries.endpoints.invalidate();
        changed.await;
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
        let endpoint_changed = engine.signals().endpoints.notified();
        tokio::pin!(endpoint_changed);
        endpoint_changed.as_mut().enable();
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
        // The endpoint's pause and circuit breaker, stored for every server: while they hold,
        // nothing is taken; once the breaker's cool-down is over, one probe is.
        let origin: Arc<str> = Arc::from(url.origin().ascii_serialization());
        let now = engine.now_ms();
        let gate = match deliveries.endpoints.gate(&engine, &origin, now).await {
            Ok(gate) => gate,
            Err(error) => {
                tracing::error!(%error, id = id.0, "reading the endpoint's state failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(IDLE_POLL) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
        };
        let probe = match gate {
            Gate::Send => None,
            Gate::Wait { until_ms, .. } => {
                tokio::select! {
                    () = engine.clock.sleep_toward(until_ms, IDLE_POLL) => {}
                    () = &mut endpoint_changed => {}
                    () = &mut changed => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            Gate::Probe => match deliveries
                .endpoints
                .claim_probe(&engine, &origin, now)
                .await
            {
                Some(probe) => Some(probe),
                // Another runner (or server) sends it: look again.
                None => continue,
            },
        };
        let room = if probe.is_some() { 1 } else { room };
        // Room under the endpoint's bound: wait for one permit, then take what is free.
        let endpoint = deliveries.endpoint_bound(&url, servers);
        let first = tokio::select! {
            permit = endpoint.clone().acquire_owned() => permit,
            _ = stop.changed() => {
                unsent(&engine, &deliveries, &origin, probe).await;
                continue;
            }
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
                unsent(&engine, &deliveries, &origin, probe).await;
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
                unsent(&engine, &deliveries, &origin, probe).await;
                tokio::time::sleep(IDLE_POLL).await;
                continue;
            }
        };
        if let Some(bucket) = throttle.as_mut() {
            bucket.give_back(permits.len().saturating_sub(jobs.len()));
        }
        if jobs.is_empty() {
            drop(permits);
            unsent(&engine, &deliveries, &origin, probe).await;
            tokio::select! {
                () = &mut ready => {}
                () = &mut changed => {}
                () = tokio::time::sleep(IDLE_POLL) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let subscription = Arc::new(subscription);
        let now = engine.now_ms();
        let mut over_budget = Vec::new();
        for (job, permit) in jobs.into_iter().zip(permits) {
            // A retry over the retry budget waits; the probe goes whatever the budget.
            let admitted = deliveries.budgets.admit(
                &subscription,
                is_retry(job.attempt, job.trigger),
                servers,
                now,
            );
            match admitted {
                Err(until_ms) if probe.is_none() => {
                    drop(permit);
                    over_budget.push((job, until_ms));
                }
                _ => {
                    in_flight.spawn(deliver(
                        Sending {
                            engine: engine.clone(),
                            deliveries: deliveries.clone(),
                            sender: sender.clone(),
                            subscription: subscription.clone(),
                            origin: origin.clone(),
                            probe,
                        },
                        job,
                        permit,
                    ));
                }
            }
        }
        for (job, until_ms) in over_budget {
            hold(&engine, id, &job, until_ms, HeldReason::RetryBudget).await;
        }
    }
    // Lets requests in flight finish briefly; abandoned ones keep their leases, which expire
    // (or vanish with the process), and are sent again.
    let _ = tokio::time::timeout(STOP_GRACE, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    // Aborted and waited for, so that none still holds the engine once the runner has ended.
    in_flight.shutdown().await;
}

/// A probe claimed and then not sent: another may go at once.
async fn unsent(engine: &Engine, deliveries: &Deliveries, origin: &str, probe: Option<u64>) {
    if let Some(probe) = probe {
        let now = engine.now_ms();
        deliveries
            .endpoints
            .end_probe(engine, origin, probe, &ProbeEnd::Unsent, now)
            .await;
    }
}

/// Puts a taken delivery back, unsent: it waits until `until_ms` and uses no attempt.
async fn hold(
    engine: &Engine,
    subscription: SubscriptionId,
    job: &TakenJob,
    until_ms: UnixMs,
    reason: HeldReason,
) {
    let ack = Ack {
        id: job.id,
        lease: job.lease_token,
    };
    let why = reason.name();
    tracing::debug!(delivery = job.id.0, until_ms, why, "delivery held back");
    match engine
        .hold_delivery(subscription, ack, until_ms, reason)
        .await
    {
        // Deleted, replayed or expired meanwhile: someone else owns it now.
        Ok(())
        | Err(
            StoreError::NotFound(_) | StoreError::LeaseLost { .. } | StoreError::NotInFlight { .. },
        ) => {}
        // Its lease runs out and it is taken again (an expired lease counts as an attempt).
        Err(error) => {
            tracing::error!(%error, delivery = job.id.0, "holding back a delivery failed")
        }
    }
}

/// What a delivery's task needs besides the delivery.
struct Sending {
    engine: Arc<Engine>,
    deliveries: Arc<Deliveries>,
    sender: Arc<Sender>,
    subscription: Arc<Subscription>,
    origin: Arc<str>,
    /// The endpoint's breaker probe, when this delivery is it.
    probe: Option<u64>,
}

/// Sends one delivery and records how it went.
async fn deliver(send: Sending, job: TakenJob, permit: OwnedSemaphorePermit) {
    let Sending {
        engine,
        deliveries,
        sender,
        subscription,
        origin,
        probe,
    } = send;
    let now = engine.now_ms();
    // A pause or an opened breaker that came since the runner's gate holds this one back too
    // (the runner may have waited for a permit in between, while the breaker opened): the
    // states are read again if they may have changed, as the gate reads them.
    if probe.is_none() {
        let gate = match deliveries.endpoints.gate(&engine, &origin, now).await {
            Ok(gate) => gate,
            // The store did not answer: go by what was last read.
            Err(_) => backpressure::gate(deliveries.endpoints.known(&origin).as_ref(), now),
        };
        if let Gate::Wait { until_ms, why } = gate {
            drop(permit);
            let reason = match why {
                Hold::Paused => HeldReason::Paused,
                Hold::Open | Hold::Probing => HeldReason::Breaker,
            };
            hold(&engine, subscription.id, &job, until_ms, reason).await;
            return;
        }
    }
    // Stamped as it leaves (the gate may have waited for a change of the endpoint's state):
    // the attempt's time, its signature's timestamp, and the health it tells of.
    let now = engine.now_ms();
    let attempt = sender.attempt(&subscription, &job, now).await;
    drop(permit);
    let answered_at = engine.now_ms();
    deliveries
        .endpoints
        .record(
            &engine,
            &origin,
            subscription.id,
            &attempt,
            probe,
            answered_at,
        )
        .await;
    // The subscription's health first: a disable (or a failure mark) is stored before the
    // retry is scheduled, so the retry finds the subscription disabled however slow the
    // store's commits are (stored after it, a retry due sooner than the commit went out).
    let failed = attempt.result != AttemptResult::Delivered;
    record_health(&engine, &deliveries, &subscription, failed, now).await;
    let ack = Ack {
        id: job.id,
        lease: job.lease_token,
    };
    match engine
        .finish_delivery(
            &subscription,
            ack,
            attempt,
            answered_at,
            job.traceparent.as_deref(),
        )
        .await
    {
        Ok(_) => {}
        // Deleted, replayed or expired meanwhile: someone else owns it now.
        Err(
            error @ (StoreError::NotFound(_)
            | StoreError::LeaseLost { .. }
            | StoreError::NotInFlight { .. }),
        ) => tracing::debug!(%error, "delivery changed while it was sent"),
        Err(error) => tracing::error!(%error, delivery = job.id.0, "recording a delivery failed"),
    }
}

/// Takes in whether an attempt of `subscription` at `now_ms` failed, and stores what that
/// changes of its health: failure marks, or its automatic disabling.
async fn record_health(
    engine: &Engine,
    deliveries: &Deliveries,
    subscription: &Subscription,
    failed: bool,
    now_ms: UnixMs,
) {
    let disable_after = subscription
        .auto_disable_after_ms
        .unwrap_or(deliveries.config.auto_disable_after_ms);
    let verdict = deliveries
        .health
        .record(subscription, failed, now_ms, disable_after);
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
