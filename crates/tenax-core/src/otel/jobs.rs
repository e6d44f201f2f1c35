//! The spans of what happens to jobs: one per job and operation (enqueue, take, complete, fail,
//! a lease that expired) and one per webhook delivery attempt, named `{operation} {queue}` with
//! the OpenTelemetry messaging attributes (`messaging.system` is `tenax`).
//!
//! A span's parent is the job's stored trace context, so that every span of a job is in the
//! trace of the producer that enqueued it; when the request doing the operation is itself in
//! that trace (a worker that passes the context on), the request's span is the parent instead,
//! which is the nearer one. A job without a trace context gets the request's span as parent,
//! and with no request either (maintenance, deliveries) its span starts a trace.

use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Context, KeyValue};

use super::{Tracing, request};
use crate::model::JobId;

/// What was done to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Enqueue,
    Take,
    Complete,
    Fail,
    /// A lease that ran out (or a claim ended): a failed attempt.
    Expire,
    /// A webhook delivery attempt: a POST to the endpoint.
    Deliver,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Self::Enqueue => "enqueue",
            Self::Take => "take",
            Self::Complete => "complete",
            Self::Fail => "fail",
            Self::Expire => "expire",
            Self::Deliver => "deliver",
        }
    }

    fn kind(self) -> SpanKind {
        match self {
            Self::Enqueue => SpanKind::Producer,
            Self::Take => SpanKind::Consumer,
            Self::Complete | Self::Fail | Self::Expire => SpanKind::Internal,
            Self::Deliver => SpanKind::Client,
        }
    }

    /// `messaging.operation.type`.
    fn operation_type(self) -> &'static str {
        match self {
            Self::Enqueue => "send",
            Self::Take => "receive",
            Self::Complete | Self::Fail | Self::Expire => "settle",
            Self::Deliver => "process",
        }
    }
}

/// One span to record.
#[derive(Debug)]
pub struct JobSpan<'a> {
    pub operation: Operation,
    pub id: JobId,
    /// The queue the job is in (a delivery: its message's queue).
    pub queue: &'a str,
    /// The job's stored trace context.
    pub trace: Option<SpanContext>,
    pub attributes: Vec<KeyValue>,
    /// Why the operation is an error (a failed attempt, a dead job).
    pub error: Option<String>,
}

impl Tracing {
    /// Records `span`, from `began` to `ended`.
    pub fn job_span(&self, span: JobSpan<'_>, began: SystemTime, ended: SystemTime) {
        let JobSpan {
            operation,
            id,
            queue,
            trace,
            mut attributes,
            error,
        } = span;
        let request = request::current();
        let parent = match (trace, request) {
            (Some(job), Some(request)) if request.trace_id() == job.trace_id() => Some(request),
            (Some(job), _) => Some(job),
            (None, request) => request,
        };
        let parent =
            parent.map_or_else(Context::new, |p| Context::new().with_remote_span_context(p));
        attributes.extend([
            KeyValue::new("messaging.system", "tenax"),
            KeyValue::new("messaging.operation.name", operation.name()),
            KeyValue::new("messaging.operation.type", operation.operation_type()),
            KeyValue::new("messaging.destination.name", queue.to_owned()),
            KeyValue::new("messaging.message.id", id.0.to_string()),
        ]);
        let tracer = self.tracer();
        let mut span = tracer
            .span_builder(format!("{} {queue}", operation.name()))
            .with_kind(operation.kind())
            .with_start_time(began)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        if let Some(error) = error {
            span.set_status(Status::error(error));
        }
        span.end_with_timestamp(ended);
    }
}
