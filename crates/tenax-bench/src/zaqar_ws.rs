//! Zaqar's websocket scenarios, mirroring the HTTP ones of [`super::zaqar`] over one websocket
//! per connection (the server's root, `ws://host:port/`): `zaqar-ws-post-10` (ten messages per
//! `message_post` frame) and `zaqar-ws-claim-delete` (a filled queue drained by `claim_create`
//! of up to 10, then one `message_delete` frame per message with its claim id).
//!
//! A connection sends a frame and waits for its answer before the next, as Zaqar's clients do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context as _, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{Ctx, Latency, ScenarioReport, Stop, join_all, payload, rate};

/// Connections of every websocket scenario, unless `--connections` says otherwise (as HTTP).
const CONNECTIONS: usize = 8;
/// Messages per post and per claim, as the HTTP scenarios.
const BATCH: usize = 10;

/// One websocket speaking Zaqar's frames as the project `bench`.
struct Ws {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    headers: Value,
}

impl Ws {
    async fn open(ctx: &Ctx) -> anyhow::Result<Self> {
        let base = ctx.api.url("/");
        let Some(rest) = base.strip_prefix("http://") else {
            bail!("the websocket scenarios speak plain ws:// only; {base} is not http://");
        };
        let mut request = format!("ws://{rest}")
            .into_client_request()
            .context("the websocket URL")?;
        let mut headers = json!({"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c",
                                 "X-Project-ID": "bench"});
        if let Some(token) = &ctx.config.client.token {
            headers["X-Auth-Token"] = json!(token);
            request.headers_mut().insert(
                "x-auth-token",
                token.parse().context("the token as a header")?,
            );
        }
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .context("opening the websocket")?;
        Ok(Self { socket, headers })
    }

    /// Sends one action and waits for its answer: its status and body.
    async fn ask(&mut self, action: &str, body: &Value) -> anyhow::Result<(u64, Value)> {
        let frame = json!({"action": action, "headers": self.headers, "body": body});
        self.socket
            .send(Message::Text(frame.to_string().into()))
            .await
            .context("sending a frame")?;
        loop {
            let message = self
                .socket
                .next()
                .await
                .context("the server closed the websocket")?
                .context("reading a frame")?;
            if let Message::Text(text) = message {
                let answer: Value = serde_json::from_str(&text).context("a JSON answer")?;
                let status = answer["headers"]["status"].as_u64().unwrap_or(0);
                return Ok((status, answer["body"].clone()));
            }
        }
    }
}

fn queue(ctx: &Ctx) -> String {
    ctx.queue.replace(':', "-")
}

/// Posts `ctx.jobs` messages, [`BATCH`] a frame, over the connections.
async fn post(ctx: &Ctx) -> anyhow::Result<(u64, std::time::Duration, Latency)> {
    let messages: Vec<Value> = (0..BATCH)
        .map(|_| json!({"ttl": 3_600, "body": payload()}))
        .collect();
    let body = Arc::new(json!({"queue_name": queue(ctx), "messages": messages}));
    let requests = ctx.jobs.div_ceil(BATCH as u64);
    let next = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let deadline = ctx.deadline();
    let mut sockets = Vec::new();
    for _ in 0..ctx.config.connections.unwrap_or(CONNECTIONS) {
        sockets.push(Ws::open(ctx).await?);
    }
    let started = Instant::now();
    let tasks = sockets
        .into_iter()
        .map(|mut ws| {
            let (body, next, stop) = (body.clone(), next.clone(), stop.clone());
            let progress = ctx.progress.clone();
            tokio::spawn(async move {
                let mut latency = Latency::new();
                let mut posted = 0;
                while !stop.is_set() && Instant::now() < deadline {
                    if next.fetch_add(1, Ordering::Relaxed) >= requests {
                        break;
                    }
                    let sent = Instant::now();
                    let (status, answer) = ws.ask("message_post", &body).await?;
                    if status != 201 {
                        stop.set();
                        bail!("message_post answered {status}: {answer}");
                    }
                    latency.record(sent.elapsed());
                    posted += BATCH as u64;
                    progress.inc(BATCH as u64);
                }
                Ok((posted, latency))
            })
        })
        .collect();
    let results = join_all(tasks).await?;
    let elapsed = started.elapsed();
    let mut latency = Latency::new();
    let mut posted = 0;
    for (n, part) in &results {
        posted += n;
        latency.merge(part);
    }
    Ok((posted, elapsed, latency))
}

pub(super) async fn post_scenario(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let (posted, elapsed, latency) = post(ctx).await?;
    Ok(ScenarioReport {
        jobs: posted,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(posted, elapsed),
        requests: vec![latency.stats(&format!("message_post frame ({BATCH}/frame)"))],
        notes: vec![format!(
            "messages/s = messages posted (201) / time, {BATCH} per frame, {} websockets",
            ctx.config.connections.unwrap_or(CONNECTIONS)
        )],
        ..ScenarioReport::default()
    })
}

pub(super) async fn claim_delete(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    ctx.progress.set_message("posting messages");
    let (posted, fill_time, _) = post(ctx).await?;
    ctx.progress.set_position(0);
    ctx.progress.set_message("claiming and deleting");
    let name = queue(ctx);
    let deleted = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let deadline = ctx.deadline();
    let mut sockets = Vec::new();
    for _ in 0..ctx.config.connections.unwrap_or(CONNECTIONS) {
        sockets.push(Ws::open(ctx).await?);
    }
    let started = Instant::now();
    let tasks = sockets
        .into_iter()
        .map(|mut ws| {
            let (name, deleted, stop) = (name.clone(), deleted.clone(), stop.clone());
            let progress = ctx.progress.clone();
            tokio::spawn(async move {
                let mut claim_latency = Latency::new();
                let mut delete_latency = Latency::new();
                let claim = json!({"queue_name": name, "ttl": 300, "grace": 60, "limit": BATCH});
                while !stop.is_set() && Instant::now() < deadline {
                    let sent = Instant::now();
                    let (status, claimed) = ws.ask("claim_create", &claim).await?;
                    claim_latency.record(sent.elapsed());
                    match status {
                        204 => break,
                        201 => {}
                        status => {
                            stop.set();
                            bail!("claim_create answered {status}: {claimed}");
                        }
                    }
                    let claim_id = claimed["claim_id"].clone();
                    let messages = claimed["messages"].as_array().cloned().unwrap_or_default();
                    for message in messages {
                        let delete = json!({"queue_name": name, "message_id": message["id"],
                                            "claim_id": claim_id});
                        let sent = Instant::now();
                        let (status, answer) = ws.ask("message_delete", &delete).await?;
                        if status != 204 {
                            stop.set();
                            bail!("message_delete answered {status}: {answer}");
                        }
                        delete_latency.record(sent.elapsed());
                        deleted.fetch_add(1, Ordering::Relaxed);
                        progress.inc(1);
                    }
                }
                Ok((claim_latency, delete_latency))
            })
        })
        .collect();
    let results = join_all(tasks).await?;
    let elapsed = started.elapsed();
    let (mut claims, mut deletes) = (Latency::new(), Latency::new());
    for (claim, delete) in &results {
        claims.merge(claim);
        deletes.merge(delete);
    }
    let deleted = deleted.load(Ordering::Relaxed);
    let mut notes = vec![format!(
        "{posted} messages posted first ({} msg/s); messages/s = messages claimed and deleted \
         (one message_delete frame each) / time, {} websockets claiming up to {BATCH}",
        super::report::format_rate(rate(posted, fill_time)),
        ctx.config.connections.unwrap_or(CONNECTIONS),
    )];
    if deleted < posted {
        notes.push(format!("only {deleted} of {posted} messages were deleted"));
    }
    Ok(ScenarioReport {
        jobs: deleted,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(deleted, elapsed),
        requests: vec![
            claims.stats("claim_create frame"),
            deletes.stats("message_delete frame"),
        ],
        notes,
        ..ScenarioReport::default()
    })
}
