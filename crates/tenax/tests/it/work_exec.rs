//! `tenax work` as a real child process running real shell scripts against the real server:
//! success, failure with the tail of stderr, every JSON outcome, a timeout that kills a process
//! group, heartbeats under a long command, SIGTERM drains.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{Options, PATIENCE, TestServer, ms};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::common;

const BIN: &str = env!("CARGO_BIN_EXE_tenax");

/// A `tenax work` child process, killed when dropped, with its log in a file.
struct Work {
    child: Child,
    log: PathBuf,
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Work {
    fn start(server: &TestServer, dir: &Path, args: &[&str]) -> Self {
        let log = dir.join(format!("work-{}.log", std::process::id()));
        let stderr = std::fs::File::create(&log).expect("the log file");
        let child = Command::new(BIN)
            .arg("work")
            .args(["--url", &server.api.base])
            .args(args)
            .env("TENAX_LOG", "info")
            .env("TENAX_TOKEN", "tnx_not-for-the-command")
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("tenax work starts");
        Self { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn terminate(&self) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        kill(pid, Signal::SIGTERM).expect("SIGTERM sent");
    }

    /// Waits for the process to exit, at most [`PATIENCE`].
    async fn exited(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("the status") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "tenax work did not exit:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An executable script in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

/// Enqueues a job from its exact JSON text; returns its id.
async fn enqueue_raw(server: &TestServer, body: &str) -> u64 {
    let (status, answer) = server
        .api
        .send_raw(
            reqwest::Method::POST,
            "/api/jobs",
            Some(body.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    answer["id"].as_u64().expect("an id")
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("a time in range")
}

async fn server() -> TestServer {
    TestServer::start(Options::system()).await
}

/// Waits until `path` exists, at most [`PATIENCE`].
async fn file_appears(path: &Path, work: &Work) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared:\n{}",
            path.display(),
            work.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a process is gone: no such process, or a zombie nobody reaped yet.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

async fn wait_gone(pid: u32) {
    let deadline = Instant::now() + PATIENCE;
    while !gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} is still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_and_failure_with_the_tail_of_stderr() {
    const TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let server = server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let out = dir.path().display().to_string();
    let run = script(
        dir.path(),
        "run.sh",
        &format!(
            r#"cat > "{out}/payload-$TENAX_JOB_ID"
env | grep -E '^(TENAX_(JOB_ID|JOB_TYPE|QUEUE|ATTEMPT|TOKEN)|TRACEPARENT)=' | sort > "{out}/env-$TENAX_JOB_ID"
if grep -q fail "{out}/payload-$TENAX_JOB_ID"; then
  echo "START-OF-STDERR" >&2
  i=0; while [ $i -lt 300 ]; do echo "noise line $i of a long failure" >&2; i=$((i+1)); done
  echo "the end: $1" >&2
  exit 3
fi
echo "all good"
"#
        ),
    );
    let ok = enqueue_raw(
        &server,
        r#"{"queue": "exec", "type": "mail.send", "payload": {"to":  "ada" , "n": [1,2]}}"#,
    )
    .await;
    let failing = server
        .enqueue(
            json!({"queue": "exec", "type": "mail.send", "payload": "fail",
            "policy": {"type": "list", "delays": ["1h"]}, "traceparent": TRACE}),
        )
        .await;
    let mut work = Work::start(
        &server,
        dir.path(),
        &[
            "--queue",
            "exec",
            "--concurrency",
            "2",
            "--exec",
            &run,
            "--",
            "argument one",
        ],
    );
    server.wait_for(ok, "completed").await;
    let payload =
        std::fs::read_to_string(dir.path().join(format!("payload-{ok}"))).expect("written");
    assert_eq!(
        payload, r#"{"to":  "ada" , "n": [1,2]}"#,
        "the payload's exact text on stdin"
    );
    let env = std::fs::read_to_string(dir.path().join(format!("env-{ok}"))).expect("written");
    assert_eq!(
        env,
        format!("TENAX_ATTEMPT=1\nTENAX_JOB_ID={ok}\nTENAX_JOB_TYPE=mail.send\nTENAX_QUEUE=exec\n"),
        "the job in the environment, and not the worker's token"
    );

    let job = server
        .wait_until(failing, "its failure recorded", |j| {
            j["errors"].as_array().is_some_and(|e| !e.is_empty())
        })
        .await;
    assert_eq!(job["status"], "scheduled");
    let message = job["errors"][0]["message"].as_str().expect("a message");
    assert!(message.ends_with("the end: argument one"), "{message}");
    assert!(message.len() <= 4096, "{} bytes", message.len());
    assert!(
        !message.contains("START-OF-STDERR"),
        "only the tail is kept"
    );
    assert_eq!(job["errors"][0]["detail"], json!({"exit_code": 3}));
    // A job enqueued with a trace context hands it to its command.
    let env = std::fs::read_to_string(dir.path().join(format!("env-{failing}"))).expect("written");
    assert!(env.contains(&format!("TRACEPARENT={TRACE}\n")), "{env}");
    work.terminate();
    assert!(work.exited().await.success(), "{}", work.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_chooses_the_outcome_on_its_last_line() {
    let server = server().await;
    let dir = tempfile::tempdir().expect("a directory");
    // Through a shell, as the user asks for one: the payload is the outcome line.
    let mut work = Work::start(
        &server,
        dir.path(),
        &[
            "-q",
            "outcomes",
            "--concurrency",
            "4",
            "--exec",
            "sh",
            "--",
            "-c",
            "echo some log; cat; echo",
        ],
    );
    let policy = json!({"type": "list", "delays": ["1h", "1h"]});
    let enqueue = |outcome: Value| {
        let policy = policy.clone();
        let server = &server;
        async move {
            server
                .enqueue(
                    json!({"queue": "outcomes", "type": "t", "payload": outcome, "policy": policy}),
                )
                .await
        }
    };
    let now = now_ms();
    let snooze = enqueue(json!({"snooze": "2h"})).await;
    let retry_in = enqueue(json!({"retry_in": "3h", "error": "rate limited"})).await;
    let retry_at = enqueue(json!({"retry_at": "2031-01-01T00:00:00Z"})).await;
    let dead = enqueue(json!({"retryable": false, "error": "bad address"})).await;
    let plain = enqueue(json!({"error": "it said no", "detail": {"code": 7}})).await;
    let typo = enqueue(json!({"snoze": "1h"})).await;

    let failed = |id: u64| {
        let server = &server;
        async move {
            server
                .wait_until(id, "its failure recorded", |j| {
                    j["errors"].as_array().is_some_and(|e| !e.is_empty())
                })
                .await
        }
    };
    let job = server.wait_for(snooze, "scheduled").await;
    assert_eq!(job["failures"], 0, "a snooze uses no attempt: {job}");
    assert_eq!(job["errors"], json!([]));
    assert!(ms(&job["run_at"]) >= now + 7_100_000, "{job}");

    let job = failed(retry_in).await;
    assert_eq!(job["errors"][0]["message"], "rate limited");
    assert!(ms(&job["run_at"]) >= now + 10_700_000, "{job}");
    let job = failed(retry_at).await;
    assert_eq!(job["run_at"], "2031-01-01T00:00:00.000Z");
    assert_eq!(
        job["errors"][0]["message"],
        "retry at 2031-01-01T00:00:00.000Z"
    );
    let job = failed(dead).await;
    assert_eq!(job["status"], "dead");
    assert_eq!(job["errors"][0]["message"], "bad address");
    let job = failed(plain).await;
    assert_eq!(job["status"], "scheduled");
    assert_eq!(job["errors"][0]["message"], "it said no");
    assert_eq!(job["errors"][0]["detail"], json!({"code": 7}));
    // A misspelt outcome fails the job rather than complete it.
    let job = failed(typo).await;
    let message = job["errors"][0]["message"].as_str().expect("a message");
    assert!(
        message.starts_with("the command's outcome line is not valid: unknown field `snoze`"),
        "{message}"
    );
    work.terminate();
    assert!(work.exited().await.success(), "{}", work.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_whole_process_group() {
    let server = server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let out = dir.path().display().to_string();
    let run = script(
        dir.path(),
        "hang.sh",
        &format!(
            r#"sleep 300 &
echo $! > "{out}/grandchild.tmp" && mv "{out}/grandchild.tmp" "{out}/grandchild"
echo "started, now hanging" >&2
wait
"#
        ),
    );
    let id = server
        .enqueue(
            json!({"queue": "slow", "type": "t", "policy": {"type": "list", "delays": ["1h"]}}),
        )
        .await;
    let mut work = Work::start(
        &server,
        dir.path(),
        &["-q", "slow", "--timeout", "1s", "--exec", &run],
    );
    let job = server
        .wait_until(id, "its failure recorded", |j| {
            j["errors"].as_array().is_some_and(|e| !e.is_empty())
        })
        .await;
    let message = job["errors"][0]["message"].as_str().expect("a message");
    assert_eq!(
        message,
        "timed out after 1s: its process group was killed; stderr: started, now hanging"
    );
    let grandchild: u32 = std::fs::read_to_string(dir.path().join("grandchild"))
        .expect("the grandchild's pid")
        .trim()
        .parse()
        .expect("a pid");
    wait_gone(grandchild).await;
    work.terminate();
    assert!(work.exited().await.success(), "{}", work.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_long_command_s_job() {
    let server = server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let out = dir.path().display().to_string();
    let run = script(
        dir.path(),
        "long.sh",
        &format!("echo run >> \"{out}/runs\"\nsleep 3\n"),
    );
    let id = server.enqueue(json!({"queue": "long", "type": "t"})).await;
    let mut work = Work::start(
        &server,
        dir.path(),
        &["-q", "long", "--lease", "1s", "--exec", &run],
    );
    let job = server.wait_for(id, "completed").await;
    assert_eq!(job["failures"], 0, "the lease never expired: {job}");
    assert_eq!(job["errors"], json!([]));
    let runs = std::fs::read_to_string(dir.path().join("runs")).expect("runs");
    assert_eq!(runs, "run\n", "the command ran once");
    work.terminate();
    assert!(work.exited().await.success(), "{}", work.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_running_commands_finish_and_gives_back_the_rest() {
    let server = server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let out = dir.path().display().to_string();
    let run = script(
        dir.path(),
        "drain.sh",
        &format!(
            "echo started > \"{out}/started-$TENAX_JOB_ID\"\nsleep 2\necho done >> \"{out}/done\"\n"
        ),
    );
    let ids = server
        .enqueue_batch(
            (0..3)
                .map(|i| json!({"queue": "drain", "type": "t", "payload": i}))
                .collect(),
        )
        .await;
    let mut work = Work::start(
        &server,
        dir.path(),
        &["-q", "drain", "--shutdown-timeout", "20s", "--exec", &run],
    );
    file_appears(&dir.path().join(format!("started-{}", ids[0])), &work).await;
    work.terminate();
    let status = work.exited().await;
    assert!(status.success(), "{status}: {}", work.log());
    let done = std::fs::read_to_string(dir.path().join("done")).expect("done");
    assert_eq!(done, "done\n", "the running command finished");
    server.wait_for(ids[0], "completed").await;
    for id in &ids[1..] {
        let job = server.wait_for(*id, "ready").await;
        assert_eq!(job["failures"], 0, "{job}");
        assert!(!dir.path().join(format!("started-{id}")).exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_past_the_deadline_kills_the_command_and_gives_its_job_back() {
    let server = server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let out = dir.path().display().to_string();
    let run = script(
        dir.path(),
        "stuck.sh",
        &format!(
            "sleep 300 &\necho $! > \"{out}/pid.tmp\" && mv \"{out}/pid.tmp\" \"{out}/pid\"\nwait\n"
        ),
    );
    let id = server.enqueue(json!({"queue": "stuck", "type": "t"})).await;
    let mut work = Work::start(
        &server,
        dir.path(),
        &["-q", "stuck", "--shutdown-timeout", "500ms", "--exec", &run],
    );
    let pid: u32 = file_appears(&dir.path().join("pid"), &work)
        .await
        .trim()
        .parse()
        .expect("a pid");
    let asked = Instant::now();
    work.terminate();
    let status = work.exited().await;
    assert!(status.success(), "{status}: {}", work.log());
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    wait_gone(pid).await;
    let job = server.wait_for(id, "ready").await;
    assert_eq!(
        (job["attempt"].clone(), job["failures"].clone()),
        (json!(1), json!(0)),
        "{job}"
    );
    assert!(work.log().contains("abandoned=1"), "{}", work.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_exits_with_status_2_naming_what_is_wrong() {
    let server = server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let mut work = Work::start(
        &server,
        dir.path(),
        &["-q", "q", "--exec", "/no/such/program"],
    );
    assert_eq!(work.exited().await.code(), Some(2));
    assert!(
        work.log()
            .contains("--exec: /no/such/program is not an executable file"),
        "{}",
        work.log()
    );
    let mut work = Work::start(&server, dir.path(), &["-q", "no spaces", "--exec", "true"]);
    assert_eq!(work.exited().await.code(), Some(2));
    assert!(work.log().contains("queues[0]"), "{}", work.log());
}
