//! `tenax jobs export` and `tenax jobs import`: one queue's jobs as NDJSON, one job per line as
//! `GET /api/jobs/{id}` shows it, for debugging and for moving one queue's work to another queue
//! or server. Both go through the HTTP API of a running server.
//!
//! An import enqueues new jobs (the target assigns ids): each keeps its type, payload, priority,
//! policy, unique key and trace context, and a scheduled one its run time. Jobs waiting or in
//! flight on the source are enqueued ready (or scheduled); dead ones only with
//! `--include-dead`, as fresh jobs; completed ones are history and stay out. Their errors stay
//! in the export file.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::Context as _;
use clap::Args;
use futures_util::StreamExt as _;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tenax_client::{JobFilter, JobInfo, JobStatus};

use super::client::{Server, ServerArgs};
use super::enqueue::send_batch;
use super::{CliError, parse};

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The queue whose jobs to export.
    #[arg(long, short)]
    pub queue: String,
    /// Only jobs in this status.
    #[arg(long, short, value_enum)]
    pub status: Option<parse::Status>,
    /// Write here instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The NDJSON file `tenax jobs export` wrote.
    pub file: PathBuf,
    /// Enqueue into this queue instead of each job's own.
    #[arg(long, short)]
    pub queue: Option<String>,
    /// Also enqueue the dead jobs, as fresh jobs (their errors are not carried over).
    #[arg(long)]
    pub include_dead: bool,
    /// Jobs per request, 1 to 1000.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub batch: u16,
}

pub async fn export(args: &ExportArgs) -> Result<(), CliError> {
    let server = Server::connect(&args.server)?;
    let mut filter = JobFilter::new().limit(1000).queue(&args.queue);
    if let Some(status) = args.status {
        filter = filter.status(status.into());
    }
    let mut out: Box<dyn std::io::Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| CliError::Invalid(format!("--output: {}: {e}", path.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let mut jobs = std::pin::pin!(server.client().all_jobs(filter));
    let mut written = 0u64;
    while let Some(job) = jobs.next().await {
        let job = job.map_err(|e| server.error(e))?;
        serde_json::to_writer(&mut out, &job).context("writing a job")?;
        out.write_all(b"\n").context("writing a job")?;
        written += 1;
    }
    out.flush().context("writing the jobs")?;
    eprintln!("exported {written} jobs of queue {:?}", args.queue);
    Ok(())
}

pub async fn import(args: &ImportArgs) -> Result<(), CliError> {
    let server = Server::connect(&args.server)?;
    let path = &args.file;
    let file = std::fs::File::open(path)
        .map_err(|e| CliError::Invalid(format!("{}: cannot open: {e}", path.display())))?;
    let now = SystemTime::now();
    let (mut sent, mut completed, mut dead, mut cancelled, mut waiting) =
        (0usize, 0u64, 0u64, 0u64, 0u64);
    let mut batch = Vec::with_capacity(usize::from(args.batch));
    for (number, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let job: JobInfo = serde_json::from_str(&line).map_err(|e| {
            CliError::Invalid(format!(
                "{}:{}: not a job as `tenax jobs export` writes it: {e}",
                path.display(),
                number + 1
            ))
        })?;
        match job.status {
            JobStatus::Completed => {
                completed += 1;
                continue;
            }
            JobStatus::Dead if !args.include_dead => {
                dead += 1;
                continue;
            }
            JobStatus::Cancelled => {
                cancelled += 1;
                continue;
            }
            _ => {}
        }
        // Its parents get new ids when they are enqueued afresh: waiting for the old ones
        // would name other jobs, and running without them would run it too soon.
        if !job.after.is_empty() {
            waiting += 1;
            continue;
        }
        batch.push(enqueue_of(&job, args.queue.as_deref(), now)?);
        if batch.len() == usize::from(args.batch) {
            sent += send_batch(&server, &mut batch, sent).await?;
        }
    }
    if !batch.is_empty() {
        sent += send_batch(&server, &mut batch, sent).await?;
    }
    eprintln!("enqueued {sent} jobs");
    if completed > 0 {
        eprintln!("left out {completed} completed jobs (history)");
    }
    if dead > 0 {
        eprintln!("left out {dead} dead jobs (--include-dead enqueues them afresh)");
    }
    if cancelled > 0 {
        eprintln!("left out {cancelled} cancelled jobs (history)");
    }
    if waiting > 0 {
        eprintln!(
            "left out {waiting} jobs that wait for others (their parents' ids do not survive an \
             import; `tenax copy` keeps them)"
        );
    }
    Ok(())
}

/// The enqueue request that makes `job` again in `queue` (its own if `None`).
fn enqueue_of(
    job: &JobInfo,
    queue: Option<&str>,
    now: SystemTime,
) -> Result<Box<RawValue>, CliError> {
    let mut body = json!({
        "queue": queue.unwrap_or(&job.queue),
        "type": job.kind,
        "payload": job.payload,
        "priority": job.priority,
    });
    let fields = body.as_object_mut().expect("an object");
    if let Some(policy) = &job.policy {
        fields.insert("policy".into(), policy.clone());
    }
    if let Some(key) = &job.unique_key {
        fields.insert("unique_key".into(), Value::String(key.clone()));
    }
    if let Some(traceparent) = &job.traceparent {
        fields.insert("traceparent".into(), Value::String(traceparent.clone()));
    }
    if job.status == JobStatus::Scheduled && job.run_at > now {
        let at = humantime::format_rfc3339_millis(job.run_at).to_string();
        fields.insert("run_at".into(), Value::String(at));
    }
    serde_json::value::to_raw_value(&body)
        .map_err(|e| CliError::Failed(anyhow::anyhow!("encoding job {}: {e}", job.id)))
}
