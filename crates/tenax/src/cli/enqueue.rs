//! `tenax enqueue`: one job from flags, or many from an NDJSON file with a progress bar.

use std::io::BufRead as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use serde_json::{Value, json};

use super::CliError;
use super::client::{Client, ServerArgs, block_on};

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
    #[arg(long, conflicts_with = "run_at")]
    pub delay: Option<String>,
    /// Run at this time (RFC 3339).
    #[arg(long)]
    pub run_at: Option<String>,
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
        let client = Client::new(&args.server)?;
        match &args.file {
            Some(path) => enqueue_file(&client, path, args.batch as usize).await,
            None => enqueue_one(&client, &args).await,
        }
    })
}

async fn enqueue_one(client: &Client, args: &EnqueueArgs) -> Result<(), CliError> {
    let payload: Value = serde_json::from_str(&args.payload)
        .map_err(|e| CliError::Invalid(format!("--payload: not valid JSON: {e}")))?;
    let mut job = json!({ "queue": args.queue, "type": args.kind, "payload": payload, "priority": args.priority });
    if let Some(delay) = &args.delay {
        job["delay"] = json!(delay);
    }
    if let Some(run_at) = &args.run_at {
        job["run_at"] = json!(run_at);
    }
    if let Some(policy) = &args.policy {
        job["policy"] = super::policy::policy_json(policy)?;
    }
    if let Some(limit) = args.retry_limit {
        job["retry_limit"] = json!(limit);
    }
    if let Some(key) = &args.unique_key {
        job["unique_key"] = json!(key);
    }
    let answer = client.post("/api/jobs", &job).await?;
    println!("{answer}");
    Ok(())
}

async fn enqueue_file(client: &Client, path: &PathBuf, batch: usize) -> Result<(), CliError> {
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
        let job: Value = serde_json::from_str(&line).map_err(|e| {
            CliError::Invalid(format!(
                "{}:{}: not valid JSON: {e}",
                path.display(),
                number + 1
            ))
        })?;
        jobs.push(job);
        if jobs.len() == batch {
            sent += send_batch(client, &mut jobs, sent).await?;
            bar.set_message(format!("{sent} jobs"));
        }
    }
    if !jobs.is_empty() {
        sent += send_batch(client, &mut jobs, sent).await?;
    }
    bar.finish_with_message(format!("{sent} jobs"));
    eprintln!("enqueued {sent} jobs");
    Ok(())
}

async fn send_batch(
    client: &Client,
    jobs: &mut Vec<Value>,
    already: usize,
) -> Result<usize, CliError> {
    let body = json!({ "jobs": std::mem::take(jobs) });
    match client.post("/api/jobs/batch", &body).await {
        Ok(answer) => Ok(answer["jobs"].as_array().map_or(0, Vec::len)),
        Err(CliError::Invalid(message)) => Err(CliError::Invalid(format!(
            "the batch starting at job {} was refused (nothing of it was enqueued): {message}",
            already + 1
        ))),
        Err(other) => Err(other),
    }
}
