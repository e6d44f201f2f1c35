//! One attempt: sign, POST, and classify what came back.

use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tenax_core::model::{Attempt, AttemptResult, DeliveryPayload, Subscription, TakenJob, Trigger};
use tenax_net::http::{self, PlatformRoots};
use tenax_net::trust;

use super::address::{GlobalOnlyResolver, ip_literal_allowed};
use super::envelope::{self, AttemptInfo};
use super::mailto::{self, Mailer, Mailto};
use super::outcome::{SNIPPET_BYTES, Verdict, classify_status, retry_after_ms, snippet};
use super::signing;
use crate::delivery::DeliveryConfig;

const USER_AGENT: &str = concat!("Tenax-Webhooks/", env!("CARGO_PKG_VERSION"));

/// The HTTP client of every delivery: pooled keep-alive connections, the delivery timeout, no
/// redirects (a 3xx is an answer, and following it could leave the checked endpoint), and a
/// resolver that refuses non-global addresses unless they are allowed. https endpoints must
/// present a certificate that the platform's root certificates or `--delivery-ca-file` vouch
/// for; the resolver and the address checks apply to them as to http ones (reqwest resolves
/// through the same connector before the TLS handshake).
#[derive(Debug, Clone)]
pub struct Sender {
    client: reqwest::Client,
    allow_private: bool,
    /// Whether deliveries go through `--delivery-proxy`, which resolves endpoint names itself:
    /// they are then resolved and judged here first.
    proxied: bool,
    /// Whether the platform's root certificates are missing, which explains every unknown
    /// issuer.
    no_platform_roots: bool,
    /// The SMTP client of `mailto:` subscribers, when `--smtp-url` names a server.
    mailer: Option<Mailer>,
}

impl Sender {
    pub fn new(config: &DeliveryConfig) -> Result<Self, String> {
        let extra_roots = config
            .ca_file
            .as_ref()
            .map(|ca_file| ca_file.certificates.clone())
            .unwrap_or_default();
        let (tls, roots) = tls_config(&extra_roots)?;
        let make = || {
            let builder = http::client_builder()
                .user_agent(USER_AGENT)
                .timeout(Duration::from_millis(config.timeout_ms))
                .connect_timeout(Duration::from_millis(config.timeout_ms.min(10_000)))
                .redirect(reqwest::redirect::Policy::none())
                .pool_max_idle_per_host(
                    usize::try_from(config.concurrency_per_endpoint).unwrap_or(64),
                )
                .pool_idle_timeout(Duration::from_secs(60))
                .tcp_nodelay(true)
                .dns_resolver(GlobalOnlyResolver {
                    allow_private: config.allow_private_endpoints,
                    // The proxy is the operator's: its name may resolve anywhere.
                    exempt: config
                        .proxy
                        .as_ref()
                        .and_then(|p| p.host_str().map(str::to_owned)),
                })
                .tls_backend_preconfigured(tls.clone());
            // Never a proxy from the environment (HTTP_PROXY and the like): it would carry
            // deliveries past the address checks. Only --delivery-proxy, after them.
            match &config.proxy {
                Some(proxy) => reqwest::Proxy::all(proxy.as_str()).map(|p| builder.proxy(p)),
                None => Ok(builder.no_proxy()),
            }
        };
        let client = make()
            .and_then(reqwest::ClientBuilder::build)
            .map_err(|e| {
                format!(
                    "building the delivery client: {}",
                    tenax_core::errors::chain(&e)
                )
            })?;
        if let Some(ca_file) = &config.ca_file {
            tracing::info!(
                path = %ca_file.path.display(),
                certificates = ca_file.certificates.len(),
                "https endpoints may also be signed by the CAs of --delivery-ca-file, or be one \
                 of its certificates"
            );
        }
        let no_platform_roots = match roots {
            PlatformRoots::Loaded => false,
            PlatformRoots::Missing(reason) => {
                tracing::warn!(
                    %reason,
                    "the platform's root certificates could not be loaded: https deliveries \
                     will fail unless --delivery-ca-file vouches for the endpoint"
                );
                true
            }
        };
        if let Some(proxy) = &config.proxy {
            tracing::info!(%proxy, "deliveries go through --delivery-proxy");
        }
        let mailer = match &config.smtp {
            Some(url) => {
                tracing::info!(server = %url.server(), "mailto subscribers are sent through --smtp-url");
                Some(Mailer::new(url, config.timeout_ms)?)
            }
            None => None,
        };
        Ok(Self {
            client,
            allow_private: config.allow_private_endpoints,
            proxied: config.proxy.is_some(),
            no_platform_roots,
            mailer,
        })
    }

    /// POSTs `job` (a delivery) to `subscription`'s endpoint at `now_ms` and says how it went.
    pub async fn attempt(
        &self,
        subscription: &Subscription,
        job: &TakenJob,
        now_ms: u64,
    ) -> Attempt {
        if mailto::is_mailto(&subscription.endpoint) {
            return self.mail(subscription, job, now_ms).await;
        }
        let started = Instant::now();
        let mut attempt = attempt_of(job, now_ms, AttemptResult::Retryable);
        let request = match self.request(subscription, job, now_ms) {
            Ok(request) => request,
            Err(failure) => {
                attempt.result = failure.result;
                attempt.error = Some(failure.message);
                return attempt;
            }
        };
        if self.proxied {
            if let Err(refusal) = self.judge_for_proxy(&subscription.endpoint).await {
                attempt.error = Some(refusal);
                attempt.latency_ms =
                    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                return attempt;
            }
        }
        match request.send().await {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok());
                attempt.retry_after_ms = retry_after_ms(status, retry_after, now_ms);
                attempt.status = Some(status);
                attempt.result =
                    match classify_status(status, subscription.retryable_statuses.as_deref()) {
                        Verdict::Delivered => AttemptResult::Delivered,
                        Verdict::Retryable => AttemptResult::Retryable,
                        Verdict::Permanent => AttemptResult::Permanent,
                    };
                let mut head = Vec::new();
                // Reads the start of the body only; a short body is read to its end, which
                // lets the connection go back to the pool.
                while head.len() <= SNIPPET_BYTES {
                    match response.chunk().await {
                        Ok(Some(chunk)) => head.extend_from_slice(&chunk),
                        Ok(None) | Err(_) => break,
                    }
                }
                if !head.is_empty() {
                    attempt.response = Some(snippet(&head, SNIPPET_BYTES));
                }
            }
            Err(error) => attempt.error = Some(describe(&error, self.no_platform_roots)),
        }
        attempt.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        attempt
    }

    /// Mails `job` (a delivery) to `subscription`'s `mailto:` recipients at `now_ms` through
    /// the SMTP server, and says how it went.
    async fn mail(&self, subscription: &Subscription, job: &TakenJob, now_ms: u64) -> Attempt {
        let started = Instant::now();
        let mut attempt = attempt_of(job, now_ms, AttemptResult::Permanent);
        let Some(mailer) = &self.mailer else {
            attempt.error = Some(
                "not sent: this server has no SMTP server for mailto subscribers (--smtp-url)"
                    .to_owned(),
            );
            return attempt;
        };
        let target = match Mailto::parse(&subscription.endpoint, subscription.options.as_ref()) {
            Ok(target) => target,
            Err(rule) => {
                attempt.error = Some(format!("the subscriber: {rule}"));
                return attempt;
            }
        };
        // A mail's text is the notification itself: Zaqar's mailto task has no template.
        let (message, notification) = match rendered(subscription, None, job, now_ms) {
            Ok(rendered) => rendered,
            Err(unreadable) => {
                attempt.error = Some(unreadable);
                return attempt;
            }
        };
        let sent = mailer
            .send(&target, mailto::letter(&target, &message, &notification))
            .await;
        attempt.result = sent.result;
        attempt.response = sent.reply;
        attempt.error = sent.error;
        attempt.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        attempt
    }

    /// Through a proxy, the endpoint's name is resolved by the proxy, not by this server's
    /// resolver: it is resolved and judged here first (a refusal is retried, as a name that
    /// resolves to a private address at connect time is without a proxy).
    async fn judge_for_proxy(&self, endpoint: &str) -> Result<(), String> {
        let url =
            url::Url::parse(endpoint).map_err(|e| format!("the endpoint is not a URL: {e}"))?;
        match url.host() {
            Some(url::Host::Domain(name)) => {
                let port = url.port_or_known_default().unwrap_or(443);
                let addresses = super::address::resolve(name, port)
                    .await
                    .map_err(|e| format!("could not connect: {e}"))?;
                super::address::judge_resolved(
                    name,
                    addresses.iter().map(std::net::SocketAddr::ip),
                    self.allow_private,
                )
                .map_err(|e| format!("could not connect: {e}"))
            }
            // Literals were judged with the request.
            _ => Ok(()),
        }
    }

    fn request(
        &self,
        subscription: &Subscription,
        job: &TakenJob,
        now_ms: u64,
    ) -> Result<reqwest::RequestBuilder, Refused> {
        let url = url::Url::parse(&subscription.endpoint)
            .map_err(|e| Refused::permanent(format!("the endpoint is not a URL: {e}")))?;
        ip_literal_allowed(&url, self.allow_private)
            .map_err(|e| Refused::permanent(format!("endpoint refused: {e}")))?;
        let (_, body) = rendered(subscription, subscription.body_template(), job, now_ms)
            .map_err(Refused::permanent)?;
        let key = signing::secret_key(&subscription.secret)
            .map_err(|e| Refused::permanent(format!("the signing secret {e}")))?;
        let id = format!("dlv_{}", job.id);
        let timestamp = now_ms / 1000;
        let mut signature = signing::sign(&key, &id, timestamp, &body);
        // During a rotation's overlap both secrets sign (Standard Webhooks lists signatures
        // separated by spaces), so a receiver still on the old secret verifies too.
        if let Some(previous) = subscription.previous_secret_at(now_ms) {
            if let Ok(old) = signing::secret_key(previous) {
                signature.push(' ');
                signature.push_str(&signing::sign(&old, &id, timestamp, &body));
            }
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &subscription.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(name, value);
            }
        }
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        };
        set("webhook-id", id);
        set("webhook-timestamp", timestamp.to_string());
        set("webhook-signature", signature);
        set("tenax-subscription", subscription.id.to_string());
        set("tenax-attempt", job.attempt.to_string());
        // The message's trace context, so the endpoint's work joins the producer's trace; it
        // wins over a subscription's own header of that name.
        if let Some(traceparent) = &job.traceparent {
            set("traceparent", traceparent.clone());
        }
        if let Ok(value) = HeaderValue::from_str(&subscription.content_type) {
            headers.insert(CONTENT_TYPE, value);
        }
        Ok(self.client.post(url).headers(headers).body(body))
    }
}

/// An attempt of `job` made at `now_ms`, ending as `result` unless its sending says otherwise.
pub(super) fn attempt_of(job: &TakenJob, now_ms: u64, result: AttemptResult) -> Attempt {
    Attempt {
        attempt: job.attempt,
        trigger: trigger_of(job),
        at_ms: now_ms,
        latency_ms: 0,
        result,
        status: None,
        error: None,
        response: None,
        retry_after_ms: None,
    }
}

/// The message `job` (a delivery of `subscription`) carries, and the body of its attempt at
/// `now_ms` in the subscription's format, through `template` if given.
fn rendered(
    subscription: &Subscription,
    template: Option<&str>,
    job: &TakenJob,
    now_ms: u64,
) -> Result<(DeliveryPayload, Vec<u8>), String> {
    let message: DeliveryPayload = serde_json::from_str(job.payload.get())
        .map_err(|e| format!("the delivery is unreadable: {e}"))?;
    let body = envelope::render(
        subscription.format,
        template,
        &AttemptInfo {
            delivery_id: job.id,
            subscription_id: subscription.id,
            attempt: job.attempt,
            message: &message,
            message_id: message.message_id(job.parent),
            message_created_at_ms: job.created_at_ms,
            sent_at_ms: now_ms,
        },
    );
    Ok((message, body))
}

/// A delivery that cannot even be sent.
struct Refused {
    result: AttemptResult,
    message: String,
}

impl Refused {
    fn permanent(message: String) -> Self {
        Self {
            result: AttemptResult::Permanent,
            message,
        }
    }
}

/// A transport error in words: what failed, with its cause chain; a failed TLS handshake says
/// so and why, without the layers around it.
fn describe(error: &reqwest::Error, no_platform_roots: bool) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let Some(tls) = tls_error(error) else {
        return format!("{what}: {}", tenax_core::errors::chain(error));
    };
    let mut text = format!("{what}: TLS handshake failed: {}", trust::explain(tls));
    if let rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) = tls {
        text.push_str(if no_platform_roots {
            " (this server has no platform root certificates to verify with: install them, \
             or trust the endpoint's CA with --delivery-ca-file)"
        } else {
            " (trusted are the platform's root certificates and those of --delivery-ca-file; \
             a certificate listed there is trusted as it is)"
        });
    }
    text
}

/// The TLS configuration of deliveries: the platform's root certificates and those of
/// `--delivery-ca-file` as CAs, and each certificate of the file also trusted as it is
/// ([`trust::ListedOrElse`]). ALPN offers HTTP/2 and HTTP/1.1, as reqwest's own would.
fn tls_config(
    extra_roots: &[rustls::pki_types::CertificateDer<'static>],
) -> Result<(rustls::ClientConfig, PlatformRoots), String> {
    use rustls::client::danger::ServerCertVerifier;
    http::install_crypto_provider();
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .ok_or("no rustls crypto provider is installed")?;
    let (inner, roots): (
        Option<std::sync::Arc<dyn ServerCertVerifier>>,
        PlatformRoots,
    ) = match rustls_platform_verifier::Verifier::new(provider.clone()) {
        Ok(_) => (
            Some(std::sync::Arc::new(
                rustls_platform_verifier::Verifier::new_with_extra_roots(
                    extra_roots.iter().cloned(),
                    provider.clone(),
                )
                .map_err(|e| format!("--delivery-ca-file: {e}"))?,
            )),
            PlatformRoots::Loaded,
        ),
        Err(missing) if extra_roots.is_empty() => {
            (None, PlatformRoots::Missing(missing.to_string()))
        }
        Err(missing) => {
            let mut store = rustls::RootCertStore::empty();
            for root in extra_roots {
                store
                    .add(root.clone())
                    .map_err(|e| format!("--delivery-ca-file: {e}"))?;
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                std::sync::Arc::new(store),
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("--delivery-ca-file: {e}"))?;
            (Some(verifier), PlatformRoots::Missing(missing.to_string()))
        }
    };
    let verifier = trust::ListedOrElse {
        listed: extra_roots.to_vec(),
        check_name: true,
        inner,
        provider,
    };
    let mut config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, roots))
}

/// The rustls error somewhere in `error`'s causes: rustls's own, or inside the `io::Error`s
/// that tokio-rustls and reqwest wrap it in (an `io::Error`'s `source` skips what it wraps).
fn tls_error(error: &reqwest::Error) -> Option<&rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        let mut inner = cause;
        while let Some(wrapped) = inner
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            inner = wrapped;
        }
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        source = cause.source();
    }
    None
}

/// What started an attempt: the job's own trigger; the first attempt of a test event is an
/// operator's.
fn trigger_of(job: &TakenJob) -> Trigger {
    let test = job.kind == tenax_core::model::subscription::TEST_DELIVERY_KIND;
    if test && job.attempt == 1 && job.trigger == Trigger::Scheduled {
        Trigger::Manual
    } else {
        job.trigger
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::default_delivery_policy;

    fn sender(allow_private: bool) -> Sender {
        Sender::new(&DeliveryConfig {
            default_policy: default_delivery_policy(),
            allow_private_endpoints: allow_private,
            timeout_ms: 5_000,
            concurrency_per_endpoint: 4,
            auto_disable_after_ms: 0,
            ca_file: None,
            breaker: crate::delivery::backpressure::BreakerSettings {
                failures: 10,
                cooldown_ms: 30_000,
                max_cooldown_ms: 600_000,
                probe_ms: 10_000,
            },
            proxy: None,
            smtp: None,
        })
        .expect("a sender")
    }

    fn subscription(endpoint: &str) -> Subscription {
        serde_json::from_value(serde_json::json!({
            "id": 1, "queue": "orders", "endpoint": endpoint, "content_type": "application/json",
            "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "enabled": true,
            "created_at_ms": 0, "updated_at_ms": 0,
        }))
        .expect("a subscription")
    }

    fn job() -> TakenJob {
        crate::delivery::fixtures::taken_job("delivery")
    }

    #[tokio::test]
    async fn https_names_are_resolved_by_the_address_guard() {
        // No connection is attempted: the resolver refuses the name before the TLS handshake.
        let attempt = sender(false)
            .attempt(&subscription("https://localhost:9/hook"), &job(), 0)
            .await;
        assert_eq!(attempt.result, AttemptResult::Retryable, "{attempt:?}");
        let error = attempt.error.unwrap_or_default();
        assert!(error.starts_with("could not connect: "), "{error}");
        assert!(error.contains("\"localhost\""), "{error}");
        assert!(error.contains("--allow-private-endpoints"), "{error}");
        assert!(!error.contains("TLS"), "{error}");
    }

    #[tokio::test]
    async fn https_ip_literals_are_judged_before_sending() {
        let attempt = sender(false)
            .attempt(&subscription("https://127.0.0.1:9/hook"), &job(), 0)
            .await;
        assert_eq!(attempt.result, AttemptResult::Permanent, "{attempt:?}");
        let error = attempt.error.unwrap_or_default();
        assert!(error.starts_with("endpoint refused: "), "{error}");
        assert!(error.contains("--allow-private-endpoints"), "{error}");
    }
}
