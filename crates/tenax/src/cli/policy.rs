//! `tenax policy preview` and `tenax policy plot`: see a retry policy before anything runs.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use tenax_policy::{ParsedPolicy, Preview, RetryPolicy, Shape, format_duration, parse_policy};

use super::CliError;
use crate::chart::{self, ChartOptions, Series};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print every retry's delay, the cumulative time, the jitter band and the total window.
    Preview(PreviewArgs),
    /// Draw one or several policies as a chart (SVG or PNG), or in the terminal.
    Plot(PlotArgs),
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// The policy: JSON in any spelling (native, AWS SNS DeliveryPolicy, Zaqar _retry_policy),
    /// or @path to a file holding it.
    #[arg(long, short)]
    pub policy: String,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// A policy to draw (JSON or @path); repeat for one line per policy.
    #[arg(long = "policy", short, required = true)]
    pub policies: Vec<String>,
    /// Legend labels, in the order of --policy (default: a description of each policy).
    #[arg(long = "label", short)]
    pub labels: Vec<String>,
    /// Output file; .svg or .png. Without it the chart is drawn in the terminal.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// A logarithmic delay axis, to compare curves of very different heights.
    #[arg(long)]
    pub log: bool,
    #[arg(long)]
    pub title: Option<String>,
    /// Chart size in pixels (files) or characters (terminal), as WIDTHxHEIGHT.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(u32, u32)>,
}

pub fn run(command: PolicyCommand) -> Result<(), CliError> {
    match command {
        PolicyCommand::Preview(args) => {
            let policy = load(&args.policy)?.retry;
            let preview = Preview::of(&policy);
            let text = match args.format {
                Format::Json => {
                    serde_json::to_string_pretty(&preview).context("encoding the preview")?
                }
                Format::Table => preview_table(&preview),
            };
            println!("{text}");
            Ok(())
        }
        PolicyCommand::Plot(args) => plot(args),
    }
}

/// Reads a `--policy` argument: inline JSON, or `@path`.
pub fn load(argument: &str) -> Result<ParsedPolicy, CliError> {
    let value = policy_json(argument)?;
    parse_policy(&value).map_err(|e| CliError::Invalid(format!("--policy: {e}")))
}

/// The JSON of a `--policy` argument (inline, or `@path`), not yet interpreted: the client
/// commands send it to the server as written.
pub fn policy_json(argument: &str) -> Result<serde_json::Value, CliError> {
    super::parse::json_argument("--policy", argument)
}

/// The preview as an aligned table with a closing total-window line.
pub fn preview_table(preview: &Preview) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6}  {:>14}  {:>14}  jitter band",
        "retry", "delay", "cumulative"
    );
    for row in &preview.retries {
        let band = if row.min_delay_ms == row.max_delay_ms {
            "-".to_owned()
        } else {
            format!(
                "{} – {}",
                format_duration(row.min_delay_ms),
                format_duration(row.max_delay_ms)
            )
        };
        let _ = writeln!(
            out,
            "{:>6}  {:>14}  {:>14}  {band}",
            row.retry,
            format_duration(row.delay_ms),
            format_duration(row.cumulative_ms)
        );
    }
    let (low, high) = (preview.min_window_ms(), preview.max_window_ms());
    let _ = write!(
        out,
        "total window: {} ({} ms) over {} {}",
        format_duration(preview.window_ms),
        preview.window_ms,
        preview.retries.len(),
        if preview.retries.len() == 1 {
            "retry"
        } else {
            "retries"
        }
    );
    if low != preview.window_ms || high != preview.window_ms {
        let _ = write!(
            out,
            "; with jitter {} – {}",
            format_duration(low),
            format_duration(high)
        );
    }
    out
}

fn plot(args: PlotArgs) -> Result<(), CliError> {
    let mut series = Vec::with_capacity(args.policies.len());
    for (index, argument) in args.policies.iter().enumerate() {
        let policy = load(argument)?.retry;
        let label = args
            .labels
            .get(index)
            .cloned()
            .unwrap_or_else(|| describe(&policy));
        let points = Preview::of(&policy)
            .retries
            .iter()
            .map(|r| (r.retry, r.delay_ms))
            .collect();
        series.push(Series::line(label, points));
    }
    match &args.output {
        Some(path) => {
            let mut options = ChartOptions {
                log_scale: args.log,
                ..ChartOptions::default()
            };
            if let Some(title) = args.title {
                options.title = title;
            }
            if let Some((width, height)) = args.size {
                (options.width, options.height) = (width, height);
            }
            chart::render_file(&series, path, &options)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => {
            let (width, height) = args.size.unwrap_or((72, 20));
            println!(
                "{}",
                chart::render_terminal(&series, width as usize, height as usize)
            );
        }
    }
    Ok(())
}

/// A short legend label for a policy.
pub fn describe(policy: &RetryPolicy) -> String {
    let d = format_duration;
    match &policy.shape {
        Shape::Phased(p) => format!(
            "{} {}→{} ×{}",
            p.function.name(),
            d(p.min_delay_ms),
            d(p.max_delay_ms),
            p.num_retries
        ),
        Shape::Polynomial(p) => format!("polynomial {} + r^{}", d(p.base_ms), p.exponent),
        Shape::Arctan(a) => format!("arctan cap {}", d(a.cap_ms)),
        Shape::Logistic(l) => format!("logistic cap {}", d(l.cap_ms)),
        Shape::Euler(e) => format!("(1+1/n)^n cap {}", d(e.cap_ms)),
        Shape::Fixed { delay_ms } => format!("fixed {}", d(*delay_ms)),
        Shape::List(l) => format!("list of {}", l.delays_ms.len()),
        Shape::Exponential(e) => {
            format!("{}·{}^(r−1) ≤ {}", d(e.initial_ms), e.factor, d(e.max_ms))
        }
        Shape::DoublingThenLinear(c) => {
            format!(
                "doubling {}→{} ×{}",
                d(c.min_backoff_ms),
                d(c.max_backoff_ms),
                c.max_doublings
            )
        }
    }
}

fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let parsed = text
        .split_once(['x', 'X'])
        .and_then(|(w, h)| Some((w.trim().parse::<u32>().ok()?, h.trim().parse::<u32>().ok()?)));
    match parsed {
        Some((w, h)) if (10..=10_000).contains(&w) && (5..=10_000).contains(&h) => Ok((w, h)),
        _ => Err(format!(
            "must be WIDTHxHEIGHT with each side from 10 (5 for height) to 10000, got \"{text}\""
        )),
    }
}
