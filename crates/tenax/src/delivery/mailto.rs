//! Email delivery for Zaqar's `mailto:` subscribers, through the SMTP server the operator names
//! (`--smtp-url smtp[s]://user:password@host:port`).
//!
//! A `mailto:` subscriber names its recipients and, in its query, the mail's `subject` and
//! `from` (Zaqar's `mailto.py` reads `subject` there and `from` from the subscription's options:
//! both places are read, the query first). Each message is one mail whose text is the
//! notification's JSON, as Zaqar's; a confirmation notice is Zaqar's confirmation mail.
//!
//! Invariants:
//! - The SMTP server is the operator's: no address rule applies to it. Recipients and the
//!   sender must be email addresses, checked when the subscription is made and again when it
//!   is sent ([`Mailto::parse`]).
//! - An attempt ends as a webhook's does: delivered (the server accepted the mail), retryable
//!   (no connection, a timeout, a 4xx reply) or permanent (a 5xx reply, an address the server
//!   refuses for good), and the subscription's policy decides what follows.
//! - The URL's password never reaches a log line: [`SmtpUrl`]'s `Debug` hides it.

use std::fmt;
use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::AsyncSmtpTransport;
use lettre::{AsyncTransport as _, Message, Tokio1Executor};
use serde_json::Value;
use tenax_core::model::subscription::CONFIRMATION_EVENT_KIND;
use tenax_core::model::{AttemptResult, DeliveryPayload};

/// The scheme of email subscribers.
pub const SCHEME: &str = "mailto";

/// Whether `endpoint` is an email subscriber.
pub fn is_mailto(endpoint: &str) -> bool {
    endpoint
        .split_once(':')
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case(SCHEME))
}

/// `--smtp-url`, checked: `smtp://` (plain, or STARTTLS with `?tls=required`) or `smtps://`
/// (TLS), with optional credentials.
#[derive(Clone)]
pub struct SmtpUrl(String);

impl SmtpUrl {
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = url::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
        if !matches!(url.scheme(), "smtp" | "smtps") {
            return Err(format!(
                "the scheme must be smtp or smtps, not {:?}",
                url.scheme()
            ));
        }
        AsyncSmtpTransport::<Tokio1Executor>::from_url(text)
            .map_err(|e| tenax_core::errors::chain(&e).to_string())?;
        Ok(Self(text.to_owned()))
    }

    /// The server without credentials, for logs and errors.
    pub fn server(&self) -> String {
        match url::Url::parse(&self.0) {
            Ok(url) => format!(
                "{}://{}:{}",
                url.scheme(),
                url.host_str().unwrap_or_default(),
                url.port()
                    .map_or_else(|| "default".to_owned(), |p| p.to_string())
            ),
            Err(_) => "an SMTP server".to_owned(),
        }
    }
}

impl fmt::Debug for SmtpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SmtpUrl({})", self.server())
    }
}

/// Where and how an email subscriber's mails go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailto {
    pub to: Vec<Mailbox>,
    pub from: Mailbox,
    pub subject: String,
}

impl Mailto {
    /// Reads `mailto:a@example.com[,b@example.com][?subject=...&from=...]`, with the
    /// subscription's `options` (Zaqar's `subject` and `from`) where the query says nothing.
    pub fn parse(subscriber: &str, options: Option<&Value>) -> Result<Self, String> {
        let url = url::Url::parse(subscriber).map_err(|e| format!("not a mailto URL: {e}"))?;
        if !url.scheme().eq_ignore_ascii_case(SCHEME) {
            return Err("not a mailto URL".into());
        }
        let recipients = percent_encoding::percent_decode_str(url.path())
            .decode_utf8()
            .map_err(|_| "the recipients are not UTF-8".to_owned())?;
        let to = recipients
            .split(',')
            .map(str::trim)
            .map(|address| {
                address
                    .parse::<lettre::Address>()
                    .map(|address| Mailbox::new(None, address))
                    .map_err(|e| format!("{address:?} is not an email address ({e})"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Zaqar lowercases the query's names.
        let query = |name: &str| {
            url.query_pairs()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.into_owned())
        };
        let option = |name: &str| {
            options
                .and_then(|o| o.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let subject = query("subject")
            .or_else(|| option("subject"))
            .unwrap_or_default();
        let from = query("from").or_else(|| option("from")).ok_or_else(|| {
            "a mail needs a sender: give it as ?from=... in the subscriber or as options.from"
                .to_owned()
        })?;
        let from = from
            .parse::<Mailbox>()
            .map_err(|e| format!("from: {from:?} is not an email address ({e})"))?;
        Ok(Self { to, from, subject })
    }
}

/// One mail: its subject and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    pub subject: String,
    pub text: String,
}

/// The mail of a delivery to `mailto`: for a confirmation notice (its `payload.body` is the
/// notice's JSON), Zaqar's confirmation mail, naming the signed request that confirms; for a
/// message, `notification` (its JSON) under the subscriber's subject.
pub fn letter(mailto: &Mailto, payload: &DeliveryPayload, notification: &[u8]) -> Letter {
    if payload.kind != CONFIRMATION_EVENT_KIND {
        return Letter {
            subject: mailto.subject.clone(),
            text: String::from_utf8_lossy(notification).into_owned(),
        };
    }
    let notice: Value = serde_json::from_str(payload.body.get()).unwrap_or(Value::Null);
    let field = |name: &str| notice[name].as_str().unwrap_or_default().to_owned();
    let (topic, opening, closing) = if field("Message_Type") == "UnsubscribeConfirmation" {
        (
            "Zaqar Notification - Unsubscribe Confirmation",
            "You have unsubscribed successfully to the queue",
            "To resubscribe this subscription",
        )
    } else {
        (
            "Zaqar Notification - Subscription Confirmation",
            "You have chosen to subscribe to the queue",
            "To confirm this subscription",
        )
    };
    let queue = payload
        .queue
        .rsplit_once(':')
        .map_or(payload.queue.as_str(), |(_, name)| name);
    // Zaqar links a confirmation page of the operator's (`external_confirmation_url`); Tenax
    // spells out the signed request that page would send.
    let text = format!(
        "{opening}: {queue}. This queue belongs to project: {project}. {closing}, send this \
         request (no token needed) before {expires} UTC:\n\n\
         PUT {path}\n\
         URL-Signature: {signature}\n\
         URL-Methods: {methods}\n\
         URL-Paths: {path}\n\
         URL-Expires: {expires}\n\
         X-Project-ID: {project}\n\
         Client-ID: <any UUID>\n\
         Content-Type: application/json\n\n\
         {{\"confirmed\": true}}\n",
        project = field("X-Project-ID"),
        path = field("URL-Paths"),
        signature = field("URL-Signature"),
        methods = field("URL-Methods"),
        expires = field("URL-Expires"),
    );
    Letter {
        subject: topic.to_owned(),
        text,
    }
}

/// How one mail went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub result: AttemptResult,
    /// The server's last reply, when it accepted the mail.
    pub reply: Option<String>,
    /// What failed, when it did.
    pub error: Option<String>,
}

/// The SMTP client of every mail: pooled connections to the one server.
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    server: String,
}

impl fmt::Debug for Mailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mailer({})", self.server)
    }
}

impl Mailer {
    /// A client of `url` whose every exchange with the server takes at most `timeout_ms`.
    pub fn new(url: &SmtpUrl, timeout_ms: u64) -> Result<Self, String> {
        tenax_net::http::install_crypto_provider();
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(&url.0)
            .map_err(|e| format!("--smtp-url: {}", tenax_core::errors::chain(&e)))?
            .timeout(Some(Duration::from_millis(timeout_ms)))
            .build();
        Ok(Self {
            transport,
            server: url.server(),
        })
    }

    /// Sends `letter` to `mailto`'s recipients.
    pub async fn send(&self, mailto: &Mailto, letter: Letter) -> Sent {
        let mut message = Message::builder()
            .from(mailto.from.clone())
            .subject(letter.subject)
            .header(ContentType::TEXT_PLAIN);
        for to in &mailto.to {
            message = message.to(to.clone());
        }
        let message = match message.body(letter.text) {
            Ok(message) => message,
            Err(e) => return failed(AttemptResult::Permanent, format!("the mail: {e}")),
        };
        match self.transport.send(message).await {
            Ok(response) => Sent {
                result: AttemptResult::Delivered,
                reply: Some(format!(
                    "{} {}",
                    response.code(),
                    response.message().collect::<Vec<_>>().join(" ")
                )),
                error: None,
            },
            Err(error) => {
                let text = format!("{}: {}", self.server, tenax_core::errors::chain(&error));
                if error.is_permanent() {
                    failed(AttemptResult::Permanent, text)
                } else {
                    failed(AttemptResult::Retryable, text)
                }
            }
        }
    }
}

fn failed(result: AttemptResult, error: String) -> Sent {
    Sent {
        result,
        reply: None,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn subscribers_name_recipients_subject_and_sender() {
        let parsed = Mailto::parse(
            "mailto:ops@example.com,dev%40example.com?subject=New%20order&FROM=Tenax%20%3Cq@example.com%3E",
            None,
        )
        .unwrap();
        assert_eq!(parsed.to.len(), 2);
        assert_eq!(parsed.to[1].email.to_string(), "dev@example.com");
        assert_eq!(parsed.subject, "New order");
        assert_eq!(parsed.from.email.to_string(), "q@example.com");
        assert_eq!(parsed.from.name.as_deref(), Some("Tenax"));

        let options = json!({"subject": "From options", "from": "z@example.com"});
        let parsed = Mailto::parse("mailto:a@example.com", Some(&options)).unwrap();
        assert_eq!(parsed.subject, "From options");
        assert_eq!(parsed.from.email.to_string(), "z@example.com");
        let query_first = Mailto::parse("mailto:a@example.com?subject=q", Some(&options)).unwrap();
        assert_eq!(query_first.subject, "q");

        let no_sender = Mailto::parse("mailto:a@example.com", None).unwrap_err();
        assert!(no_sender.contains("sender"), "{no_sender}");
        let bad = Mailto::parse("mailto:not-an-address?from=a@example.com", None).unwrap_err();
        assert!(bad.contains("not an email address"), "{bad}");
        assert!(Mailto::parse("mailto:a@example.com?from=nope", None).is_err());
        assert!(is_mailto("MAILTO:a@example.com") && !is_mailto("http://x/"));
    }

    #[test]
    fn smtp_urls_are_checked_and_never_show_their_password() {
        let url = SmtpUrl::parse("smtp://user:hunter2@127.0.0.1:2525").unwrap();
        let shown = format!("{url:?} {}", url.server());
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("smtp://127.0.0.1:2525"), "{shown}");
        assert!(SmtpUrl::parse("smtps://mail.example.com").is_ok());
        assert!(SmtpUrl::parse("http://mail.example.com").is_err());
        assert!(SmtpUrl::parse("smtp://").is_err());
    }
}
