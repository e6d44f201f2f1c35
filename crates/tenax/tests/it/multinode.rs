//! Several Tenax servers on one PostgreSQL database, as separate processes of the real binary:
//! a job is taken once whichever server is asked, a lease taken on one server is completed on
//! another, a long-polling worker on one server is woken by an enqueue on another (and a producer
//! waiting for a job's result by its completion on another), the leader
//! killed with SIGKILL is replaced, so is a leader paused with SIGSTOP, a server killed under load loses nothing acknowledged, and
//! PostgreSQL restarted under load is survived without restarting the servers, cluster limits
//! hold (a subscription's concurrency, a queue's concurrency and rate), a subscription made on
//! one server applies at once to enqueues on another, an endpoint's pause holds on every
//! server, a schedule ticks once per tick whichever server leads (the leader killed included),
//! a primary demoted to a read-only standby is left for a writable one, and every node shows
//! the whole cluster (its servers, their workers, its activity).
//!
//! Restarting PostgreSQL breaks every connection to the test server, and making it read-only
//! changes every session's default, so the cases of this suite take turns ([`TURN`]) on a
//! server of their own ([`POSTGRES`]), which no other suite's tests use.

use std::collections::{BTreeSet, HashSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::postgres;
use node::{Answer, Node};
use receiver::{Receiver, Reply};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::common;
use crate::common::node;
use crate::common::receiver;

/// One case at a time: a PostgreSQL restart must not break another case's servers.
static TURN: Mutex<()> = Mutex::const_new(());

/// This suite's own PostgreSQL: its restart and its read-only spell touch no other suite.
static POSTGRES: postgres::OwnCluster = postgres::OwnCluster::new();

/// The longest the docs allow for another server to take the lead after the leader dies
/// (docs/postgres.md: about two seconds), with room for a busy machine.
const TAKEOVER: Duration = Duration::from_secs(6);

/// What these cases do to jobs on any node, in the native API's words.
trait Jobs {
    /// Enqueues; the id if the server acknowledged it.
    async fn enqueue(&self, job: Value) -> Option<u64>;
    async fn must_enqueue(&self, job: Value) -> u64;
    /// Takes jobs: (id, lease token) each.
    async fn take(&self, body: Value) -> Vec<(u64, u64)>;
    /// Completes a taken job; the answer's status.
    async fn complete(&self, taken: (u64, u64)) -> u16;
}

impl Jobs for Node {
    async fn enqueue(&self, job: Value) -> Option<u64> {
        match self.post("/api/jobs", job).await {
            Ok(Answer {
                status: 200 | 201,
                body,
                ..
            }) => body["id"].as_u64(),
            _ => None,
        }
    }

    async fn must_enqueue(&self, job: Value) -> u64 {
        self.enqueue(job)
            .await
            .expect("the enqueue is acknowledged")
    }

    async fn take(&self, body: Value) -> Vec<(u64, u64)> {
        let answer = self.must_post("/api/take", body, 200).await;
        answer["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| {
                (
                    j["id"].as_u64().expect("an id"),
                    j["lease_token"].as_u64().expect("a lease token"),
                )
            })
            .collect()
    }

    async fn complete(&self, (id, lease): (u64, u64)) -> u16 {
        let path = format!("/api/jobs/{id}/complete");
        let answer = self.post(&path, json!({"lease_token": lease})).await;
        answer.unwrap_or_else(|e| panic!("{e}")).status
    }
}

/// A worker long-polling `queue` on `waiter` is handed the job enqueued on `producer`, well
/// before its 20 s wait is over: the waiter heard of it by LISTEN/NOTIFY (it does not poll
/// while listening).
async fn woken_across(waiter: &Arc<Node>, producer: &Node, queue: &str) {
    let waiting = {
        let (waiter, queue) = (waiter.clone(), queue.to_owned());
        tokio::spawn(async move {
            let started = Instant::now();
            let taken = waiter
                .take(json!({"queues": [queue], "max": 1, "wait": "20s"}))
                .await;
            (taken, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = producer.must_enqueue(json!({ "queue": queue })).await;
    let (taken, waited) = waiting.await.expect("the waiting worker");
    assert_eq!(taken.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [id]);
    assert!(
        waited < Duration::from_secs(10),
        "woken by the other server's enqueue, not by the end of the wait: {waited:?}"
    );
}

/// A fresh database, or `None` when the harness skips (no PostgreSQL here).
async fn database() -> Option<String> {
    POSTGRES.fresh_database().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_taken_once_and_acknowledged_on_any_node() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let a = Arc::new(Node::start(&url, &[], &[]).await);
    let b = Arc::new(Node::start(&url, &[], &[]).await);
    let jobs: Vec<Value> = (0..300)
        .map(|n| json!({"queue": "q", "payload": {"n": n}}))
        .collect();
    let answer = a
        .must_post("/api/jobs/batch", json!({"jobs": jobs}), 201)
        .await;
    let enqueued: BTreeSet<u64> = answer["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_u64().expect("an id"))
        .collect();
    assert_eq!(enqueued.len(), 300);

    // Four workers, two on each server, take until nothing is left.
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let node = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let taken = node.take(json!({"queues": ["q"], "max": 7})).await;
                    if taken.is_empty() {
                        break mine;
                    }
                    mine.extend(taken);
                }
            })
        })
        .collect();
    let mut leases = Vec::new();
    for worker in workers {
        leases.extend(worker.await.expect("a worker"));
    }
    let mut taken: Vec<u64> = leases.iter().map(|(id, _)| *id).collect();
    taken.sort_unstable();
    assert_eq!(
        taken,
        enqueued.iter().copied().collect::<Vec<_>>(),
        "every job taken exactly once"
    );

    // Every lease completes on the other server than the one that handed it out, or on the
    // same: a lease is a row, not a server's memory.
    for (n, lease) in leases.iter().enumerate() {
        let node = if n % 2 == 0 { &b } else { &a };
        assert_eq!(node.complete(*lease).await, 200, "job {}", lease.0);
    }
    for id in [taken[0], taken[150], taken[299]] {
        assert_eq!(a.status(id).await.as_deref(), Some("completed"));
    }

    // A worker long-polling on B is woken by an enqueue on A, well before its wait is over
    // (B hears it by LISTEN/NOTIFY; it does not poll while listening).
    woken_across(&b, &a, "wake").await;

    // A producer waiting on B for a job's result is answered when A completes it, long before
    // its wait is over: B hears of the completion by LISTEN/NOTIFY.
    result_waited_across(&b, &a).await;
}

/// `GET /api/jobs/{id}?wait=` on `waiter` answers with the result of a job `worker` completes.
async fn result_waited_across(waiter: &Arc<Node>, worker: &Node) {
    let id = worker.must_enqueue(json!({"queue": "results"})).await;
    let [lease] = worker.take(json!({"queues": ["results"], "max": 1})).await[..] else {
        panic!("one job taken");
    };
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = waiter.get(&format!("/api/jobs/{id}?wait=30s")).await;
            (answer, started.elapsed())
        })
    };
    // As `woken_across`: the waiter is (very likely) waiting by now, so that the completion
    // reaches it across servers; were it not, it would answer at once, as the test expects.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let path = format!("/api/jobs/{id}/complete");
    let done = worker
        .must_post(
            &path,
            json!({"lease_token": lease.1, "result": {"n": 7}}),
            200,
        )
        .await;
    assert_eq!(done["status"], "completed");
    let (answer, waited) = waiting.await.expect("the waiting producer");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body["result"], json!({"n": 7}), "{}", answer.body);
    assert!(
        waited < Duration::from_secs(10),
        "woken by the other server's completion, not by the end of the wait: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_node_takes_the_lead_when_the_leader_is_killed() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let mut a = Node::start(&url, &[], &[]).await;
    a.wait_until_leading().await;
    let b = Node::start(&url, &[], &[]).await;
    // B follows while A leads: a job due in a second is promoted (by A) and B hands it out.
    let first = b
        .must_enqueue(json!({"queue": "later", "delay": "1s"}))
        .await;
    let taken = b
        .take(json!({"queues": ["later"], "max": 1, "wait": "10s"}))
        .await;
    assert_eq!(taken.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [first]);
    assert!(!b.log_text().contains("leads the maintenance"));

    a.kill();
    let killed = Instant::now();
    let due = b
        .must_enqueue(json!({"queue": "later", "delay": "1s"}))
        .await;
    let taken = b
        .take(json!({"queues": ["later"], "max": 1, "wait": "20s"}))
        .await;
    assert_eq!(taken.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [due]);
    assert!(
        killed.elapsed() < TAKEOVER + Duration::from_secs(1),
        "B promoted the due job {:?} after the leader died",
        killed.elapsed()
    );
    assert!(b.log_text().contains("leads the maintenance"));
}

/// A leader that stops without dying (SIGSTOP: a long pause, or a partition that leaves its
/// session open on PostgreSQL) keeps its advisory lock, but not the lead: the other server
/// ends the silent leader's session and leads, so leases still expire and due jobs are still
/// promoted. The paused server, resumed, finds it no longer leads and follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_replaced_and_follows_when_resumed() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let a = Node::start(&url, &[], &[]).await;
    a.wait_until_leading().await;
    let b = Node::start(&url, &[], &[]).await;
    // A job leased on B for two seconds and abandoned: only a leader expires its lease.
    let abandoned = b.must_enqueue(json!({"queue": "held"})).await;
    let taken = b
        .take(json!({"queues": ["held"], "max": 1, "lease": "2s"}))
        .await;
    assert_eq!(
        taken.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [abandoned]
    );

    let a_pid = Pid::from_raw(i32::try_from(a.pid()).expect("a pid"));
    kill(a_pid, Signal::SIGSTOP).expect("SIGSTOP");
    let paused = Instant::now();
    // Silent for five seconds, then unseated; the lock is B's on its next ask.
    let again = b
        .take(json!({"queues": ["held"], "max": 1, "wait": "30s"}))
        .await;
    let took_over = paused.elapsed();
    kill(a_pid, Signal::SIGCONT).expect("SIGCONT");
    assert_eq!(
        again.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [abandoned],
        "the abandoned job's lease expired under the new leader"
    );
    assert!(
        took_over < TAKEOVER + Duration::from_secs(5),
        "the lease expired {took_over:?} after the leader was paused"
    );
    let log = b.log_text();
    assert!(log.contains("has not been seen for 5 s"), "B's log:\n{log}");
    assert!(log.contains("leads the maintenance"), "B's log:\n{log}");

    // A, resumed, learns it lost the lead, and B still leads: a due job is promoted.
    let started = Instant::now();
    while !a.log_text().contains("no longer leads") {
        assert!(
            started.elapsed() < node::START_TIMEOUT,
            "A never noticed it lost the lead; its log:\n{}",
            a.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let due = a
        .must_enqueue(json!({"queue": "later", "delay": "1s"}))
        .await;
    let taken = a
        .take(json!({"queues": ["later"], "max": 1, "wait": "20s"}))
        .await;
    assert_eq!(taken.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [due]);
    assert_eq!(
        a.log_text()
            .matches("this server leads the maintenance")
            .count(),
        1,
        "A took the lead only at its start"
    );
}

/// Advisory locks belong to a database: a server unseating a silent leader ends only its own
/// database's holder, never the leader of another cluster on the same PostgreSQL server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unseating_a_silent_leader_leaves_other_databases_leaders_alone() {
    /// The lead's advisory lock (src/store/postgres/mod.rs, `LEAD_LOCK`).
    const LEAD_LOCK: i64 = 0x7465_6e61_782d_6c64;
    let _turn = TURN.lock().await;
    let Some(ours) = database().await else { return };
    let Some(theirs) = database().await else {
        return;
    };
    // A silent leader here: a lead session whose server has no row, so not seen for 5 s.
    let silent = writable_admin(&ours).await;
    silent
        .batch_execute(&format!(
            "SET application_name = 'tenax-lead 1'; SELECT pg_advisory_lock({LEAD_LOCK})"
        ))
        .await
        .expect("the silent leader's lock");
    // Another cluster's leader, in the other database, just as silent from here.
    let other = writable_admin(&theirs).await;
    other
        .batch_execute(&format!(
            "SET application_name = 'tenax-lead 2'; SELECT pg_advisory_lock({LEAD_LOCK})"
        ))
        .await
        .expect("the other cluster's leader's lock");

    let node = Node::start(&ours, &[], &[]).await;
    node.wait_until_leading().await;
    assert!(
        node.log_text().contains("has not been seen for 5 s"),
        "{}",
        node.log_text()
    );
    assert!(
        silent.simple_query("SELECT 1").await.is_err(),
        "the silent leader's session was ended"
    );
    other
        .simple_query("SELECT 1")
        .await
        .expect("the other database's leader keeps its session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_under_load_loses_nothing_acknowledged() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let mut a = Node::start(&url, &[], &[]).await;
    let b = Arc::new(Node::start(&url, &[], &[]).await);
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // Producers on B run through the kill; on A until it dies.
    let producer = {
        let (b, acknowledged, stop) = (b.clone(), acknowledged.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                if let Some(id) = b
                    .enqueue(json!({"queue": "load", "payload": {"n": n}}))
                    .await
                {
                    acknowledged.lock().expect("the list").push(id);
                }
            }
        })
    };
    let mut from_a = Vec::new();
    let mut leased_on_a = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(800) {
        if let Some(id) = a.enqueue(json!({"queue": "load"})).await {
            from_a.push(id);
        }
        leased_on_a.extend(
            a.take(json!({"queues": ["load"], "max": 3, "lease": "2s"}))
                .await,
        );
    }
    a.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    producer.await.expect("the producer");
    let mut all: Vec<u64> = acknowledged.lock().expect("the list").clone();
    all.extend(&from_a);
    assert!(!leased_on_a.is_empty() && all.len() > 10, "some load ran");
    for id in &all {
        assert!(
            b.status(*id).await.is_some(),
            "acknowledged job {id} is still there"
        );
    }
    // A's leases end, and their jobs come back to B's workers.
    let wanted: HashSet<u64> = leased_on_a.iter().map(|(id, _)| *id).collect();
    let mut back = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !wanted.is_subset(&back) && Instant::now() < deadline {
        for job in b
            .take(json!({"queues": ["load"], "max": 500, "wait": "1s"}))
            .await
        {
            back.insert(job.0);
            assert_eq!(b.complete(job).await, 200);
        }
    }
    assert!(
        wanted.is_subset(&back),
        "every job leased on the killed server came back: missing {:?}",
        wanted.difference(&back).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_survive_a_postgres_restart_without_losing_acknowledged_jobs() {
    let _turn = TURN.lock().await;
    if std::env::var_os("TENAX_TEST_DATABASE_URL").is_some() {
        eprintln!("SKIPPED: restarting PostgreSQL needs the private test cluster");
        return;
    }
    let Some(url) = database().await else { return };
    let a = Arc::new(Node::start(&url, &[], &[]).await);
    let b = Arc::new(Node::start(&url, &[], &[]).await);
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|node| {
            let (acknowledged, refused, stop) =
                (acknowledged.clone(), refused.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match node.post("/api/jobs", json!({"queue": "r"})).await {
                        Ok(Answer {
                            status: 200 | 201,
                            body,
                            ..
                        }) => acknowledged
                            .lock()
                            .expect("the list")
                            .push(body["id"].as_u64().expect("an id")),
                        Ok(Answer { status: 503, .. }) | Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Ok(Answer { status, body, .. }) => panic!("unexpected {status}: {body}"),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    POSTGRES.restart_server().await;
    // The servers were not restarted: they reconnect, and serve again.
    let before = acknowledged.lock().expect("the list").len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while acknowledged.lock().expect("the list").len() < before + 20 {
        assert!(
            Instant::now() < deadline,
            "the servers serve again after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for producer in producers {
        producer.await.expect("a producer");
    }
    let all = acknowledged.lock().expect("the list").clone();
    for id in &all {
        assert!(
            a.status(*id).await.is_some(),
            "acknowledged job {id} survived"
        );
    }
    // LISTEN is back too: a worker waiting on A is woken by an enqueue on B.
    woken_across(&a, &b, "after").await;
    eprintln!(
        "{} enqueues acknowledged, {} refused or failed while PostgreSQL restarted",
        all.len(),
        refused.load(Ordering::Relaxed)
    );
}

/// The most requests a receiver had in progress at once, when each takes `held` to answer:
/// requests that arrived within less than `held` of each other overlapped.
fn most_at_once(arrivals: &[Instant], held: Duration) -> usize {
    let mut sorted = arrivals.to_vec();
    sorted.sort_unstable();
    // A margin under `held`: the next request of a runner arrives just after one ends.
    let window = held - Duration::from_millis(100);
    (0..sorted.len())
        .map(|i| {
            sorted[i..]
                .iter()
                .take_while(|at| at.duration_since(sorted[i]) < window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriptions_concurrency_holds_across_the_cluster() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let held = Duration::from_millis(400);
    let hook = Receiver::start(Vec::new(), Reply::slow(held)).await;
    let flags = ["--allow-private-endpoints"];
    let a = Node::start(&url, &flags, &[]).await;
    let b = Node::start(&url, &flags, &[]).await;
    // Both servers have counted each other (they write their rows every second).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    a.must_post(
        "/api/queues/fan/subscriptions",
        json!({"endpoint": hook.url("/hook"), "max_concurrency": 2}),
        201,
    )
    .await;
    let jobs: Vec<Value> = (0..16)
        .map(|n| json!({"queue": "fan", "payload": {"n": n}}))
        .collect();
    b.must_post("/api/jobs/batch", json!({"jobs": jobs}), 201)
        .await;
    let received = hook.wait_for(16, Duration::from_secs(30)).await;
    let arrivals: Vec<Instant> = received.iter().map(|r| r.at).collect();
    let most = most_at_once(&arrivals, held);
    // Two servers, a limit of 2: one each, never 2 each.
    assert!(
        most <= 2,
        "{most} deliveries at once, with a limit of 2 for the cluster"
    );
    assert!(most >= 1);
}

/// What an enqueue needs of a queue, which each server caches, follows a change made on another
/// server at once: a subscription made on B is delivered the very next message enqueued on A,
/// though A had just enqueued to that queue (and cached that it had no subscribers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_on_one_node_gets_the_next_message_of_another() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let hook = Receiver::ok().await;
    let flags = ["--allow-private-endpoints"];
    let a = Node::start(&url, &flags, &[]).await;
    let b = Node::start(&url, &flags, &[]).await;
    let before = a
        .must_enqueue(json!({"queue": "fan", "payload": {"n": 0}}))
        .await;
    let answer = b
        .must_post(
            "/api/queues/fan/subscriptions",
            json!({"endpoint": hook.url("/hook")}),
            201,
        )
        .await;
    let after = a
        .must_enqueue(json!({"queue": "fan", "payload": {"n": 1}}))
        .await;
    let received = hook.wait_for(1, Duration::from_secs(30)).await;
    let message = &received[0].json()["message"];
    assert_eq!(message["id"], json!(after), "{message}");
    assert_eq!(message["body"], json!({"n": 1}), "{message}");
    // The message enqueued before the subscription has no delivery, and gets none later.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deliveries = a
        .must_get(
            &format!("/api/subscriptions/{}/deliveries", answer["id"]),
            200,
        )
        .await;
    let messages: Vec<&Value> = deliveries["deliveries"]
        .as_array()
        .expect("a page of deliveries")
        .iter()
        .map(|d| &d["message_id"])
        .collect();
    assert_eq!(messages, [&json!(after)], "not {before}: {deliveries}");
    assert_eq!(hook.count(), 1);
}

/// A 429 with `Retry-After` that one server got pauses the endpoint for every server: the
/// pause is stored. Another subscription to the same origin, its deliveries spread over both
/// servers (a `max_concurrency` of 2: one each), sends nothing before the pause is over, and
/// then everything, with no attempt used by the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoints_pause_holds_on_every_server() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let hook = Receiver::start(vec![Reply::status(429).retry_after("3")], Reply::ok()).await;
    let flags = ["--allow-private-endpoints"];
    let a = Node::start(&url, &flags, &[]).await;
    let b = Node::start(&url, &flags, &[]).await;
    // Both servers have counted each other (they write their rows every second).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut subscriptions = Vec::new();
    for (queue, path) in [("asks", "/a"), ("waits", "/b")] {
        let answer = a
            .must_post(
                &format!("/api/queues/{queue}/subscriptions"),
                json!({"endpoint": hook.url(path), "max_concurrency": 2}),
                201,
            )
            .await;
        subscriptions.push(answer["id"].clone());
    }
    a.must_enqueue(json!({"queue": "asks", "payload": {"n": 0}}))
        .await;
    let first = hook.wait_for(1, Duration::from_secs(30)).await[0].at;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = b
            .must_get(&format!("/api/subscriptions/{}", subscriptions[1]), 200)
            .await;
        if view["health"]["endpoint"]["paused_until"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "no pause stored: {view}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another server hears of the change within moments (its notification).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let jobs: Vec<Value> = (1..=6)
        .map(|n| json!({"queue": "waits", "payload": {"n": n}}))
        .collect();
    b.must_post("/api/jobs/batch", json!({"jobs": jobs}), 201)
        .await;
    let received = hook.wait_for(8, Duration::from_secs(30)).await;
    for request in &received[1..] {
        let after = request.at.duration_since(first);
        // The pause began when the 429 was answered, after it arrived; 50 ms for rounding.
        assert!(
            after >= Duration::from_millis(2_950),
            "a request {after:?} after the 429, within its 3 s pause"
        );
    }
    let deliveries = a
        .must_get(
            &format!("/api/subscriptions/{}/deliveries", subscriptions[1]),
            200,
        )
        .await;
    let failures: Vec<&Value> = deliveries["deliveries"]
        .as_array()
        .expect("a page of deliveries")
        .iter()
        .map(|d| &d["failures"])
        .collect();
    assert_eq!(failures, [&json!(0); 6], "the pause used no attempt");
}

/// A cancellation made through one node marks the lease on the job's row: a heartbeat through
/// another node answers `"cancelled": true`, and the failure reported there (or on the first)
/// finishes the job as cancelled, seen alike by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_through_one_node_reaches_a_heartbeat_through_another() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let a = Node::start(&url, &[], &[]).await;
    let b = Node::start(&url, &[], &[]).await;
    let id = a
        .must_enqueue(json!({"queue": "cancel", "retry_limit": 5}))
        .await;
    let taken = b.take(json!({"queues": ["cancel"], "max": 1})).await;
    assert_eq!(taken.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [id]);
    let (_, lease) = taken[0];
    let heartbeat = format!("/api/jobs/{id}/heartbeat");
    let beat = b
        .must_post(&heartbeat, json!({"lease_token": lease}), 200)
        .await;
    assert_eq!(beat["cancelled"], json!(false), "{beat}");

    let answer = a
        .must_post(&format!("/api/jobs/{id}/cancel"), json!({}), 200)
        .await;
    assert_eq!(answer["outcome"], "marked", "{answer}");
    let beat = b
        .must_post(&heartbeat, json!({"lease_token": lease}), 200)
        .await;
    assert_eq!(beat["cancelled"], json!(true), "{beat}");

    let failed = b
        .must_post(
            &format!("/api/jobs/{id}/fail"),
            json!({"lease_token": lease, "error": "stopped: cancelled"}),
            200,
        )
        .await;
    assert_eq!(failed["status"], "cancelled", "{failed}");
    assert_eq!(a.status(id).await.as_deref(), Some("cancelled"));
    assert!(
        a.take(json!({"queues": ["cancel"], "max": 1}))
            .await
            .is_empty(),
        "a cancelled job does not run again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_starting_together_migrate_once() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    // Four `tenax migrate` at once on an empty database: one migrates, the others wait for
    // its lock and find nothing to do.
    let runs: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_tenax"))
                .args(["migrate", "--database-url", &url])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("tenax migrate starts")
        })
        .collect();
    let mut said = Vec::new();
    for run in runs {
        let output = run.wait_with_output().expect("tenax migrate ends");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        said.push(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let migrated = said.iter().filter(|s| s.starts_with("migrated")).count();
    assert_eq!(migrated, 1, "{said:?}");
    // A server then starts on it, and refuses a schema newer than it knows.
    let node = Node::start(&url, &[], &[]).await;
    drop(node);
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connected");
    tokio::spawn(connection);
    client
        .execute("UPDATE tenax_schema SET version = version + 1", &[])
        .await
        .expect("stamped newer");
    let output = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(["migrate", "--database-url", &url])
        .output()
        .expect("tenax migrate runs");
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("newer than"), "{error}");
}

/// A session on the test server's `database`, writable whatever the server's default says.
async fn writable_admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("an admin connection");
    tokio::spawn(connection);
    client
        .batch_execute("SET default_transaction_read_only = off")
        .await
        .expect("a writable session");
    client
}

/// The other sessions on `url`'s database.
async fn other_sessions(url: &str) -> BTreeSet<i32> {
    writable_admin(url)
        .await
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .expect("the sessions")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Makes every session of the cluster read-only by default (the configuration file, reloaded),
/// and undoes it when dropped, whatever happened meanwhile.
struct ReadOnlyServer {
    admin_url: String,
}

impl ReadOnlyServer {
    async fn start(admin_url: String) -> Self {
        let admin = writable_admin(&admin_url).await;
        for statement in [
            "ALTER SYSTEM SET default_transaction_read_only = on",
            "SELECT pg_reload_conf()",
        ] {
            admin.batch_execute(statement).await.expect(statement);
        }
        Self { admin_url }
    }
}

impl Drop for ReadOnlyServer {
    fn drop(&mut self) {
        let url = self.admin_url.clone();
        // Its own runtime: a drop cannot await, and the test's runtime may be ending.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let admin = writable_admin(&url).await;
                for statement in [
                    "ALTER SYSTEM RESET default_transaction_read_only",
                    "SELECT pg_reload_conf()",
                ] {
                    admin.batch_execute(statement).await.expect(statement);
                }
            });
        })
        .join()
        .expect("the read-only default undone");
    }
}

/// A failover as a server sees it: the sessions it has lead to a primary that became a
/// read-only standby (SQLSTATE 25006 on every write), then a new primary takes over. While
/// nothing accepts writes, enqueues are answered 503 `unavailable`, never 500; once new
/// sessions are writable again the server serves without a restart, and every session it had
/// before (the pool's, the listener's, the lead's) is gone: none is kept on the old primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_left_for_a_writable_one() {
    let _turn = TURN.lock().await;
    if std::env::var_os("TENAX_TEST_DATABASE_URL").is_some() {
        eprintln!("SKIPPED: making PostgreSQL read-only needs the private test cluster");
        return;
    }
    let Some(url) = database().await else { return };
    let admin_url = POSTGRES.admin_url().await.expect("the admin URL");
    let node = Node::start(&url, &[], &[]).await;
    node.wait_until_leading().await;
    for n in 0..20 {
        node.must_enqueue(json!({"queue": "before", "payload": {"n": n}}))
            .await;
    }
    let before = other_sessions(&url).await;
    assert!(
        before.len() >= 3,
        "the pool, the listener, the lead: {before:?}"
    );

    // The old primary is demoted: every session, old or new, refuses writes (once the reload
    // has reached it: until the first refusal, an enqueue may still be stored).
    let read_only = ReadOnlyServer::start(admin_url).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let Answer {
            status,
            body: answer,
            ..
        } = node
            .post("/api/jobs", json!({"queue": "during"}))
            .await
            .expect("an answer");
        if status == 503 {
            assert_eq!(answer["error"]["code"], "unavailable", "{answer}");
            break;
        }
        assert_eq!(status, 201, "{answer}");
        assert!(Instant::now() < deadline, "writes are still accepted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in 0..10 {
        let answer = node
            .must_post(
                "/api/jobs",
                json!({"queue": "during", "payload": {"n": n}}),
                503,
            )
            .await;
        assert_eq!(answer["error"]["code"], "unavailable", "{answer}");
    }
    assert!(
        node.log_text().contains("refused a write as read-only"),
        "{}",
        node.log_text()
    );

    // A new primary: new sessions of the database accept writes (a database's own setting
    // outranks the configuration file), the old ones still do not.
    let dbname = url.rsplit('/').next().expect("a database name").to_owned();
    writable_admin(&url)
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {dbname} SET default_transaction_read_only = off"
        ))
        .await
        .expect("new sessions writable");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut served = 0;
    loop {
        match node.post("/api/jobs", json!({"queue": "after"})).await {
            Ok(Answer {
                status: 200 | 201, ..
            }) => served += 1,
            Ok(Answer {
                status: 503, body, ..
            }) => assert_eq!(body["error"]["code"], "unavailable", "{body}"),
            other => panic!("unexpected: {other:?}"),
        }
        let now = other_sessions(&url).await;
        if served >= 20 && now.is_disjoint(&before) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{served} enqueues served; sessions kept from before the demotion: {:?}; log:\n{}",
            now.intersection(&before).collect::<Vec<_>>(),
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The lead is held again, by a new session.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let holder: Option<i32> = writable_admin(&url)
            .await
            .query_opt(
                "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
                 WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()",
                &[],
            )
            .await
            .expect("the locks")
            .map(|row| row.get(0));
        if let Some(pid) = holder {
            assert!(!before.contains(&pid), "the lead kept its old session");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nobody leads: {}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(read_only);
}

/// Workers on both servers, long-polling a queue with a concurrency and a rate limit: they
/// never hold more than the concurrency limit at once (counted by the workers), nor start more
/// than the rate limit in any period (counted from the servers' own start times).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queues_limits_hold_across_the_cluster() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let a = Arc::new(Node::start(&url, &[], &[]).await);
    let b = Arc::new(Node::start(&url, &[], &[]).await);
    a.must_put(
        "/api/queues/shared?create=true",
        json!({"concurrency": 3, "rate": {"limit": 8, "period": "500ms"}}),
        200,
    )
    .await;
    let jobs: Vec<Value> = (0..40)
        .map(|n| json!({"queue": "shared", "payload": n}))
        .collect();
    b.must_post("/api/jobs/batch", json!({"jobs": jobs}), 201)
        .await;
    let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let starts = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let node = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (held, most, done, starts) =
                (held.clone(), most.clone(), done.clone(), starts.clone());
            tokio::spawn(async move {
                use std::sync::atomic::Ordering::SeqCst;
                while done.load(SeqCst) < 40 {
                    assert!(Instant::now() < deadline, "the jobs were not done in time");
                    let answer = node
                        .must_post(
                            "/api/take",
                            json!({"queues": ["shared"], "max": 2, "wait": "300ms",
                                   "lease": "30s"}),
                            200,
                        )
                        .await;
                    let jobs = answer["jobs"].as_array().expect("jobs").clone();
                    let now = held.fetch_add(jobs.len(), SeqCst) + jobs.len();
                    most.fetch_max(now, SeqCst);
                    for job in &jobs {
                        let ends = tenax_core::clock::parse_rfc3339(
                            job["lease_expires_at"].as_str().expect("a lease"),
                        )
                        .expect("a time");
                        starts.lock().await.push(ends - 30_000);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    for job in &jobs {
                        held.fetch_sub(1, SeqCst);
                        let lease = (
                            job["id"].as_u64().expect("an id"),
                            job["lease_token"].as_u64().expect("a token"),
                        );
                        assert_eq!(node.complete(lease).await, 200);
                        done.fetch_add(1, SeqCst);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a worker");
    }
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= 3, "the workers held {most} at once");
    let mut starts = starts.lock().await.clone();
    assert_eq!(starts.len(), 40);
    starts.sort_unstable();
    for (i, end) in starts.iter().enumerate() {
        let within = starts[..=i].iter().filter(|s| **s + 500 > *end).count();
        assert!(within <= 8, "{within} starts in the 500 ms up to {end}");
    }
}

/// A schedule of every second, on two servers: each tick enqueues exactly one job, whichever
/// server leads; when the leader is killed the other takes over, and the ticks it was late for
/// (by less than a minute) are still enqueued, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_ticks_once_per_tick_across_the_cluster() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let mut a = Node::start(&url, &[], &[]).await;
    a.wait_until_leading().await;
    let b = Node::start(&url, &[], &[]).await;
    b.must_put(
        "/api/schedules/every-second",
        json!({"cron": "* * * * * *", "job": {"queue": "ticks"}}),
        201,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.kill();
    // B takes the lead within TAKEOVER, and catches up.
    tokio::time::sleep(TAKEOVER + Duration::from_secs(2)).await;
    b.must_post("/api/schedules/every-second/pause", json!({}), 200)
        .await;
    // Once the pause is stored no tick is recorded: a pass that read the schedule before it
    // records at a revision the pause replaced, and is refused.
    let schedule = b.must_get("/api/schedules/every-second", 200).await;
    let last_tick = schedule["last_tick"]
        .as_str()
        .expect("a last tick")
        .to_owned();
    let page = b.must_get("/api/jobs?queue=ticks&limit=1000", 200).await;
    let mut ticks: Vec<u64> = page["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            tenax_core::clock::parse_rfc3339(j["run_at"].as_str().expect("run_at")).expect("a time")
        })
        .collect();
    ticks.sort_unstable();
    let unique: BTreeSet<u64> = ticks.iter().copied().collect();
    assert_eq!(
        unique.len(),
        ticks.len(),
        "a tick enqueued twice: {ticks:?}"
    );
    assert!(ticks.len() >= 5, "{ticks:?}");
    // No tick lost: one job per second from the first to the last handled.
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1_000, "a tick missing: {ticks:?}");
    }
    assert_eq!(
        ticks.last().copied(),
        tenax_core::clock::parse_rfc3339(&last_tick),
        "{schedule}"
    );
    assert_eq!(schedule["counts"]["missed"], 0, "{schedule}");
}

/// How long the cluster's figures may take to reach another server: its activity counts are
/// added every 2 s and its row written every second (docs/postgres.md), with room for a busy
/// machine.
const SHARED_WITHIN: Duration = Duration::from_secs(15);

/// `GET path` on `node` until `ready` holds of the answer; fails after [`SHARED_WITHIN`].
async fn until(node: &Node, path: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let answer = node.must_get(path, 200).await;
        if ready(&answer) {
            return answer;
        }
        assert!(
            started.elapsed() < SHARED_WITHIN,
            "GET {path} never became as expected: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The servers of `cluster`, as (id, this, version) each.
fn servers_of(cluster: &Value) -> Vec<(String, bool, String)> {
    cluster["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| {
            (
                s["id"].as_str().expect("an id").to_owned(),
                s["this"].as_bool().expect("this"),
                s["version"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Every node shows the cluster's figures: both nodes list both servers with their versions,
/// one of them leading; jobs enqueued and completed on A are counted in B's activity; and a
/// worker taking on A is listed by B, with its name, its queues and its jobs in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_shows_the_whole_cluster() {
    let _turn = TURN.lock().await;
    let Some(url) = database().await else { return };
    let a = Node::start(&url, &[], &[]).await;
    let b = Node::start(&url, &[], &[]).await;

    // Two servers, one leading, each having said what it is (a server's first row, written as
    // its store opens, says nothing yet).
    let two_servers = |cluster: &Value| {
        let servers = cluster["servers"].as_array().cloned().unwrap_or_default();
        let leaders = servers.iter().filter(|s| s["leads"] == true).count();
        servers.len() == 2 && leaders == 1 && servers.iter().all(|s| s["version"].is_string())
    };
    let from_a = until(&a, "/api/cluster", two_servers).await;
    let from_b = until(&b, "/api/cluster", two_servers).await;
    let (seen_by_a, seen_by_b) = (servers_of(&from_a), servers_of(&from_b));
    let version = env!("CARGO_PKG_VERSION").to_owned();
    for seen in [&seen_by_a, &seen_by_b] {
        assert!(seen.iter().all(|(_, _, v)| *v == version), "{seen:?}");
        assert_eq!(
            seen.iter().filter(|(_, this, _)| *this).count(),
            1,
            "{seen:?}"
        );
    }
    let ids =
        |seen: &[(String, bool, String)]| seen.iter().map(|s| s.0.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&seen_by_a), ids(&seen_by_b), "the same servers, by id");
    let a_id = seen_by_a.iter().find(|s| s.1).expect("A itself").0.clone();
    let b_id = seen_by_b.iter().find(|s| s.1).expect("B itself").0.clone();
    assert_ne!(a_id, b_id);
    let addresses: BTreeSet<String> = from_b["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| s["address"].as_str().expect("an address").to_owned())
        .collect();
    let expected: BTreeSet<String> = [&a, &b]
        .iter()
        .map(|n| n.url("").trim_start_matches("http://").to_owned())
        .collect();
    assert_eq!(addresses, expected);

    // Work on A.
    let jobs: Vec<Value> = (0..5).map(|_| json!({"queue": "seen"})).collect();
    a.must_post("/api/jobs/batch", json!({"jobs": jobs}), 201)
        .await;
    let taken = a
        .take(
            json!({"queues": ["seen", "other"], "max": 3, "lease": "5m", "worker": "worker-on-a"}),
        )
        .await;
    assert_eq!(taken.len(), 3);
    for lease in &taken[..2] {
        assert_eq!(a.complete(*lease).await, 200);
    }

    // B counts it.
    let activity = until(&b, "/api/activity?minutes=60", |activity| {
        activity["total"]["enqueued"] == 5 && activity["total"]["completed"] == 2
    })
    .await;
    assert_eq!(activity["minutes"].as_array().map(Vec::len), Some(60));

    // B lists A's worker, under A.
    let cluster = until(&b, "/api/cluster", |cluster| {
        cluster["servers"].as_array().is_some_and(|servers| {
            servers.iter().any(|s| {
                s["id"] == a_id.as_str()
                    && s["workers"]
                        .as_array()
                        .is_some_and(|w| w.iter().any(|w| w["in_flight"] == 1))
            })
        })
    })
    .await;
    let on_a = cluster["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|s| s["id"] == a_id.as_str())
        .expect("A");
    assert_eq!(on_a["this"], false);
    let worker = &on_a["workers"][0];
    assert_eq!(worker["name"], "worker-on-a");
    assert_eq!(worker["queues"], json!(["other", "seen"]));
    assert_eq!(worker["in_flight"], 1);
    assert_eq!(worker["streaming"], false);
}
