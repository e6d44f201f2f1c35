//! OpenTelemetry spans, exported by OTLP over HTTP (protobuf) when `--otlp-endpoint` is given
//! (the exporter is the server's: `crates/tenax/src/otlp.rs`).
//!
//! - [`request`]: a server span per HTTP request, child of the request's `traceparent` header;
//! - [`jobs`]: a span per job for enqueue, take, complete, fail (and a lease that expired), and
//!   one per webhook delivery attempt, each joining the job's stored trace: its `traceparent`
//!   is the parent, so one trace covers the producer, the queue, the workers and the endpoints.
//!
//! Spans go to a batch processor with a thread of its own, which exports them in the background
//! (built by the server, handed to [`Tracing::new`]): a request only hands its spans over. Off (the default), nothing here
//! runs: the engine and the HTTP guard hold `None` and test it once per operation.

pub mod book;
pub mod jobs;
pub mod request;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use self::book::TraceBook;

/// The span exporter and what the spans need: the tracer, and the trace contexts of the jobs
/// this server leased out.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// The trace context of each lease handed out, for a store of this process alone (a shared
    /// store reports it when the lease ends).
    pub book: TraceBook,
}

impl Tracing {
    /// Records spans through `provider`, which exports them (the server's is built by
    /// `tenax`'s `otlp.rs`, from `--otlp-endpoint`).
    pub fn new(provider: SdkTracerProvider) -> Self {
        let tracer = provider.tracer("tenax");
        Self {
            provider,
            tracer,
            book: TraceBook::default(),
        }
    }

    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Exports what is left and stops the exporter. Blocks: call it off the runtime's threads.
    pub fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "exporting the last spans failed");
        }
    }
}

/// The span context a W3C `traceparent` names (as remote), or `None` if it names none.
pub fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let mut parts = text.split('-');
    let _version = parts.next()?;
    let trace_id = TraceId::from_hex(parts.next()?).ok()?;
    let span_id = SpanId::from_hex(parts.next()?).ok()?;
    let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// The W3C `traceparent` of a span context.
pub fn traceparent_of(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_as_written() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(text).expect("a span context");
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(traceparent_of(&context), text);
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
    }
}
