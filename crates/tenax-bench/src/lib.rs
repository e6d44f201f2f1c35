//! `tenax bench`: drives a running server over HTTP and measures jobs per second and request
//! latency, one scenario at a time. The command line is in `cli/bench.rs`; the figures this
//! machine gives, and how they were taken, are in `docs/benchmarks.md`.
//!
//! Every scenario uses a queue of its own (`bench-<scenario>-<random>`), so runs against the
//! same server do not see each other's jobs. Every loop is bounded by a job count and by
//! `max_seconds`. Request bodies are serialised once and reused. The loads that send one request
//! after another do it on connections of their own (`lane`); everything else shares one
//! `reqwest::Client` (HTTP/1.1 keep-alive, or one HTTP/2 connection with `--http2`).

mod dag;
mod deliveries;
mod enqueue;
mod fanout;
mod floor;
mod lane;
mod memory;
mod one_by_one;
mod promotion;
mod report;
mod work;
mod worker;
mod zaqar;
mod zaqar_ws;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::ValueEnum;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use self::fanout::{Extra as FanoutExtra, FanoutCase, SIZES as FANOUT_SIZES};
pub use self::floor::{FloorReport, TARGET_SHARE};
pub use self::memory::{ProcMemory, parse_proc_status};
pub use self::report::{
    Align, format_count, format_mb, format_micros, format_rate, render_table, table,
};

/// A benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum Scenario {
    /// One job per `POST /api/jobs`, one connection.
    #[value(name = "enqueue-1")]
    #[serde(rename = "enqueue-1")]
    Enqueue1,
    /// One job per `POST /api/jobs`, 8 concurrent connections.
    #[value(name = "enqueue-8")]
    #[serde(rename = "enqueue-8")]
    Enqueue8,
    /// One job per `POST /api/jobs`, 64 concurrent connections.
    #[value(name = "enqueue-64")]
    #[serde(rename = "enqueue-64")]
    Enqueue64,
    /// 100 jobs per `POST /api/jobs/batch`, 4 connections.
    #[value(name = "bulk-100")]
    #[serde(rename = "bulk-100")]
    Bulk100,
    /// 1000 jobs per `POST /api/jobs/batch`, 4 connections.
    #[value(name = "bulk-1000")]
    #[serde(rename = "bulk-1000")]
    Bulk1000,
    /// Pre-filled queue drained by workers taking and completing in batches.
    #[value(name = "take-complete")]
    #[serde(rename = "take-complete")]
    TakeComplete,
    /// Producers and consumers at once; jobs completed end to end.
    #[value(name = "mixed")]
    #[serde(rename = "mixed")]
    Mixed,
    /// The simple worker, one worker: take one job, complete it, one request each.
    #[value(name = "take-one-1")]
    #[serde(rename = "take-one-1")]
    TakeOne1,
    /// The simple worker, 8 workers at once: take one job, complete it, one request each.
    #[value(name = "take-one-8")]
    #[serde(rename = "take-one-8")]
    TakeOne8,
    /// `take-complete` with tenax-client's worker runtime as the consumers (no-op handler).
    #[value(name = "take-complete-worker")]
    #[serde(rename = "take-complete-worker")]
    TakeCompleteWorker,
    /// `mixed` with tenax-client's worker runtime as the consumers (no-op handler).
    #[value(name = "mixed-worker")]
    #[serde(rename = "mixed-worker")]
    MixedWorker,
    /// Jobs all due at one instant: how fast they become ready.
    #[value(name = "promotion")]
    #[serde(rename = "promotion")]
    Promotion,
    /// The server's resident memory holding many waiting jobs, and once they are drained
    /// (needs `--server-pid`).
    #[value(name = "memory")]
    #[serde(rename = "memory")]
    Memory,
    /// Bulk enqueue (100 a request) while the store grows to a million jobs: the tail latency.
    #[value(name = "growth")]
    #[serde(rename = "growth")]
    Growth,
    /// The machine's floor for one job per request (`GET /healthz` round trips, one
    /// `fdatasync` in `--data-dir`), then `enqueue-1` and `enqueue-8` as shares of it (and of
    /// a relaxed server's `enqueue-8`, with `--relaxed-url`).
    #[value(name = "floor")]
    #[serde(rename = "floor")]
    Floor,
    /// Webhook deliveries to a local receiver (the server needs `--allow-private-endpoints`).
    #[value(name = "deliveries")]
    #[serde(rename = "deliveries")]
    Deliveries,
    /// Webhook deliveries to a receiver that fails every other request.
    #[value(name = "deliveries-flaky")]
    #[serde(rename = "deliveries-flaky")]
    DeliveriesFlaky,
    /// Webhook deliveries at 1, 100 and 10 000 subscriptions, each alone, with a spare endpoint
    /// and with a slow one: burst deliveries/s and the healthy endpoints' latency at a steady
    /// rate.
    #[value(name = "deliveries-fanout")]
    #[serde(rename = "deliveries-fanout")]
    DeliveriesFanout,
    /// Zaqar v2: one message per `POST /v2/queues/{q}/messages`, 8 connections.
    #[value(name = "zaqar-post-1")]
    #[serde(rename = "zaqar-post-1")]
    ZaqarPost1,
    /// Zaqar v2: ten messages per post, 8 connections.
    #[value(name = "zaqar-post-10")]
    #[serde(rename = "zaqar-post-10")]
    ZaqarPost10,
    /// Zaqar v2: claim up to 10 and delete each message with its own DELETE, 8 consumers.
    #[value(name = "zaqar-claim-delete")]
    #[serde(rename = "zaqar-claim-delete")]
    ZaqarClaimDelete,
    /// Zaqar's websocket: ten messages per `message_post` frame, 8 websockets.
    #[value(name = "zaqar-ws-post-10")]
    #[serde(rename = "zaqar-ws-post-10")]
    ZaqarWsPost10,
    /// Zaqar's websocket: `claim_create` of up to 10, then a `message_delete` frame per
    /// message, 8 websockets.
    #[value(name = "zaqar-ws-claim-delete")]
    #[serde(rename = "zaqar-ws-claim-delete")]
    ZaqarWsClaimDelete,
    /// Workflows of 1 → 100 → 1 jobs (one batch each) produced and consumed at once, against
    /// the same jobs without their dependencies.
    #[value(name = "dag")]
    #[serde(rename = "dag")]
    Dag,
}

impl Scenario {
    /// Every scenario but the delivery ones (they need a server flag), the Zaqar ones,
    /// `growth` (a million jobs) and `floor` (it writes in the server's data directory).
    pub const ALL: [Scenario; 14] = [
        Self::Enqueue1,
        Self::Enqueue8,
        Self::Enqueue64,
        Self::Bulk100,
        Self::Bulk1000,
        Self::TakeComplete,
        Self::Mixed,
        Self::TakeOne1,
        Self::TakeOne8,
        Self::TakeCompleteWorker,
        Self::MixedWorker,
        Self::Promotion,
        Self::Memory,
        Self::Dag,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Enqueue1 => "enqueue-1",
            Self::Enqueue8 => "enqueue-8",
            Self::Enqueue64 => "enqueue-64",
            Self::Bulk100 => "bulk-100",
            Self::Bulk1000 => "bulk-1000",
            Self::TakeComplete => "take-complete",
            Self::Mixed => "mixed",
            Self::TakeOne1 => "take-one-1",
            Self::TakeOne8 => "take-one-8",
            Self::TakeCompleteWorker => "take-complete-worker",
            Self::MixedWorker => "mixed-worker",
            Self::Promotion => "promotion",
            Self::Memory => "memory",
            Self::Growth => "growth",
            Self::Floor => "floor",
            Self::Deliveries => "deliveries",
            Self::DeliveriesFlaky => "deliveries-flaky",
            Self::DeliveriesFanout => "deliveries-fanout",
            Self::ZaqarPost1 => "zaqar-post-1",
            Self::ZaqarPost10 => "zaqar-post-10",
            Self::ZaqarClaimDelete => "zaqar-claim-delete",
            Self::ZaqarWsPost10 => "zaqar-ws-post-10",
            Self::ZaqarWsClaimDelete => "zaqar-ws-claim-delete",
            Self::Dag => "dag",
        }
    }

    /// Jobs the scenario handles when `--jobs` is not given: enough for a few seconds of work
    /// at the targets, few enough that single-job enqueue (one fsync each) finishes promptly.
    pub fn default_jobs(self) -> u64 {
        match self {
            Self::Enqueue1 => 3_000,
            Self::Enqueue8 => 20_000,
            Self::Enqueue64 => 60_000,
            Self::TakeOne1 => 5_000,
            Self::TakeOne8 => 30_000,
            Self::Growth => 1_000_000,
            // enqueue-1's and enqueue-8's (each runs its own, or --jobs each).
            Self::Floor => 23_000,
            Self::Bulk100 => 200_000,
            Self::Bulk1000 => 400_000,
            Self::TakeComplete
            | Self::Mixed
            | Self::TakeCompleteWorker
            | Self::MixedWorker
            | Self::Promotion
            | Self::Memory => 200_000,
            Self::Deliveries | Self::DeliveriesFlaky => 100_000,
            // Deliveries per phase, at each size.
            Self::DeliveriesFanout => 20_000,
            // 500 workflows, each phase.
            Self::Dag => 51_000,
            Self::ZaqarPost1 => 20_000,
            Self::ZaqarPost10
            | Self::ZaqarClaimDelete
            | Self::ZaqarWsPost10
            | Self::ZaqarWsClaimDelete => 200_000,
        }
    }
}

/// What to run, and against which server.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Base URL of the server, e.g. `http://127.0.0.1:7890`.
    pub url: String,
    pub scenarios: Vec<Scenario>,
    /// Jobs per scenario; `None` uses each scenario's default.
    pub jobs: Option<u64>,
    /// The longest any one phase of a scenario runs.
    pub max_seconds: u64,
    /// The server's process id, for the memory scenario (read from `/proc/PID/status`).
    pub server_pid: Option<u32>,
    /// Connections of the enqueue and bulk scenarios, instead of their own (1, 8, 4, 4).
    pub connections: Option<usize>,
    /// Consumers in take-complete (mixed uses half as many, and as many producers).
    pub workers: usize,
    /// Most jobs per take.
    pub take_max: usize,
    /// How far in the future the promotion scenario schedules its jobs.
    pub promotion_lead: Duration,
    /// Draw progress bars on stderr (when it is a terminal).
    pub progress: bool,
    /// Speak HTTP/2: every request over one connection (see [`Api::new`]).
    pub http2: bool,
    /// The token and CA file of every request.
    pub client: tenax_net::http::ClientOptions,
    /// Each scenario's queue stores its payloads encrypted (`encrypt_payloads`), set before
    /// the scenario starts: what encryption costs, against a run without it.
    pub encrypt_payloads: bool,
    /// The server's data directory, on this machine: `floor` times `fdatasync` there.
    pub data_dir: std::path::PathBuf,
    /// A second server, started with `--durability relaxed`: `floor` runs `enqueue-8` against
    /// it too, for durable `enqueue-8`'s share of it.
    pub relaxed_url: Option<String>,
    /// The sizes `deliveries-fanout` subscribes, one after the other ([`fanout::SIZES`] by
    /// default).
    pub fanout_sizes: Vec<usize>,
    /// The queue every scenario uses; `None`: a fresh one per scenario ([`queue_name`]). A
    /// pooled deployment places a queue on one pool: naming the queues of several benches
    /// puts their load where the caller wants it.
    pub queue: Option<String>,
}

/// The whole run.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_pid: Option<u32>,
    pub scenarios: Vec<ScenarioReport>,
}

/// One scenario's figures.
#[derive(Debug, Default, Serialize)]
pub struct ScenarioReport {
    pub scenario: &'static str,
    pub queue: String,
    /// Jobs counted by the rate: enqueued, completed or promoted, per scenario.
    pub jobs: u64,
    /// The measured interval.
    pub seconds: f64,
    pub jobs_per_sec: f64,
    /// Latency per request kind, in microseconds.
    pub requests: Vec<RequestStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryReport>,
    /// `floor`'s figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<FloorReport>,
    /// `deliveries-fanout`'s figures, one per size and slow endpoint or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fanout: Option<Vec<FanoutCase>>,
    /// Why the scenario did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Why the scenario stopped early.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub notes: Vec<String>,
}

/// Latency of one kind of request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestStats {
    pub request: String,
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

/// The server's memory, from `/proc/PID/status`.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub pid: u32,
    pub rss_before_kb: u64,
    /// Resident set once the jobs are enqueued.
    pub rss_kb: u64,
    /// The peak resident set of the process's life (`VmHWM`).
    pub hwm_kb: u64,
    /// Jobs the server held (any status, every queue) when measured.
    pub jobs_on_server: u64,
    /// Resident set once those jobs were taken and completed.
    pub rss_drained_kb: u64,
}

/// Runs the scenarios in order. A scenario that fails is reported and the others still run.
pub async fn run(config: &BenchConfig) -> anyhow::Result<BenchReport> {
    let api = Api::new(&config.url, &config.client, config.http2)?;
    api.get(&api.url("/healthz"))
        .await
        .with_context(|| format!("no tenax server answers at {}", config.url))?;
    let mut reports = Vec::new();
    for &scenario in &config.scenarios {
        let queue = config.queue.clone().unwrap_or_else(|| queue_name(scenario));
        let jobs = config
            .jobs
            .unwrap_or_else(|| scenario.default_jobs())
            .max(1);
        let ctx = Ctx {
            api: api.clone(),
            config: config.clone(),
            queue: queue.clone(),
            jobs,
            progress: progress_bar(config.progress, scenario, jobs),
        };
        let encrypted = if config.encrypt_payloads {
            encrypt_queue(&ctx, scenario).await
        } else {
            Ok(())
        };
        let result = match encrypted {
            Err(error) => Err(error),
            Ok(()) => run_scenario(&ctx, scenario).await,
        };
        ctx.progress.finish_and_clear();
        let mut report = result.unwrap_or_else(|error| ScenarioReport {
            error: Some(format!("{error:#}")),
            ..ScenarioReport::default()
        });
        if config.encrypt_payloads {
            report
                .notes
                .push("payloads stored encrypted (encrypt_payloads)".into());
        }
        report.scenario = scenario.name();
        report.queue = queue;
        reports.push(report);
    }
    Ok(BenchReport {
        url: config.url.clone(),
        server_pid: config.server_pid,
        scenarios: reports,
    })
}

/// Sets `encrypt_payloads` on the queue `scenario` uses (made if new).
async fn encrypt_queue(ctx: &Ctx, scenario: Scenario) -> anyhow::Result<()> {
    let queue = match scenario {
        Scenario::ZaqarPost1
        | Scenario::ZaqarPost10
        | Scenario::ZaqarClaimDelete
        | Scenario::ZaqarWsPost10
        | Scenario::ZaqarWsClaimDelete => zaqar::native_queue(ctx),
        _ => ctx.queue.clone(),
    };
    let url = ctx.api.url(&format!("/api/queues/{queue}?create=true"));
    ctx.api
        .put(&url, Bytes::from_static(br#"{"encrypt_payloads": true}"#))
        .await?;
    Ok(())
}

/// Runs one scenario on `ctx`'s queue.
async fn run_scenario(ctx: &Ctx, scenario: Scenario) -> anyhow::Result<ScenarioReport> {
    match scenario {
        Scenario::Enqueue1 => enqueue::single(ctx, 1).await,
        Scenario::Enqueue8 => enqueue::single(ctx, 8).await,
        Scenario::Enqueue64 => enqueue::single(ctx, 64).await,
        Scenario::Bulk100 => enqueue::bulk(ctx, 100).await,
        Scenario::Bulk1000 => enqueue::bulk(ctx, 1_000).await,
        Scenario::TakeComplete => work::take_complete(ctx).await,
        Scenario::Mixed => work::mixed(ctx).await,
        Scenario::TakeOne1 => one_by_one::run(ctx, 1).await,
        Scenario::TakeOne8 => one_by_one::run(ctx, 8).await,
        Scenario::TakeCompleteWorker => worker::take_complete(ctx).await,
        Scenario::MixedWorker => worker::mixed(ctx).await,
        Scenario::Promotion => promotion::run(ctx).await,
        Scenario::Memory => memory::run(ctx).await,
        Scenario::Growth => enqueue::growth(ctx).await,
        Scenario::Floor => floor::run(ctx).await,
        Scenario::Deliveries => deliveries::run(ctx, false).await,
        Scenario::DeliveriesFlaky => deliveries::run(ctx, true).await,
        Scenario::DeliveriesFanout => fanout::run(ctx).await,
        Scenario::ZaqarPost1 => zaqar::post_scenario(ctx, 1).await,
        Scenario::ZaqarPost10 => zaqar::post_scenario(ctx, 10).await,
        Scenario::ZaqarClaimDelete => zaqar::claim_delete(ctx).await,
        Scenario::ZaqarWsPost10 => zaqar_ws::post_scenario(ctx).await,
        Scenario::ZaqarWsClaimDelete => zaqar_ws::claim_delete(ctx).await,
        Scenario::Dag => dag::run(ctx).await,
    }
}

/// What a scenario gets.
#[derive(Debug)]
struct Ctx {
    api: Api,
    config: BenchConfig,
    queue: String,
    jobs: u64,
    progress: ProgressBar,
}

impl Ctx {
    fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_secs(self.config.max_seconds)
    }
}

fn progress_bar(enabled: bool, scenario: Scenario, jobs: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(jobs);
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>14} {bar:30} {pos}/{len} jobs {per_sec} {msg}")
    {
        bar.set_style(style);
    }
    bar.set_prefix(scenario.name());
    bar
}

/// `bench-<scenario>-<6 hex digits>`: unique enough that runs against one server never share a
/// queue.
pub fn queue_name(scenario: Scenario) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // A cheap mix of the clock and the process id; not cryptographic, only distinct.
    let mut x = u64::from(nanos) ^ (u64::from(std::process::id()) << 32);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    format!("bench-{}-{:06x}", scenario.name(), x & 0xff_ffff)
}

/// A realistic job payload of about 100 bytes.
pub fn payload() -> Value {
    json!({
        "user_id": 4_821_337,
        "template": "welcome-email",
        "locale": "en-GB",
        "to": "ada.lovelace@example.com",
        "vars": {"plan": "pro"}
    })
}

/// The type of every job the scenarios enqueue.
pub const JOB_TYPE: &str = "email.send";

/// One job as `POST /api/jobs` takes it; `run_at` in Unix milliseconds.
pub fn job(queue: &str, run_at_ms: Option<u64>) -> Value {
    let mut job = json!({"queue": queue, "type": JOB_TYPE, "payload": payload()});
    if let Some(at) = run_at_ms {
        job["run_at"] = json!(at);
    }
    job
}

/// A `POST /api/jobs/batch` body of `count` identical jobs, serialised once.
pub fn batch_body(queue: &str, count: usize, run_at_ms: Option<u64>) -> Bytes {
    let jobs: Vec<Value> = (0..count).map(|_| job(queue, run_at_ms)).collect();
    Bytes::from(serde_json::to_vec(&json!({ "jobs": jobs })).unwrap_or_default())
}

/// A `POST /api/jobs/complete` body for `(id, lease_token)` pairs.
pub fn complete_body(jobs: &[(u64, u64)]) -> Bytes {
    use std::fmt::Write as _;
    let mut body = String::with_capacity(12 + jobs.len() * 56);
    body.push_str("{\"jobs\":[");
    for (i, (id, token)) in jobs.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        let _ = write!(body, "{{\"id\":{id},\"lease_token\":{token}}}");
    }
    body.push_str("]}");
    Bytes::from(body)
}

/// Milliseconds since the Unix epoch, as the server's clock reads them.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The HTTP client: one pool of keep-alive connections shared by every task.
#[derive(Debug, Clone)]
pub struct Api {
    client: reqwest::Client,
    base: Arc<str>,
    /// Where load tasks open connections of their own ([`lane`]), when the base URL allows.
    lane: Option<Arc<lane::Target>>,
}

impl Api {
    /// With `http2`, every request goes over one HTTP/2 connection (h2c with prior knowledge
    /// on `http://`), so "N connections" means N requests in flight at once on it; without,
    /// HTTP/1.1 only, one request per connection at a time.
    pub fn new(
        base: &str,
        options: &tenax_net::http::ClientOptions,
        http2: bool,
    ) -> anyhow::Result<Self> {
        let prepared = options.prepare().map_err(|e| anyhow::anyhow!(e))?;
        let make = || {
            let builder = prepared
                .builder(reqwest::header::HeaderMap::new())
                .no_proxy()
                .tcp_nodelay(true)
                .pool_max_idle_per_host(128)
                .timeout(Duration::from_secs(120));
            if http2 {
                builder.http2_prior_knowledge()
            } else {
                builder.http1_only()
            }
        };
        let (client, _) = tenax_net::http::build(make).context("building the HTTP client")?;
        let base = base.trim_end_matches('/');
        let lane = lane::Target::of(base, http2, prepared.authorization().cloned());
        Ok(Self {
            client,
            base: Arc::from(base),
            lane: lane.map(Arc::new),
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Where a load task's own connection goes; `None` when the tasks share this client.
    pub fn lane_target(&self) -> Option<&lane::Target> {
        self.lane.as_deref()
    }

    /// POSTs a JSON body; any status but 2xx is an error carrying the server's answer.
    pub async fn post(&self, url: &str, body: Bytes) -> anyhow::Result<Bytes> {
        let response = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST {url}"))?;
        answer(url, response).await
    }

    pub async fn put(&self, url: &str, body: Bytes) -> anyhow::Result<Bytes> {
        let response = self
            .client
            .put(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .with_context(|| format!("PUT {url}"))?;
        answer(url, response).await
    }

    pub async fn delete(&self, url: &str) -> anyhow::Result<Bytes> {
        let response = self
            .client
            .delete(url)
            .send()
            .await
            .with_context(|| format!("DELETE {url}"))?;
        answer(url, response).await
    }

    pub async fn get(&self, url: &str) -> anyhow::Result<Bytes> {
        let response = self
            .client
            .get(url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        answer(url, response).await
    }

    /// The counts of one queue from `GET /api/stats` (zeros if it has no jobs).
    async fn queue_counts(&self, queue: &str) -> anyhow::Result<Counts> {
        let stats = self.stats().await?;
        Ok(stats
            .queues
            .into_iter()
            .find(|q| q.queue == queue)
            .unwrap_or_default())
    }

    async fn stats(&self) -> anyhow::Result<Stats> {
        let bytes = self.get(&self.url("/api/stats")).await?;
        serde_json::from_slice(&bytes).context("reading /api/stats")
    }
}

async fn answer(url: &str, response: reqwest::Response) -> anyhow::Result<Bytes> {
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .with_context(|| format!("reading the answer of {url}"))?;
    success(url, status, bytes)
}

/// The body of a 2xx answer; any other status is an error carrying the start of the server's
/// answer.
fn success(url: &str, status: reqwest::StatusCode, bytes: Bytes) -> anyhow::Result<Bytes> {
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned();
        bail!("{url} answered {status}: {text}");
    }
    Ok(bytes)
}

/// `GET /api/stats`.
#[derive(Debug, Deserialize)]
struct Stats {
    queues: Vec<Counts>,
    totals: Counts,
}

#[derive(Debug, Default, Deserialize)]
struct Counts {
    #[serde(default)]
    queue: String,
    scheduled: u64,
    ready: u64,
    in_flight: u64,
    completed: u64,
    dead: u64,
}

impl Counts {
    fn total(&self) -> u64 {
        self.scheduled + self.ready + self.in_flight + self.completed + self.dead
    }
}

/// Request latencies in microseconds.
#[derive(Debug, Clone)]
pub struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Self {
        // 1 µs to an hour at 3 significant digits.
        Self(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"))
    }

    pub fn record(&mut self, elapsed: Duration) {
        self.record_us(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn record_us(&mut self, micros: u64) {
        self.0.saturating_record(micros.max(1));
    }

    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Percentiles for the table and the JSON.
    pub fn stats(&self, request: &str) -> RequestStats {
        RequestStats {
            request: request.to_owned(),
            count: self.0.len(),
            p50_us: self.0.value_at_quantile(0.50),
            p90_us: self.0.value_at_quantile(0.90),
            p99_us: self.0.value_at_quantile(0.99),
            p999_us: self.0.value_at_quantile(0.999),
            max_us: self.0.max(),
            mean_us: self.0.mean(),
        }
    }
}

/// Set by the first task that fails, so the others stop instead of running to their deadline.
#[derive(Debug, Default, Clone)]
struct Stop(Arc<AtomicBool>);

impl Stop {
    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Waits for spawned tasks; the first error (or panic) wins.
async fn join_all<T>(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<T>>>,
) -> anyhow::Result<Vec<T>> {
    let mut results = Vec::with_capacity(tasks.len());
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(value)) => results.push(value),
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(join) => {
                first_error.get_or_insert(anyhow::anyhow!("a benchmark task failed: {join}"));
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(results),
    }
}

/// Jobs per second, zero for an empty interval.
fn rate(jobs: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        jobs as f64 / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_round_trip_through_clap() {
        for scenario in Scenario::ALL {
            let parsed = Scenario::from_str(scenario.name(), false).unwrap();
            assert_eq!(parsed, scenario);
            assert_eq!(
                serde_json::to_value(scenario).unwrap(),
                json!(scenario.name())
            );
        }
    }

    #[test]
    fn payload_is_about_100_bytes_and_jobs_are_valid_requests() {
        let len = serde_json::to_vec(&payload()).unwrap().len();
        assert!((80..=120).contains(&len), "payload is {len} bytes");
        let body = batch_body("bench-q", 3, Some(42));
        let value: Value = serde_json::from_slice(&body).unwrap();
        let jobs = value["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0]["queue"], "bench-q");
        assert_eq!(jobs[0]["run_at"], 42);
        assert!(job("q", None).get("run_at").is_none());
    }

    #[test]
    fn queue_names_are_valid_and_name_the_scenario() {
        for scenario in Scenario::ALL {
            let name = queue_name(scenario);
            assert!(name.starts_with(&format!("bench-{}-", scenario.name())));
            assert!(name.len() <= 128);
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
            );
        }
    }

    #[test]
    fn complete_body_is_the_api_shape() {
        let body = complete_body(&[(1, 10), (2, 20)]);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value,
            json!({"jobs": [{"id": 1, "lease_token": 10}, {"id": 2, "lease_token": 20}]})
        );
        let empty: Value = serde_json::from_slice(&complete_body(&[])).unwrap();
        assert_eq!(empty, json!({"jobs": []}));
    }

    #[test]
    fn latency_percentiles_from_recorded_values() {
        let mut a = Latency::new();
        for us in 1..=90 {
            a.record_us(us * 10);
        }
        let mut b = Latency::new();
        for us in 91..=100 {
            b.record(Duration::from_micros(us * 10));
        }
        a.merge(&b);
        let stats = a.stats("x");
        assert_eq!(stats.count, 100);
        assert_eq!(stats.p50_us, 500);
        assert_eq!(stats.p90_us, 900);
        assert_eq!(stats.p99_us, 990);
        assert_eq!(stats.max_us, 1000);
        assert_eq!(rate(500, Duration::from_millis(250)), 2_000.0);
        assert_eq!(rate(5, Duration::ZERO), 0.0);
    }
}
