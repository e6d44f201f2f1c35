//! OpenTelemetry export (`--otlp-endpoint`) to a real OTLP/HTTP receiver started here: an HTTP
//! server that takes `POST /v1/traces`, decodes the protobuf `ExportTraceServiceRequest` and
//! keeps every span. A producer enqueues in its own trace, a worker takes, completes and fails,
//! a webhook receiver gets the deliveries; the spans are checked by name, kind, trace id and
//! parent: one trace covers the producer's request, the enqueue, the take, the completion and
//! the delivery attempt.
//!
//! Runs on the store `TENAX_TEST_STORE` names, like the API suite.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use common::{Options, TestServer};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use parking_lot::Mutex;
use prost::Message as _;
use receiver::Receiver;
use reqwest::Method;
use serde_json::json;

use crate::common;
use crate::common::receiver;

/// The producer's trace and span, as its `traceparent` names them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER: &str = "00f067aa0ba902b7";
/// Another producer's trace, sent in the job's body rather than a header.
const OTHER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const OTHER_PRODUCER: &str = "b7ad6b7169203331";

/// A span as received, with the service that sent it.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn trace(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }

    fn kind(&self) -> SpanKind {
        SpanKind::try_from(self.span.kind).unwrap()
    }

    fn is_error(&self) -> bool {
        self.span
            .status
            .as_ref()
            .is_some_and(|s| s.code == SpanStatus::Error as i32)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An attribute's value as text (strings as they are, numbers and booleans printed).
fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|a| a.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(n) => n.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// The OTLP/HTTP receiver: every span of every export, and each export's content type.
#[derive(Debug, Default)]
struct Collected {
    spans: Vec<Got>,
    content_types: Vec<String>,
}

async fn traces(
    State(collected): State<Arc<Mutex<Collected>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut collected = collected.lock();
    collected.content_types.push(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    );
    for resource in request.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .and_then(|r| attribute(&r.attributes, "service.name"))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                collected.spans.push(Got {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    StatusCode::OK
}

/// Starts the receiver; returns its base URL and what it collects.
async fn otlp_receiver() -> (String, Arc<Mutex<Collected>>) {
    let collected = Arc::new(Mutex::new(Collected::default()));
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(traces))
        .with_state(collected.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}"), collected)
}

/// The one span named `name` whose message id is `job`.
fn job_span<'a>(spans: &'a [Got], name: &str, job: u64) -> &'a Got {
    let found: Vec<&Got> = spans
        .iter()
        .filter(|s| {
            s.span.name == name && s.attribute("messaging.message.id") == Some(job.to_string())
        })
        .collect();
    assert_eq!(found.len(), 1, "one span {name} of job {job}: {spans:#?}");
    found[0]
}

/// The one request span named `name` in trace `trace`.
fn request_span<'a>(spans: &'a [Got], name: &str, trace: &str) -> &'a Got {
    let found: Vec<&Got> = spans
        .iter()
        .filter(|s| s.span.name == name && s.trace() == trace)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one request span {name} in {trace}: {spans:#?}"
    );
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_a_job_join_its_producers_trace() {
    let (collector, collected) = otlp_receiver().await;
    let hooks = Receiver::ok().await;
    let mut server = TestServer::start(Options::system().flags(&[
        "--allow-private-endpoints",
        "--otlp-endpoint",
        &collector,
    ]))
    .await;
    server
        .expect(
            Method::POST,
            "/api/queues/orders/subscriptions",
            Some(json!({ "endpoint": hooks.url("/hook") })),
            201,
        )
        .await;

    // The producer enqueues in its trace (the header); another job names its trace in the body;
    // a third has none.
    let answer = server
        .http()
        .post(server.url("/api/jobs"))
        .header("traceparent", format!("00-{TRACE}-{PRODUCER}-01"))
        .json(&json!({ "queue": "orders", "type": "ship", "payload": {} }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let shipped = answer.json::<serde_json::Value>().await.unwrap()["id"]
        .as_u64()
        .unwrap();
    let refund = server
        .enqueue(json!({
            "queue": "refunds",
            "type": "refund",
            "payload": {},
            "traceparent": format!("00-{OTHER_TRACE}-{OTHER_PRODUCER}-01"),
        }))
        .await;
    let plain = server
        .enqueue(json!({ "queue": "plain", "type": "note", "payload": {} }))
        .await;

    // A worker, outside any trace, completes the first and fails the second.
    let taken = server.take_one("orders").await;
    assert_eq!(taken.id, shipped);
    server.complete(&taken).await;
    let taken = server.take_one("refunds").await;
    assert_eq!(taken.id, refund);
    server.fail(&taken, "card declined", json!({})).await;

    // The endpoint gets the delivery in the producer's trace.
    let delivered = hooks.wait_for(1, Duration::from_secs(10)).await;
    assert!(
        delivered[0].header("traceparent").contains(TRACE),
        "{:?}",
        delivered[0].headers
    );
    // Stopping exports the spans still waiting.
    server.stop().await;

    let collected = collected.lock();
    assert!(
        collected
            .content_types
            .iter()
            .all(|c| c == "application/x-protobuf"),
        "{:?}",
        collected.content_types
    );
    let spans = &collected.spans;
    assert!(spans.iter().all(|s| s.service == "tenax"), "{spans:#?}");

    // The producer's request is a server span, child of the producer's span; the enqueue is a
    // producer span, child of the request (the nearer span of the same trace).
    let request = request_span(spans, "POST /api/jobs", TRACE);
    assert_eq!(request.parent(), PRODUCER);
    assert_eq!(request.kind(), SpanKind::Server);
    assert_eq!(
        request.attribute("http.response.status_code").unwrap(),
        "201"
    );
    let enqueue = job_span(spans, "enqueue orders", shipped);
    assert_eq!(
        (enqueue.trace(), enqueue.parent()),
        (TRACE.into(), request.id())
    );
    assert_eq!(enqueue.kind(), SpanKind::Producer);
    assert_eq!(enqueue.attribute("tenax.job.type").unwrap(), "ship");
    assert_eq!(enqueue.attribute("messaging.system").unwrap(), "tenax");

    // The worker's take and completion are not in the producer's trace as requests, but the
    // job's spans are: their parent is the producer's span, stored with the job.
    let take = job_span(spans, "take orders", shipped);
    assert_eq!(
        (take.trace(), take.parent()),
        (TRACE.into(), PRODUCER.into())
    );
    assert_eq!(take.kind(), SpanKind::Consumer);
    let complete = job_span(spans, "complete orders", shipped);
    assert_eq!(
        (complete.trace(), complete.parent()),
        (TRACE.into(), PRODUCER.into())
    );
    assert!(!complete.is_error());
    let take_request = spans.iter().find(|s| {
        s.span.name == "POST /api/take" && s.trace() != TRACE && s.trace() != OTHER_TRACE
    });
    assert!(
        take_request.is_some(),
        "the take's own request span: {spans:#?}"
    );

    // The delivery attempt is a client span in the producer's trace.
    let delivery: Vec<&Got> = spans
        .iter()
        .filter(|s| s.span.name == "deliver orders")
        .collect();
    assert_eq!(delivery.len(), 1, "{spans:#?}");
    let delivery = delivery[0];
    assert_eq!(
        (delivery.trace(), delivery.parent()),
        (TRACE.into(), PRODUCER.into())
    );
    assert_eq!(delivery.kind(), SpanKind::Client);
    assert_eq!(
        delivery.attribute("http.response.status_code").unwrap(),
        "204"
    );
    assert_eq!(delivery.attribute("tenax.attempt").unwrap(), "1");
    assert!(!delivery.is_error());

    // The failure is an error span in the other producer's trace; the job is retried.
    let enqueue = job_span(spans, "enqueue refunds", refund);
    assert_eq!(enqueue.trace(), OTHER_TRACE);
    let fail = job_span(spans, "fail refunds", refund);
    assert_eq!(
        (fail.trace(), fail.parent()),
        (OTHER_TRACE.into(), OTHER_PRODUCER.into())
    );
    assert!(fail.is_error(), "{fail:#?}");
    assert_eq!(fail.span.status.as_ref().unwrap().message, "card declined");
    assert_eq!(fail.attribute("tenax.job.status").unwrap(), "scheduled");

    // A job without a trace of its own is in its request's.
    let enqueue = job_span(spans, "enqueue plain", plain);
    let request: Vec<&Got> = spans
        .iter()
        .filter(|s| s.span.name == "POST /api/jobs" && s.id() == enqueue.parent())
        .collect();
    assert_eq!(
        request.len(),
        1,
        "the enqueue's parent is its request: {spans:#?}"
    );
    assert_eq!(request[0].trace(), enqueue.trace());
    assert!(
        request[0].parent().is_empty(),
        "a request without traceparent starts a trace"
    );
}
