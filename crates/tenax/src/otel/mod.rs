//! OpenTelemetry spans, exported by OTLP over HTTP (protobuf) when `--otlp-endpoint` is given.
//!
//! - [`request`]: a server span per HTTP request, child of the request's `traceparent` header;
//! - [`jobs`]: a span per job for enqueue, take, complete, fail (and a lease that expired), and
//!   one per webhook delivery attempt, each joining the job's stored trace: its `traceparent`
//!   is the parent, so one trace covers the producer, the queue, the workers and the endpoints.
//!
//! Spans go to a batch processor with a thread of its own, which exports them in the background
//! ([`Tracing::start`]): a request only hands its spans over. Off (the default), nothing here
//! runs: the engine and the HTTP guard hold `None` and test it once per operation.

pub mod book;
pub mod jobs;
pub mod request;

use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use self::book::TraceBook;

/// The path an OTLP/HTTP receiver takes spans at, under its base URL.
pub const TRACES_PATH: &str = "/v1/traces";

/// How long one export may take before it is given up (its spans are dropped).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The URL spans are sent to: `endpoint` is the receiver's base URL (`http://host:4318`), to
/// which [`TRACES_PATH`] is added unless it already ends with it.
pub fn traces_url(endpoint: &url::Url) -> String {
    let text = endpoint.as_str();
    if endpoint.path().trim_end_matches('/').ends_with(TRACES_PATH) {
        text.to_owned()
    } else {
        format!("{}{TRACES_PATH}", text.trim_end_matches('/'))
    }
}

impl Tracing {
    /// Starts exporting to the OTLP/HTTP receiver at `endpoint` (see [`traces_url`]). The
    /// standard `OTEL_BSP_*` variables tune the batches, `OTEL_TRACES_SAMPLER` the sampling
    /// (by default every span whose parent is sampled, and every root), `OTEL_SERVICE_NAME` and
    /// `OTEL_RESOURCE_ATTRIBUTES` the resource (service `tenax` by default).
    pub fn start(endpoint: &url::Url) -> anyhow::Result<Self> {
        crate::http::install_crypto_provider();
        // The blocking client runs a runtime of its own: it is built, used (on the batch
        // processor's thread) and dropped away from the server's runtime.
        let client = std::thread::spawn(|| {
            #[allow(clippy::disallowed_methods)] // the crypto provider is installed above
            reqwest::blocking::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .build()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("building the OTLP client panicked"))??;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url(endpoint))
            .with_timeout(EXPORT_TIMEOUT)
            .build()?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("tenax");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("tenax");
        Ok(Self {
            provider,
            tracer,
            book: TraceBook::default(),
        })
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

    #[test]
    fn the_traces_path_is_added_once() {
        let url = |s: &str| url::Url::parse(s).expect("a URL");
        assert_eq!(
            traces_url(&url("http://127.0.0.1:4318")),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url(&url("http://h:4318/otlp/")),
            "http://h:4318/otlp/v1/traces"
        );
        assert_eq!(
            traces_url(&url("https://h/v1/traces")),
            "https://h/v1/traces"
        );
    }
}
