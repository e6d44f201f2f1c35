//! Exporting spans by OTLP over HTTP (protobuf) when `--otlp-endpoint` is given: the exporter
//! behind [`tenax_core::otel::Tracing`], which records them.

use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tenax_core::otel::Tracing;

/// The path an OTLP/HTTP receiver takes spans at, under its base URL.
pub const TRACES_PATH: &str = "/v1/traces";

/// How long one export may take before it is given up (its spans are dropped).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Starts exporting to the OTLP/HTTP receiver at `endpoint` (see [`traces_url`]). The standard
/// `OTEL_BSP_*` variables tune the batches, `OTEL_TRACES_SAMPLER` the sampling (by default every
/// span whose parent is sampled, and every root), `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES` the resource (service `tenax` by default).
pub fn start(endpoint: &url::Url) -> anyhow::Result<Tracing> {
    tenax_net::http::install_crypto_provider();
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
    Ok(Tracing::new(provider))
}

#[cfg(test)]
mod tests {
    use super::*;

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
