//! Zaqar v2 scenarios: `zaqar-post-1` and `zaqar-post-10` (messages posted per second, 1 or 10
//! per request, 8 connections) and `zaqar-claim-delete` (a filled queue drained the way
//! `zaqar-bench` consumes: claim up to 10, then one `DELETE` per message with its claim id).
//!
//! Every request carries a `Client-ID` and the project `bench`, as Zaqar requires.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::{Ctx, Latency, ScenarioReport, Stop, join_all, payload, rate};

/// Connections of every Zaqar scenario, unless `--connections` says otherwise.
const CONNECTIONS: usize = 8;
/// Messages per claim (Zaqar's default claim size).
const CLAIM_LIMIT: usize = 10;

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
fn queue(ctx: &Ctx) -> String {
    ctx.queue.replace(':', "-")
}

/// The native name of the scenario's Zaqar queue (of the project `bench`).
pub(super) fn native_queue(ctx: &Ctx) -> String {
    format!("bench:{}", queue(ctx))
}

fn post_body(per_request: usize) -> Bytes {
    let messages: Vec<Value> = (0..per_request)
        .map(|_| json!({"ttl": 3_600, "body": payload()}))
        .collect();
    Bytes::from(serde_json::to_vec(&json!({ "messages": messages })).unwrap_or_default())
}

/// Posts `ctx.jobs` messages, `per_request` at a time, over [`CONNECTIONS`] connections.
async fn post(
    ctx: &Ctx,
    per_request: usize,
) -> anyhow::Result<(u64, std::time::Duration, Latency)> {
    let http = client(&ctx.config.client)?;
    let url = ctx.api.url(&format!("/v2/queues/{}/messages", queue(ctx)));
    let body = post_body(per_request);
    let per = per_request as u64;
    let requests = ctx.jobs.div_ceil(per);
    let next = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let deadline = ctx.deadline();
    let started = Instant::now();
    let tasks = (0..ctx.config.connections.unwrap_or(CONNECTIONS))
        .map(|_| {
            let (http, url, body, next, stop) = (
                http.clone(),
                url.clone(),
                body.clone(),
                next.clone(),
                stop.clone(),
            );
            let progress = ctx.progress.clone();
            tokio::spawn(async move {
                let mut latency = Latency::new();
                let mut posted = 0;
                while !stop.is_set() && Instant::now() < deadline {
                    if next.fetch_add(1, Ordering::Relaxed) >= requests {
                        break;
                    }
                    let sent = Instant::now();
                    let response = http.post(&url).body(body.clone()).send().await;
                    let ok = matches!(&response, Ok(r) if r.status().as_u16() == 201);
                    if !ok {
                        stop.set();
                        let answer = match response {
                            Ok(r) => {
                                format!("{} {}", r.status(), r.text().await.unwrap_or_default())
                            }
                            Err(e) => e.to_string(),
                        };
                        bail!("POST {url}: {answer}");
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

pub(super) async fn post_scenario(ctx: &Ctx, per_request: usize) -> anyhow::Result<ScenarioReport> {
    let (posted, elapsed, latency) = post(ctx, per_request).await?;
    Ok(ScenarioReport {
        jobs: posted,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(posted, elapsed),
        requests: vec![latency.stats(&format!("POST messages ({per_request}/request)"))],
        notes: vec![format!(
            "messages/s = messages posted (201) / time, {per_request} per request, {} connections",
            ctx.config.connections.unwrap_or(CONNECTIONS)
        )],
        ..ScenarioReport::default()
    })
}

pub(super) async fn claim_delete(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    ctx.progress.set_message("posting messages");
    let (posted, fill_time, _) = post(ctx, 10).await?;
    ctx.progress.set_position(0);
    ctx.progress.set_message("claiming and deleting");
    let http = client(&ctx.config.client)?;
    let base = ctx.api.url("");
    let claims_url = ctx.api.url(&format!(
        "/v2/queues/{}/claims?limit={CLAIM_LIMIT}",
        queue(ctx)
    ));
    let deleted = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let deadline = ctx.deadline();
    let started = Instant::now();
    let tasks = (0..ctx.config.connections.unwrap_or(CONNECTIONS))
        .map(|_| {
            let (http, base, claims_url, deleted, stop) = (
                http.clone(),
                base.clone(),
                claims_url.clone(),
                deleted.clone(),
                stop.clone(),
            );
            let progress = ctx.progress.clone();
            tokio::spawn(async move {
                let mut claim_latency = Latency::new();
                let mut delete_latency = Latency::new();
                while !stop.is_set() && Instant::now() < deadline {
                    let sent = Instant::now();
                    let response = http
                        .post(&claims_url)
                        .body(r#"{"ttl": 300, "grace": 60}"#)
                        .send()
                        .await
                        .context("claiming")?;
                    claim_latency.record(sent.elapsed());
                    match response.status().as_u16() {
                        204 => break,
                        201 => {}
                        status => {
                            stop.set();
                            bail!("claim answered {status}");
                        }
                    }
                    let claimed: Value = response.json().await.context("claim body")?;
                    let messages = claimed["messages"].as_array().cloned().unwrap_or_default();
                    for message in messages {
                        let href = message["href"].as_str().context("message href")?;
                        let sent = Instant::now();
                        let status = http
                            .delete(format!("{base}{href}"))
                            .send()
                            .await
                            .context("deleting")?
                            .status()
                            .as_u16();
                        if status != 204 {
                            stop.set();
                            bail!("DELETE {href} answered {status}");
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
         (one DELETE each, as zaqar-bench consumes) / time, {} consumers claiming up to {CLAIM_LIMIT}",
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
        requests: vec![claims.stats("POST claims"), deletes.stats("DELETE message")],
        notes,
        ..ScenarioReport::default()
    })
}
