//! `tenax jobs`, `tenax dead`, `tenax stats`: look at jobs and replay the dead.

use clap::{Args, Subcommand};
use serde_json::json;

use super::CliError;
use super::client::{Client, ServerArgs, block_on};
use super::terminal::{safe, safe_json};

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs (100 per page; --after continues).
    List(ListArgs),
    /// Show one job with its errors, attempts and next run time.
    Show {
        id: u64,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[arg(long, short)]
    pub queue: Option<String>,
    /// scheduled, ready, in_flight, completed or dead.
    #[arg(long, short)]
    pub status: Option<String>,
    #[arg(long = "type", short = 't')]
    pub kind: Option<String>,
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[arg(long)]
    pub after: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead jobs.
    List(ListArgs),
    /// Make dead jobs ready again.
    Replay(ReplayArgs),
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Job ids to replay (repeat the flag).
    #[arg(long = "id")]
    pub ids: Vec<u64>,
    #[arg(long, short)]
    pub queue: Option<String>,
    #[arg(long = "type", short = 't')]
    pub kind: Option<String>,
    /// Replay every dead job.
    #[arg(long)]
    pub all: bool,
    /// A new policy for the replayed jobs (any spelling, or @file).
    #[arg(long)]
    pub policy: Option<String>,
    /// Start the retries again from 1.
    #[arg(long)]
    pub reset_attempts: bool,
}

pub fn run_jobs(command: JobsCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            JobsCommand::List(args) => list(&args, "/api/jobs").await,
            JobsCommand::Show { id, server } => {
                let job = Client::new(&server)?
                    .get(&format!("/api/jobs/{id}"))
                    .await?;
                let pretty = serde_json::to_string_pretty(&job).unwrap_or_default();
                println!("{}", safe_json(&pretty));
                Ok(())
            }
        }
    })
}

pub fn run_dead(command: DeadCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            DeadCommand::List(args) => list(&args, "/api/dead").await,
            DeadCommand::Replay(args) => replay(&args).await,
        }
    })
}

pub fn run_stats(server: ServerArgs) -> Result<(), CliError> {
    block_on(async move {
        let stats = Client::new(&server)?.get("/api/stats").await?;
        println!(
            "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "queue", "scheduled", "ready", "in_flight", "completed", "dead"
        );
        for q in stats["queues"].as_array().into_iter().flatten() {
            println!(
                "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10}",
                safe(q["queue"].as_str().unwrap_or("")),
                q["scheduled"].to_string(),
                q["ready"].to_string(),
                q["in_flight"].to_string(),
                q["completed"].to_string(),
                q["dead"].to_string()
            );
        }
        Ok(())
    })
}

async fn list(args: &ListArgs, path: &str) -> Result<(), CliError> {
    let mut query = vec![format!("limit={}", args.limit)];
    for (key, value) in [
        ("queue", &args.queue),
        ("status", &args.status),
        ("type", &args.kind),
    ] {
        if let Some(value) = value {
            query.push(format!("{key}={}", encode(value)));
        }
    }
    if let Some(after) = args.after {
        query.push(format!("after={after}"));
    }
    let page = Client::new(&args.server)?
        .get(&format!("{path}?{}", query.join("&")))
        .await?;
    println!(
        "{:>10}  {:<16} {:<16} {:<10} {:>7}  {:<24}  last error",
        "id", "queue", "type", "status", "attempt", "run at"
    );
    for job in page["jobs"].as_array().into_iter().flatten() {
        let last_error = job["errors"]
            .as_array()
            .and_then(|e| e.last())
            .and_then(|e| e["message"].as_str())
            .unwrap_or("");
        println!(
            "{:>10}  {:<16} {:<16} {:<10} {:>7}  {:<24}  {}",
            job["id"].to_string(),
            safe(job["queue"].as_str().unwrap_or("")),
            safe(job["type"].as_str().unwrap_or("")),
            safe(job["status"].as_str().unwrap_or("")),
            job["attempt"].to_string(),
            safe(job["run_at"].as_str().unwrap_or("")),
            safe(last_error)
        );
    }
    if let Some(next) = page["next_after"].as_u64() {
        eprintln!("more: --after {next}");
    }
    Ok(())
}

async fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    let mut body = json!({ "all": args.all, "reset_attempts": args.reset_attempts });
    if !args.ids.is_empty() {
        body["ids"] = json!(args.ids);
    }
    if let Some(queue) = &args.queue {
        body["queue"] = json!(queue);
    }
    if let Some(kind) = &args.kind {
        body["type"] = json!(kind);
    }
    if let Some(policy) = &args.policy {
        body["policy"] = super::policy::policy_json(policy)?;
    }
    let answer = Client::new(&args.server)?
        .post("/api/dead/replay", &body)
        .await?;
    println!("replayed {} jobs: {}", answer["replayed"], answer["ids"]);
    for skipped in answer["skipped"].as_array().into_iter().flatten() {
        println!(
            "not replayed: job {}: {}",
            skipped["id"],
            safe(skipped["reason"].as_str().unwrap_or_default())
        );
    }
    Ok(())
}

/// Percent-encodes a query value (queue names are plain, but types may hold anything).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
