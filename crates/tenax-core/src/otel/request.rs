//! The span of an HTTP request: a server span, child of the request's `traceparent` header when
//! it has a valid one, named by method and route template once the router has matched
//! (`POST /api/jobs`). While the request is handled its context is the task's
//! ([`current`]): the spans of what it does to jobs that have no trace of their own are its
//! children.

use std::future::Future;
use std::time::SystemTime;

use http::{HeaderMap, Method};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::Span;

use super::{Tracing, parse_traceparent};

tokio::task_local! {
    /// The span context of the request this task is handling.
    static REQUEST: SpanContext;
}

/// The span context of the request this task is handling, if any (and tracing is on).
pub fn current() -> Option<SpanContext> {
    REQUEST.try_with(Clone::clone).ok()
}

/// A request's span, from its arrival to its answer.
#[derive(Debug)]
pub struct RequestSpan {
    span: Span,
}

impl RequestSpan {
    pub fn start(
        tracing: &Tracing,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        request_id: &str,
    ) -> Self {
        let parent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_traceparent)
            .map_or_else(Context::new, |remote| {
                Context::new().with_remote_span_context(remote)
            });
        let tracer = tracing.tracer();
        let span = tracer
            .span_builder(method.as_str().to_owned())
            .with_kind(SpanKind::Server)
            .with_start_time(SystemTime::now())
            .with_attributes([
                KeyValue::new("http.request.method", method.as_str().to_owned()),
                KeyValue::new("url.path", path.to_owned()),
                KeyValue::new("tenax.request_id", request_id.to_owned()),
            ])
            .start_with_context(tracer, &parent);
        Self { span }
    }

    /// Runs `handle` with this span as the task's request ([`current`]).
    pub async fn within<F: Future>(&self, handle: F) -> F::Output {
        REQUEST
            .scope(self.span.span_context().clone(), handle)
            .await
    }

    /// Ends the span with the route the router matched and the status answered; a 5xx is an
    /// error of the server's.
    pub fn end(mut self, method: &Method, route: &str, status: u16) {
        self.span.update_name(format!("{method} {route}"));
        self.span.set_attributes([
            KeyValue::new("http.route", route.to_owned()),
            KeyValue::new("http.response.status_code", i64::from(status)),
        ]);
        if status >= 500 {
            self.span.set_status(Status::error(status.to_string()));
        }
        self.span.end_with_timestamp(SystemTime::now());
    }
}
