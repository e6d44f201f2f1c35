//! `tenax enqueue`: one job from flags, or many from an NDJSON file with a progress bar.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;
use serde_json::value::RawValue;
use tenax_client::NewJob;

use super::client::{Server, ServerArgs, block_on};
use super::{CliError, parse};

#[derive(Debug, Args)]
pub struct EnqueueArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Queue of the job.
    #[arg(long, short, required_unless_present = "file")]
    pub queue: Option<String>,
    /// Type of the job (what the worker should do).
    #[arg(long = "type", short = 't', default_value = "")]
    pub kind: String,
    /// Payload: any JSON.
    #[arg(long, short, default_value = "null")]
    pub payload: String,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Run after this delay (`30s`, `5m`, or milliseconds).
    #[arg(long, conflicts_with = "run_at", value_parser = parse::duration)]
    pub delay: Option<Duration>,
    /// Run at this time (RFC 3339, or milliseconds since 1970).
    #[arg(long, value_parser = parse::time)]
    pub run_at: Option<SystemTime>,
    /// The job's retry policy, in any spelling, or @file.
    #[arg(long)]
    pub policy: Option<String>,
    #[arg(long)]
    pub retry_limit: Option<u32>,
    #[arg(long)]
    pub unique_key: Option<String>,
    /// Enqueue every line of this NDJSON file (one job object per line, the shape of
    /// `POST /api/jobs`), in atomic batches.
    #[arg(long, conflicts_with_all = ["queue", "delay", "run_at", "policy", "unique_key"])]
    pub file: Option<PathBuf>,
    /// Jobs per request when reading a file.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
}

pub fn run(args: EnqueueArgs) -> Result<(), CliError> {
    block_on(async move {
        let server = Server::connect(&args.server)?;
        match &args.file {
            Some(path) => enqueue_file(&server, path, args.batch as usize).await,
            None => enqueue_one(&server, &args).await,
        }
    })
}

async fn enqueue_one(server: &Server, args: &EnqueueArgs) -> Result<(), CliError> {
    let payload: Value = serde_json::from_str(&args.payload)
        .map_err(|e| CliError::Invalid(format!("--payload: not valid JSON: {e}")))?;
    // Without --file, clap requires --queue.
    let queue = args.queue.clone().unwrap_or_default();
    let mut job = NewJob::new(queue, &args.kind)
        .payload(payload)
        .priority(args.priority);
    if let Some(delay) = args.delay {
        job = job.delay(delay);
    }
    if let Some(run_at) = args.run_at {
        job = job.run_at(run_at);
    }
    if let Some(policy) = &args.policy {
        job = job.policy(super::policy::policy_json(policy)?);
    }
    if let Some(limit) = args.retry_limit {
        job = job.retry_limit(limit);
    }
    if let Some(key) = &args.unique_key {
        job = job.unique_key(key);
    }
    let answer = server.ask(server.enqueue(&job)).await?;
    println!(
        "{}",
        serde_json::to_string(&answer).context("encoding the answer")?
    );
    Ok(())
}

async fn enqueue_file(server: &Server, path: &PathBuf, batch: usize) -> Result<(), CliError> {
    let file = std::fs::File::open(path)
        .map_err(|e| CliError::Invalid(format!("--file: cannot open {}: {e}", path.display())))?;
    let total = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut jobs = Vec::with_capacity(batch);
    let mut sent = 0usize;
    for (number, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        bar.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        // Each line goes as written: the server checks its fields.
        let job: Box<RawValue> = serde_json::from_str(&line).map_err(|e| {
            CliError::Invalid(format!(
                "{}:{}: not valid JSON: {e}",
                path.display(),
                number + 1
            ))
        })?;
        jobs.push(job);
        if jobs.len() == batch {
            sent += send_batch(server, &mut jobs, sent).await?;
            bar.set_message(format!("{sent} jobs"));
        }
    }
    if !jobs.is_empty() {
        sent += send_batch(server, &mut jobs, sent).await?;
    }
    bar.finish_with_message(format!("{sent} jobs"));
    eprintln!("enqueued {sent} jobs");
    Ok(())
}

pub(super) async fn send_batch(
    server: &Server,
    jobs: &mut Vec<Box<RawValue>>,
    already: usize,
) -> Result<usize, CliError> {
    let batch = std::mem::take(jobs);
    match server.ask(server.enqueue_many_json(&batch)).await {
        Ok(enqueued) => Ok(enqueued.len()),
        Err(CliError::Invalid(message)) => Err(CliError::Invalid(format!(
            "the batch starting at job {} was refused (nothing of it was enqueued): {message}",
            already + 1
        ))),
        Err(other) => Err(other),
    }
}
