//! One attempt: sign, POST, and classify what came back.

use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use super::address::{GlobalOnlyResolver, ip_literal_allowed};
use super::envelope::{self, AttemptInfo};
use super::outcome::{SNIPPET_BYTES, Verdict, classify_status, retry_after_ms, snippet};
use super::signing;
use crate::config::DeliveryConfig;
use crate::model::{Attempt, AttemptResult, DeliveryPayload, Subscription};
use crate::store::TakenJob;

const USER_AGENT: &str = concat!("Tenax-Webhooks/", env!("CARGO_PKG_VERSION"));

/// The HTTP client of every delivery: pooled keep-alive connections, the delivery timeout, no
/// redirects (a 3xx is an answer, and following it could leave the checked endpoint), and a
/// resolver that refuses non-global addresses unless they are allowed.
#[derive(Debug, Clone)]
pub struct Sender {
    client: reqwest::Client,
    allow_private: bool,
}

impl Sender {
    pub fn new(config: &DeliveryConfig) -> Result<Self, reqwest::Error> {
        let resolver = GlobalOnlyResolver {
            allow_private: config.allow_private_endpoints,
        };
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(Duration::from_millis(config.timeout_ms))
            .connect_timeout(Duration::from_millis(config.timeout_ms.min(10_000)))
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(usize::try_from(config.concurrency_per_endpoint).unwrap_or(64))
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .dns_resolver(resolver)
            .build()?;
        Ok(Self {
            client,
            allow_private: config.allow_private_endpoints,
        })
    }

    /// POSTs `job` (a delivery) to `subscription`'s endpoint at `now_ms` and says how it went.
    pub async fn attempt(
        &self,
        subscription: &Subscription,
        job: &TakenJob,
        now_ms: u64,
    ) -> Attempt {
        let started = Instant::now();
        let mut attempt = Attempt {
            attempt: job.attempt,
            at_ms: now_ms,
            latency_ms: 0,
            result: AttemptResult::Retryable,
            status: None,
            error: None,
            response: None,
            retry_after_ms: None,
        };
        let request = match self.request(subscription, job, now_ms) {
            Ok(request) => request,
            Err(failure) => {
                attempt.result = failure.result;
                attempt.error = Some(failure.message);
                return attempt;
            }
        };
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
            Err(error) => attempt.error = Some(describe(&error)),
        }
        attempt.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        attempt
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
        let message: DeliveryPayload = serde_json::from_str(job.payload.get())
            .map_err(|e| Refused::permanent(format!("the delivery is unreadable: {e}")))?;
        let body = envelope::render(
            subscription.format,
            &AttemptInfo {
                delivery_id: job.id,
                subscription_id: subscription.id,
                attempt: job.attempt,
                message: &message,
                message_created_at_ms: job.created_at_ms,
                sent_at_ms: now_ms,
            },
        );
        let key = signing::secret_key(&subscription.secret)
            .map_err(|e| Refused::permanent(format!("the signing secret {e}")))?;
        let id = format!("dlv_{}", job.id);
        let timestamp = now_ms / 1000;
        let signature = signing::sign(&key, &id, timestamp, &body);
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
        if let Ok(value) = HeaderValue::from_str(&subscription.content_type) {
            headers.insert(CONTENT_TYPE, value);
        }
        Ok(self.client.post(url).headers(headers).body(body))
    }
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

/// A transport error in words: what failed, with its cause chain.
fn describe(error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut text = format!("{what}: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
