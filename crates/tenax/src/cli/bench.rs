//! `tenax bench`: measure a running server over HTTP (scenarios in `tenax_bench`).

use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tenax_bench::{BenchConfig, Scenario};

use super::CliError;

/// Flags of `tenax bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Base URL of a running tenax server.
    #[arg(long, env = "TENAX_BENCH_URL", default_value = "http://127.0.0.1:7890")]
    pub url: String,
    /// Scenario to run; repeat (or separate with commas) for several, in order. Default: all.
    #[arg(long = "scenario", value_enum, value_delimiter = ',')]
    pub scenarios: Vec<Scenario>,
    /// Jobs per scenario (default: per scenario, 3000 for enqueue-1 up to 400000 for bulk-1000).
    #[arg(long)]
    pub jobs: Option<u64>,
    /// The longest any phase of a scenario runs, in seconds.
    #[arg(long, default_value_t = 60)]
    pub max_seconds: u64,
    /// The server's process id (same machine): the memory scenario reads VmRSS and VmHWM from
    /// /proc/PID/status, and is skipped without it.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Connections of enqueue-1, enqueue-8, bulk-100 and bulk-1000 instead of 1, 8, 4 and 4.
    #[arg(long)]
    pub connections: Option<usize>,
    /// Consumers in take-complete; mixed runs half as many consumers and as many producers.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Most jobs per take (1 to 1000).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub take_max: u64,
    /// How far ahead the promotion scenario schedules its jobs (ms or `5s`); longer than the
    /// enqueue takes.
    #[arg(long, value_parser = lead, default_value = "5s")]
    pub promotion_lead: u64,
    /// Speak HTTP/2 (h2c on http://): the concurrent requests of a scenario share one
    /// connection instead of one connection each.
    #[arg(long)]
    pub http2: bool,
    /// Set `encrypt_payloads` on each scenario's queue first: its payloads are stored
    /// encrypted (docs/security.md#encrypted-queues), to compare with a run without it.
    #[arg(long)]
    pub encrypt_payloads: bool,
    /// The server's data directory (same machine): the floor scenario times fdatasync there,
    /// in a small file it removes.
    #[arg(long, default_value = "./tenax-data")]
    pub data_dir: std::path::PathBuf,
    /// A second server, started with `--durability relaxed` (its own --data-dir and --listen):
    /// the floor scenario runs enqueue-8 against it too, and prints durable enqueue-8 as a
    /// share of it.
    #[arg(long)]
    pub relaxed_url: Option<String>,
    /// The queue every scenario uses (default: a fresh `bench-<scenario>-<random>` for each).
    /// On a deployment with pools, a queue is on one pool: name the queues of several benches
    /// to put their load on the pools you choose.
    #[arg(long, value_parser = queue_name)]
    pub queue: Option<String>,
    /// The subscriptions the deliveries-fanout scenario puts on its queue, one size after the
    /// other.
    #[arg(long, value_delimiter = ',', default_values_t = tenax_bench::FANOUT_SIZES)]
    pub subscriptions: Vec<usize>,
    /// Print the results as JSON on stdout (the table then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// The API token, sent as `Authorization: Bearer <token>`.
    #[arg(long, env = "TENAX_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A PEM file of CA certificates to trust (an https server of a private CA).
    #[arg(long, env = "TENAX_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
}

fn queue_name(text: &str) -> Result<String, String> {
    crate::api::fields::check_queue_name("--queue", text)
        .map(|()| text.to_owned())
        .map_err(|e| e.message)
}

fn lead(text: &str) -> Result<u64, String> {
    tenax_policy::parse_duration("duration", text).map_err(|e| e.rule)
}

pub fn run(args: BenchArgs) -> Result<(), CliError> {
    if args.subscriptions.contains(&0) {
        return Err(CliError::Invalid(
            "--subscriptions: each size must be at least 1".into(),
        ));
    }
    if args.workers == 0 {
        return Err(CliError::Invalid("--workers: must be at least 1".into()));
    }
    let config = BenchConfig {
        url: args.url,
        scenarios: if args.scenarios.is_empty() {
            Scenario::ALL.to_vec()
        } else {
            args.scenarios
        },
        jobs: args.jobs,
        max_seconds: args.max_seconds.max(1),
        server_pid: args.server_pid,
        connections: args.connections.map(|n| n.max(1)),
        workers: args.workers,
        take_max: usize::try_from(args.take_max).unwrap_or(1_000),
        promotion_lead: Duration::from_millis(args.promotion_lead),
        client: tenax_net::http::ClientOptions {
            token: args.token,
            ca_file: args.ca_file,
        },
        progress: std::io::stderr().is_terminal(),
        http2: args.http2,
        encrypt_payloads: args.encrypt_payloads,
        data_dir: args.data_dir,
        relaxed_url: args.relaxed_url,
        fanout_sizes: args.subscriptions,
        queue: args.queue,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(tenax_bench::run(&config))?;
    let table = tenax_bench::table(&report);
    if args.json {
        eprint!("{table}");
        let json = serde_json::to_string_pretty(&report).context("encoding the report")?;
        println!("{json}");
    } else {
        print!("{table}");
    }
    let failed: Vec<&str> = report
        .scenarios
        .iter()
        .filter(|s| s.error.is_some())
        .map(|s| s.scenario)
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(anyhow::anyhow!(
            "scenario(s) failed: {}",
            failed.join(", ")
        )))
    }
}
