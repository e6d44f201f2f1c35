//! `memory`: the server's resident memory once it holds many waiting jobs. Reads
//! `/proc/PID/status` of the server, so it needs `--server-pid` and a server on this machine.

use std::time::Duration;

use anyhow::Context as _;

use super::enqueue;
use super::{Ctx, MemoryReport, ScenarioReport, rate};

/// Resident memory of a process, from `/proc/PID/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcMemory {
    /// `VmRSS`: resident now, in KiB.
    pub rss_kb: u64,
    /// `VmHWM`: the peak resident set, in KiB.
    pub hwm_kb: u64,
}

/// Reads `VmRSS` and `VmHWM` out of the text of `/proc/PID/status`.
pub fn parse_proc_status(text: &str) -> Option<ProcMemory> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let value = line.strip_prefix(name)?.strip_prefix(':')?.trim();
            value.strip_suffix("kB")?.trim().parse().ok()
        })
    };
    Some(ProcMemory {
        rss_kb: field("VmRSS")?,
        hwm_kb: field("VmHWM")?,
    })
}

fn read(pid: u32) -> anyhow::Result<ProcMemory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path} (is --server-pid the server's pid?)"))?;
    parse_proc_status(&text).with_context(|| format!("{path} has no VmRSS/VmHWM"))
}

/// Most reads, a second apart, of the resident size after a load.
const SETTLE_READS: u32 = 6;

/// The server's memory once it is steady after a load: read each second until two reads agree
/// within 1 %, at most [`SETTLE_READS`] times. The allocator (mimalloc) gives freed memory back
/// only once it has been free for a second and some thread allocates again, so a single read
/// right after a load catches it at a moment of its own, and runs differed by 10–20 MiB.
async fn read_settled(pid: u32) -> anyhow::Result<ProcMemory> {
    let mut last = None;
    for _ in 0..SETTLE_READS {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = read(pid)?;
        if let Some(previous) = last.replace(now) {
            let (a, b) = (previous.rss_kb, now.rss_kb);
            if a.abs_diff(b) * 100 <= a.max(b) {
                break;
            }
        }
    }
    last.ok_or_else(|| anyhow::anyhow!("no read of /proc/{pid}/status"))
}

pub(super) async fn run(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let Some(pid) = ctx.config.server_pid else {
        return Ok(ScenarioReport {
            skipped: Some(
                "give --server-pid PID (a server on this machine): memory is read from \
                 /proc/PID/status"
                    .into(),
            ),
            ..ScenarioReport::default()
        });
    };
    let mut notes = Vec::new();
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if command.trim() != "tenax" {
        notes.push(format!(
            "process {pid} is {:?}, not tenax: is --server-pid right?",
            command.trim()
        ));
    }
    let before = read(pid)?;
    ctx.progress.set_message("enqueueing");
    let filled = enqueue::fill(ctx, None).await?;
    let after = read_settled(pid).await?;
    let stats = ctx.api.stats().await?;
    ctx.progress.set_message("draining");
    let drained =
        super::work::drain_queue(ctx, super::enqueue::BULK_CONNECTIONS, filled.jobs).await?;
    let after_drain = read_settled(pid).await?;
    notes.push(format!(
        "{} jobs enqueued in {} requests of {}; resident read from /proc/{pid}/status \
         (VmRSS, VmHWM) once steady: each second after the last request, until two reads \
         agree within 1 % (at most {} s)",
        filled.jobs, filled.requests, filled.jobs_per_request, SETTLE_READS
    ));
    notes.push(format!(
        "then {drained} taken and completed ({} workers, take max {}); resident again once \
         steady (completed jobs are kept for the server's retention)",
        super::enqueue::BULK_CONNECTIONS,
        ctx.config.take_max
    ));
    Ok(ScenarioReport {
        jobs: filled.jobs,
        seconds: filled.elapsed.as_secs_f64(),
        jobs_per_sec: rate(filled.jobs, filled.elapsed),
        requests: vec![filled.latency.stats(&format!(
            "POST /api/jobs/batch ({})",
            filled.jobs_per_request
        ))],
        memory: Some(MemoryReport {
            pid,
            rss_before_kb: before.rss_kb,
            rss_kb: after.rss_kb,
            hwm_kb: after.hwm_kb,
            jobs_on_server: stats.totals.total(),
            rss_drained_kb: after_drain.rss_kb,
        }),
        notes,
        ..ScenarioReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_peak_from_proc_status() {
        let text = "Name:\ttenax\nVmPeak:\t  900000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t   98765 kB\n";
        assert_eq!(
            parse_proc_status(text),
            Some(ProcMemory {
                rss_kb: 98_765,
                hwm_kb: 123_456
            })
        );
        assert_eq!(parse_proc_status("Name:\ttenax\nVmRSS:\t1 kB\n"), None);
        assert_eq!(parse_proc_status("VmRSS:\tlots\nVmHWM:\t2 kB\n"), None);
    }
}
