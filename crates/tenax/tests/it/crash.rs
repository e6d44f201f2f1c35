//! Crash test: the real `tenax` binary is killed with SIGKILL under load, restarted on the same
//! data directory, and checked against everything it acknowledged.
//!
//! One data directory serves all rounds, so later rounds also recover a store that was itself
//! recovered. Each round:
//!
//! 1. Load from several connections (each task has its own HTTP client): 4 producers enqueue jobs
//!    with unique payloads `{"n": k}`, one at a time and in batches, into two queues; 2 consumers
//!    take jobs (60 s leases), complete most of them (one at a time and in batches) and leave
//!    the rest in flight.
//! 2. After a random 200–1500 ms the server gets SIGKILL. Requests in flight fail and count as
//!    unacknowledged; only a complete 2xx answer is an acknowledgement.
//! 3. The server restarts on the same directory, and the test checks:
//!    - every acknowledged enqueue exists with its id, queue, type and payload (the full listing,
//!      and `GET /api/jobs/{id}` for a sample); so does every job a worker was ever handed,
//!      and every job seen after an earlier restart;
//!    - every acknowledged completion (and every completion seen after an earlier restart) is
//!      `completed`, and a completed job is one whose completion was sent;
//!    - no job is in_flight, scheduled or dead: every job not completed is ready, in particular
//!      every job that was in flight at the kill;
//!    - a stored job that no enqueue acknowledged carries the payload of an enqueue that was
//!      sent (its answer was lost), and no payload is stored twice;
//!    - `/api/stats` totals equal the counts of the listing;
//!    - taking everything returns exactly the ready jobs, none of them ever acknowledged as
//!      completed; `/api/stats` then shows them in flight;
//!    - during the load, no server process handed out one job twice, nor a job whose completion
//!      had been acknowledged.
//!
//!    Half of the jobs taken in that check are then completed (they must stay completed) and the
//!    other half stay in flight for the next kill.
//!
//! The random choices (kill moments, sizes) come from a seed printed at the start; rerun with
//! `TENAX_CRASH_SEED=<seed>` to repeat them. Every request goes to 127.0.0.1.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::common::ports;
use crate::common::receiver;

const ROUNDS: usize = 5;
const PRODUCERS: usize = 4;
const CONSUMERS: usize = 2;
const QUEUES: [&str; 2] = ["crash-a", "crash-b"];
const KIND: &str = "crash.job";
/// The kill comes this long (in ms, inclusive range) after the load starts.
const KILL_AFTER_MS: (u64, u64) = (200, 1_500);
/// How long the server may take to answer /healthz after a (re)start.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Most violations printed when a round fails.
const SHOWN: usize = 40;

/// SplitMix64: small, seeded, enough to pick moments and sizes reproducibly.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }

    fn index(&mut self, len: usize) -> usize {
        let len = u64::try_from(len).expect("length fits u64");
        usize::try_from(self.next() % len).expect("index fits usize")
    }
}

fn seed() -> u64 {
    if let Ok(text) = std::env::var("TENAX_CRASH_SEED") {
        return text
            .trim()
            .parse()
            .expect("TENAX_CRASH_SEED must be a whole number");
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.as_secs() ^ u64::from(now.subsec_nanos()) ^ (u64::from(std::process::id()) << 32)
}

fn client() -> reqwest::Client {
    tenax_net::http::client_builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15))
        .build()
        .expect("building an HTTP client")
}

/// An answer: status and JSON body. `Err` when no complete answer arrived (not acknowledged).
async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Result<(u16, Value), String> {
    let response = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.map_err(|e| e.to_string())?;
    Ok((status, body))
}

async fn get(client: &reqwest::Client, url: &str) -> Result<(u16, Value), String> {
    let response = client.get(url).send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.map_err(|e| e.to_string())?;
    Ok((status, body))
}

/// A loopback port that was free a moment ago, below the ephemeral range (`common::ports`).
fn free_port() -> u16 {
    ports::spare_port()
}

/// The running binary. Dropping it kills the process (also when a check panics).
#[derive(Debug)]
struct Server {
    child: Child,
    base: String,
}

impl Server {
    async fn start(data_dir: &Path, log: &Path) -> Self {
        Self::start_with(data_dir, log, &[]).await
    }

    /// Starts the binary with `extra` flags besides the test's own.
    async fn start_with(data_dir: &Path, log: &Path, extra: &[&str]) -> Self {
        let client = client();
        for attempt in 1..=5 {
            let port = free_port();
            let stderr = File::options()
                .create(true)
                .append(true)
                .open(log)
                .expect("opening the server log");
            let child = Command::new(env!("CARGO_BIN_EXE_tenax"))
                .arg("serve")
                .arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--data-dir")
                .arg(data_dir)
                // Explicit, so that no TENAX_* variable of the environment weakens the test.
                .args(["--durability", "sync", "--completed-retention", "1d"])
                .args(["--max-lease", "12h", "--log-format", "text"])
                .args(extra)
                .env("TENAX_LOG", "info")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(stderr))
                .spawn()
                .expect("spawning the tenax binary");
            let mut server = Self {
                child,
                base: format!("http://127.0.0.1:{port}"),
            };
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if let Ok(Some(status)) = server.child.try_wait() {
                    eprintln!(
                        "tenax exited during start (attempt {attempt}, port {port}): {status}; retrying on another port"
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "tenax did not answer /healthz within {START_TIMEOUT:?}\n{}",
                    log_tail(log)
                );
                let url = format!("{}/healthz", server.base);
                if let Ok(response) = client.get(&url).send().await {
                    if response.status().is_success() {
                        return server;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("tenax failed to start five times\n{}", log_tail(log));
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reap the process.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let start = text.char_indices().rev().nth(6_000).map_or(0, |(i, _)| i);
    format!("--- server log (tail) ---\n{}", &text[start..])
}

#[derive(Debug, Default)]
struct ProducerLog {
    /// Acknowledged: (id, n, queue).
    acked: Vec<(u64, u64, &'static str)>,
    /// Every payload number sent, acknowledged or not: (n, queue).
    sent: Vec<(u64, &'static str)>,
    unexpected: Vec<String>,
}

async fn producer(
    base: String,
    who: usize,
    counter: Arc<AtomicU64>,
    answered: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    mut rng: Rng,
) -> ProducerLog {
    let client = client();
    let mut log = ProducerLog::default();
    while !stop.load(Ordering::SeqCst) {
        let queue = QUEUES[rng.index(QUEUES.len())];
        let size = if rng.percent(40) { 1 } else { rng.range(2, 12) };
        let ns: Vec<u64> = (0..size)
            .map(|_| counter.fetch_add(1, Ordering::SeqCst))
            .collect();
        log.sent.extend(ns.iter().map(|&n| (n, queue)));
        let job =
            |n: u64| json!({"queue": queue, "type": KIND, "payload": {"n": n, "producer": who}});
        let result = if size == 1 {
            post(&client, &format!("{base}/api/jobs"), &job(ns[0])).await
        } else {
            let jobs: Vec<Value> = ns.iter().map(|&n| job(n)).collect();
            post(
                &client,
                &format!("{base}/api/jobs/batch"),
                &json!({ "jobs": jobs }),
            )
            .await
        };
        let body = match result {
            // No complete answer: the server is gone, nothing here was acknowledged.
            Err(_) => break,
            Ok((201, body)) => {
                answered.fetch_add(1, Ordering::SeqCst);
                body
            }
            Ok((status, body)) => {
                log.unexpected
                    .push(format!("enqueue answered {status}: {body}"));
                break;
            }
        };
        let ids: Vec<Option<u64>> = if size == 1 {
            vec![body["id"].as_u64()]
        } else {
            body["jobs"]
                .as_array()
                .map(|jobs| jobs.iter().map(|j| j["id"].as_u64()).collect())
                .unwrap_or_default()
        };
        if ids.len() != ns.len() || ids.iter().any(Option::is_none) {
            log.unexpected
                .push(format!("enqueue of {} jobs answered {body}", ns.len()));
            break;
        }
        for (id, &n) in ids.into_iter().flatten().zip(&ns) {
            log.acked.push((id, n, queue));
        }
    }
    log
}

#[derive(Debug, Default)]
struct ConsumerLog {
    /// Handed out by take: (id, n, queue).
    taken: Vec<(u64, u64, String)>,
    completion_sent: Vec<u64>,
    completion_acked: Vec<u64>,
    unexpected: Vec<String>,
}

async fn consumer(base: String, stop: Arc<AtomicBool>, mut rng: Rng) -> ConsumerLog {
    let client = client();
    let mut log = ConsumerLog::default();
    'load: while !stop.load(Ordering::SeqCst) {
        let request =
            json!({"queues": QUEUES, "max": rng.range(1, 16), "lease": 60_000, "wait": 100});
        let body = match post(&client, &format!("{base}/api/take"), &request).await {
            Err(_) => break,
            Ok((200, body)) => body,
            Ok((status, body)) => {
                log.unexpected
                    .push(format!("take answered {status}: {body}"));
                break;
            }
        };
        let Some(jobs) = body["jobs"].as_array() else {
            log.unexpected.push(format!("take answered {body}"));
            break;
        };
        let mut to_complete = Vec::new();
        for job in jobs {
            let (Some(id), Some(n), Some(queue), Some(token)) = (
                job["id"].as_u64(),
                job["payload"]["n"].as_u64(),
                job["queue"].as_str(),
                job["lease_token"].as_u64(),
            ) else {
                log.unexpected.push(format!("take handed out {job}"));
                continue;
            };
            log.taken.push((id, n, queue.to_owned()));
            // Leave some in flight: they must be ready again after the kill.
            if !rng.percent(15) {
                to_complete.push((id, token));
            }
        }
        if to_complete.is_empty() {
            continue;
        }
        if rng.percent(50) {
            let acks: Vec<Value> = to_complete
                .iter()
                .map(|(id, token)| json!({"id": id, "lease_token": token}))
                .collect();
            log.completion_sent
                .extend(to_complete.iter().map(|(id, _)| *id));
            let url = format!("{base}/api/jobs/complete");
            match post(&client, &url, &json!({ "jobs": acks })).await {
                Err(_) => break,
                Ok((200, answer)) => {
                    let results = answer["results"].as_array().cloned().unwrap_or_default();
                    if results.len() != to_complete.len() {
                        log.unexpected
                            .push(format!("complete of {to_complete:?} answered {answer}"));
                    }
                    for result in results {
                        match (result["id"].as_u64(), result["completed"].as_bool()) {
                            (Some(id), Some(true)) => log.completion_acked.push(id),
                            _ => log.unexpected.push(format!("completion refused: {result}")),
                        }
                    }
                }
                Ok((status, answer)) => {
                    log.unexpected
                        .push(format!("complete answered {status}: {answer}"));
                    break;
                }
            }
        } else {
            for (id, token) in to_complete {
                log.completion_sent.push(id);
                let url = format!("{base}/api/jobs/{id}/complete");
                match post(&client, &url, &json!({ "lease_token": token })).await {
                    Err(_) => break 'load,
                    Ok((200, _)) => log.completion_acked.push(id),
                    Ok((status, answer)) => {
                        log.unexpected
                            .push(format!("complete of job {id} answered {status}: {answer}"));
                        break 'load;
                    }
                }
            }
        }
    }
    log
}

/// What the test knows must hold on disk.
#[derive(Debug, Default)]
struct Model {
    /// Jobs that must exist: id → (n, queue). Acknowledged enqueues, jobs handed to a worker,
    /// and everything seen after a restart.
    jobs: BTreeMap<u64, (u64, String)>,
    /// Every payload number ever sent → its queue.
    sent: HashMap<u64, String>,
    /// Jobs that must be completed: acknowledged completions and completions seen after a
    /// restart.
    completed: HashSet<u64>,
    /// Jobs whose completion was sent, acknowledged or not.
    completion_sent: HashSet<u64>,
    /// Jobs the verification leased in the running process (in flight at the next kill).
    leased_by_check: Vec<u64>,
}

impl Model {
    /// Records a job that must exist; an id seen with two payloads is a violation.
    fn must_exist(
        &mut self,
        id: u64,
        n: u64,
        queue: &str,
        why: &str,
        violations: &mut Vec<String>,
    ) {
        match self.jobs.get(&id) {
            Some((known, known_queue)) if *known != n || known_queue != queue => {
                violations.push(format!(
                    "job {id} was {why} as n={n} in {queue}, but is known as n={known} in {known_queue}: an id was reused"
                ));
            }
            Some(_) => {}
            None => {
                self.jobs.insert(id, (n, queue.to_owned()));
            }
        }
    }
}

/// One job of the listing.
#[derive(Debug)]
struct Listed {
    status: String,
    n: Option<u64>,
    queue: String,
    kind: String,
}

#[derive(Debug, Default)]
struct Totals {
    scheduled: u64,
    ready: u64,
    in_flight: u64,
    completed: u64,
    dead: u64,
}

async fn stats(client: &reqwest::Client, server: &Server) -> Totals {
    let (status, body) = get(client, &server.url("/api/stats"))
        .await
        .expect("GET /api/stats");
    assert_eq!(status, 200, "GET /api/stats: {body}");
    let t = &body["totals"];
    let n = |name: &str| {
        t[name]
            .as_u64()
            .unwrap_or_else(|| panic!("stats without totals.{name}: {body}"))
    };
    Totals {
        scheduled: n("scheduled"),
        ready: n("ready"),
        in_flight: n("in_flight"),
        completed: n("completed"),
        dead: n("dead"),
    }
}

async fn list_all(client: &reqwest::Client, server: &Server) -> BTreeMap<u64, Listed> {
    let mut listed = BTreeMap::new();
    let mut after: Option<u64> = None;
    for _ in 0..100_000 {
        let url = match after {
            Some(after) => server.url(&format!("/api/jobs?limit=1000&after={after}")),
            None => server.url("/api/jobs?limit=1000"),
        };
        let (status, body) = get(client, &url).await.expect("listing jobs");
        assert_eq!(status, 200, "GET {url}: {body}");
        for job in body["jobs"].as_array().expect("a page of jobs") {
            let id = job["id"].as_u64().expect("a job id");
            listed.insert(
                id,
                Listed {
                    status: job["status"].as_str().unwrap_or_default().to_owned(),
                    n: job["payload"]["n"].as_u64(),
                    queue: job["queue"].as_str().unwrap_or_default().to_owned(),
                    kind: job["type"].as_str().unwrap_or_default().to_owned(),
                },
            );
        }
        match body["next_after"].as_u64() {
            Some(next) => after = Some(next),
            None => return listed,
        }
    }
    panic!("listing did not end");
}

/// Summary of one verification, for the test output.
#[derive(Debug, Default)]
struct Checked {
    stored: usize,
    ready: usize,
    completed: usize,
    stored_without_ack: usize,
    in_flight_back: usize,
}

/// The checks after a restart. `in_flight_at_kill`: jobs leased in the killed process and
/// not acknowledged as completed.
async fn verify(
    server: &Server,
    model: &mut Model,
    in_flight_at_kill: &HashSet<u64>,
    rng: &mut Rng,
    violations: &mut Vec<String>,
) -> Checked {
    let client = client();
    let before = stats(&client, server).await;
    let listed = list_all(&client, server).await;
    let mut checked = Checked {
        stored: listed.len(),
        ..Checked::default()
    };

    // Every job that must exist does, with its payload, queue and type.
    for (id, (n, queue)) in &model.jobs {
        match listed.get(id) {
            None => violations.push(format!(
                "job {id} (n={n}, {queue}) is missing after the restart"
            )),
            Some(job) => {
                if job.n != Some(*n) || job.queue != *queue || job.kind != KIND {
                    violations.push(format!(
                        "job {id} should be n={n} in {queue} of type {KIND}, is n={:?} in {} of type {}",
                        job.n, job.queue, job.kind
                    ));
                }
            }
        }
    }
    // The same through GET /api/jobs/{id}, for a sample.
    let ids: Vec<u64> = model.jobs.keys().copied().collect();
    for _ in 0..ids.len().min(200) {
        let id = ids[rng.index(ids.len())];
        let (n, _) = &model.jobs[&id];
        let url = server.url(&format!("/api/jobs/{id}"));
        let (status, body) = get(&client, &url).await.expect("GET /api/jobs/{id}");
        if status != 200 || body["payload"]["n"].as_u64() != Some(*n) {
            violations.push(format!(
                "GET /api/jobs/{id}: {status} {body}; expected n={n}"
            ));
        } else if listed
            .get(&id)
            .is_some_and(|job| body["status"].as_str() != Some(job.status.as_str()))
        {
            violations.push(format!(
                "GET /api/jobs/{id} says {}, the listing says otherwise",
                body["status"]
            ));
        }
    }
    // Every acknowledged completion holds.
    for id in &model.completed {
        match listed.get(id) {
            Some(job) if job.status == "completed" => {}
            Some(job) => violations.push(format!(
                "job {id}: completion was acknowledged, but it is {} after the restart (it would run again)",
                job.status
            )),
            None => {} // Reported as missing above.
        }
    }
    // Every stored job is ready or completed, was sent once, and a completed one was sent to
    // complete.
    let mut seen_n: HashMap<u64, u64> = HashMap::new();
    for (id, job) in &listed {
        match job.status.as_str() {
            "ready" => checked.ready += 1,
            "completed" => {
                checked.completed += 1;
                if !model.completion_sent.contains(id) {
                    violations.push(format!(
                        "job {id} is completed, but nobody asked to complete it"
                    ));
                }
            }
            other => violations.push(format!(
                "job {id} is {other} after the restart; expected ready or completed"
            )),
        }
        let Some(n) = job.n else {
            violations.push(format!("job {id} has no payload n"));
            continue;
        };
        if let Some(other) = seen_n.insert(n, *id) {
            violations.push(format!(
                "payload n={n} is stored twice: jobs {other} and {id}"
            ));
        }
        if !model.jobs.contains_key(id) {
            checked.stored_without_ack += 1;
            if model.sent.get(&n).is_none_or(|queue| *queue != job.queue) {
                violations.push(format!(
                    "job {id} (n={n}, {}) was never enqueued by the test",
                    job.queue
                ));
            }
        }
    }
    // In-flight jobs are back: ready, or completed if their completion was sent.
    for id in in_flight_at_kill {
        match listed.get(id).map(|job| job.status.as_str()) {
            Some("ready") => checked.in_flight_back += 1,
            Some("completed") if model.completion_sent.contains(id) => {}
            Some(status) => violations.push(format!(
                "job {id} was in flight at the kill and is {status} after the restart"
            )),
            None => {} // Reported as missing above.
        }
    }
    // The counts agree with the listing.
    let count = |n: usize| u64::try_from(n).expect("count fits u64");
    if before.ready != count(checked.ready)
        || before.completed != count(checked.completed)
        || before.in_flight != 0
        || before.scheduled != 0
        || before.dead != 0
    {
        violations.push(format!(
            "stats after the restart {before:?} disagree with the listing: {} ready, {} completed, nothing else",
            checked.ready, checked.completed
        ));
    }

    // Taking everything returns exactly the ready jobs.
    let ready: HashSet<u64> = listed
        .iter()
        .filter(|(_, job)| job.status == "ready")
        .map(|(id, _)| *id)
        .collect();
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let take = json!({"queues": QUEUES, "max": 1000, "lease": "10m", "wait": 0});
    for _ in 0..listed.len() / 1000 + 5 {
        let (status, body) = post(&client, &server.url("/api/take"), &take)
            .await
            .expect("taking after the restart");
        assert_eq!(status, 200, "take after the restart: {body}");
        let jobs = body["jobs"].as_array().expect("taken jobs");
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let id = job["id"].as_u64().expect("a job id");
            let token = job["lease_token"].as_u64().expect("a lease token");
            if job["payload"]["n"].as_u64() != listed.get(&id).and_then(|j| j.n) {
                violations.push(format!(
                    "take handed out {job}, which the listing shows otherwise"
                ));
            }
            taken.push((id, token));
        }
    }
    let taken_ids: HashSet<u64> = taken.iter().map(|(id, _)| *id).collect();
    if taken_ids.len() != taken.len() {
        violations.push("one take after the restart handed out a job twice".to_owned());
    }
    for id in &taken_ids {
        if model.completed.contains(id) {
            violations.push(format!(
                "job {id} was handed out after the restart, but its completion was acknowledged"
            ));
        }
    }
    if taken_ids != ready {
        let mut not_taken: Vec<_> = ready.difference(&taken_ids).collect();
        let mut not_ready: Vec<_> = taken_ids.difference(&ready).collect();
        not_taken.sort_unstable();
        not_ready.sort_unstable();
        violations.push(format!(
            "taking everything after the restart disagrees with the listing: ready but not taken {not_taken:?}, taken but not ready {not_ready:?}"
        ));
    }
    let after = stats(&client, server).await;
    if after.in_flight != count(taken_ids.len()) || after.ready != 0 {
        violations.push(format!(
            "stats after taking {} jobs: {after:?}",
            taken_ids.len()
        ));
    }

    // What is on disk now must survive every later round.
    for (id, job) in &listed {
        if let Some(n) = job.n {
            model.must_exist(*id, n, &job.queue, "listed after a restart", violations);
        }
        if job.status == "completed" {
            model.completed.insert(*id);
        }
    }

    // Complete half of what was taken; the rest stays in flight for the next kill.
    let (complete, keep): (Vec<_>, Vec<_>) = taken.into_iter().partition(|_| rng.percent(50));
    model.leased_by_check = keep.into_iter().map(|(id, _)| id).collect();
    for chunk in complete.chunks(1000) {
        let acks: Vec<Value> = chunk
            .iter()
            .map(|(id, token)| json!({"id": id, "lease_token": token}))
            .collect();
        model
            .completion_sent
            .extend(chunk.iter().map(|(id, _)| *id));
        let (status, answer) = post(
            &client,
            &server.url("/api/jobs/complete"),
            &json!({ "jobs": acks }),
        )
        .await
        .expect("completing after the restart");
        assert_eq!(status, 200, "complete after the restart: {answer}");
        for result in answer["results"].as_array().expect("results") {
            match (result["id"].as_u64(), result["completed"].as_bool()) {
                (Some(id), Some(true)) => {
                    model.completed.insert(id);
                }
                _ => violations.push(format!("completion after the restart refused: {result}")),
            }
        }
    }
    checked
}

fn fail_round(round: usize, seed: u64, violations: &[String], log: &Path) -> ! {
    let shown: Vec<&str> = violations.iter().take(SHOWN).map(String::as_str).collect();
    panic!(
        "round {round}: {} durability violations (seed {seed}; rerun with TENAX_CRASH_SEED={seed}):\n  {}\n{}",
        violations.len(),
        shown.join("\n  "),
        log_tail(log)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_load_loses_nothing_acknowledged() {
    let seed = seed();
    println!("crash test seed: {seed} (rerun with TENAX_CRASH_SEED={seed})");
    let started = Instant::now();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let counter = Arc::new(AtomicU64::new(1));
    let mut model = Model::default();

    let mut server = Server::start(&data, &log).await;
    for round in 1..=ROUNDS {
        let kill_after = rng.range(KILL_AFTER_MS.0, KILL_AFTER_MS.1);
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|who| {
                tokio::spawn(producer(
                    server.base.clone(),
                    who,
                    counter.clone(),
                    answered.clone(),
                    stop.clone(),
                    Rng(rng.next()),
                ))
            })
            .collect();
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| tokio::spawn(consumer(server.base.clone(), stop.clone(), Rng(rng.next()))))
            .collect();

        // The kill time counts from the first acknowledged enqueue, so that a slow machine
        // does not kill the server before any load reaches it.
        let waiting_since = Instant::now();
        while answered.load(Ordering::SeqCst) == 0 {
            assert!(
                waiting_since.elapsed() < Duration::from_secs(30),
                "no enqueue was acknowledged within 30 s\n{}",
                log_tail(&log)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(kill_after)).await;
        server.kill();
        stop.store(true, Ordering::SeqCst);

        let mut violations = Vec::new();
        let mut produced = Vec::new();
        for handle in producers {
            let log = tokio::time::timeout(Duration::from_secs(30), handle)
                .await
                .expect("a producer stopped")
                .expect("a producer did not panic");
            produced.push(log);
        }
        let mut consumed = Vec::new();
        for handle in consumers {
            let log = tokio::time::timeout(Duration::from_secs(30), handle)
                .await
                .expect("a consumer stopped")
                .expect("a consumer did not panic");
            consumed.push(log);
        }

        // What the killed process acknowledged and handed out.
        let mut acked = 0usize;
        for log in &produced {
            violations.extend(log.unexpected.iter().cloned());
            for &(n, queue) in &log.sent {
                model.sent.insert(n, queue.to_owned());
            }
            for &(id, n, queue) in &log.acked {
                acked += 1;
                model.must_exist(id, n, queue, "acknowledged", &mut violations);
            }
        }
        let mut handed_out: HashSet<u64> = model.leased_by_check.iter().copied().collect();
        let mut taken = 0usize;
        let mut completed = 0usize;
        for log in &consumed {
            violations.extend(log.unexpected.iter().cloned());
            for (id, n, queue) in &log.taken {
                taken += 1;
                if !handed_out.insert(*id) {
                    violations.push(format!(
                        "job {id} was handed out twice by one server process"
                    ));
                }
                if model.completed.contains(id) {
                    violations.push(format!(
                        "job {id} was handed out, but its completion had been acknowledged"
                    ));
                }
                model.must_exist(*id, *n, queue, "handed out", &mut violations);
            }
        }
        for log in &consumed {
            model
                .completion_sent
                .extend(log.completion_sent.iter().copied());
            for id in &log.completion_acked {
                completed += 1;
                model.completed.insert(*id);
            }
        }
        let in_flight_at_kill: HashSet<u64> = handed_out
            .into_iter()
            .filter(|id| !model.completed.contains(id))
            .collect();
        if acked == 0 || taken == 0 {
            violations.push(format!(
                "no load reached the server before the kill ({acked} enqueues acknowledged, {taken} jobs taken)"
            ));
        }

        server = Server::start(&data, &log).await;
        let checked = verify(
            &server,
            &mut model,
            &in_flight_at_kill,
            &mut rng,
            &mut violations,
        )
        .await;
        if !violations.is_empty() {
            fail_round(round, seed, &violations, &log);
        }
        println!(
            "round {round}: SIGKILL after {kill_after} ms; before it {acked} enqueues and {completed} completions acknowledged, {taken} jobs taken, {} in flight; after the restart {} jobs stored ({} ready, {} completed, {} stored without a received ack), {} of the in-flight jobs ready again (the rest completed by an unacknowledged completion): ok",
            in_flight_at_kill.len(),
            checked.stored,
            checked.ready,
            checked.completed,
            checked.stored_without_ack,
            checked.in_flight_back,
        );
    }
    drop(server);
    println!(
        "crash test: {ROUNDS} rounds, {} jobs tracked, {:.1} s",
        model.jobs.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Enqueues batches of messages `{"n": k}` on `queue` until `stop`, counting acknowledged
/// messages in `acked_count`; returns the acknowledged (id, n) and every n sent.
async fn publisher(
    base: String,
    queue: &'static str,
    stop: Arc<AtomicBool>,
    acked_count: Arc<AtomicUsize>,
) -> (Vec<(u64, u64)>, Vec<u64>) {
    let client = client();
    let mut acked = Vec::new();
    let mut sent = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let batch: Vec<u64> = (n..n + 10).collect();
        n += 10;
        sent.extend(&batch);
        let jobs: Vec<Value> = batch
            .iter()
            .map(|k| json!({"queue": queue, "type": "crash.message", "payload": {"n": k}}))
            .collect();
        let url = format!("{base}/api/jobs/batch");
        match post(&client, &url, &json!({ "jobs": jobs })).await {
            Ok((201, answer)) => {
                let ids = answer["jobs"]
                    .as_array()
                    .expect("the batch answer lists jobs");
                assert_eq!(ids.len(), batch.len(), "{answer}");
                for (job, k) in ids.iter().zip(&batch) {
                    acked.push((job["id"].as_u64().expect("a job id"), *k));
                }
                acked_count.store(acked.len(), Ordering::SeqCst);
            }
            Ok((status, answer)) => panic!("enqueue answered {status}: {answer}"),
            // The kill: not acknowledged.
            Err(_) => break,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (acked, sent)
}

/// SIGKILL while webhook deliveries are in flight: after the restart every acknowledged message
/// is delivered (at least once: those in flight at the kill are sent again), only stored
/// messages are delivered, and every delivery ends completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_webhook_delivery_loses_no_delivery() {
    const QUEUE: &str = "crash-hooks";
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let flags = ["--allow-private-endpoints"];
    // Each answer takes 10 ms and the throttle spreads the deliveries out, so that many are
    // waiting and some are in flight when the kill comes. The kill waits for that state rather
    // than for a fixed time: on a loaded machine the publisher is slower.
    let receiver =
        receiver::Receiver::start(Vec::new(), receiver::Reply::slow(Duration::from_millis(10)))
            .await;
    let mut server = Server::start_with(&data, &log, &flags).await;
    let client = client();
    let (status, sub) = post(
        &client,
        &server.url(&format!("/api/queues/{QUEUE}/subscriptions")),
        &json!({"endpoint": receiver.url("/hook"), "throttle_per_second": 50}),
    )
    .await
    .expect("creating the subscription");
    assert_eq!(status, 201, "{sub}");
    let sub = sub["id"].as_u64().expect("a subscription id");

    let stop = Arc::new(AtomicBool::new(false));
    let acked_count = Arc::new(AtomicUsize::new(0));
    let publishing = tokio::spawn(publisher(
        server.base.clone(),
        QUEUE,
        stop.clone(),
        acked_count.clone(),
    ));
    let waiting_since = Instant::now();
    loop {
        let delivered = receiver.count();
        let acked = acked_count.load(Ordering::SeqCst);
        if delivered > 0 && acked >= delivered + 100 {
            break;
        }
        assert!(
            waiting_since.elapsed() < Duration::from_secs(20),
            "deliveries never fell 100 behind the publisher ({delivered} of {acked})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill();
    stop.store(true, Ordering::SeqCst);
    let (acked, sent) = tokio::time::timeout(Duration::from_secs(30), publishing)
        .await
        .expect("the publisher stopped")
        .expect("the publisher did not panic");
    let before_restart = receiver.count();
    assert!(
        !acked.is_empty(),
        "nothing was acknowledged before the kill"
    );
    assert!(
        before_restart < acked.len(),
        "every delivery was done before the kill ({before_restart} of {}): the test proves nothing",
        acked.len()
    );

    let server = Server::start_with(&data, &log, &flags).await;
    // Every acknowledged message arrives.
    let deadline = Instant::now() + Duration::from_secs(30);
    let wanted: HashSet<u64> = acked.iter().map(|(id, _)| *id).collect();
    loop {
        let got: HashSet<u64> = receiver
            .received()
            .iter()
            .filter_map(|r| r.json()["message"]["id"].as_u64())
            .collect();
        let missing = wanted.difference(&got).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} acknowledged messages never arrived\n{}",
            wanted.len(),
            log_tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every delivery ends completed: none dead, none left pending.
    let url = server.url(&format!("/api/subscriptions/{sub}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let counts = loop {
        let (status, view) = get(&client, &url).await.expect("the subscription");
        assert_eq!(status, 200, "{view}");
        let counts = view["deliveries"].clone();
        let pending = ["scheduled", "ready", "in_flight"]
            .iter()
            .map(|k| counts[k].as_u64().expect("a count"))
            .sum::<u64>();
        if pending == 0 {
            break counts;
        }
        assert!(
            Instant::now() < deadline,
            "deliveries still pending: {view}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(counts["dead"], json!(0), "{counts}");
    let completed = counts["completed"].as_u64().expect("a count");

    // Only stored messages were delivered, each with the payload it was enqueued with; a
    // message is sent again only if it was in flight at the kill.
    let sent: HashSet<u64> = sent.into_iter().collect();
    let mut times: HashMap<u64, usize> = HashMap::new();
    for request in receiver.received() {
        let envelope = request.json();
        let id = envelope["message"]["id"].as_u64().expect("a message id");
        let n = envelope["message"]["body"]["n"]
            .as_u64()
            .expect("a payload number");
        assert!(
            sent.contains(&n),
            "delivered a payload never sent: {envelope}"
        );
        let (status, job) = get(&client, &server.url(&format!("/api/jobs/{id}")))
            .await
            .expect("the message");
        assert_eq!(status, 200, "a delivered message is not stored: {envelope}");
        assert_eq!(job["payload"], json!({ "n": n }), "{envelope}");
        *times.entry(id).or_default() += 1;
    }
    let delivered = u64::try_from(times.len()).expect("a count");
    assert_eq!(
        completed, delivered,
        "one completed delivery per delivered message"
    );
    let again = times.values().filter(|t| **t > 1).count();
    // At most the endpoint's concurrency (32 by default) was in flight at the kill.
    assert!(
        again <= 32,
        "{again} messages were delivered more than once"
    );
}
