//! `floor`: what one job per request costs against what this machine allows, in one run.
//!
//! It measures the floor first: the round trip of `GET /healthz` (a request the server does
//! nothing for) at 1 and at 8 connections, and one `fdatasync` of a page written in the
//! server's data directory (`--data-dir`, so on the server's disk: the server must be on this
//! machine). Then it runs `enqueue-1` and `enqueue-8` as those scenarios do, and `enqueue-8`
//! against a second server started with `--durability relaxed` when `--relaxed-url` names one.
//! It reports `enqueue-1` as a share of `1 / (round trip at 1 connection + one fdatasync)`, the
//! most a durable request at a time can reach here, and durable `enqueue-8` as a share of
//! relaxed `enqueue-8`.

use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use indicatif::ProgressBar;
use serde::Serialize;

use super::enqueue::{self, Load};
use super::{Api, Ctx, Latency, RequestStats, Scenario, ScenarioReport, rate};

/// `GET /healthz` requests of each connection count.
const HEALTHZ_REQUESTS: [(usize, u64); 2] = [(1, 5_000), (8, 40_000)];
/// Syncs timed; the first few are left out (the file's first write allocates its block).
const SYNCS: u32 = 2_000;
const SYNC_WARMUP: u32 = 20;
/// Bytes written before each sync: a page, as the write-ahead log appends one record of a few
/// hundred bytes to a page and syncs it.
const SYNC_BYTES: usize = 4_096;
/// The share of the floor the single-request work aims at (issue 31).
pub const TARGET_SHARE: f64 = 0.85;

/// The floor and the shares, for the table and the JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FloorReport {
    /// `GET /healthz` at 1 connection: requests per second (requests / wall time).
    pub healthz_1_per_sec: f64,
    /// Wall time per request at 1 connection (1 / the rate above), in microseconds: the round
    /// trip the floor counts, the client's own time between requests included, as `enqueue-1`'s
    /// rate includes it.
    pub healthz_1_round_trip_us: f64,
    /// The median latency of a `GET /healthz` at 1 connection, in microseconds.
    pub healthz_1_p50_us: f64,
    /// `GET /healthz` at 8 connections: requests per second.
    pub healthz_8_per_sec: f64,
    pub healthz_8_p50_us: f64,
    /// The median of `SYNCS` timed `pwrite` + `fdatasync` of a page in `data_dir`, in
    /// microseconds.
    pub fdatasync_us: f64,
    pub data_dir: PathBuf,
    /// `1 / (healthz_1_round_trip + fdatasync)`, per second.
    pub floor_1_per_sec: f64,
    /// Durable `enqueue-1`, jobs per second.
    pub enqueue_1_per_sec: f64,
    /// Its median request latency, in microseconds.
    pub enqueue_1_p50_us: f64,
    /// `enqueue_1_per_sec / floor_1_per_sec`.
    pub enqueue_1_share: f64,
    /// Durable `enqueue-8`, jobs per second.
    pub enqueue_8_per_sec: f64,
    pub enqueue_8_p50_us: f64,
    /// The server of `--relaxed-url`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relaxed_url: Option<String>,
    /// `enqueue-8` against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relaxed_enqueue_8_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relaxed_enqueue_8_p50_us: Option<f64>,
    /// `enqueue_8_per_sec / relaxed_enqueue_8_per_sec`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enqueue_8_share: Option<f64>,
    pub target_share: f64,
}

pub(super) async fn run(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let started = Instant::now();
    let mut floor = FloorReport {
        data_dir: ctx.config.data_dir.clone(),
        target_share: TARGET_SHARE,
        ..FloorReport::default()
    };
    let mut requests = Vec::new();

    for (connections, count) in HEALTHZ_REQUESTS {
        let (per_sec, stats) = healthz(ctx, connections, count).await?;
        let p50 = stats.p50_us as f64;
        if connections == 1 {
            (floor.healthz_1_per_sec, floor.healthz_1_p50_us) = (per_sec, p50);
        } else {
            (floor.healthz_8_per_sec, floor.healthz_8_p50_us) = (per_sec, p50);
        }
        requests.push(stats);
    }
    floor.healthz_1_round_trip_us = per_request_us(floor.healthz_1_per_sec);

    let dir = ctx.config.data_dir.clone();
    let syncs = tokio::task::spawn_blocking(move || time_syncs(&dir))
        .await
        .context("the fdatasync task")??;
    let sync_stats = syncs.stats(&format!("fdatasync of {SYNC_BYTES} B written"));
    floor.fdatasync_us = sync_stats.p50_us as f64;
    requests.push(sync_stats);
    floor.floor_1_per_sec = 1e6 / (floor.healthz_1_round_trip_us + floor.fdatasync_us);

    let mut jobs = 0;
    let one = enqueue_on(ctx, &ctx.api, Scenario::Enqueue1, 1, "").await?;
    floor.enqueue_1_per_sec = one.jobs_per_sec;
    floor.enqueue_1_p50_us = p50(&one);
    floor.enqueue_1_share = share(one.jobs_per_sec, floor.floor_1_per_sec);
    jobs += one.jobs;
    requests.extend(one.requests);
    let eight = enqueue_on(ctx, &ctx.api, Scenario::Enqueue8, 8, "").await?;
    floor.enqueue_8_per_sec = eight.jobs_per_sec;
    floor.enqueue_8_p50_us = p50(&eight);
    jobs += eight.jobs;
    requests.extend(eight.requests);

    let mut notes = vec![
        "floor = 1 / (GET /healthz wall time per request at 1 connection + median fdatasync)"
            .to_owned(),
    ];
    notes.extend(
        one.notes
            .into_iter()
            .skip(1)
            .map(|n| format!("enqueue-1: {n}")),
    );
    notes.extend(
        eight
            .notes
            .into_iter()
            .skip(1)
            .map(|n| format!("enqueue-8: {n}")),
    );
    match &ctx.config.relaxed_url {
        Some(url) => {
            let relaxed = Api::new(url, &ctx.config.client, ctx.config.http2)?;
            relaxed
                .get(&relaxed.url("/healthz"))
                .await
                .with_context(|| format!("no tenax server answers at --relaxed-url {url}"))?;
            let loose = enqueue_on(ctx, &relaxed, Scenario::Enqueue8, 8, ", relaxed").await?;
            floor.relaxed_url = Some(url.clone());
            floor.relaxed_enqueue_8_per_sec = Some(loose.jobs_per_sec);
            floor.relaxed_enqueue_8_p50_us = Some(p50(&loose));
            floor.enqueue_8_share = Some(share(floor.enqueue_8_per_sec, loose.jobs_per_sec));
            requests.extend(loose.requests);
            notes.extend(
                loose
                    .notes
                    .into_iter()
                    .skip(1)
                    .map(|n| format!("relaxed: {n}")),
            );
            notes.push(format!(
                "relaxed enqueue-8 ran against {url}: that server must run with --durability relaxed"
            ));
        }
        None => notes.push(
            "no durable/relaxed share of enqueue-8: start a second server with --durability \
             relaxed (its own --data-dir and --listen) and give its URL with --relaxed-url"
                .into(),
        ),
    }
    Ok(ScenarioReport {
        jobs,
        seconds: started.elapsed().as_secs_f64(),
        jobs_per_sec: 0.0,
        requests,
        floor: Some(floor),
        notes,
        ..ScenarioReport::default()
    })
}

/// `GET /healthz` `count` times over `connections` connections of their own: requests per
/// second (wall time) and the latency of each.
async fn healthz(ctx: &Ctx, connections: usize, count: u64) -> anyhow::Result<(f64, RequestStats)> {
    let loaded = enqueue::send(
        ctx,
        Load {
            url: ctx.api.url("/healthz"),
            body: None,
            jobs_per_request: 1,
            connections,
            requests: count,
            deadline: ctx.deadline(),
            progress: ProgressBar::hidden(),
        },
    )
    .await?;
    let name = format!("GET /healthz ({})", connections_name(connections));
    Ok((
        rate(loaded.requests, loaded.elapsed),
        loaded.latency.stats(&name),
    ))
}

/// The `enqueue-1` or `enqueue-8` scenario on `api` (its own queue, its default job count or
/// `--jobs`, its own connection count whatever `--connections` says); its request named with
/// the connections and `tag`.
async fn enqueue_on(
    ctx: &Ctx,
    api: &Api,
    scenario: Scenario,
    connections: usize,
    tag: &str,
) -> anyhow::Result<ScenarioReport> {
    let mut config = ctx.config.clone();
    config.connections = None;
    let sub = Ctx {
        api: api.clone(),
        queue: super::queue_name(scenario),
        jobs: ctx
            .config
            .jobs
            .unwrap_or_else(|| scenario.default_jobs())
            .max(1),
        config,
        progress: ctx.progress.clone(),
    };
    let mut report = enqueue::single(&sub, connections).await?;
    for request in &mut report.requests {
        request.request = format!(
            "{} ({}{tag})",
            request.request,
            connections_name(connections)
        );
    }
    Ok(report)
}

/// Writes a page at the start of a file in `dir` and syncs it, `SYNCS` times (after
/// `SYNC_WARMUP` untimed): the time of each write and `fdatasync`. The file is removed after.
fn time_syncs(dir: &Path) -> anyhow::Result<Latency> {
    let path = dir.join(format!(".tenax-bench-floor-{}", std::process::id()));
    let result = sync_file(&path);
    let removed = std::fs::remove_file(&path);
    let latency = result.with_context(|| {
        format!(
            "timing fdatasync in {} (--data-dir: the server's data directory, on this machine)",
            dir.display()
        )
    })?;
    removed.with_context(|| format!("removing {}", path.display()))?;
    Ok(latency)
}

fn sync_file(path: &Path) -> anyhow::Result<Latency> {
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    // The page exists and is on disk before the timing: a sync then writes data only, as the
    // log's syncs into its pre-allocated file do.
    file.write_all(&[0; SYNC_BYTES])?;
    file.sync_all()?;
    let mut page = [0u8; SYNC_BYTES];
    let mut latency = Latency::new();
    for i in 0..SYNC_WARMUP + SYNCS {
        page[..4].copy_from_slice(&i.to_le_bytes());
        let started = Instant::now();
        file.write_all_at(&page, 0)?;
        file.sync_data()?;
        if i >= SYNC_WARMUP {
            latency.record(started.elapsed());
        }
    }
    Ok(latency)
}

/// The median latency of a scenario's (first) request, in microseconds.
fn p50(report: &ScenarioReport) -> f64 {
    report.requests.first().map_or(0.0, |r| r.p50_us as f64)
}

fn connections_name(connections: usize) -> String {
    if connections == 1 {
        "1 connection".into()
    } else {
        format!("{connections} connections")
    }
}

/// Microseconds per request at `per_sec` requests a second (0 for none).
fn per_request_us(per_sec: f64) -> f64 {
    if per_sec > 0.0 { 1e6 / per_sec } else { 0.0 }
}

/// `part / whole`, 0 when the whole is 0.
fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_are_timed_in_the_directory_and_the_file_is_removed() {
        let dir = std::env::temp_dir().join(format!("tenax-floor-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let latency = time_syncs(&dir).unwrap();
        assert_eq!(latency.count(), u64::from(SYNCS));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "file removed");
        std::fs::remove_dir(&dir).unwrap();
        let missing = time_syncs(&dir.join("missing")).unwrap_err();
        assert!(format!("{missing:#}").contains("--data-dir"), "{missing:#}");
    }

    #[test]
    fn shares_and_round_trips() {
        assert_eq!(per_request_us(10_000.0), 100.0);
        assert_eq!(per_request_us(0.0), 0.0);
        assert_eq!(share(85.0, 100.0), 0.85);
        assert_eq!(share(1.0, 0.0), 0.0);
        assert_eq!(connections_name(8), "8 connections");
    }
}
