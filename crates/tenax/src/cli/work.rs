//! `tenax work`: runs a program once per job, on tenax-client's worker runtime.
//!
//! The program gets the payload (its exact JSON text) on standard input and the job in
//! environment variables; its exit status completes or fails the job, or one JSON line on
//! standard output chooses the outcome. Each command runs in a process group of its own, so a
//! timeout, or the shutdown deadline, kills everything it started; heartbeats keep the job's
//! lease while it runs.

use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Args;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tenax_client::{Job, JobError, Outcome, Worker};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use super::client::{Server, ServerArgs};
use super::{CliError, parse};
use crate::config::LogFormat;

/// The most of a command's standard error kept: the tail becomes the job's error.
const STDERR_TAIL: usize = 4 * 1024;
/// The most of a command's standard output kept, to find its last line.
const STDOUT_TAIL: usize = 64 * 1024;
/// The longest line of a command's output written to the worker's log.
const LOG_LINE: usize = 2 * 1024;
/// After a timeout's SIGTERM, how long the process group has before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the output pipes to close once the process group is gone (a process
/// that left the group with `setsid` may hold them open).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// `tenax work`.
#[derive(Debug, Args)]
pub struct WorkArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// A queue to take jobs from; repeat for several (best job first across them).
    #[arg(long = "queue", short = 'q', required = true, value_name = "QUEUE")]
    pub queues: Vec<String>,
    /// How many commands run at once (and jobs are held leased at once), 1 to 1000.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub concurrency: u16,
    /// The lease of each job (`30s`, `5m`, or milliseconds); heartbeats renew it every half
    /// lease while its command runs.
    #[arg(long, value_parser = parse::duration, default_value = "30s")]
    pub lease: Duration,
    /// Kill a command that runs longer than this (SIGTERM to its whole process group, SIGKILL
    /// 2 s later) and fail its job. Default: no limit.
    #[arg(long, value_parser = parse::duration)]
    pub timeout: Option<Duration>,
    /// On SIGTERM or SIGINT, how long running commands may take to finish: then they are
    /// killed and their jobs go back to the queue without using an attempt. A second signal
    /// does that at once.
    #[arg(long, value_parser = parse::duration, default_value = "25s")]
    pub shutdown_timeout: Duration,
    /// The program run for each job: a path, or a name looked up in PATH. It is not run
    /// through a shell; for one, pass `--exec sh -- -c 'script'`.
    #[arg(long, required = true, value_name = "PROGRAM")]
    pub exec: OsString,
    /// The program's arguments, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<OsString>,
    /// Log format (on standard error; `TENAX_LOG` sets the level).
    #[arg(long, env = "TENAX_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// What every job runs.
#[derive(Debug)]
struct Command {
    program: PathBuf,
    args: Vec<OsString>,
    timeout: Option<Duration>,
}

pub fn run(args: WorkArgs) -> Result<(), CliError> {
    let program = find_program(&args.exec).map_err(CliError::Invalid)?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TENAX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    let server = Server::connect(&args.server)?;
    let command = Arc::new(Command {
        program,
        args: args.args,
        timeout: args.timeout,
    });
    let worker = Worker::builder(server.client().clone())
        .queues(args.queues)
        .concurrency(usize::from(args.concurrency))
        .lease(args.lease)
        .shutdown_timeout(args.shutdown_timeout)
        .fallback(move |job: Job<Box<RawValue>>| run_command(command.clone(), job))
        .build()
        .map_err(|e| CliError::Invalid(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let handle = worker.handle();
        let mut signals = Signals::new().context("listening for SIGTERM and SIGINT")?;
        tokio::spawn(async move {
            let name = signals.next().await;
            tracing::info!(
                signal = name,
                "stopping: no new jobs; running commands may finish"
            );
            handle.shutdown();
            let name = signals.next().await;
            tracing::warn!(signal = name, "second signal: killing running commands now");
            handle.shutdown_now();
        });
        // An error is the stream refused for good: a bad queue name or lease, a token that
        // may not take from these queues.
        worker.run().await.map(|_| ()).map_err(|e| server.error(e))
    })
}

/// SIGTERM and SIGINT, one after the other.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// The program to run: a path with a `/` as given, else the first match in `PATH`; checked
/// once at start-up so that a typo fails the command, not every job.
fn find_program(name: &OsString) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let runnable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = Path::new(name);
    if path.as_os_str().is_empty() {
        return Err("--exec: must name a program".to_owned());
    }
    if name.to_string_lossy().contains('/') {
        return if runnable(path) {
            Ok(path.to_path_buf())
        } else {
            Err(format!(
                "--exec: {} is not an executable file",
                path.display()
            ))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(path))
        .find(|candidate| runnable(candidate))
        .ok_or_else(|| format!("--exec: no program {} in PATH", path.display()))
}

/// Runs the command for one job and turns what it did into the job's outcome.
async fn run_command(command: Arc<Command>, job: Job<Box<RawValue>>) -> Result<(), JobError> {
    let mut process = tokio::process::Command::new(&command.program);
    process
        .args(&command.args)
        .env("TENAX_JOB_ID", job.id.to_string())
        .env("TENAX_JOB_TYPE", &job.kind)
        .env("TENAX_QUEUE", &job.queue)
        .env("TENAX_ATTEMPT", job.attempt.to_string())
        // The worker's credentials are not the command's.
        .env_remove("TENAX_TOKEN")
        .env_remove("TENAX_ADMIN_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a timeout or the shutdown deadline kills all it started.
        .process_group(0)
        .kill_on_drop(true);
    match &job.traceparent {
        Some(traceparent) => process.env("TRACEPARENT", traceparent),
        None => process.env_remove("TRACEPARENT"),
    };
    let mut child = process.spawn().map_err(|error| {
        JobError::retry(format!("cannot run {}: {error}", command.program.display()))
    })?;
    // Dropped (the job stopped at the shutdown deadline, or finished), it kills the group.
    let mut group = ProcessGroup::of(&child);
    let id = job.id;
    let stdin = child.stdin.take();
    let payload = job.payload;
    let feeding = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            // A command that does not read its input may exit first: a broken pipe is fine.
            let _ = stdin.write_all(payload.get().as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
    });
    let stdout = child
        .stdout
        .take()
        .map(|out| tokio::spawn(pump(out, STDOUT_TAIL, id, "stdout")));
    let stderr = child
        .stderr
        .take()
        .map(|err| tokio::spawn(pump(err, STDERR_TAIL, id, "stderr")));

    let exited = match command.timeout {
        None => Some(child.wait().await),
        Some(limit) => tokio::select! {
            status = child.wait() => Some(status),
            () = tokio::time::sleep(limit) => None,
        },
    };
    let timed_out = exited.is_none();
    let status = match exited {
        Some(status) => status,
        None => {
            group.signal(Signal::SIGTERM);
            match tokio::time::timeout(KILL_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    group.signal(Signal::SIGKILL);
                    child.wait().await
                }
            }
        }
    }
    .map_err(|error| JobError::retry(format!("waiting for the command: {error}")))?;
    // What the command left running dies with its job: then the pipes close. (The group
    // outlives its leader while any member lives, so its id is not reused before this.)
    group.signal(Signal::SIGKILL);
    group.disarm();
    feeding.abort();
    let stdout = collect(stdout).await;
    let stderr = collect(stderr).await;
    // Each outcome is logged once, by the worker runtime, with the job's run time.
    decide(&status, timed_out, command.timeout, &stdout, &stderr)
}

/// A command's process group, killed when dropped unless disarmed.
#[derive(Debug)]
struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    fn of(child: &tokio::process::Child) -> Self {
        // The child leads its group (`process_group(0)`): the group id is its pid.
        Self(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
        )
    }

    fn signal(&self, signal: Signal) {
        if let Some(group) = self.0 {
            // No such group: everything in it has exited already.
            let _ = killpg(group, signal);
        }
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// Reads a command's output to its end: logs it line by line and keeps its last `keep` bytes.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    keep: usize,
    job: u64,
    name: &'static str,
) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut line = Vec::new();
    let mut chunk = vec![0u8; 8 * 1024];
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > keep {
            tail.drain(..tail.len() - keep);
        }
        for byte in &chunk[..n] {
            if *byte == b'\n' {
                log_line(job, name, &line);
                line.clear();
            } else if line.len() < LOG_LINE {
                line.push(*byte);
            }
        }
    }
    if !line.is_empty() {
        log_line(job, name, &line);
    }
    tail
}

fn log_line(job: u64, stream: &'static str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    tracing::info!(
        job,
        stream,
        "{}",
        super::terminal::safe(text.trim_end_matches('\r'))
    );
}

/// The tail a pump kept; empty if the pipe did not close in time.
async fn collect(pump: Option<tokio::task::JoinHandle<Vec<u8>>>) -> Vec<u8> {
    let Some(pump) = pump else {
        return Vec::new();
    };
    let abort = pump.abort_handle();
    match tokio::time::timeout(PIPE_GRACE, pump).await {
        Ok(Ok(tail)) => tail,
        _ => {
            abort.abort();
            Vec::new()
        }
    }
}

/// The outcome a command chose on its last line of standard output.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reported {
    snooze: Option<Value>,
    retry_in: Option<Value>,
    retry_at: Option<Value>,
    retryable: Option<bool>,
    error: Option<String>,
    detail: Option<Value>,
}

/// The job's outcome: the command's own choice (its last line of standard output, when that
/// is a JSON object), else its exit status.
fn decide(
    status: &ExitStatus,
    timed_out: bool,
    timeout: Option<Duration>,
    stdout: &[u8],
    stderr: &[u8],
) -> Result<(), JobError> {
    let stderr_text = text_tail(stderr);
    if timed_out {
        let limit = humantime::format_duration(timeout.unwrap_or_default());
        let mut message = format!("timed out after {limit}: its process group was killed");
        if !stderr_text.is_empty() {
            message.push_str(&format!("; stderr: {stderr_text}"));
        }
        return Err(JobError::retry(message).with_detail(json!({"timed_out": true})));
    }
    let exit = exit_detail(status);
    match reported(stdout) {
        Err(problem) => {
            return Err(JobError::retry(format!(
                "the command's outcome line is not valid: {problem}"
            ))
            .with_detail(exit));
        }
        Ok(Some(report)) => {
            if let Some(choice) = report.into_error(&stderr_text, &exit)? {
                return Err(choice);
            }
        }
        Ok(None) => {}
    }
    if status.success() {
        return Ok(());
    }
    let message = if stderr_text.is_empty() {
        describe_exit(status)
    } else {
        stderr_text
    };
    Err(JobError::retry(message).with_detail(exit))
}

impl Reported {
    /// The failure the command chose; `None` for `{}` (the exit status decides). Err for a
    /// report that does not make sense (the job fails, saying why).
    fn into_error(self, stderr: &str, exit: &Value) -> Result<Option<JobError>, JobError> {
        let invalid = |why: String| {
            JobError::retry(format!("the command's outcome line is not valid: {why}"))
        };
        let choices = [
            self.snooze.is_some(),
            self.retry_in.is_some(),
            self.retry_at.is_some(),
            self.retryable == Some(false),
        ];
        if choices.iter().filter(|c| **c).count() > 1 {
            return Err(invalid(
                "give at most one of snooze, retry_in, retry_at and retryable: false".to_owned(),
            ));
        }
        let outcome = if let Some(delay) = &self.snooze {
            Outcome::Snooze(duration(delay).map_err(|e| invalid(format!("snooze: {e}")))?)
        } else if let Some(delay) = &self.retry_in {
            Outcome::RetryIn(duration(delay).map_err(|e| invalid(format!("retry_in: {e}")))?)
        } else if let Some(at) = &self.retry_at {
            Outcome::RetryAt(time(at).map_err(|e| invalid(format!("retry_at: {e}")))?)
        } else if self.retryable == Some(false) {
            Outcome::NotRetryable
        } else if self.error.is_some() || self.retryable == Some(true) {
            Outcome::Retry
        } else {
            return Ok(None);
        };
        let mut error = JobError::new(outcome);
        match self.error {
            Some(message) => error = error.with_message(message),
            None if !stderr.is_empty() && !matches!(outcome, Outcome::Snooze(_)) => {
                error = error.with_message(stderr.to_owned());
            }
            None => {}
        }
        let detail = self.detail.unwrap_or_else(|| exit.clone());
        Ok(Some(error.with_detail(detail)))
    }
}

/// The last non-blank line of standard output, read as an outcome when it is a JSON object.
fn reported(stdout: &[u8]) -> Result<Option<Reported>, String> {
    let text = String::from_utf8_lossy(stdout);
    let Some(last) = text.lines().map(str::trim).rev().find(|l| !l.is_empty()) else {
        return Ok(None);
    };
    if !last.starts_with('{') {
        return Ok(None);
    }
    serde_json::from_str::<Reported>(last)
        .map(Some)
        .map_err(|e| format!("{e}: {last}"))
}

fn duration(value: &Value) -> Result<Duration, String> {
    match value {
        Value::String(text) => parse::duration(text),
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_millis)
            .ok_or_else(|| format!("must be whole milliseconds, got {n}")),
        other => Err(format!("must be a duration such as \"30s\", got {other}")),
    }
}

fn time(value: &Value) -> Result<std::time::SystemTime, String> {
    let ms = match value {
        Value::String(text) => tenax_core::clock::parse_rfc3339(text)
            .ok_or_else(|| format!("must be an RFC 3339 time, got {text:?}"))?,
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("must be milliseconds since 1970, got {n}"))?,
        other => return Err(format!("must be an RFC 3339 time, got {other}")),
    };
    Ok(UNIX_EPOCH + Duration::from_millis(ms))
}

/// Some output as text, trimmed (a character the tail cut in two shows as U+FFFD).
fn text_tail(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

fn exit_detail(status: &ExitStatus) -> Value {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => json!({"exit_code": code}),
        (None, Some(signal)) => json!({"signal": signal}),
        (None, None) => json!({}),
    }
}

fn describe_exit(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("the command exited with status {code}"),
        (None, Some(signal)) => format!("the command was killed by signal {signal}"),
        (None, None) => "the command ended without a status".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use super::*;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn the_exit_status_decides_without_an_outcome_line() {
        assert!(decide(&exit(0), false, None, b"hello\n", b"").is_ok());
        let error = decide(&exit(3), false, None, b"", b"  boom\n").expect_err("failed");
        assert_eq!(
            (error.outcome(), error.message()),
            (Outcome::Retry, "boom".to_owned())
        );
        assert_eq!(error.detail(), Some(json!({"exit_code": 3})));
        let error = decide(&exit(1), false, None, b"", b"").expect_err("failed");
        assert_eq!(error.message(), "the command exited with status 1");
        let killed = ExitStatus::from_raw(9);
        let error = decide(&killed, false, None, b"", b"").expect_err("failed");
        assert_eq!(error.message(), "the command was killed by signal 9");
    }

    #[test]
    fn the_last_line_may_choose_the_outcome() {
        let error = decide(&exit(0), false, None, b"log\n{\"snooze\": \"30s\"}\n", b"")
            .expect_err("snoozed");
        assert_eq!(error.outcome(), Outcome::Snooze(Duration::from_secs(30)));
        let error = decide(
            &exit(1),
            false,
            None,
            b"{\"retry_in\": 60000, \"error\": \"busy\"}",
            b"x",
        )
        .expect_err("retry in");
        assert_eq!(error.outcome(), Outcome::RetryIn(Duration::from_secs(60)));
        assert_eq!(error.message(), "busy");
        let error = decide(
            &exit(0),
            false,
            None,
            b"{\"retryable\": false}",
            b"bad input",
        )
        .expect_err("dead");
        assert_eq!(
            (error.outcome(), error.message()),
            (Outcome::NotRetryable, "bad input".to_owned())
        );
        let error = decide(
            &exit(0),
            false,
            None,
            b"{\"retry_at\": \"2030-01-01T00:00:00Z\"}",
            b"",
        )
        .expect_err("retry at");
        assert_eq!(
            error.outcome(),
            Outcome::RetryAt(UNIX_EPOCH + Duration::from_secs(1_893_456_000))
        );
        let error =
            decide(&exit(0), false, None, b"{\"error\": \"said so\"}", b"").expect_err("failed");
        assert_eq!(
            (error.outcome(), error.message()),
            (Outcome::Retry, "said so".to_owned())
        );
        assert!(decide(&exit(0), false, None, b"{}", b"").is_ok());
    }

    #[test]
    fn a_wrong_outcome_line_fails_the_job_rather_than_complete_it() {
        for line in [
            &b"{\"snoze\": \"30s\"}"[..],
            b"{\"snooze\": \"soon\"}",
            b"{\"snooze\": \"1s\", \"retry_in\": \"1s\"}",
            b"{not json",
        ] {
            let error = decide(&exit(0), false, None, line, b"").expect_err("failed");
            assert!(
                error
                    .message()
                    .starts_with("the command's outcome line is not valid"),
                "{}",
                error.message()
            );
        }
    }

    #[test]
    fn a_timeout_says_so() {
        let error = decide(
            &exit(0),
            true,
            Some(Duration::from_secs(300)),
            b"",
            b"partial",
        )
        .expect_err("timed out");
        assert_eq!(
            error.message(),
            "timed out after 5m: its process group was killed; stderr: partial"
        );
    }
}
