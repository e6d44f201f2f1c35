//! `tenax repair`: the way on from a damaged write-ahead log, which `tenax serve` refuses to
//! start on. Keeps a copy of the damaged log, applies every record it can, makes a new log, and
//! says exactly what is lost (`crate::store::embedded::repair`). `serve` never does this.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use super::CliError;
use crate::model::JobId;
use crate::store::embedded::repair::{self, Lost, Report};

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// The embedded store's data directory (stop the server that uses it first).
    #[arg(long, env = "TENAX_DATA_DIR")]
    pub data_dir: PathBuf,
}

pub fn run(args: RepairArgs) -> Result<(), CliError> {
    let dir = &args.data_dir;
    if !dir.join("tenax.redb").is_file() {
        return Err(CliError::Invalid(format!(
            "--data-dir: {} holds no embedded store (no tenax.redb)",
            dir.display()
        )));
    }
    let report =
        repair::repair(dir).with_context(|| format!("repairing the store in {}", dir.display()))?;
    print!("{}", render(&report));
    Ok(())
}

/// The report, in words: what was wrong, where the copy is, what was applied, what is lost.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let log = report.log.display();
    let Some(damage) = &report.damage else {
        let _ = writeln!(
            out,
            "{log} is intact: nothing to repair (tenax serve opens the store as it is)."
        );
        return out;
    };
    let _ = writeln!(out, "{log} is damaged: {damage}.");
    match &report.copy {
        Some(copy) => {
            let _ = writeln!(out, "The damaged log is kept as {}.", copy.display());
        }
        None => {
            let _ = writeln!(out, "There was no log file to keep a copy of.");
        }
    }
    match report.applied {
        Some((first, last)) => {
            let _ = writeln!(
                out,
                "Applied {}, which the store file had not checkpointed.",
                records(first, last)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "No record past the store file's last checkpoint could be applied."
            );
        }
    }
    lost(&mut out, &report.lost);
    let _ = writeln!(out, "The store has a new, empty log; tenax serve opens it.");
    out
}

fn lost(out: &mut String, lost: &Lost) {
    let shown = (lost.through + 1).saturating_sub(lost.from);
    match (lost.unsure, shown) {
        (None, 0) => {
            let _ = writeln!(out, "Lost: nothing.");
            return;
        }
        (None, _) => {
            let _ = writeln!(out, "Lost: {}.", records(lost.from, lost.through));
        }
        (Some(why), 0) => {
            let _ = writeln!(
                out,
                "Lost: every record logged after record {}; how many cannot be known: {why}.",
                lost.from.saturating_sub(1)
            );
            return;
        }
        (Some(why), _) => {
            let _ = writeln!(
                out,
                "Lost: {}, and maybe more: {why}.",
                records(lost.from, lost.through)
            );
        }
    }
    if lost.unsynced {
        let _ = writeln!(
            out,
            "  A crash cut {} before it was synced: never acknowledged in sync durability.",
            if shown == 1 { "it" } else { "them" }
        );
    }
    let unreadable = lost.unreadable();
    if !unreadable.is_empty() {
        let _ = writeln!(
            out,
            "  Cannot be read: {} ({}).",
            ranges(&unreadable),
            plural(unreadable.len(), "record")
        );
    }
    if let (Some(first), Some(last)) = (lost.readable.first(), lost.readable.last()) {
        let numbers: Vec<u64> = lost.readable.iter().map(|r| r.lsn).collect();
        let _ = writeln!(
            out,
            "  Can be read, from byte {} to byte {} of the copy, but not applied: they follow a \
             lost record: {} ({}).",
            first.offset,
            last.end,
            ranges(&numbers),
            plural(numbers.len(), "record")
        );
        let ops = &lost.ops;
        let ids = |set: &std::collections::BTreeSet<JobId>| {
            let ids: Vec<u64> = set.iter().map(|id| id.0).collect();
            if ids.is_empty() {
                String::new()
            } else {
                format!(" (ids {})", ranges(&ids))
            }
        };
        let _ = writeln!(
            out,
            "  What those did: {} enqueued, which the store does not have{}; {} completed, \
             which will run again{}; {} otherwise changed{}; {} to queues, subscriptions, \
             tokens, schedules, endpoints or rate limits.",
            plural(ops.enqueued.len(), "job"),
            ids(&ops.enqueued),
            plural(ops.completed.len(), "job"),
            ids(&ops.completed),
            plural(ops.changed.len(), "job"),
            ids(&ops.changed),
            plural(ops.other, "change"),
        );
    }
}

fn records(first: u64, last: u64) -> String {
    if first == last {
        format!("record {first}")
    } else {
        format!("records {first} to {last} ({})", last - first + 1)
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Sorted numbers as ranges, the first few: "3, 5 to 9, 12".
fn ranges(numbers: &[u64]) -> String {
    const SHOWN: usize = 8;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == n => *last = n,
            _ => runs.push((n, n)),
        }
    }
    let mut text: Vec<String> = runs
        .iter()
        .take(SHOWN)
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a} to {b}")
            }
        })
        .collect();
    if runs.len() > SHOWN {
        text.push("…".to_owned());
    }
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_ranges() {
        assert_eq!(ranges(&[3, 5, 6, 7, 9]), "3, 5 to 7, 9");
        assert_eq!(ranges(&[]), "");
        let many: Vec<u64> = (0..40).map(|n| n * 2).collect();
        assert!(ranges(&many).ends_with(", …"));
    }
}
