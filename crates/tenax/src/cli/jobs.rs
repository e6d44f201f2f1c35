//! `tenax jobs`, `tenax dead`, `tenax stats`: look at jobs, cancel them, and replay the dead.

use clap::{Args, Subcommand};
use tenax_client::{CancelOutcome, CancelSelection, DeadSelection, JobFilter, ReplayDead};

use super::client::{Server, ServerArgs, block_on};
use super::terminal::safe;
use super::{CliError, output, parse};

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs (100 per page; --after continues).
    List(ListArgs),
    /// Show one job with its errors, attempts, next run time and (completed) result.
    Show {
        id: u64,
        /// Wait until the job has finished (completed or dead), at most this long (at most
        /// 60s), then show it as it is.
        #[arg(long, value_parser = parse::duration)]
        wait: Option<std::time::Duration>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Cancel jobs: a scheduled or ready job at once; a job in flight by marking its lease (its
    /// worker learns it on its next heartbeat, stops, and the job ends cancelled). Finished
    /// jobs are left as they are.
    Cancel(CancelArgs),
    /// Write a queue's jobs as NDJSON, one job per line as `tenax jobs show` prints it.
    Export(super::jobs_ndjson::ExportArgs),
    /// Enqueue the waiting jobs of a `tenax jobs export` file afresh (into another queue or
    /// server); completed ones stay out, dead ones too unless --include-dead.
    Import(super::jobs_ndjson::ImportArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[arg(long, short)]
    pub queue: Option<String>,
    #[arg(long, short, value_enum)]
    pub status: Option<parse::Status>,
    #[arg(long = "type", short = 't')]
    pub kind: Option<String>,
    /// Jobs per page, 1 to 1000.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    #[arg(long)]
    pub after: Option<u64>,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Job ids to cancel (repeat the flag). One id alone, with nothing else: a finished job is
    /// an error that names its status.
    #[arg(long = "id")]
    pub ids: Vec<u64>,
    #[arg(long, short)]
    pub queue: Option<String>,
    #[arg(long = "type", short = 't')]
    pub kind: Option<String>,
    /// Cancel every unfinished job.
    #[arg(long)]
    pub all: bool,
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
    /// Replay cancelled jobs instead of dead ones.
    #[arg(long)]
    pub cancelled: bool,
}

pub fn run_jobs(command: JobsCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            JobsCommand::List(args) => list(&args, Listing::Jobs).await,
            JobsCommand::Show { id, wait, server } => {
                let server = Server::connect(&server)?;
                let job = match wait {
                    Some(wait) => server.ask(server.wait_for_job(id, wait)).await?,
                    None => server.ask(server.get_job(id)).await?,
                };
                println!("{}", output::json(&job)?);
                Ok(())
            }
            JobsCommand::Cancel(args) => cancel(&args).await,
            JobsCommand::Export(args) => super::jobs_ndjson::export(&args).await,
            JobsCommand::Import(args) => super::jobs_ndjson::import(&args).await,
        }
    })
}

pub fn run_dead(command: DeadCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            DeadCommand::List(args) => list(&args, Listing::Dead).await,
            DeadCommand::Replay(args) => replay(&args).await,
        }
    })
}

pub fn run_stats(server: ServerArgs) -> Result<(), CliError> {
    block_on(async move {
        let server = Server::connect(&server)?;
        let stats = server.ask(server.stats()).await?;
        println!(
            "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "queue", "scheduled", "ready", "in_flight", "completed", "dead", "cancelled"
        );
        for q in &stats.queues {
            let c = &q.counts;
            println!(
                "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
                safe(&q.queue),
                c.scheduled,
                c.ready,
                c.in_flight,
                c.completed,
                c.dead,
                c.cancelled
            );
        }
        Ok(())
    })
}

/// Which jobs a list shows.
#[derive(Debug, Clone, Copy)]
enum Listing {
    Jobs,
    Dead,
}

async fn list(args: &ListArgs, listing: Listing) -> Result<(), CliError> {
    let mut filter = JobFilter::new().limit(args.limit);
    if let Some(queue) = &args.queue {
        filter = filter.queue(queue);
    }
    if let Some(status) = args.status {
        filter = filter.status(status.into());
    }
    if let Some(kind) = &args.kind {
        filter = filter.kind(kind);
    }
    if let Some(after) = args.after {
        filter = filter.after(after);
    }
    let server = Server::connect(&args.server)?;
    let page = match listing {
        Listing::Jobs => server.ask(server.list_jobs(&filter)).await?,
        Listing::Dead => server.ask(server.list_dead(&filter)).await?,
    };
    println!(
        "{:>10}  {:<16} {:<16} {:<10} {:>7}  {:<24}  last error",
        "id", "queue", "type", "status", "attempt", "run at"
    );
    for job in &page.jobs {
        let last_error = job.errors.last().map_or("", |e| e.message.as_str());
        println!(
            "{:>10}  {:<16} {:<16} {:<10} {:>7}  {:<24}  {}",
            job.id,
            safe(&job.queue),
            safe(&job.kind),
            job.status,
            job.attempt,
            output::time(job.run_at),
            safe(last_error)
        );
    }
    if let Some(next) = page.next_after {
        eprintln!("more: --after {next}");
    }
    Ok(())
}

async fn cancel(args: &CancelArgs) -> Result<(), CliError> {
    let server = Server::connect(&args.server)?;
    if let ([id], None, None, false) = (&args.ids[..], &args.queue, &args.kind, args.all) {
        let answer = server.ask(server.cancel_job(*id)).await?;
        match answer.outcome {
            CancelOutcome::Marked => println!(
                "job {id} is in flight: its lease is marked cancelled; its worker learns it on \
                 its next heartbeat"
            ),
            _ => println!("cancelled job {id}"),
        }
        return Ok(());
    }
    let mut selection = match (&args.ids[..], &args.queue) {
        ([], Some(queue)) => CancelSelection::queue(queue),
        ([], None) if args.all => CancelSelection::all(),
        // Nothing named: the server says what is missing.
        ([], None) => CancelSelection::default(),
        (ids, queue) => {
            let selection = CancelSelection::ids(ids.iter().copied());
            match queue {
                Some(queue) => selection.in_queue(queue),
                None => selection,
            }
        }
    };
    if let Some(kind) = &args.kind {
        selection = selection.kind(kind);
    }
    let answer = server.ask(server.cancel_jobs(&selection)).await?;
    println!(
        "cancelled {} jobs: {}",
        answer.cancelled,
        output::ids(&answer.cancelled_ids)
    );
    if answer.marked > 0 {
        println!(
            "marked {} jobs in flight (their workers learn it on their next heartbeat): {}",
            answer.marked,
            output::ids(&answer.marked_ids)
        );
    }
    Ok(())
}

async fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    let mut selection = match (&args.ids[..], &args.queue) {
        ([], Some(queue)) => DeadSelection::queue(queue),
        ([], None) if args.all => DeadSelection::all(),
        // Nothing named: the server says what is missing.
        ([], None) => DeadSelection::default(),
        (ids, queue) => {
            let selection = DeadSelection::ids(ids.iter().copied());
            match queue {
                Some(queue) => selection.in_queue(queue),
                None => selection,
            }
        }
    };
    if let Some(kind) = &args.kind {
        selection = selection.kind(kind);
    }
    if args.cancelled {
        selection = selection.cancelled();
    }
    let mut replay = ReplayDead::new(selection).reset_attempts(args.reset_attempts);
    if let Some(policy) = &args.policy {
        replay = replay.policy(super::policy::policy_json(policy)?);
    }
    let server = Server::connect(&args.server)?;
    let answer = server.ask(server.replay_dead(&replay)).await?;
    println!(
        "replayed {} jobs: {}",
        answer.replayed,
        output::ids(&answer.ids)
    );
    for skipped in &answer.skipped {
        println!(
            "not replayed: job {}: {}",
            skipped.id,
            safe(&skipped.reason)
        );
    }
    Ok(())
}
