//! What the client commands print: the server's answer as JSON (`--format json`), or a table
//! made of it; and the cells of those tables.
//!
//! Invariants:
//! - The JSON is the typed answer written back in the API's spelling (tenax-client's models
//!   serialize as the server writes them), every string made safe for a terminal.
//! - A cell holds text from the server only through [`safe`]: one line, no control characters.
//! - A cell shows a time as a date ([`time`]), never as milliseconds since 1970.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::time::SystemTime;

use anyhow::Context as _;
use clap::Args;
use serde::Serialize;

use super::CliError;
use super::client::ServerArgs;
use super::policy::Format;
use super::terminal::safe;

/// Where the server is, and how to print its answer.
#[derive(Debug, Args)]
pub struct Output {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Print a table, or the server's JSON answer.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Prints `answer` as JSON, or as the table `table` makes of it.
pub fn print<T: Serialize + ?Sized>(
    answer: &T,
    format: Format,
    table: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    match format {
        Format::Json => println!("{}", json(answer)?),
        Format::Table => print!("{}", table(answer)),
    }
    Ok(())
}

/// Prints a list the API answers as `{key: [...]}`, as that JSON or as a table.
pub fn print_list<T: Serialize>(
    key: &'static str,
    items: &[T],
    format: Format,
    table: impl FnOnce(&[T]) -> String,
) -> Result<(), CliError> {
    match format {
        Format::Json => println!("{}", json(&BTreeMap::from([(key, items)]))?),
        Format::Table => print!("{}", table(items)),
    }
    Ok(())
}

/// `answer` as indented JSON, safe for a terminal.
pub fn json<T: Serialize + ?Sized>(answer: &T) -> Result<String, CliError> {
    let text = serde_json::to_string_pretty(answer).context("encoding the answer")?;
    Ok(super::terminal::safe_json(&text).into_owned())
}

/// A time as a cell: RFC 3339 in UTC to the second (`2026-11-27T11:25:37Z`), the way a reader
/// compares it with a clock. `--format json` keeps the API's milliseconds.
pub fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A time that may be missing: its cell, or `default`.
pub fn time_or(at: Option<SystemTime>, default: &str) -> String {
    at.map_or_else(|| default.to_owned(), time)
}

/// A value that may be missing: its text, safe for a terminal, or `default`.
pub fn or<T: Display>(value: Option<T>, default: &str) -> String {
    value.map_or_else(|| default.to_owned(), |v| safe(&v.to_string()).into_owned())
}

/// Ids as the API lists them: `[1,2,3]`.
pub fn ids(ids: &[u64]) -> String {
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    format!("[{}]", list.join(","))
}
