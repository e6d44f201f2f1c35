//! Zaqar v2 scenarios: `zaqar-post-1` and `zaqar-post-10` (messages posted per second, 1 or 10
//! per request, 8 connections) and `zaqar-claim-delete` (a filled queue drained the way
//! `zaqar-bench` consumes: claim up to 10, then one `DELETE` per message with its claim id).
//! The websocket scenarios ([`super::zaqar_ws`]) run the same loops over another [`Link`].
//!
//! Every request carries a `Client-ID` and the project `bench`, as Zaqar requires.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::{Ctx, Latency, ScenarioReport, Stop, join_all, payload, rate};

/// Connections of every Zaqar scenario, unless `--connections` says otherwise.
pub(super) const CONNECTIONS: usize = 8;
/// Messages per claim (Zaqar's default claim size).
pub(super) const CLAIM_LIMIT: usize = 10;

/// One connection's way of speaking Zaqar: HTTP, or the websocket's frames.
#[async_trait]
pub(super) trait Link: Send + 'static {
    /// Posts one batch of messages (the scenario's batch, prepared by the link).
    async fn post(&mut self) -> anyhow::Result<()>;
    /// Claims up to [`CLAIM_LIMIT`] messages: `None` when the queue is empty.
    async fn claim(&mut self) -> anyhow::Result<Option<Vec<Value>>>;
    /// Deletes one claimed message (as the claim showed it) with its claim.
    async fn delete(&mut self, message: &Value) -> anyhow::Result<()>;
}

/// How a scenario's links are named in its report.
pub(super) struct Names {
    pub post: String,
    pub claim: &'static str,
    pub delete: &'static str,
    /// How each message is deleted, for the notes.
    pub how: &'static str,
    /// What a connection is, for the notes.
    pub connections: &'static str,
}

fn client(options: &tenax_net::http::ClientOptions) -> anyhow::Result<reqwest::Client> {
    let prepared = options.prepare().map_err(|e| anyhow::anyhow!(e))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        "client-id",
        HeaderValue::from_static("3381af92-2b9e-11e3-b191-71861300734c"),
    );
    headers.insert("x-project-id", HeaderValue::from_static("bench"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let make = || {
        prepared
            .builder(headers.clone())
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(64)
    };
    let (client, _) = tenax_net::http::build(make).context("building the HTTP client")?;
    Ok(client)
}

/// The Zaqar queue name of the scenario's queue (Zaqar names have no `:`).
pub(super) fn queue(ctx: &Ctx) -> String {
    ctx.queue.replace(':', "-")
}

/// The native name of the scenario's Zaqar queue (of the project `bench`).
pub(super) fn native_queue(ctx: &Ctx) -> String {
    format!("bench:{}", queue(ctx))
}

/// `per_request` messages of about 100 bytes, as Zaqar posts them.
pub(super) fn messages(per_request: usize) -> Vec<Value> {
    (0..per_request)
        .map(|_| json!({"ttl": 3_600, "body": payload()}))
        .collect()
}

/// One HTTP connection's worth of requests (the client pools the connections).
struct Http {
    http: reqwest::Client,
    base: String,
    post_url: String,
    post_body: Bytes,
    claims_url: String,
}

#[async_trait]
impl Link for Http {
    async fn post(&mut self) -> anyhow::Result<()> {
        let response = self
            .http
            .post(&self.post_url)
            .body(self.post_body.clone())
            .send()
            .await;
        match response {
            Ok(r) if r.status().as_u16() == 201 => Ok(()),
            Ok(r) => bail!(
                "POST {}: {} {}",
                self.post_url,
                r.status(),
                r.text().await.unwrap_or_default()
            ),
            Err(e) => bail!("POST {}: {e}", self.post_url),
        }
    }

    async fn claim(&mut self) -> anyhow::Result<Option<Vec<Value>>> {
        let response = self
            .http
            .post(&self.claims_url)
            .body(r#"{"ttl": 300, "grace": 60}"#)
            .send()
            .await
            .context("claiming")?;
        match response.status().as_u16() {
            204 => Ok(None),
            201 => {
                let claimed: Value = response.json().await.context("claim body")?;
                Ok(Some(
                    claimed["messages"].as_array().cloned().unwrap_or_default(),
                ))
            }
            status => bail!("claim answered {status}"),
        }
    }

    async fn delete(&mut self, message: &Value) -> anyhow::Result<()> {
        let href = message["href"].as_str().context("message href")?;
        let status = self
            .http
            .delete(format!("{}{href}", self.base))
            .send()
            .await
            .context("deleting")?
            .status()
            .as_u16();
        if status != 204 {
            bail!("DELETE {href} answered {status}");
        }
        Ok(())
    }
}

/// The HTTP links of a scenario, one per connection.
fn http_links(ctx: &Ctx, per_request: usize) -> anyhow::Result<Vec<Http>> {
    let http = client(&ctx.config.client)?;
    let body = json!({ "messages": messages(per_request) });
    let link = Http {
        http,
        base: ctx.api.url(""),
        post_url: ctx.api.url(&format!("/v2/queues/{}/messages", queue(ctx))),
        post_body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        claims_url: ctx.api.url(&format!(
            "/v2/queues/{}/claims?limit={CLAIM_LIMIT}",
            queue(ctx)
        )),
    };
    Ok((0..ctx.config.connections.unwrap_or(CONNECTIONS))
        .map(|_| Http {
            http: link.http.clone(),
            base: link.base.clone(),
            post_url: link.post_url.clone(),
            post_body: link.post_body.clone(),
            claims_url: link.claims_url.clone(),
        })
        .collect())
}

/// Posts `ctx.jobs` messages, `per_request` at a time, over the links (one task each).
async fn post<L: Link>(
    ctx: &Ctx,
    links: Vec<L>,
    per_request: usize,
) -> anyhow::Result<(u64, Duration, Latency)> {
    let per = per_request as u64;
    let requests = ctx.jobs.div_ceil(per);
    let next = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let deadline = ctx.deadline();
    let started = Instant::now();
    let tasks = links
        .into_iter()
        .map(|mut link| {
            let (next, stop) = (next.clone(), stop.clone());
            let progress = ctx.progress.clone();
            tokio::spawn(async move {
                let mut latency = Latency::new();
                let mut posted = 0;
                while !stop.is_set() && Instant::now() < deadline {
                    if next.fetch_add(1, Ordering::Relaxed) >= requests {
                        break;
                    }
                    let sent = Instant::now();
                    if let Err(error) = link.post().await {
                        stop.set();
                        return Err(error);
                    }
                    latency.record(sent.elapsed());
                    posted += per;
                    progress.inc(per);
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

/// A post scenario over `links`.
pub(super) async fn post_with<L: Link>(
    ctx: &Ctx,
    links: Vec<L>,
    per_request: usize,
    names: &Names,
) -> anyhow::Result<ScenarioReport> {
    let (posted, elapsed, latency) = post(ctx, links, per_request).await?;
    Ok(ScenarioReport {
        jobs: posted,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(posted, elapsed),
        requests: vec![latency.stats(&names.post)],
        notes: vec![format!(
            "messages/s = messages posted (201) / time, {per_request} per request, {} {}",
            ctx.config.connections.unwrap_or(CONNECTIONS),
            names.connections,
        )],
        ..ScenarioReport::default()
    })
}

/// A claim-and-delete scenario: fills the queue over `fill` (10 per post), then drains it over
/// `drain`, each link claiming up to [`CLAIM_LIMIT`] and deleting each message on its own.
pub(super) async fn claim_delete_with<L: Link>(
    ctx: &Ctx,
    fill: Vec<L>,
    drain: Vec<L>,
    names: &Names,
) -> anyhow::Result<ScenarioReport> {
    ctx.progress.set_message("posting messages");
    let (posted, fill_time, _) = post(ctx, fill, CLAIM_LIMIT).await?;
    ctx.progress.set_position(0);
    ctx.progress.set_message("claiming and deleting");
    let deleted = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let deadline = ctx.deadline();
    let started = Instant::now();
    let tasks = drain
        .into_iter()
        .map(|mut link| {
            let (deleted, stop) = (deleted.clone(), stop.clone());
            let progress = ctx.progress.clone();
            tokio::spawn(async move {
                let mut claim_latency = Latency::new();
                let mut delete_latency = Latency::new();
                let drained = async {
                    while !stop.is_set() && Instant::now() < deadline {
                        let sent = Instant::now();
                        let claimed = link.claim().await?;
                        claim_latency.record(sent.elapsed());
                        let Some(messages) = claimed else { break };
                        for message in messages {
                            let sent = Instant::now();
                            link.delete(&message).await?;
                            delete_latency.record(sent.elapsed());
                            deleted.fetch_add(1, Ordering::Relaxed);
                            progress.inc(1);
                        }
                    }
                    anyhow::Ok(())
                };
                if let Err(error) = drained.await {
                    stop.set();
                    return Err(error);
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
         ({}) / time, {} {} claiming up to {CLAIM_LIMIT}",
        super::report::format_rate(rate(posted, fill_time)),
        names.how,
        ctx.config.connections.unwrap_or(CONNECTIONS),
        names.connections,
    )];
    if deleted < posted {
        notes.push(format!("only {deleted} of {posted} messages were deleted"));
    }
    Ok(ScenarioReport {
        jobs: deleted,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(deleted, elapsed),
        requests: vec![claims.stats(names.claim), deletes.stats(names.delete)],
        notes,
        ..ScenarioReport::default()
    })
}

fn http_names(per_request: usize) -> Names {
    Names {
        post: format!("POST messages ({per_request}/request)"),
        claim: "POST claims",
        delete: "DELETE message",
        how: "one DELETE each, as zaqar-bench consumes",
        connections: "connections",
    }
}

pub(super) async fn post_scenario(ctx: &Ctx, per_request: usize) -> anyhow::Result<ScenarioReport> {
    let links = http_links(ctx, per_request)?;
    post_with(ctx, links, per_request, &http_names(per_request)).await
}

pub(super) async fn claim_delete(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let fill = http_links(ctx, CLAIM_LIMIT)?;
    let drain = http_links(ctx, CLAIM_LIMIT)?;
    claim_delete_with(ctx, fill, drain, &http_names(CLAIM_LIMIT)).await
}
