//! The readable report: number formatting and a plain aligned table.

use std::fmt::Write as _;

use super::fanout::Extra;
use super::{BenchReport, FanoutCase, FloorReport, ScenarioReport};

/// `1234567` → `1,234,567`.
pub fn format_count(n: u64) -> String {
    group_digits(&n.to_string())
}

/// Jobs per second: grouped whole numbers, one decimal below 100.
pub fn format_rate(rate: f64) -> String {
    if !rate.is_finite() || rate <= 0.0 {
        return "0".into();
    }
    if rate < 100.0 {
        return format!("{rate:.1}");
    }
    group_digits(&format!("{rate:.0}"))
}

/// A latency in microseconds with a unit and three significant digits or so:
/// `850µs`, `1.25ms`, `12.5ms`, `125ms`, `1.50s`.
pub fn format_micros(us: u64) -> String {
    let ms = us as f64 / 1_000.0;
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..10_000 => format!("{ms:.2}ms"),
        10_000..100_000 => format!("{ms:.1}ms"),
        100_000..1_000_000 => format!("{ms:.0}ms"),
        _ => format!("{:.2}s", ms / 1_000.0),
    }
}

/// Megabytes (MiB) from kilobytes (KiB), one decimal.
pub fn format_mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

fn group_digits(digits: &str) -> String {
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", digits),
    };
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    out.push_str(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Column alignment of [`render_table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table with a header line and a rule; every column as wide as its widest cell.
pub fn render_table(columns: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, ((cell, (_, align)), width)) in cells.zip(columns).zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let pad = width.saturating_sub(cell.chars().count());
            match align {
                Align::Left => {
                    out.push_str(cell);
                    out.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(cell);
                }
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut columns.iter().map(|(h, _)| *h));
    let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

const COLUMNS: [(&str, Align); 11] = [
    ("scenario", Align::Left),
    ("jobs", Align::Right),
    ("time", Align::Right),
    ("jobs/s", Align::Right),
    ("request", Align::Left),
    ("count", Align::Right),
    ("p50", Align::Right),
    ("p90", Align::Right),
    ("p99", Align::Right),
    ("p99.9", Align::Right),
    ("max", Align::Right),
];

fn rows(scenario: &ScenarioReport) -> Vec<Vec<String>> {
    let head = |rate: String| {
        vec![
            scenario.scenario.to_owned(),
            format_count(scenario.jobs),
            format!("{:.2}s", scenario.seconds),
            rate,
        ]
    };
    if scenario.skipped.is_some() || (scenario.error.is_some() && scenario.jobs == 0) {
        let word = if scenario.skipped.is_some() {
            "skipped"
        } else {
            "FAILED"
        };
        let mut row = vec![scenario.scenario.to_owned(), String::new(), String::new()];
        row.push(word.to_owned());
        row.extend(std::iter::repeat_n(String::new(), COLUMNS.len() - 4));
        return vec![row];
    }
    let mut rows = Vec::new();
    let rate = if scenario.floor.is_some() || scenario.fanout.is_some() {
        // Several loads, each with its own rate: the floor table below.
        "below".to_owned()
    } else {
        format_rate(scenario.jobs_per_sec)
    };
    if scenario.requests.is_empty() {
        let mut row = head(rate);
        row.extend(std::iter::repeat_n(String::new(), COLUMNS.len() - 4));
        return vec![row];
    }
    for (i, request) in scenario.requests.iter().enumerate() {
        let mut row = if i == 0 {
            head(rate.clone())
        } else {
            vec![String::new(); 4]
        };
        row.extend([
            request.request.clone(),
            format_count(request.count),
            format_micros(request.p50_us),
            format_micros(request.p90_us),
            format_micros(request.p99_us),
            format_micros(request.p999_us),
            format_micros(request.max_us),
        ]);
        rows.push(row);
    }
    rows
}

/// The whole human-readable report: the table, then notes per scenario.
pub fn table(report: &BenchReport) -> String {
    let mut out = String::new();
    let _ = write!(out, "tenax bench against {}", report.url);
    if let Some(pid) = report.server_pid {
        let _ = write!(out, " (server pid {pid})");
    }
    out.push_str("\n\n");
    let rows: Vec<Vec<String>> = report.scenarios.iter().flat_map(rows).collect();
    out.push_str(&render_table(&COLUMNS, &rows));
    let mut notes = String::new();
    for scenario in &report.scenarios {
        let name = scenario.scenario;
        if let Some(reason) = &scenario.skipped {
            let _ = writeln!(notes, "  {name}: skipped: {reason}");
        }
        if let Some(error) = &scenario.error {
            let _ = writeln!(notes, "  {name}: FAILED: {error}");
        }
        if let Some(memory) = &scenario.memory {
            let _ = writeln!(
                notes,
                "  {name}: server resident {} with {} jobs held (before: {}; peak: {}; {} per job added)",
                format_mb(memory.rss_kb),
                format_count(memory.jobs_on_server),
                format_mb(memory.rss_before_kb),
                format_mb(memory.hwm_kb),
                bytes_per_job(memory.rss_kb, memory.rss_before_kb, scenario.jobs),
            );
            let _ = writeln!(
                notes,
                "  {name}: server resident {} once they were taken and completed",
                format_mb(memory.rss_drained_kb),
            );
        }
        for note in &scenario.notes {
            let _ = writeln!(notes, "  {name}: {note}");
        }
    }
    for floor in report.scenarios.iter().filter_map(|s| s.floor.as_ref()) {
        out.push('\n');
        out.push_str(&floor_table(floor));
    }
    for cases in report.scenarios.iter().filter_map(|s| s.fanout.as_ref()) {
        out.push('\n');
        out.push_str(&fanout_table(cases));
    }
    if !notes.is_empty() {
        out.push_str("\nnotes:\n");
        out.push_str(&notes);
    }
    out
}

/// `deliveries-fanout`'s own table: per size and extra endpoint, the burst's rate and the paced
/// latencies, with the p99's change against the size alone (what the fan-out costs) and, for
/// the slow endpoint, against the spare (what its slowness costs).
pub fn fanout_table(cases: &[FanoutCase]) -> String {
    let columns = [
        ("subscriptions", Align::Right),
        ("extra endpoint", Align::Left),
        ("burst deliveries/s", Align::Right),
        ("paced p50", Align::Right),
        ("paced p99", Align::Right),
        ("p99 against none", Align::Right),
        ("p99, slow against spare", Align::Right),
    ];
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|case| {
            let against = |extra: Extra| {
                let other = cases
                    .iter()
                    .find(|c| c.subscriptions == case.subscriptions && c.extra == extra);
                match other {
                    Some(other) if other.paced_latency.p99_us > 0 => {
                        let ratio =
                            case.paced_latency.p99_us as f64 / other.paced_latency.p99_us as f64;
                        format!("{:+.1} %", (ratio - 1.0) * 100.0)
                    }
                    _ => String::new(),
                }
            };
            let (none, spare) = match case.extra {
                Extra::None => (String::new(), String::new()),
                Extra::Spare => (against(Extra::None), String::new()),
                Extra::Slow => (against(Extra::None), against(Extra::Spare)),
            };
            vec![
                format_count(case.subscriptions as u64),
                case.extra.name().to_owned(),
                format_rate(case.burst_per_sec),
                format_micros(case.paced_latency.p50_us),
                format_micros(case.paced_latency.p99_us),
                none,
                spare,
            ]
        })
        .collect();
    render_table(&columns, &rows)
}

/// `floor`'s own table: the floor's parts, the loads, and the shares against the target.
pub fn floor_table(floor: &FloorReport) -> String {
    let columns = [
        ("floor", Align::Left),
        ("per second", Align::Right),
        ("latency p50", Align::Right),
        ("share", Align::Right),
        ("target", Align::Right),
        ("met", Align::Left),
    ];
    // Latencies are whole microseconds of a histogram, or a figure above zero made from one:
    // non-negative and far below u64's range.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let micros = |us: f64| format_micros(us.max(0.0).round() as u64);
    let line = |what: &str, per_sec: f64, latency_us: f64| {
        vec![
            what.to_owned(),
            format_rate(per_sec),
            micros(latency_us),
            String::new(),
            String::new(),
            String::new(),
        ]
    };
    let target = format!(">= {:.0} %", floor.target_share * 100.0);
    let judge = |row: &mut Vec<String>, share: f64, of: &str| {
        row[3] = format!("{:.1} % of {of}", share * 100.0);
        row[4] = target.clone();
        row[5] = if share >= floor.target_share {
            "yes"
        } else {
            "no"
        }
        .to_owned();
    };
    let per_sec = |us: f64| if us > 0.0 { 1e6 / us } else { 0.0 };
    let mut enqueue_1 = line(
        "enqueue-1, durable",
        floor.enqueue_1_per_sec,
        floor.enqueue_1_p50_us,
    );
    judge(&mut enqueue_1, floor.enqueue_1_share, "floor");
    let mut rows = vec![
        line(
            "GET /healthz, 1 connection",
            floor.healthz_1_per_sec,
            floor.healthz_1_p50_us,
        ),
        line(
            "GET /healthz, 8 connections",
            floor.healthz_8_per_sec,
            floor.healthz_8_p50_us,
        ),
        line(
            "fdatasync of a page",
            per_sec(floor.fdatasync_us),
            floor.fdatasync_us,
        ),
        line(
            "floor: 1 / (round trip + fdatasync)",
            floor.floor_1_per_sec,
            per_sec(floor.floor_1_per_sec),
        ),
        enqueue_1,
    ];
    let mut enqueue_8 = line(
        "enqueue-8, durable",
        floor.enqueue_8_per_sec,
        floor.enqueue_8_p50_us,
    );
    match (
        floor.relaxed_enqueue_8_per_sec,
        floor.relaxed_enqueue_8_p50_us,
        floor.enqueue_8_share,
    ) {
        (Some(relaxed), Some(latency), Some(share)) => {
            judge(&mut enqueue_8, share, "relaxed");
            rows.push(enqueue_8);
            rows.push(line("enqueue-8, relaxed", relaxed, latency));
        }
        _ => {
            enqueue_8[3] = "needs --relaxed-url".into();
            enqueue_8[4] = target.clone();
            rows.push(enqueue_8);
        }
    }
    render_table(&columns, &rows)
}

/// Resident growth per job added, e.g. `412 B`.
pub fn bytes_per_job(after_kb: u64, before_kb: u64, jobs: u64) -> String {
    if jobs == 0 {
        return "n/a".into();
    }
    let bytes = after_kb.saturating_sub(before_kb).saturating_mul(1024) / jobs;
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryReport, RequestStats};

    #[test]
    fn numbers_are_grouped_and_latencies_get_units() {
        assert_eq!(format_count(0), "0");
        assert_eq!(format_count(999), "999");
        assert_eq!(format_count(1_000), "1,000");
        assert_eq!(format_count(1_234_567), "1,234,567");
        assert_eq!(format_rate(152_340.4), "152,340");
        assert_eq!(format_rate(12.345), "12.3");
        assert_eq!(format_rate(f64::NAN), "0");
        assert_eq!(format_micros(0), "0µs");
        assert_eq!(format_micros(850), "850µs");
        assert_eq!(format_micros(1_250), "1.25ms");
        assert_eq!(format_micros(12_500), "12.5ms");
        assert_eq!(format_micros(125_400), "125ms");
        assert_eq!(format_micros(1_500_000), "1.50s");
        assert_eq!(format_mb(102_400), "100.0 MB");
        assert_eq!(bytes_per_job(2_000, 1_000, 1_024), "1000 B");
        assert_eq!(bytes_per_job(2_000, 1_000, 0), "n/a");
    }

    #[test]
    fn table_aligns_columns() {
        let text = render_table(
            &[("name", Align::Left), ("n", Align::Right)],
            &[
                vec!["a".into(), "1".into()],
                vec!["longer".into(), "1,000".into()],
            ],
        );
        assert_eq!(
            text,
            "name        n\n-------------\na           1\nlonger  1,000\n"
        );
    }

    #[test]
    fn report_has_one_row_per_request_kind_and_notes() {
        let stats = |name: &str| RequestStats {
            request: name.into(),
            count: 10,
            p50_us: 900,
            p90_us: 1_500,
            p99_us: 20_000,
            p999_us: 45_000,
            max_us: 2_000_000,
            mean_us: 1_000.0,
        };
        let report = BenchReport {
            url: "http://x".into(),
            server_pid: Some(7),
            scenarios: vec![
                ScenarioReport {
                    scenario: "take-complete",
                    jobs: 200_000,
                    seconds: 2.5,
                    jobs_per_sec: 80_000.0,
                    requests: vec![stats("take"), stats("complete")],
                    ..ScenarioReport::default()
                },
                ScenarioReport {
                    scenario: "memory",
                    skipped: Some("needs --server-pid".into()),
                    ..ScenarioReport::default()
                },
                ScenarioReport {
                    scenario: "memory",
                    jobs: 1_024,
                    memory: Some(MemoryReport {
                        pid: 7,
                        rss_before_kb: 1_024,
                        rss_kb: 2_048,
                        hwm_kb: 4_096,
                        jobs_on_server: 1_024,
                        rss_drained_kb: 1_536,
                    }),
                    ..ScenarioReport::default()
                },
            ],
        };
        let text = table(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "tenax bench against http://x (server pid 7)");
        let words = |line: &str| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            words(lines[4]),
            [
                "take-complete",
                "200,000",
                "2.50s",
                "80,000",
                "take",
                "10",
                "900µs",
                "1.50ms",
                "20.0ms",
                "45.0ms",
                "2.00s"
            ]
        );
        assert_eq!(
            lines[4].find("take "),
            lines[5].find("complete"),
            "request names line up"
        );
        assert!(lines[5].trim_start().starts_with("complete"));
        assert!(lines[6].contains("skipped"));
        assert!(text.contains("memory: skipped: needs --server-pid"));
        assert!(text.contains(
            "memory: server resident 2.0 MB with 1,024 jobs held (before: 1.0 MB; peak: 4.0 MB; 1024 B per job added)"
        ));
        assert!(text.contains("memory: server resident 1.5 MB once they were taken and completed"));
    }
}
