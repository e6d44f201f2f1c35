//! The client commands against a real server process: enqueue one and from an NDJSON file,
//! jobs, dead jobs, stats, queues, schedules, subscriptions, deliveries and tokens; `--format
//! json` prints what the API answers; bad input exits with status 2 and names the field.

use std::io::BufRead as _;
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::ports;

const BIN: &str = env!("CARGO_BIN_EXE_tenax");

/// A `tenax serve` child process, killed when dropped.
struct Server {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    start_with(&[], Stdio::inherit())
}

/// A server with extra environment variables and its standard error sent to `stderr`.
fn start_with(env: &[(&str, &str)], stderr: Stdio) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = ports::spare_port();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir.path())
        .env("TENAX_LOG", "warn")
        .envs(env.iter().copied())
        .stderr(stderr)
        .spawn()
        .expect("spawn tenax serve");
    let url = format!("http://127.0.0.1:{port}");
    let server = Server {
        child,
        url,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

fn tenax(server: &Server, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("TENAX_URL", &server.url)
        .output()
        .expect("run tenax")
}

/// `tenax` with an API token in `TENAX_TOKEN`.
fn tenax_with(server: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("TENAX_URL", &server.url)
        .env("TENAX_TOKEN", token)
        .output()
        .expect("run tenax")
}

/// What the API answers to `GET path`, read by hand: what `--format json` must print.
fn api(server: &Server, path: &str) -> serde_json::Value {
    http()
        .get(format!("{}{path}", server.url))
        .send()
        .and_then(|r| r.json())
        .expect("an API answer")
}

/// A blocking HTTP client for the tests' own requests.
fn http() -> reqwest::blocking::Client {
    tenax_net::http::install_crypto_provider();
    #[allow(clippy::disallowed_methods)] // the provider is installed
    reqwest::blocking::Client::new()
}

/// `tenax ARGS --format json`, read as JSON.
fn json(server: &Server, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    serde_json::from_str(&stdout(&tenax(server, &args))).expect("JSON")
}

/// A port on loopback where nobody listens, and a webhook endpoint there.
fn closed_endpoint() -> (u16, String) {
    let closed = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    (closed, format!("http://127.0.0.1:{closed}/hook"))
}

/// `tenax ARGS --format json` prints what the API answers to `GET path`.
fn prints_the_api_answer(server: &Server, args: &[&str], path: &str) {
    assert_eq!(json(server, args), api(server, path), "tenax {args:?}");
}

/// A command that must fail with status 2: its standard error.
fn refused(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    stderr
}

/// Polls `check` until it gives a value, at most 20 s.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn client_commands_round_trip() {
    let server = start();
    let one = stdout(&tenax(
        &server,
        &[
            "enqueue",
            "-q",
            "mail",
            "-t",
            "send",
            "-p",
            r#"{"to":"a@example.com"}"#,
            "--policy",
            r#"{"type": "fixed", "delay": "1s", "retry_limit": 0}"#,
        ],
    ));
    let one: serde_json::Value = serde_json::from_str(one.trim()).expect("json answer");
    assert_eq!(one["created"], true);
    let id = one["id"].as_u64().expect("id");

    let file = tempfile::NamedTempFile::new().expect("temp file");
    let lines: String = (0..2_500)
        .map(|n| format!("{{\"queue\":\"bulk\",\"type\":\"t\",\"payload\":{{\"n\":{n}}}}}\n"))
        .collect();
    std::fs::write(file.path(), lines).expect("write ndjson");
    let output = tenax(
        &server,
        &[
            "enqueue",
            "--file",
            file.path().to_str().expect("utf-8 path"),
            "--batch",
            "1000",
        ],
    );
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("enqueued 2500 jobs"));

    let stats = stdout(&tenax(&server, &["stats"]));
    let bulk = stats
        .lines()
        .find(|l| l.starts_with("bulk"))
        .expect("bulk row");
    assert_eq!(
        bulk.split_whitespace().collect::<Vec<_>>(),
        ["bulk", "0", "2500", "0", "0", "0", "0"]
    );

    // Fail the mail job once: its policy allows no retries, so it is dead.
    let client = http();
    let taken: serde_json::Value = client
        .post(format!("{}/api/take", server.url))
        .header("content-type", "application/json")
        .body(r#"{"queues": ["mail"]}"#)
        .send()
        .and_then(|r| r.json())
        .expect("take");
    assert_eq!(taken["jobs"][0]["id"].as_u64(), Some(id));
    let token = taken["jobs"][0]["lease_token"]
        .as_u64()
        .expect("a lease token");
    let failed = client
        .post(format!("{}/api/jobs/{id}/fail", server.url))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"lease_token": {token}, "error": "smtp said no"}}"#
        ))
        .send()
        .expect("fail");
    assert!(failed.status().is_success());

    let dead = stdout(&tenax(&server, &["dead", "list"]));
    assert!(dead.contains("smtp said no"), "{dead}");
    let replayed = stdout(&tenax(
        &server,
        &[
            "dead",
            "replay",
            "--id",
            &id.to_string(),
            "--reset-attempts",
        ],
    ));
    assert!(replayed.starts_with("replayed 1 jobs"), "{replayed}");
    let shown: serde_json::Value =
        serde_json::from_str(&stdout(&tenax(&server, &["jobs", "show", &id.to_string()])))
            .expect("json");
    assert_eq!(shown["status"], "ready");
    assert_eq!(shown["errors"][0]["message"], "smtp said no");

    let listed = stdout(&tenax(
        &server,
        &["jobs", "list", "-q", "bulk", "--limit", "2"],
    ));
    assert_eq!(listed.lines().count(), 3, "header and two rows: {listed}");
    let output = tenax(
        &server,
        &[
            "jobs", "list", "-q", "bulk", "--limit", "2", "--status", "ready",
        ],
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).starts_with("more: --after "),
        "a full page says how to go on"
    );
    let none = stdout(&tenax(&server, &["jobs", "list", "--status", "in_flight"]));
    assert_eq!(none.lines().count(), 1, "the header alone: {none}");
    let stderr = refused(&tenax(&server, &["jobs", "list", "--status", "lost"]));
    assert!(stderr.contains("--status"), "{stderr}");
    // The job as the API shows it.
    let shown: serde_json::Value =
        serde_json::from_str(&stdout(&tenax(&server, &["jobs", "show", &id.to_string()])))
            .expect("json");
    assert_eq!(shown, api(&server, &format!("/api/jobs/{id}")));
    // A replay that selects nothing says what is missing.
    let stderr = refused(&tenax(&server, &["dead", "replay"]));
    assert!(stderr.contains("ids: name the jobs"), "{stderr}");
    let dead = stdout(&tenax(&server, &["dead", "replay", "--all"]));
    assert_eq!(dead, "replayed 0 jobs: []\n");
}

#[test]
fn bad_input_exits_2_naming_the_field() {
    let server = start();
    let output = tenax(&server, &["enqueue", "-q", "bad queue!"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("queue: must be 1 to 1602 characters")
    );
    let output = tenax(
        &server,
        &[
            "enqueue",
            "-q",
            "ok",
            "--policy",
            r#"{"type": "phased", "function": "cubic"}"#,
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("policy.function"));
    let output = Command::new(BIN)
        .args(["serve", "--default-backoff-base", "10s"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--default-backoff-exponent"));
    let output = Command::new(BIN)
        .args(["serve", "--delivery-ca-file", "/no/such/ca.pem"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--delivery-ca-file: cannot read /no/such/ca.pem"),
        "{stderr}"
    );
    let output = Command::new(BIN)
        .args(["policy", "preview", "--policy", r#"{"type": "fixed"}"#])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("delay: is required"));
}

#[test]
fn without_platform_root_certificates_plain_http_still_works() {
    // A machine with no CA certificates (a minimal container): rustls-native-certs reads only
    // SSL_CERT_FILE and SSL_CERT_DIR when either is set, and here they hold nothing.
    let dir = tempfile::tempdir().expect("temp dir");
    let no_roots = dir.path().join("no-roots.pem");
    std::fs::write(&no_roots, "").expect("write an empty bundle");
    let no_roots = no_roots.to_str().expect("utf-8 path");
    let log = dir.path().join("serve.log");
    let server = start_with(
        &[("SSL_CERT_FILE", no_roots), ("SSL_CERT_DIR", "")],
        Stdio::from(std::fs::File::create(&log).expect("a log file")),
    );
    // The server runs, and says why https deliveries will fail.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("root certificates could not be loaded") {
            break;
        }
        assert!(Instant::now() < deadline, "no warning in the log: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A client command builds its client and talks plain http.
    let output = Command::new(BIN)
        .args(["stats"])
        .env("TENAX_URL", &server.url)
        .env("SSL_CERT_FILE", no_roots)
        .env("SSL_CERT_DIR", "")
        .output()
        .expect("run tenax");
    stdout(&output);
}

/// Job types, error messages and reasons come from anyone: the terminal gets them escaped,
/// never as raw control or reordering characters, in tables, JSON and error messages alike.
#[test]
fn text_from_the_server_is_escaped_for_the_terminal() {
    let server = start();
    let nasty = "x\u{1b}[2J\u{1b}[31m\u{7}\u{9b}\u{202e}y";
    let added = stdout(&tenax(&server, &["enqueue", "-q", "esc", "-t", nasty]));
    assert!(added.contains("\"id\""), "{added}");
    let forbidden = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    let listed = stdout(&tenax(&server, &["jobs", "list", "-q", "esc"]));
    assert!(!listed.chars().any(forbidden), "{listed:?}");
    assert!(listed.contains("x\\u{1b}[2J"), "{listed}");
    let shown = stdout(&tenax(&server, &["jobs", "show", "1"]));
    assert!(!shown.chars().any(forbidden), "{shown:?}");
    let job: serde_json::Value = serde_json::from_str(&shown).expect("still JSON");
    assert_eq!(job["type"], nasty);
    // An error message that quotes the input raw (serde names an unknown field as it is).
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("jobs.ndjson");
    std::fs::write(&file, "{\"queue\": \"esc\", \"\\u001b[2J\": 1}\n").expect("write");
    let output = tenax(
        &server,
        &["enqueue", "--file", file.to_str().expect("a UTF-8 path")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\\u{1b}[2J"), "{stderr:?}");
    assert!(!stderr.chars().any(forbidden), "{stderr:?}");
}

#[test]
fn schedules_and_queue_limits_from_the_command_line() {
    let server = start();
    let made = stdout(&tenax(
        &server,
        &[
            "schedules",
            "set",
            "nightly",
            "--cron",
            "30 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--queue",
            "reports",
            "--type",
            "report",
            "--payload",
            r#"{"full": true}"#,
            "--overlap",
            "skip",
            "--format",
            "json",
        ],
    ));
    let made: serde_json::Value = serde_json::from_str(&made).expect("JSON");
    assert_eq!(made["job"]["payload"], serde_json::json!({"full": true}));
    assert_eq!(made["overlap"], "skip");
    let list = stdout(&tenax(&server, &["schedules", "list"]));
    assert!(
        list.contains("nightly") && list.contains("Europe/Berlin"),
        "{list}"
    );
    let shown = stdout(&tenax(&server, &["schedules", "show", "nightly"]));
    assert!(shown.contains("next tick"), "{shown}");
    assert!(shown.contains("last job      -\n"), "{shown}");
    prints_the_api_answer(
        &server,
        &["schedules", "show", "nightly"],
        "/api/schedules/nightly",
    );
    prints_the_api_answer(&server, &["schedules", "list"], "/api/schedules");
    prints_the_api_answer(
        &server,
        &["schedules", "ticks", "nightly", "--count", "3"],
        "/api/schedules/nightly/ticks?count=3",
    );
    let ticks = stdout(&tenax(
        &server,
        &["schedules", "ticks", "nightly", "--count", "2"],
    ));
    assert_eq!(ticks.lines().count(), 4, "{ticks}");
    let paused = stdout(&tenax(&server, &["schedules", "pause", "nightly"]));
    assert!(paused.contains("paused        true"), "{paused}");
    tenax(&server, &["schedules", "resume", "nightly"]);
    // Run now: the job is enqueued at once and is the schedule's last.
    let ran = stdout(&tenax(&server, &["schedules", "run", "nightly"]));
    let job = api(&server, "/api/schedules/nightly")["last_job"].clone();
    assert!(job.is_u64(), "{ran}");
    let said = refused(&tenax(&server, &["schedules", "run", "nope"]));
    assert!(said.contains("schedule \"nope\" does not exist"), "{said}");
    // A preview needs no server: the spring-forward day shows its tick moved to 03:00.
    let preview = Command::new(BIN)
        .args([
            "schedules",
            "preview",
            "--cron",
            "30 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--after",
            "2027-03-27T12:00:00Z",
            "--count",
            "2",
        ])
        .output()
        .expect("run tenax");
    let preview = stdout(&preview);
    assert!(
        preview
            .lines()
            .any(|line| line.contains("2027-03-28T03:00:00+02:00")
                && line.contains("(its wall time does not exist")),
        "{preview}"
    );
    let said = refused(&tenax(
        &server,
        &["schedules", "set", "bad", "--cron", "* * *", "--queue", "q"],
    ));
    assert!(said.contains("cron:"), "{said}");
    let deleted = stdout(&tenax(&server, &["schedules", "delete", "nightly"]));
    assert!(deleted.contains("deleted schedule nightly"), "{deleted}");
    let said = refused(&tenax(&server, &["schedules", "show", "nightly"]));
    assert!(said.contains("does not exist (404 Not Found)"), "{said}");

    let set = stdout(&tenax(
        &server,
        &[
            "queues",
            "set",
            "q",
            "--create",
            "--concurrency",
            "4",
            "--rate",
            "100/1m",
        ],
    ));
    assert!(set.contains("0/4") && set.contains("0/100 per 1m"), "{set}");
    let removed = stdout(&tenax(&server, &["queues", "set", "q", "--no-concurrency"]));
    assert!(removed.contains("in flight  0\n"), "{removed}");
    let said = refused(&tenax(
        &server,
        &["queues", "set", "q", "--concurrency", "0"],
    ));
    assert!(said.contains("concurrency:"), "{said}");
    let list = stdout(&tenax(&server, &["queues", "list"]));
    assert!(list.contains("0/100 per 1m"), "{list}");
    let said = refused(&tenax(&server, &["queues", "set", "q", "--rate", "5/soon"]));
    assert!(
        said.contains("--rate") && said.contains("the period"),
        "{said}"
    );
}

#[test]
fn queues_show_pause_and_resume() {
    let server = start();
    stdout(&tenax(&server, &["enqueue", "-q", "mail", "-t", "t"]));
    stdout(&tenax(
        &server,
        &["enqueue", "-q", "mail", "-t", "t", "--delay", "1h"],
    ));
    let shown = stdout(&tenax(&server, &["queues", "show", "mail"]));
    assert!(shown.contains("ready      1\n"), "{shown}");
    assert!(shown.contains("scheduled  1\n"), "{shown}");
    assert!(shown.contains("rate       -\n"), "{shown}");
    let paused = stdout(&tenax(&server, &["queues", "pause", "mail"]));
    assert!(paused.contains("paused     true\n"), "{paused}");
    let list = stdout(&tenax(&server, &["queues", "list"]));
    let row = list
        .lines()
        .find(|l| l.starts_with("mail "))
        .expect("a row of mail");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["mail", "true", "1", "1", "0", "0", "0", "-"]
    );
    let resumed = stdout(&tenax(&server, &["queues", "resume", "mail"]));
    assert!(resumed.contains("paused     false\n"), "{resumed}");
    // A misspelt queue is refused, naming the one meant; --create makes a new one.
    let said = refused(&tenax(&server, &["queues", "pause", "mial"]));
    assert!(
        said.contains("queue \"mial\" does not exist; did you mean \"mail\"?"),
        "{said}"
    );
    let made = stdout(&tenax(&server, &["queues", "pause", "mial", "--create"]));
    assert!(made.contains("paused     true\n"), "{made}");
    prints_the_api_answer(&server, &["queues", "show", "mail"], "/api/queues/mail");
    prints_the_api_answer(&server, &["queues", "list"], "/api/queues");
}

/// A subscription whose endpoint refuses every connection, its dead delivery, the replay of
/// it, a new secret and the delete, all from the command line.
#[test]
fn subscriptions_and_deliveries_from_the_command_line() {
    let server = start_with(
        &[("TENAX_ALLOW_PRIVATE_ENDPOINTS", "true")],
        Stdio::inherit(),
    );
    let (_, endpoint) = closed_endpoint();
    let made = json(
        &server,
        &[
            "subscriptions",
            "create",
            "orders",
            &endpoint,
            "--policy",
            r#"{"type": "fixed", "delay": "1s", "retry_limit": 0}"#,
            "--header",
            "X-Team=billing",
            "--auto-disable-after",
            "3d",
            "--retryable-statuses",
            "409,503",
        ],
    );
    assert!(
        made["secret"]
            .as_str()
            .is_some_and(|s| s.starts_with("whsec_"))
    );
    assert_eq!(made["auto_disable_after_ms"], 3 * 86_400_000);
    let id = made["id"].to_string();
    let list = stdout(&tenax(&server, &["subscriptions", "list", "orders"]));
    let row = list.lines().nth(1).expect("a row");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            id.as_str(),
            "orders",
            "yes",
            "ok",
            "0",
            "0",
            endpoint.as_str()
        ]
    );
    let shown = stdout(&tenax(&server, &["subscriptions", "show", &id]));
    for words in [
        "fixed 1s",
        "(from the subscription)",
        "X-Team: [redacted]",
        "retried       409, 503",
        "auto-disable  after 3d failing",
        "retry budget  none",
        "format        tenax",
    ] {
        assert!(shown.contains(words), "{words:?} in {shown}");
    }
    prints_the_api_answer(
        &server,
        &["subscriptions", "show", &id],
        &format!("/api/subscriptions/{id}"),
    );
    prints_the_api_answer(&server, &["subscriptions", "list"], "/api/subscriptions");

    stdout(&tenax(
        &server,
        &["enqueue", "-q", "orders", "-t", "order.paid"],
    ));
    let dead = eventually("a dead delivery with its attempt", || {
        let page = json(&server, &["deliveries", "list", &id, "--status", "dead"]);
        let delivery = page["deliveries"].get(0)?["id"].to_string();
        let shown = stdout(&tenax(&server, &["deliveries", "show", &delivery]));
        shown
            .contains("could not connect")
            .then_some((delivery, shown))
    });
    let (delivery, shown) = dead;
    assert!(shown.contains("status        dead\n"), "{shown}");
    assert!(shown.contains("order.paid on orders"), "{shown}");
    assert!(
        shown.contains("policy        the subscription's\n"),
        "{shown}"
    );
    prints_the_api_answer(
        &server,
        &["deliveries", "show", &delivery],
        &format!("/api/deliveries/{delivery}"),
    );
    let list = stdout(&tenax(&server, &["deliveries", "list", &id]));
    assert!(
        list.lines()
            .nth(1)
            .is_some_and(|row| row.contains(" dead ")),
        "{list}"
    );
    let replayed = stdout(&tenax(&server, &["deliveries", "replay", &delivery]));
    assert_eq!(replayed, format!("replayed 1 deliveries: [{delivery}]\n"));
    let replay_since = |since: &str| {
        let args = [
            "deliveries",
            "replay",
            "--subscription",
            &id,
            "--since",
            since,
        ];
        tenax(&server, &args)
    };
    let said = refused(&replay_since("soon"));
    assert!(said.contains("--since"), "{said}");
    let none = stdout(&replay_since("2100-01-01T00:00:00Z"));
    assert_eq!(none, "replayed 0 deliveries: []\n");

    let rotated = stdout(&tenax(
        &server,
        &["subscriptions", "rotate-secret", &id, "--overlap", "1m"],
    ));
    assert!(rotated.contains("secret        whsec_"), "{rotated}");
    let updated = stdout(&tenax(
        &server,
        &[
            "subscriptions",
            "update",
            &id,
            "--disable",
            "--throttle",
            "5",
        ],
    ));
    assert!(updated.contains("enabled       no\n"), "{updated}");
    assert!(
        updated.contains("throttle      5 per second\n"),
        "{updated}"
    );
    let said = refused(&tenax(
        &server,
        &["subscriptions", "update", &id, "--endpoint", "ftp://x"],
    ));
    assert!(said.contains("endpoint:"), "{said}");
    let deleted = stdout(&tenax(&server, &["subscriptions", "delete", &id]));
    assert_eq!(
        deleted,
        format!("deleted subscription {id} and its 1 deliveries\n")
    );
}

const ADMIN: &str = "cli-test-admin-token-0123456789abcdef";

fn start_with_auth() -> Server {
    start_with(
        &[("TENAX_AUTH", "on"), ("TENAX_ADMIN_TOKEN", ADMIN)],
        Stdio::inherit(),
    )
}

#[test]
fn tokens_are_made_listed_and_revoked() {
    let server = start_with_auth();
    let made = tenax_with(
        &server,
        ADMIN,
        &[
            "tokens",
            "create",
            "--name",
            "billing workers",
            "--role",
            "worker",
            "--queue",
            "billing.*",
        ],
    );
    let token = stdout(&made).trim().to_owned();
    assert!(token.starts_with("tnx_"), "{token}");
    let said = String::from_utf8_lossy(&made.stderr);
    assert!(
        said.contains("made token 1 (worker); it is shown once, here:"),
        "{said}"
    );
    let list = stdout(&tenax_with(&server, ADMIN, &["tokens", "list"]));
    let row = list.lines().nth(1).expect("a row");
    assert!(
        row.starts_with("    1  billing workers          worker    "),
        "{row}"
    );
    assert!(
        row.contains(" never ") && row.ends_with("queues billing.*"),
        "{row}"
    );
    // The worker's token reads no stats: its role may not.
    let said = refused(&tenax_with(&server, &token, &["stats"]));
    assert!(said.contains("(403 Forbidden)"), "{said}");
    let revoked = stdout(&tenax_with(&server, ADMIN, &["tokens", "revoke", "1"]));
    assert_eq!(revoked, "revoked token 1\n");
    let said = refused(&tenax_with(&server, ADMIN, &["tokens", "revoke", "1"]));
    assert!(said.contains("(404 Not Found)"), "{said}");
    let said = refused(&tenax_with(
        &server,
        ADMIN,
        &["tokens", "create", "--name", "x", "--role", "boss"],
    ));
    assert!(said.contains("--role"), "{said}");
}

/// `tenax subscriptions show` says in words what holds the deliveries back: the retry budget
/// set by `--retry-budget`, and the endpoint's circuit breaker, opened here by one refused
/// connection (a closed port on loopback).
#[test]
fn subscriptions_show_the_retry_budget_and_the_endpoint_breaker() {
    let server = start_with(
        &[
            ("TENAX_ALLOW_PRIVATE_ENDPOINTS", "true"),
            ("TENAX_DELIVERY_BREAKER_FAILURES", "1"),
            ("TENAX_DELIVERY_BREAKER_COOLDOWN", "10m"),
        ],
        Stdio::inherit(),
    );
    let (closed, endpoint) = closed_endpoint();
    let made = stdout(&tenax(
        &server,
        &[
            "subscriptions",
            "create",
            "orders",
            &endpoint,
            "--retry-budget",
            "20,1m,5",
            "--format",
            "json",
        ],
    ));
    let made: serde_json::Value = serde_json::from_str(&made).expect("JSON");
    assert_eq!(
        made["retry_budget"],
        serde_json::json!({"percent": 20, "window_ms": 60_000, "min_retries": 5})
    );
    let id = made["id"].to_string();
    stdout(&tenax(
        &server,
        &["enqueue", "-q", "orders", "-t", "order.paid", "-p", "{}"],
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    let shown = loop {
        let shown = stdout(&tenax(&server, &["subscriptions", "show", &id]));
        if shown.contains("circuit breaker open") {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "the breaker never opened: {shown}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        shown.contains("retries at most 20% of the attempts in any 1m (or 5)"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("http://127.0.0.1:{closed}")),
        "{shown}"
    );
    assert!(shown.contains("could not connect"), "{shown}");
    assert!(shown.contains("opened 1 times in a row"), "{shown}");

    let changed = stdout(&tenax(
        &server,
        &[
            "subscriptions",
            "update",
            &id,
            "--no-retry-budget",
            "--format",
            "json",
        ],
    ));
    let changed: serde_json::Value = serde_json::from_str(&changed).expect("JSON");
    assert_eq!(changed["retry_budget"], serde_json::Value::Null);
    let shown = stdout(&tenax(&server, &["subscriptions", "show", &id]));
    assert!(shown.contains("retry budget"), "{shown}");
    assert!(shown.contains("none"), "{shown}");
}

/// `tenax queues` alone lists the queues, as `tenax queues list` does.
#[test]
fn queues_alone_lists_them() {
    let server = start();
    stdout(&tenax(&server, &["enqueue", "-q", "mail"]));
    let alone = stdout(&tenax(&server, &["queues"]));
    assert!(alone.lines().any(|l| l.starts_with("mail ")), "{alone}");
    assert_eq!(alone, stdout(&tenax(&server, &["queues", "list"])));
    prints_the_api_answer(&server, &["queues"], "/api/queues");
}

/// Whether `text` is a time as the tables show one: `2026-11-27T11:25:37Z`.
fn is_date(text: &str) -> bool {
    let shape = text
        .bytes()
        .map(|b| if b.is_ascii_digit() { b'0' } else { b })
        .collect::<Vec<u8>>();
    shape == b"0000-00-00T00:00:00Z"
}

/// Times in tables are dates in UTC to the second, never milliseconds since 1970.
#[test]
fn times_in_tables_are_dates() {
    let server = start();
    stdout(&tenax(
        &server,
        &[
            "enqueue",
            "-q",
            "later",
            "--run-at",
            "2030-01-02T03:04:05.678Z",
        ],
    ));
    let list = stdout(&tenax(&server, &["jobs", "list", "-q", "later"]));
    let row = list.lines().nth(1).expect("a row");
    assert!(row.contains(" 2030-01-02T03:04:05Z "), "{row}");
    stdout(&tenax(
        &server,
        &[
            "schedules",
            "set",
            "yearly",
            "--cron",
            "@yearly",
            "--queue",
            "later",
        ],
    ));
    let shown = stdout(&tenax(&server, &["schedules", "show", "yearly"]));
    let next = shown
        .lines()
        .find_map(|l| l.strip_prefix("next tick"))
        .expect("a next tick")
        .trim();
    assert!(
        is_date(next) && next.ends_with("-01-01T00:00:00Z"),
        "{shown}"
    );
    let ticks = stdout(&tenax(
        &server,
        &["schedules", "ticks", "yearly", "--count", "2"],
    ));
    for row in ticks.lines().skip(2) {
        let at = row.split_whitespace().next().expect("a time");
        assert!(is_date(at), "{ticks}");
    }
    // JSON keeps the API's spelling.
    let job = &json(&server, &["schedules", "show", "yearly"])["next_tick"];
    assert!(
        job.as_str().is_some_and(|t| t.ends_with("T00:00:00.000Z")),
        "{job}"
    );
}

/// A 401 says which flag (or variable) gives the token, not which HTTP header carries it.
#[test]
fn a_missing_or_bad_token_names_the_flag() {
    let server = start_with_auth();
    for said in [
        refused(&tenax(&server, &["stats"])),
        refused(
            &Command::new(BIN)
                .args(["work", "-q", "q", "--exec", "true"])
                .env("TENAX_URL", &server.url)
                .output()
                .expect("run tenax work"),
        ),
    ] {
        // The last line is the error (`tenax work` logs before it).
        let error = said.lines().last().unwrap_or_default();
        assert_eq!(
            error,
            "error: this server needs an API token: give it with --token or TENAX_TOKEN \
             (401 Unauthorized)",
            "{said}"
        );
    }
    let said = refused(&tenax_with(&server, "tnx_wrong", &["jobs", "list"]));
    assert!(
        said.contains(
            "the API token is not valid (unknown or revoked): check --token or TENAX_TOKEN"
        ),
        "{said}"
    );
    stdout(&tenax_with(&server, ADMIN, &["stats"]));
}

/// `tenax listen` receives a subscription's deliveries: it answers the first with 500 (the
/// delivery is retried), prints each with its attempt and a signature checked against the
/// subscription's secret, and acknowledges the retry.
#[test]
fn listen_receives_deliveries_and_checks_their_signatures() {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let server = start_with(
        &[("TENAX_ALLOW_PRIVATE_ENDPOINTS", "true")],
        Stdio::inherit(),
    );
    let port = ports::spare_port();
    let mut listen = Command::new(BIN)
        .args(["listen", "--port", &port.to_string(), "--fail-first", "1"])
        .args(["--secret", SECRET])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn tenax listen");
    let mut lines = std::io::BufReader::new(listen.stdout.take().expect("its stdout")).lines();
    let first = lines.next().expect("a line").expect("text");
    assert!(
        first.starts_with(&format!("listening on http://127.0.0.1:{port}/")),
        "{first}"
    );
    let created = stdout(&tenax(
        &server,
        &[
            "subscriptions",
            "create",
            "orders",
            &format!("http://127.0.0.1:{port}/hooks"),
            "--secret",
            SECRET,
            "--policy",
            r#"{"type": "fixed", "delay": "10ms", "retry_limit": 3}"#,
        ],
    ));
    assert!(created.contains("orders"), "{created}");
    stdout(&tenax(
        &server,
        &[
            "enqueue",
            "-q",
            "orders",
            "-t",
            "order.paid",
            "-p",
            r#"{"order": 7}"#,
        ],
    ));
    // Read until the second request's lines are complete (its body's last line).
    let mut seen = Vec::new();
    while seen.iter().filter(|l: &&String| l.trim() == "}").count() < 2 {
        seen.push(lines.next().expect("more lines").expect("text"));
    }
    // The answer goes after the lines are printed: stop the receiver once it was heard.
    let delivered = eventually("the retry acknowledged", || {
        let list = api(&server, "/api/subscriptions/1/deliveries?status=completed");
        (list["deliveries"].as_array()?.len() == 1).then_some(list)
    });
    assert_eq!(delivered["deliveries"][0]["failures"], 1, "{delivered}");
    let _ = listen.kill();
    let _ = listen.wait();
    let text = seen.join("\n");
    assert!(
        text.contains("#1 ") && text.contains("POST /hooks → 500"),
        "{text}"
    );
    assert!(
        text.contains("#2 ") && text.contains("POST /hooks → 200"),
        "{text}"
    );
    assert!(
        text.contains("attempt 1") && text.contains("attempt 2"),
        "{text}"
    );
    assert_eq!(text.matches("signature ok").count(), 2, "{text}");
    assert!(text.contains("\"order\": 7"), "{text}");
}

/// `POST path` with `body` on the server, expecting a success: its JSON.
fn post(server: &Server, path: &str, body: serde_json::Value) -> serde_json::Value {
    let response = http()
        .post(format!("{}{path}", server.url))
        .json(&body)
        .send()
        .expect("an API answer");
    assert!(response.status().is_success(), "POST {path}: {response:?}");
    response.json().expect("JSON")
}

#[test]
fn a_queues_jobs_are_exported_as_ndjson_and_imported_afresh() {
    let server = start();
    let policy = serde_json::json!({"type": "fixed", "delay": "7s"});
    let ready = post(
        &server,
        "/api/jobs",
        serde_json::json!({"queue": "a", "type": "mail", "payload": {"to": "x@example.com"},
                           "priority": 3, "policy": policy, "unique_key": "mail-1"}),
    )["id"]
        .as_u64()
        .unwrap();
    post(
        &server,
        "/api/jobs",
        serde_json::json!({"queue": "a", "type": "later", "payload": [1, 2],
                           "run_at": "2099-01-01T00:00:00.000Z"}),
    );
    // One completed, one dead.
    for (kind, outcome) in [("done", "complete"), ("doomed", "fail")] {
        post(
            &server,
            "/api/jobs",
            serde_json::json!({"queue": "a", "type": kind, "payload": null, "priority": 9}),
        );
        let taken = post(&server, "/api/take", serde_json::json!({"queues": ["a"]}));
        let job = &taken["jobs"][0];
        assert_eq!(job["type"], kind);
        let path = format!("/api/jobs/{}/{outcome}", job["id"]);
        let mut body = serde_json::json!({"lease_token": job["lease_token"]});
        if outcome == "fail" {
            body["error"] = "no".into();
            body["retryable"] = false.into();
        }
        post(&server, &path, body);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    let exported = tenax(
        &server,
        &[
            "jobs",
            "export",
            "--queue",
            "a",
            "--output",
            file.to_str().unwrap(),
        ],
    );
    assert!(exported.status.success(), "{exported:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], api(&server, &format!("/api/jobs/{ready}")));
    let dead = lines.iter().find(|j| j["status"] == "dead").unwrap();
    assert_eq!(dead["errors"][0]["message"], "no");

    let imported = tenax(
        &server,
        &["jobs", "import", file.to_str().unwrap(), "--queue", "b"],
    );
    let said = String::from_utf8_lossy(&imported.stderr).into_owned();
    assert!(imported.status.success(), "{said}");
    assert!(said.contains("enqueued 2 jobs"), "{said}");
    assert!(said.contains("left out 1 completed"), "{said}");
    assert!(said.contains("left out 1 dead"), "{said}");
    let b = api(&server, "/api/jobs?queue=b");
    let b = b["jobs"].as_array().unwrap();
    assert_eq!(b.len(), 2, "{b:?}");
    for field in ["type", "payload", "priority", "policy", "unique_key"] {
        assert_eq!(b[0][field], lines[0][field], "{field}");
    }
    assert_eq!(b[0]["status"], "ready");
    assert_eq!(b[1]["status"], "scheduled");
    assert_eq!(b[1]["run_at"], lines[1]["run_at"]);

    // Dead jobs too when asked, afresh; a line that is not a job is named.
    let again = tenax(
        &server,
        &[
            "jobs",
            "import",
            file.to_str().unwrap(),
            "--queue",
            "c",
            "--include-dead",
        ],
    );
    assert!(again.status.success(), "{again:?}");
    let c = api(&server, "/api/jobs?queue=c");
    let kinds: Vec<&str> = c["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["mail", "later", "doomed"]);
    std::fs::write(&file, format!("{}\n{{\"id\": 1}}\n", lines[0])).unwrap();
    let bad = tenax(&server, &["jobs", "import", file.to_str().unwrap()]);
    let stderr = refused(&bad);
    assert!(
        stderr.contains("a.ndjson:2: not a job as `tenax jobs export` writes it"),
        "{stderr}"
    );
}

#[test]
fn jobs_are_cancelled_from_the_command_line() {
    let server = start();
    let enqueue = |queue: &str| {
        post(&server, "/api/jobs", serde_json::json!({"queue": queue}))["id"]
            .as_u64()
            .expect("an id")
    };
    let (ready, flying) = (enqueue("stop"), enqueue("busy"));
    let (c1, c2) = (enqueue("many"), enqueue("many"));
    let one = stdout(&tenax(
        &server,
        &["jobs", "cancel", "--id", &ready.to_string()],
    ));
    assert_eq!(one, format!("cancelled job {ready}\n"));
    // Again: it is finished, and the error says so.
    let output = tenax(&server, &["jobs", "cancel", "--id", &ready.to_string()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is cancelled"), "{stderr}");
    // In flight: marked.
    let taken = post(
        &server,
        "/api/take",
        serde_json::json!({"queues": ["busy"]}),
    );
    assert_eq!(taken["jobs"][0]["id"].as_u64(), Some(flying));
    let marked = stdout(&tenax(
        &server,
        &["jobs", "cancel", "--id", &flying.to_string()],
    ));
    assert!(
        marked.starts_with(&format!("job {flying} is in flight")),
        "{marked}"
    );
    // By queue.
    let many = stdout(&tenax(&server, &["jobs", "cancel", "-q", "many"]));
    assert_eq!(many, format!("cancelled 2 jobs: [{c1},{c2}]\n"));
    let stats = stdout(&tenax(&server, &["stats"]));
    let row = stats
        .lines()
        .find(|l| l.starts_with("many"))
        .expect("the queue's row");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["many", "0", "0", "0", "0", "0", "2"]
    );
    // Nothing named: the server says what is missing.
    let stderr = refused(&tenax(&server, &["jobs", "cancel"]));
    assert!(stderr.contains("ids: name the jobs"), "{stderr}");
    // Replayed as dead jobs are, with --cancelled.
    let replayed = stdout(&tenax(
        &server,
        &["dead", "replay", "--cancelled", "--id", &ready.to_string()],
    ));
    assert!(replayed.starts_with("replayed 1 jobs"), "{replayed}");
    assert_eq!(
        api(&server, &format!("/api/jobs/{ready}"))["status"],
        "ready"
    );
}
