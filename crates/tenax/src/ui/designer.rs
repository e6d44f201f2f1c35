//! The policy designer: up to four policies, each chosen by shape (or in SNS's or Zaqar's
//! spelling) with its parameters; their curves, jitter bands and windows on one chart, redrawn
//! as one types (the page's script posts the form to [`chart`] and shows the answer); and
//! each policy in the three spellings, to copy. Drawn by [`crate::chart`], like
//! `tenax policy plot`.

use axum::Extension;
use axum::extract::{Query, RawForm};
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, PreEscaped, html};
use serde::Deserialize;
use serde_json::Value;
use tenax_policy::spelling::{Spelling, detect};
use tenax_policy::{Preview, format_duration, parse_policy, spell};

use super::layout::{self, Nav, Refresh};
use super::{Session, UiError};
use crate::chart::{self, ChartOptions, Series, Style};

/// Policies on one chart.
pub const SLOTS: usize = 4;
/// The most retries a curve shows.
const DRAWN: u32 = 200;

/// Each shape the designer offers, with a policy to start from.
pub const TEMPLATES: [(&str, &str, &str); 11] = [
    (
        "phased",
        "phased (Zaqar / SNS curve)",
        r#"{"type": "phased", "min_delay": "5s", "max_delay": "260s", "num_retries": 10, "function": "geometric"}"#,
    ),
    (
        "exponential",
        "exponential",
        r#"{"type": "exponential", "initial": "1s", "factor": 2, "max": "1h", "retry_limit": 12, "jitter": "full"}"#,
    ),
    (
        "polynomial",
        "polynomial (Sidekiq)",
        r#"{"type": "polynomial", "base": "15s", "exponent": 4, "retry_limit": 25}"#,
    ),
    (
        "fixed",
        "fixed",
        r#"{"type": "fixed", "delay": "30s", "retry_limit": 10}"#,
    ),
    (
        "list",
        "list of delays",
        r#"{"type": "list", "delays": ["10s", "1m", "10m", "1h"]}"#,
    ),
    (
        "doubling",
        "doubling then linear (Cloud Tasks)",
        r#"{"type": "doubling", "min_backoff": "10s", "max_backoff": "300s", "max_doublings": 3, "retry_limit": 10}"#,
    ),
    (
        "arctan",
        "arctan (saturating)",
        r#"{"type": "arctan", "max_delay": "1h", "retry_limit": 15}"#,
    ),
    (
        "logistic",
        "logistic (saturating)",
        r#"{"type": "logistic", "max_delay": "1h", "retry_limit": 15}"#,
    ),
    (
        "euler",
        "euler (saturating)",
        r#"{"type": "euler", "max_delay": "10m", "retry_limit": 15}"#,
    ),
    (
        "sns",
        "AWS SNS DeliveryPolicy",
        r#"{"healthyRetryPolicy": {"minDelayTarget": 5, "maxDelayTarget": 260, "numRetries": 10, "numNoDelayRetries": 0, "numMinDelayRetries": 0, "numMaxDelayRetries": 0, "backoffFunction": "geometric"}}"#,
    ),
    (
        "zaqar",
        "Zaqar _retry_policy",
        r#"{"_retry_policy": {"retries_with_no_delay": 3, "minimum_delay_retries": 3, "minimum_delay": 5, "maximum_delay": 30, "maximum_delay_retries": 3, "retry_backoff_function": "linear"}}"#,
    ),
];

/// The shape a policy's text is of, for the shape menu.
fn shape_of(text: &str) -> &'static str {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return "phased";
    };
    match detect(&value) {
        Spelling::Sns => "sns",
        Spelling::Zaqar => "zaqar",
        Spelling::Native => {
            let kind = value
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("phased");
            TEMPLATES
                .iter()
                .find(|(name, ..)| *name == kind)
                .map_or("phased", |(name, ..)| name)
        }
    }
}

fn pretty(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
}

/// One slot of the form: whether it is drawn, and its policy's text.
#[derive(Debug, Clone)]
struct Slot {
    on: bool,
    text: String,
}

#[derive(Debug, Deserialize)]
pub struct DesignerQuery {
    /// A policy to start with (JSON, any spelling).
    p: Option<String>,
}

pub async fn page(
    Extension(session): Extension<Session>,
    Query(query): Query<DesignerQuery>,
) -> Response {
    let starts = ["phased", "exponential", "polynomial", "fixed"];
    let mut slots: Vec<Slot> = starts
        .iter()
        .map(|shape| Slot {
            on: false,
            text: pretty(template(shape)),
        })
        .collect();
    slots[0] = Slot {
        on: true,
        text: pretty(query.p.as_deref().unwrap_or(template("phased"))),
    };
    let content = html! {
        p.hint { "Choose up to four policies: a shape and its parameters, or a policy in SNS's or Zaqar's spelling. The chart, each jitter band and each total window follow as you type; copy the result in any of the three spellings." }
        form #designer method="post" action="/ui/policy/chart" {
            (layout::csrf(&session))
            div.slots {
                @for (i, slot) in slots.iter().enumerate() {
                    fieldset.slot data-slot=(i) {
                        legend {
                            label { input type="checkbox" name={"on" (i)} value="1" checked[slot.on]; " Policy " (i + 1) }
                        }
                        label { "Shape "
                            select.shape name={"shape" (i)} {
                                @for (name, label, text) in TEMPLATES {
                                    option value=(name) data-template=(pretty(text)) selected[shape_of(&slot.text) == name] { (label) }
                                }
                            }
                        }
                        div.params {}
                        label { "As JSON "
                            textarea.policy name={"policy" (i)} rows="8" spellcheck="false" { (slot.text) }
                        }
                    }
                }
            }
            label.log { input type="checkbox" name="log" value="1"; " logarithmic delay axis" }
            noscript { button type="submit" { "Draw" } }
        }
        div #result aria-live="polite" { (result(&slots, false)) }
    };
    layout::page(
        &session,
        Nav::Policy,
        "Policy designer",
        Refresh::Still,
        content,
    )
}

fn template(shape: &str) -> &'static str {
    TEMPLATES
        .iter()
        .find(|(name, ..)| *name == shape)
        .map_or(TEMPLATES[0].2, |(_, _, text)| text)
}

/// The chart and the spellings for the posted form: a fragment the page puts in place.
pub async fn chart(
    Extension(_session): Extension<Session>,
    RawForm(form): RawForm,
) -> Result<Response, UiError> {
    let fields: Vec<(String, String)> = url::form_urlencoded::parse(&form).into_owned().collect();
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let slots: Vec<Slot> = (0..SLOTS)
        .map(|i| Slot {
            on: field(&format!("on{i}")).is_some(),
            text: field(&format!("policy{i}")).unwrap_or_default(),
        })
        .collect();
    let log = field("log").is_some();
    Ok((layout::headers(), Html(result(&slots, log).into_string())).into_response())
}

/// What a slot's policy is, once parsed.
struct Drawn {
    slot: usize,
    retry: tenax_policy::RetryPolicy,
    preview: Preview,
}

fn result(slots: &[Slot], log: bool) -> Markup {
    let mut drawn = Vec::new();
    let mut errors = Vec::new();
    for (i, slot) in slots.iter().enumerate().filter(|(_, s)| s.on) {
        let parsed = serde_json::from_str::<Value>(&slot.text)
            .map_err(|e| format!("not valid JSON: {e}"))
            .and_then(|value| parse_policy(&value).map_err(|e| e.to_string()));
        match parsed {
            Ok(parsed) => drawn.push(Drawn {
                slot: i,
                preview: Preview::of(&parsed.retry),
                retry: parsed.retry,
            }),
            Err(why) => errors.push((i, why)),
        }
    }
    let series: Vec<Series> = drawn
        .iter()
        .map(|d| {
            let shown = d.preview.retries.iter().take(DRAWN as usize);
            Series {
                label: format!(
                    "{}: {} ({} retries, window {})",
                    d.slot + 1,
                    d.retry.shape.kind(),
                    d.preview.retries.len(),
                    format_duration(d.preview.window_ms)
                ),
                points: shown.clone().map(|r| (r.retry, r.delay_ms)).collect(),
                band: shown
                    .map(|r| (r.retry, r.min_delay_ms, r.max_delay_ms))
                    .collect(),
                style: Style::Line,
            }
        })
        .collect();
    let options = ChartOptions {
        title: String::new(),
        width: 960,
        height: 420,
        log_scale: log,
    };
    let svg = if series.iter().any(|s| !s.points.is_empty()) {
        chart::render_svg(&series, &options).ok()
    } else {
        None
    };
    html! {
        @for (i, why) in &errors {
            p.error role="alert" data-slot=(i) { "Policy " (i + 1) ": " (why) }
        }
        @if let Some(svg) = svg {
            div.chart { (PreEscaped(svg)) }
        } @else if errors.is_empty() {
            p.muted { "Tick a policy to draw it." }
        }
        div.spellings {
            @for d in &drawn {
                (spellings(d))
            }
        }
    }
}

fn spellings(d: &Drawn) -> Markup {
    let (low, high) = (d.preview.min_window_ms(), d.preview.max_window_ms());
    let first: Vec<String> = d
        .preview
        .retries
        .iter()
        .take(6)
        .map(|r| format_duration(r.delay_ms))
        .collect();
    html! {
        section.spelled data-slot=(d.slot) {
            h3 { "Policy " (d.slot + 1) }
            p.summary {
                span.retries { (d.preview.retries.len()) " retries" } "; total window "
                strong.window { (format_duration(d.preview.window_ms)) }
                @if low != d.preview.window_ms || high != d.preview.window_ms {
                    " (with jitter " (format_duration(low)) " – " (format_duration(high)) ")"
                }
                @if let Some(max) = d.retry.max_window_ms { "; stops " (format_duration(max)) " after the first failure" }
                ". First delays: " (first.join(", ")) @if d.preview.retries.len() > 6 { ", …" }
            }
            div.spelling-grid {
                @for (name, spelling) in [("Tenax", Spelling::Native), ("AWS SNS", Spelling::Sns), ("Zaqar", Spelling::Zaqar)] {
                    div.spelling {
                        h4 { (name) }
                        @match spell(&d.retry, spelling) {
                            Ok(value) => {
                                pre.json { (serde_json::to_string_pretty(&value).unwrap_or_default()) }
                                button.copy type="button" { "Copy" }
                            }
                            Err(why) => p.muted { "Cannot be written this way: " (why) "." },
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_is_a_valid_policy_of_its_shape() {
        for (name, _, text) in TEMPLATES {
            let value: Value = serde_json::from_str(text).unwrap();
            parse_policy(&value).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(shape_of(text), name);
        }
    }

    #[test]
    fn a_broken_policy_names_its_slot_and_field() {
        let slots = vec![
            Slot {
                on: true,
                text: r#"{"type": "phased", "min_delay": "10s", "max_delay": "5s"}"#.into(),
            },
            Slot {
                on: true,
                text: template("fixed").into(),
            },
        ];
        let html = result(&slots, false).into_string();
        assert!(html.contains("Policy 1: max_delay"), "{html}");
        assert!(html.contains("<svg"), "the valid one is drawn");
        assert!(
            html.contains("Cannot be written this way"),
            "fixed has no SNS spelling"
        );
    }
}
