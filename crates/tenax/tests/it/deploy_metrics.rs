//! The shipped monitoring names only metrics the server exports: every metric in the PromQL of
//! the Grafana dashboard (`deploy/grafana/tenax.json`: its panels' `expr` and its variables'
//! queries) and of the alerting rules (`deploy/prometheus/alerts.yml`) is checked against a
//! real scrape of a real server that has exported every family: jobs enqueued, taken,
//! completed, failed into a retry, failed to death and snoozed (a queue and type's first job
//! makes all its job series, leases expired included), and a webhook delivered to a real
//! receiver after a failed attempt and another waiting for its retry.
//!
//! A histogram is selected in PromQL by its `_bucket`, `_sum` and `_count` series, a counter by
//! its `_total`: the names are compared with the series names of the scrape's sample lines, so
//! a bare histogram name (or a counter without `_total`) is unknown, as it is to Prometheus.
//! Prometheus's own series (`up`) are the only others allowed.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use crate::common;
#[path = "deploy_metrics/promql.rs"]
mod promql;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Options, PATIENCE, TestServer};
use receiver::{Receiver, Reply};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::receiver;

/// Series Prometheus makes itself for every target.
const PROMETHEUS_SERIES: &[&str] = &["up"];

fn deploy_file(path: &str) -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// The PromQL of the dashboard: every `expr` of its panels' targets, and the selector of each
/// query variable's `label_values(<selector>, <label>)`.
fn dashboard_expressions(dashboard: &Value) -> Vec<String> {
    fn walk(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                for (key, field) in fields {
                    match (key.as_str(), field) {
                        ("expr", Value::String(expr)) => found.push(expr.clone()),
                        _ => walk(field, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(&dashboard["panels"], &mut found);
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str())
            .unwrap_or_else(|| panic!("variable {} has no query", variable["name"]));
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.rsplit_once(','))
            .map(|(selector, _label)| selector)
            .unwrap_or_else(|| panic!("variable query {query:?} is not label_values(…, label)"));
        found.push(selector.to_owned());
    }
    found
}

/// The `expr` of every rule. The file is YAML; each `expr:` is written either on its line,
/// unquoted, or as a block scalar (`|` or `>`, with chomping) whose lines are indented deeper.
/// Every rule (`alert:` or `record:`) must have given one, so none is missed.
fn rule_expressions(rules: &str) -> Vec<String> {
    let lines: Vec<&str> = rules.lines().collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut found = Vec::new();
    let mut rule_count = 0;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start().trim_start_matches("- ");
        if trimmed.starts_with("alert:") || trimmed.starts_with("record:") {
            rule_count += 1;
        }
        let Some(rest) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with(['|', '>']) {
            let block: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || indent(l) > indent(line))
                .map(|l| l.trim())
                .collect();
            found.push(block.join(" "));
        } else {
            assert!(
                !rest.starts_with(['"', '\'']) && !rest.is_empty(),
                "line {}: write `expr:` unquoted on its line, or as a block: {line}",
                i + 1
            );
            found.push(rest.to_owned());
        }
    }
    assert_eq!(found.len(), rule_count, "every rule has one expr");
    assert!(rule_count > 0, "no rules found");
    found
}

/// The names of the series of a scrape in the Prometheus text format (`_total`, `_bucket`,
/// `_sum` and `_count` included, as PromQL selects them).
fn series_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            line[..end].to_owned()
        })
        .collect()
}

/// What is wrong with each name used in `expressions` that `exported` lacks, one line each.
fn unknown(expressions: &[String], exported: &BTreeSet<String>, file: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for expr in expressions {
        for name in promql::metric_names(expr) {
            if exported.contains(&name) || PROMETHEUS_SERIES.contains(&name.as_str()) {
                continue;
            }
            let hint = if exported.contains(&format!("{name}_bucket")) {
                " (a histogram: select its _bucket, _sum or _count)"
            } else if exported.contains(&format!("{name}_total")) {
                " (a counter: select its _total)"
            } else {
                ""
            };
            wrong.push(format!("{file}: unknown metric {name}{hint}, in: {expr}"));
        }
    }
    wrong
}

/// Enqueues, takes, completes, fails (into a retry and to death) and snoozes jobs, and has a
/// webhook delivered after a failed attempt and another one fail; returns once the receivers
/// have had those attempts.
async fn export_every_family(server: &TestServer) {
    let retry_fast = json!({"type": "list", "delays": ["1ms"]});
    for kind in ["complete", "retry", "die", "snooze"] {
        server
            .enqueue(json!({"queue": "emails", "type": kind, "payload": {}, "policy": retry_fast}))
            .await;
    }
    let taken = server.take(&["emails"], 10).await;
    assert_eq!(taken.len(), 4);
    for job in &taken {
        match job.json["type"].as_str().unwrap() {
            "complete" => server.complete(job).await,
            "retry" => {
                server.fail(job, "flaky", json!({})).await;
            }
            "die" => {
                server
                    .fail(job, "broken", json!({"retryable": false}))
                    .await;
            }
            _ => {
                server.fail(job, "later", json!({"snooze": "1h"})).await;
            }
        }
    }
    // Two webhooks of one queue, to real receivers: one fails once and then accepts (a 500,
    // then a 200 on the retry), the other always fails, and its delivery waits an hour for its
    // retry (so the deliveries by state have a series).
    let flaky = Receiver::start(vec![Reply::status(500)], Reply::ok()).await;
    let broken = Receiver::start(Vec::new(), Reply::status(500)).await;
    for (receiver, retry) in [(&flaky, "10ms"), (&broken, "1h")] {
        server
            .expect(
                Method::POST,
                "/api/queues/orders/subscriptions",
                Some(json!({"endpoint": receiver.url("/hook"),
                            "policy": {"type": "list", "delays": [retry]}})),
                201,
            )
            .await;
    }
    server
        .enqueue(json!({"queue": "orders", "type": "order.paid", "payload": {}}))
        .await;
    flaky.wait_for(2, PATIENCE).await;
    broken.wait_for(1, PATIENCE).await;
}

/// `GET /metrics`, as text, once `ready` holds for it.
async fn scrape_when(server: &TestServer, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = server
            .http()
            .get(format!("{}/metrics", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "GET /metrics");
        let text = answer.text().await.unwrap();
        if ready(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never: {what}\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_dashboard_and_the_rules_name_only_exported_metrics() {
    let server = TestServer::start(Options::system().flags(&["--allow-private-endpoints"])).await;
    export_every_family(&server).await;
    // Health is recorded just after the attempt that the receiver answered, and the job counts
    // of a scrape may be those of a count made a moment before.
    let text = scrape_when(
        &server,
        "both endpoints' health, and the waiting delivery",
        |text| {
            let has = |prefix: &str, value: &str| {
                text.lines()
                    .any(|l| l.starts_with(prefix) && l.ends_with(value))
            };
            has("tenax_webhook_endpoint_healthy{", " 1")
                && has("tenax_webhook_endpoint_healthy{", " 0")
                && has("tenax_webhook_deliveries{", " 1")
        },
    )
    .await;
    let exported = series_names(&text);

    let (dashboard_path, dashboard) = deploy_file("grafana/tenax.json");
    let dashboard: Value = serde_json::from_str(&dashboard)
        .unwrap_or_else(|e| panic!("{}: not JSON: {e}", dashboard_path.display()));
    let panels = dashboard_expressions(&dashboard);
    let (_, rules) = deploy_file("prometheus/alerts.yml");
    let rules = rule_expressions(&rules);

    let mut wrong = unknown(&panels, &exported, "deploy/grafana/tenax.json");
    wrong.extend(unknown(&rules, &exported, "deploy/prometheus/alerts.yml"));
    assert!(
        wrong.is_empty(),
        "metrics the server does not export:\n{}\n\nexported: {exported:?}",
        wrong.join("\n")
    );

    // Each file names metrics at all, so the check above had something to check.
    let used = |exprs: &[String]| -> BTreeSet<String> {
        exprs.iter().flat_map(|e| promql::metric_names(e)).collect()
    };
    assert!(used(&panels).len() >= 10, "{:?}", used(&panels));
    assert!(used(&rules).len() >= 5, "{:?}", used(&rules));
}

#[test]
fn a_misspelt_metric_is_named_with_what_it_is() {
    let exported: BTreeSet<String> = [
        "tenax_jobs_dead_total",
        "tenax_job_wait_seconds_bucket",
        "tenax_job_wait_seconds_sum",
        "tenax_job_wait_seconds_count",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let exprs = [
        "sum(rate(tenax_jobs_dead_total[5m])) + sum(rate(tenax_jobs_deaths_total[5m]))".to_owned(),
        "histogram_quantile(0.9, rate(tenax_job_wait_seconds[5m]))".to_owned(),
        "rate(tenax_jobs_dead[5m]) and up == 0".to_owned(),
    ];
    assert_eq!(
        unknown(&exprs, &exported, "f"),
        [
            format!(
                "f: unknown metric tenax_jobs_deaths_total, in: {}",
                exprs[0]
            ),
            format!(
                "f: unknown metric tenax_job_wait_seconds (a histogram: select its _bucket, \
                 _sum or _count), in: {}",
                exprs[1]
            ),
            format!(
                "f: unknown metric tenax_jobs_dead (a counter: select its _total), in: {}",
                exprs[2]
            ),
        ]
    );
}

#[test]
fn rule_expressions_are_read_inline_and_from_blocks() {
    let rules = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n        \
                 for: 1m\n      - alert: B\n        expr: |\n          sum(rate(x_total[5m]))\n          \
                 > 1\n        labels: {}\n      - record: c:rate5m\n        expr: >-\n          rate(c_total[5m])\n";
    assert_eq!(
        rule_expressions(rules),
        ["up == 0", "sum(rate(x_total[5m])) > 1", "rate(c_total[5m])"]
    );
}
