//! A failover under load, as docs/postgres.md ("Failover") describes it: two `tenax serve`
//! processes on a multi-host `--database-url` (the URL spelling on one, the key/value spelling
//! on the other) naming a primary and its synchronous standby. While producers enqueue and
//! workers take and complete on both servers, the primary is killed with SIGKILL and the
//! standby promoted. Meanwhile every request is answered, and every 5xx is a 503
//! `unavailable`; after the promotion both servers serve again without a restart, their pools,
//! listeners and the lead on the new primary; and every acknowledged enqueue is there, every
//! acknowledged completion completed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use node::Node;
use replicated::Replicated;
use serde_json::json;

use crate::common::node;
use crate::common::replicated;

/// How long the servers may take to serve again after the promotion: the docs promise about
/// two seconds for the lead and five for a listener; the rest is for a busy machine.
const BACK_WITHIN: Duration = Duration::from_secs(30);

/// The longest any request may take, failover or not: a request waits at most 30 s for a free
/// connection of the pool, and a connection attempt at most 5 s per host (docs/postgres.md).
const ANSWER_WITHIN: Duration = Duration::from_secs(40);

/// What the load saw.
#[derive(Default)]
struct Seen {
    /// Enqueues acknowledged (2xx): their ids.
    enqueued: Vec<u64>,
    /// Enqueues whose outcome is unknown (a 5xx, or no answer): each may have made a job.
    enqueues_unknown: usize,
    /// Completions acknowledged.
    completed: Vec<u64>,
    /// Every status answered, with how many times; `0` for no answer at all.
    statuses: BTreeMap<u16, usize>,
    /// The error codes of the 5xx answers.
    codes: BTreeMap<String, usize>,
    /// The slowest answer.
    slowest: Duration,
    /// When each server first acknowledged a write after `mark` was set.
    first_after_mark: [Option<Instant>; 2],
}

struct Load {
    seen: Mutex<Seen>,
    stop: AtomicBool,
    /// Set when the standby was promoted.
    mark: Mutex<Option<Instant>>,
}

impl Load {
    fn answered(&self, node: usize, answer: &Result<node::Answer, String>, took: Duration) {
        let mut seen = self.seen.lock().expect("the record");
        seen.slowest = seen.slowest.max(took);
        let status = answer.as_ref().map_or(0, |a| a.status);
        *seen.statuses.entry(status).or_default() += 1;
        if let Ok(answer) = answer {
            if answer.status >= 500 {
                let code = answer.body["error"]["code"].as_str().unwrap_or("(none)");
                *seen.codes.entry(code.to_owned()).or_default() += 1;
            }
            if (200..300).contains(&answer.status) {
                let mark = *self.mark.lock().expect("the mark");
                if mark.is_some() && seen.first_after_mark[node].is_none() {
                    seen.first_after_mark[node] = Some(Instant::now());
                }
            }
        }
    }
}

/// Enqueues on `node` until told to stop.
async fn produce(load: Arc<Load>, node: Arc<Node>, index: usize) {
    while !load.stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let answer = node.post("/api/jobs", json!({"queue": "work"})).await;
        load.answered(index, &answer, started.elapsed());
        match answer {
            Ok(answer) if (200..300).contains(&answer.status) => {
                let id = answer.body["id"].as_u64().expect("an id");
                load.seen.lock().expect("the record").enqueued.push(id);
            }
            answer => {
                // A 503 can come after the commit (the connection broke while it was answered).
                if answer.is_err() || answer.is_ok_and(|a| a.status >= 500) {
                    load.seen.lock().expect("the record").enqueues_unknown += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Takes and completes on `node` until told to stop.
async fn work(load: Arc<Load>, node: Arc<Node>, index: usize) {
    while !load.stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let answer = node
            .post(
                "/api/take",
                json!({"queues": ["work"], "max": 5, "lease": "60s", "wait": "1s"}),
            )
            .await;
        load.answered(index, &answer, started.elapsed());
        let Ok(taken) = answer else { continue };
        if taken.status != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        for job in taken.body["jobs"].as_array().expect("jobs") {
            let id = job["id"].as_u64().expect("an id");
            let token = job["lease_token"].as_u64().expect("a lease token");
            let started = Instant::now();
            let answer = node
                .post(
                    &format!("/api/jobs/{id}/complete"),
                    json!({"lease_token": token}),
                )
                .await;
            load.answered(index, &answer, started.elapsed());
            if answer.is_ok_and(|a| a.status == 200) {
                load.seen.lock().expect("the record").completed.push(id);
            }
        }
    }
}

/// Waits until `done` holds, polling; panics after `within` with `what`.
async fn wait_until(what: &str, within: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < within, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_nothing_acknowledged_and_answers_503_meanwhile() {
    let Some(mut pair) = Replicated::start().await else {
        return;
    };
    pair.create_database("tenax").await;
    let (p1, p2) = (pair.primary.port, pair.standby.port);
    let spellings = [
        format!("postgres://postgres@127.0.0.1:{p1},127.0.0.1:{p2}/tenax"),
        format!("host=127.0.0.1,127.0.0.1 port={p1},{p2} user=postgres dbname=tenax"),
    ];
    let a = Arc::new(Node::start(&spellings[0], &[], &[]).await);
    a.wait_until_leading().await;
    let b = Arc::new(Node::start(&spellings[1], &[], &[]).await);

    let load = Arc::new(Load {
        seen: Mutex::new(Seen::default()),
        stop: AtomicBool::new(false),
        mark: Mutex::new(None),
    });
    let mut tasks = Vec::new();
    for (index, node) in [a.clone(), b.clone()].into_iter().enumerate() {
        tasks.push(tokio::spawn(produce(load.clone(), node.clone(), index)));
        tasks.push(tokio::spawn(work(load.clone(), node, index)));
    }
    let progress = |load: &Load| {
        let seen = load.seen.lock().expect("the record");
        (seen.enqueued.len(), seen.completed.len())
    };
    wait_until("the load gets going", BACK_WITHIN, async || {
        let (enqueued, completed) = progress(&load);
        enqueued >= 200 && completed >= 50
    })
    .await;

    let killed_at = Instant::now();
    pair.kill_primary();
    // The failover lasts until both servers have found every host refusing them: a write
    // answered 503, the listener and the lead unable to connect (the old primary is gone, the
    // standby accepts no writes yet).
    wait_until(
        "the servers find no writable host",
        BACK_WITHIN,
        async || {
            let refused = load
                .seen
                .lock()
                .expect("the record")
                .statuses
                .contains_key(&503);
            refused
                && [&a, &b].iter().all(|node| {
                    let log = node.log_text();
                    log.contains("the PostgreSQL listener cannot connect")
                        && log.contains("asking the store for the maintenance lead failed")
                })
        },
    )
    .await;
    let before_promotion = progress(&load);
    pair.promote_standby();
    let promoted_at = Instant::now();
    *load.mark.lock().expect("the mark") = Some(promoted_at);

    // The lead and both listeners are on the new primary. A listener connects only to a
    // writable server: after the kill, only to the new primary.
    let standby = replicated::connect(&pair.standby.url("tenax")).await;
    let (mut lead_at, mut listening_at) = (None, None);
    wait_until(
        "a server leads, and both listen, on the new primary",
        BACK_WITHIN,
        async || {
            if lead_at.is_none()
                && standby
                    .query_opt(
                        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted",
                        &[],
                    )
                    .await
                    .expect("pg_locks")
                    .is_some()
            {
                lead_at = Some(Instant::now());
            }
            if listening_at.is_none()
                && [&a, &b].iter().all(|node| {
                    node.log_text()
                        .contains("the PostgreSQL listener listens again")
                })
            {
                listening_at = Some(Instant::now());
            }
            lead_at.is_some() && listening_at.is_some()
        },
    )
    .await;
    // Both servers serve writes again, without a restart.
    wait_until(
        "both servers acknowledge writes again after the promotion",
        BACK_WITHIN,
        async || {
            let seen = load.seen.lock().expect("the record");
            seen.first_after_mark.iter().all(Option::is_some)
        },
    )
    .await;
    let (enqueued_then, _) = progress(&load);
    wait_until("the load goes on", BACK_WITHIN, async || {
        let (enqueued, completed) = progress(&load);
        enqueued >= enqueued_then + 200 && completed >= before_promotion.1 + 50
    })
    .await;

    // Maintenance runs: a job due in a second is promoted.
    let due = a
        .must_post("/api/jobs", json!({"queue": "due", "delay": "1s"}), 201)
        .await["id"]
        .as_u64()
        .expect("an id");
    wait_until("the leader promotes a due job", BACK_WITHIN, async || {
        a.status(due).await.as_deref() == Some("ready")
    })
    .await;

    load.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a load task");
    }
    let seen = std::mem::take(&mut *load.seen.lock().expect("the record"));

    // Nothing acknowledged is lost.
    let completed: std::collections::HashSet<u64> = seen.completed.iter().copied().collect();
    for id in &seen.enqueued {
        let status = b.status(*id).await;
        assert!(status.is_some(), "acknowledged job {id} is gone");
        if completed.contains(id) {
            assert_eq!(
                status.as_deref(),
                Some("completed"),
                "job {id}'s completion was acknowledged"
            );
        }
    }
    // And no job appears from nowhere: a completed job was enqueued with an acknowledgement,
    // or by one of the enqueues whose answer was lost.
    let acknowledged: std::collections::HashSet<u64> = seen.enqueued.iter().copied().collect();
    let unacknowledged: Vec<u64> = completed
        .iter()
        .filter(|id| !acknowledged.contains(id))
        .copied()
        .collect();
    assert!(
        unacknowledged.len() <= seen.enqueues_unknown,
        "completed jobs {unacknowledged:?} were never acknowledged, and only {} enqueues had \
         no certain answer",
        seen.enqueues_unknown
    );
    // Every request was answered, within the bound, and every 5xx was a 503 `unavailable`.
    assert_eq!(
        seen.statuses.get(&0),
        None,
        "unanswered requests: {:?}",
        seen.statuses
    );
    assert!(
        seen.statuses
            .keys()
            .all(|status| *status < 500 || *status == 503),
        "{:?}",
        seen.statuses
    );
    assert!(
        seen.codes.keys().all(|code| code == "unavailable"),
        "{:?}",
        seen.codes
    );
    assert!(
        seen.slowest < ANSWER_WITHIN,
        "the slowest answer took {:?}",
        seen.slowest
    );
    let back = |at: Option<Instant>| {
        at.map_or_else(
            || "never".to_owned(),
            |at| format!("{:?}", at.duration_since(promoted_at)),
        )
    };
    eprintln!(
        "failover: primary killed {:?} before the promotion; after it, writes acknowledged \
         again by A in {} and by B in {}, a lead on the new primary seen within {:?}, both \
         listeners within {:?}; {} enqueues and {} completions acknowledged, answers {:?}, \
         slowest {:?}",
        promoted_at.duration_since(killed_at),
        back(seen.first_after_mark[0]),
        back(seen.first_after_mark[1]),
        lead_at.map(|at| at.duration_since(promoted_at)),
        listening_at.map(|at| at.duration_since(promoted_at)),
        seen.enqueued.len(),
        seen.completed.len(),
        seen.statuses,
        seen.slowest,
    );
}
