//! The delivery loop: a supervisor that keeps one runner per subscription, and the runners.
//!
//! A runner takes its subscription's ready deliveries as leases, never more at once than the
//! subscription's and the endpoint's concurrency bounds allow, nor faster than its throttle,
//! and sends each in its own task. Deliveries wait in the store while the bounds are full:
//! nothing is dropped. Disabled subscriptions' queues are paused, so their deliveries wait too.
//! So do the deliveries of an endpoint that asked for a pause or whose circuit breaker is open
//! (but for the breaker's one probe), and retries over their subscription's retry budget:
//! none of them uses an attempt ([`super::backpressure`], [`super::budget`]).
//!
//! What a runner does at each turn is decided by its [`Admission`], from what it saw; the
//! runner only carries the decision out: it reads, claims, acquires, takes, sends, holds and
//! waits.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenax_core::clock::UnixMs;
use tenax_core::engine::{ChangeError, Engine};
use tenax_core::engine::{Conflict, EngineError, Missing};
use tenax_core::metrics::webhooks::HeldReason;
use tenax_core::model::{Ack, Attempt, AttemptResult, Subscription, SubscriptionId, TakenJob};
use tokio::sync::futures::Notified;
use tokio::sync::{AcquireError, Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::Deliveries;
use super::admission::{Admission, Budgeted, Decision, Limits, Seen, Wait, admit_taken};
use super::backpressure::{self, Gate, Hold, ProbeEnd};
use super::budget::is_retry;
use super::confirmation;
use super::health::Verdict;
use super::send::Sender;
use super::signals::Event;

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
///
/// Each turn it looks at its subscription and endpoint, asks its [`Admission`] what to do,
/// and either waits for what that names or takes deliveries and sends each in its own task.
async fn run_subscription(
    engine: Arc<Engine>,
    deliveries: Arc<Deliveries>,
    sender: Arc<Sender>,
    id: SubscriptionId,
    stop: watch::Receiver<bool>,
) {
    let mut runner = Runner::new(engine.clone(), deliveries, sender, id, stop);
    loop {
        while runner.in_flight.try_join_next().is_some() {}
        if *runner.stop.borrow() {
            break;
        }
        // Registered before the runner looks, so that a change of its subscription or of an
        // endpoint, or a delivery that becomes ready, while it looks wakes it.
        let mut wakes = Wakes::register(&engine);
        let sight = match runner.look().await {
            Ok(sight) => sight,
            Err(Unseen::Gone) => break,
            Err(Unseen::Failed) => {
                runner.pause().await;
                continue;
            }
        };
        let bound = sight.bound.clone();
        let throttle_ms = runner.throttle_ms();
        let next = match runner.admission.admit(&sight.seen, throttle_ms) {
            Decision::Take { up_to, probe } => runner.take_and_send(sight, up_to, probe).await,
            // Dropped before the wait: a permit kept through it would hold back the endpoint's
            // other subscriptions.
            Decision::Wait(wait) => {
                drop(sight);
                Next::Wait(wait)
            }
        };
        match next {
            Next::Look => {}
            Next::Wait(wait) => {
                runner.deliveries.signals.send(id, Event::Waits(wait));
                if runner.wait(wait, &bound, &mut wakes).await.is_err() {
                    break;
                }
            }
            Next::Pause => runner.pause().await,
        }
    }
    runner.finish().await;
}

/// A runner's state between its turns, and its effects: what it reads, takes, sends and holds.
struct Runner {
    engine: Arc<Engine>,
    deliveries: Arc<Deliveries>,
    sender: Arc<Sender>,
    id: SubscriptionId,
    stop: watch::Receiver<bool>,
    /// The throttle counts in time since the runner started: rates are about real time.
    started: Instant,
    lease_ms: u64,
    admission: Admission,
    in_flight: JoinSet<()>,
    /// A permit of the endpoint's bound the runner waited for ([`Wait::Permit`]), kept for its
    /// next look: let go, it could go to a runner that did not wait.
    waited: Option<OwnedSemaphorePermit>,
}

/// Why a runner's look saw nothing to decide on.
enum Unseen {
    /// The subscription is deleted, or its endpoint is not a URL: the runner ends.
    Gone,
    /// The store did not answer: look again after a while.
    Failed,
}

/// The subscription and its endpoint as a runner saw them.
struct Sight {
    subscription: Subscription,
    origin: Arc<str>,
    /// The endpoint's concurrency bound on this server.
    bound: Arc<Semaphore>,
    /// A permit of `bound` the runner waited for (counted in `seen.free_permits`).
    held: Option<OwnedSemaphorePermit>,
    seen: Seen,
}

/// How a turn ends.
enum Next {
    /// Look again at once.
    Look,
    Wait(Wait),
    /// The store did not answer: look again after a while.
    Pause,
}

/// The store's wake-ups a runner may wait for, registered when created.
struct Wakes<'a> {
    subscription: Pin<Box<Notified<'a>>>,
    ready: Pin<Box<Notified<'a>>>,
    endpoint: Pin<Box<Notified<'a>>>,
}

impl<'a> Wakes<'a> {
    fn register(engine: &'a Engine) -> Self {
        let registered = |notify: &'a Notify| {
            let mut notified = Box::pin(notify.notified());
            notified.as_mut().enable();
            notified
        };
        let signals = engine.signals();
        Self {
            subscription: registered(&signals.subscriptions),
            ready: registered(&signals.ready),
            endpoint: registered(&signals.endpoints),
        }
    }
}

impl Runner {
    fn new(
        engine: Arc<Engine>,
        deliveries: Arc<Deliveries>,
        sender: Arc<Sender>,
        id: SubscriptionId,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let lease_ms = deliveries.config.timeout_ms.saturating_add(60_000);
        Self {
            engine,
            deliveries,
            sender,
            id,
            stop,
            started: Instant::now(),
            lease_ms,
            admission: Admission::default(),
            in_flight: JoinSet::new(),
            waited: None,
        }
    }

    fn throttle_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Reads the subscription and its endpoint's state, and counts the endpoint's permits.
    async fn look(&mut self) -> Result<Sight, Unseen> {
        let waited = self.waited.take();
        let subscription = match self.engine.subscription(self.id).await {
            Ok(Some(subscription)) => subscription,
            Ok(None) => return Err(Unseen::Gone),
            Err(error) => {
                tracing::error!(%error, id = self.id.0, "reading the subscription failed; retrying");
                return Err(Unseen::Failed);
            }
        };
        let Ok(url) = url::Url::parse(&subscription.endpoint) else {
            tracing::error!(id = self.id.0, endpoint = %subscription.endpoint, "subscription endpoint is not a URL");
            return Err(Unseen::Gone);
        };
        // Limits are for the whole cluster: this server keeps its share.
        let servers = self.engine.servers();
        // The endpoint's pause and circuit breaker, stored for every server.
        let origin: Arc<str> = Arc::from(super::origin_of_url(&url));
        let now = self.engine.now_ms();
        let gate = match self
            .deliveries
            .endpoints
            .gate(&self.engine, &origin, now)
            .await
        {
            Ok(gate) => gate,
            Err(error) => {
                tracing::error!(%error, id = self.id.0, "reading the endpoint's state failed; retrying");
                return Err(Unseen::Failed);
            }
        };
        let bound = self.deliveries.endpoint_bound(&url, servers);
        // A permit waited for counts if it is of the bound as it is now (made anew when the
        // number of servers changed).
        let held = waited.filter(|permit| Arc::ptr_eq(permit.semaphore(), &bound));
        let seen = Seen {
            limits: Limits::of(&subscription),
            servers,
            in_flight: self.in_flight.len(),
            gate,
            free_permits: usize::from(held.is_some()) + bound.available_permits(),
        };
        Ok(Sight {
            subscription,
            origin,
            bound,
            held,
            seen,
        })
    }

    /// Takes up to `up_to` deliveries as the admission allowed (`probe`: the breaker's probe,
    /// claimed before it is taken) and sends each, or holds it back over the retry budget.
    async fn take_and_send(&mut self, sight: Sight, up_to: usize, probe: bool) -> Next {
        let Sight {
            subscription,
            origin,
            bound,
            held,
            seen,
        } = sight;
        let permits = self.permits(&bound, held, up_to);
        if permits.is_empty() {
            return Next::Look;
        }
        let probe = if probe {
            let now = self.engine.now_ms();
            match self
                .deliveries
                .endpoints
                .claim_probe(&self.engine, &origin, now)
                .await
            {
                Some(probe) => Some(probe),
                // Another runner (or server) sends it: look again.
                None => {
                    self.admission.give_back(permits.len());
                    return Next::Look;
                }
            }
        } else {
            None
        };
        // Takes what is ready now, without waiting: an idle runner must not sit on the
        // endpoint's permits (its other subscriptions would wait for them) nor on throttle
        // tokens, and must see changes to its subscription at once.
        let taken = self
            .engine
            .take_deliveries(self.id, permits.len(), self.lease_ms)
            .await;
        let jobs = match taken {
            Ok(jobs) => jobs,
            Err(error) => {
                tracing::error!(%error, id = self.id.0, "taking deliveries failed");
                drop(permits);
                self.unsent(&origin, probe).await;
                return Next::Pause;
            }
        };
        if let Some(wait) = self.admission.took(permits.len(), jobs.len()) {
            drop(permits);
            self.unsent(&origin, probe).await;
            return Next::Wait(wait);
        }
        let sending = Sending {
            engine: self.engine.clone(),
            deliveries: self.deliveries.clone(),
            sender: self.sender.clone(),
            subscription: Arc::new(subscription),
            origin,
            probe,
        };
        self.send_or_hold(&sending, seen.servers, jobs, permits)
            .await;
        Next::Look
    }

    /// The permits of `bound` for up to `up_to` deliveries: `held`, and what is free. Tokens
    /// the throttle granted for permits counted as free but gone to another runner meanwhile
    /// go back.
    fn permits(
        &mut self,
        bound: &Arc<Semaphore>,
        held: Option<OwnedSemaphorePermit>,
        up_to: usize,
    ) -> Vec<OwnedSemaphorePermit> {
        let mut permits: Vec<OwnedSemaphorePermit> = held.into_iter().collect();
        while permits.len() < up_to {
            match bound.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        self.admission
            .give_back(up_to.saturating_sub(permits.len()));
        permits
    }

    /// Sends each delivery taken in its own task, with a permit, but a retry over the retry
    /// budget, which is put back unsent.
    async fn send_or_hold(
        &mut self,
        sending: &Sending,
        servers: usize,
        jobs: Vec<TakenJob>,
        permits: Vec<OwnedSemaphorePermit>,
    ) {
        let retries = jobs.iter().map(|job| is_retry(job.attempt, job.trigger));
        let budgeted = admit_taken(
            &self.deliveries.budgets,
            &sending.subscription,
            servers,
            sending.probe.is_some(),
            retries,
            self.engine.now_ms(),
        );
        let mut over_budget = Vec::new();
        for ((job, permit), budgeted) in jobs.into_iter().zip(permits).zip(budgeted) {
            match budgeted {
                Budgeted::Hold { until_ms } => {
                    drop(permit);
                    over_budget.push((job, until_ms));
                }
                Budgeted::Send => {
                    self.in_flight.spawn(deliver(sending.clone(), job, permit));
                }
            }
        }
        for (job, until_ms) in over_budget {
            hold(
                &self.engine,
                self.id,
                &job,
                until_ms,
                HeldReason::RetryBudget,
            )
            .await;
        }
    }

    /// Waits for what the admission named, or for the server to stop; a permit of the
    /// endpoint's `bound` waited for is kept for the next look. An error: the bound is closed.
    async fn wait(
        &mut self,
        wait: Wait,
        bound: &Arc<Semaphore>,
        wakes: &mut Wakes<'_>,
    ) -> Result<(), AcquireError> {
        match wait {
            Wait::Change => tokio::select! {
                () = &mut wakes.subscription => {}
                _ = self.stop.changed() => {}
            },
            Wait::RequestEnd => tokio::select! {
                _ = self.in_flight.join_next() => {}
                _ = self.stop.changed() => {}
            },
            Wait::Endpoint { until_ms } => tokio::select! {
                () = self.engine.clock.sleep_toward(until_ms, IDLE_POLL) => {}
                () = &mut wakes.endpoint => {}
                () = &mut wakes.subscription => {}
                _ = self.stop.changed() => {}
            },
            Wait::Permit => tokio::select! {
                permit = bound.clone().acquire_owned() => self.waited = Some(permit?),
                _ = self.stop.changed() => {}
            },
            Wait::Token { for_ms } => tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(for_ms)) => {}
                _ = self.stop.changed() => {}
            },
            Wait::Ready => tokio::select! {
                () = &mut wakes.ready => {}
                () = &mut wakes.subscription => {}
                () = tokio::time::sleep(IDLE_POLL) => {}
                _ = self.stop.changed() => {}
            },
        }
        Ok(())
    }

    /// After the store failed to answer: waits a while, or for the server to stop.
    async fn pause(&mut self) {
        tokio::select! {
            () = tokio::time::sleep(IDLE_POLL) => {}
            _ = self.stop.changed() => {}
        }
    }

    /// A probe claimed and then not sent: another may go at once.
    async fn unsent(&self, origin: &str, probe: Option<u64>) {
        if let Some(probe) = probe {
            let now = self.engine.now_ms();
            self.deliveries
                .endpoints
                .end_probe(&self.engine, origin, probe, &ProbeEnd::Unsent, now)
                .await;
        }
    }

    /// Lets requests in flight finish briefly; abandoned ones keep their leases, which expire
    /// (or vanish with the process), and are sent again.
    async fn finish(mut self) {
        let _ = tokio::time::timeout(STOP_GRACE, async {
            while self.in_flight.join_next().await.is_some() {}
        })
        .await;
        // Aborted and waited for, so that none still holds the engine once the runner has ended.
        self.in_flight.shutdown().await;
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
            EngineError::NotFound(Missing::Job(_))
            | EngineError::Conflict(Conflict::LeaseLost { .. } | Conflict::NotInFlight { .. }),
        ) => {}
        // Its lease runs out and it is taken again (an expired lease counts as an attempt).
        Err(error) => {
            tracing::error!(%error, delivery = job.id.0, "holding back a delivery failed")
        }
    }
}

/// What a delivery's task needs besides the delivery.
#[derive(Clone)]
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
    // A message for an unconfirmed subscription ends unsent: not the endpoint's doing, so
    // nothing of its health, breaker or probe counts it.
    if !confirmed_now(&engine, &subscription, &job).await {
        drop(permit);
        if let Some(probe) = probe {
            let now = engine.now_ms();
            deliveries
                .endpoints
                .end_probe(&engine, &origin, probe, &ProbeEnd::Unsent, now)
                .await;
        }
        let now = engine.now_ms();
        let attempt = confirmation::unsent(&job, now);
        finish(&engine, &subscription, &job, attempt, now).await;
        return;
    }
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
        .signals
        .send(subscription.id, Event::Answered { at_ms: answered_at });
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
    finish(&engine, &subscription, &job, attempt, answered_at).await;
}

/// Ends `job`'s attempt, answered (or not sent) at `answered_at`, by the subscription's policy.
async fn finish(
    engine: &Engine,
    subscription: &Subscription,
    job: &TakenJob,
    attempt: Attempt,
    answered_at: UnixMs,
) {
    let ack = Ack {
        id: job.id,
        lease: job.lease_token,
    };
    match engine
        .finish_delivery(
            subscription,
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
            error @ (EngineError::NotFound(Missing::Job(_))
            | EngineError::Conflict(
                Conflict::LeaseLost { .. } | Conflict::NotInFlight { .. },
            )),
        ) => tracing::debug!(%error, "delivery changed while it was sent"),
        Err(error) => tracing::error!(%error, delivery = job.id.0, "recording a delivery failed"),
    }
}

/// Whether `job` may go to `subscription`, as it is stored now: the runner's copy said it is
/// not confirmed, and a confirmation since then counts.
async fn confirmed_now(engine: &Engine, subscription: &Subscription, job: &TakenJob) -> bool {
    if confirmation::may_send(subscription, job) {
        return true;
    }
    match engine.subscription(subscription.id).await {
        Ok(Some(now)) => confirmation::may_send(&now, job),
        Ok(None) => false,
        // The store did not answer: go by the copy.
        Err(_) => false,
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
                    Ok::<_, EngineError>(Some(s))
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
                    Ok::<_, EngineError>(Some(s))
                })
                .await
        }
    };
    match patched {
        Ok(_) | Err(ChangeError::Failed(EngineError::NotFound(Missing::Subscription(_)))) => {}
        Err(ChangeError::Failed(error) | ChangeError::Refused(error)) => {
            tracing::warn!(%error, id = subscription.id.0, "storing subscription health failed");
        }
    }
}
