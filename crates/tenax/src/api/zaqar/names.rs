//! Names and ids: how a Zaqar (project, queue) or (project, topic) pair maps to a Tenax queue,
//! and how message, claim and subscription ids are spelt.
//!
//! Invariants:
//! - A Zaqar queue `q` of project `p` is the Tenax queue `p:q`, or `:e:q` where `e` escapes a
//!   project id that is not 1 to 191 letters, digits, `_`, `-` or `.`
//!   ([`tenax_core::model::project`]): the mapping is reversible, ids Tenax accepted before map
//!   as before, and projects cannot see each other's queues.
//! - Queue names follow Zaqar: 1 to 64 ASCII letters, digits, `_`, `-` or `.`. Project ids are
//!   Zaqar's: any characters, up to 256 (the header's bytes read as Latin-1, as Zaqar reads
//!   them: [`super::request`]).
//! - Message and subscription ids are the decimal Tenax ids; claim ids are the claim's number
//!   in lowercase hex. Clients treat all three as opaque strings.

use axum::extract::{FromRequestParts, MatchedPath};
use axum::http::request::Parts;
use tenax_core::model::{ClaimId, JobId, SubscriptionId};

use super::error::ZaqarError;

/// Zaqar's longest queue name.
pub const MAX_QUEUE_NAME: usize = 64;
/// The longest project part of a native queue name (an escaped one).
pub use tenax_core::model::project::MAX_ESCAPED_PROJECT;
/// Zaqar's longest project id, in characters.
pub use tenax_core::model::project::MAX_PROJECT as MAX_PROJECT_ID;

/// Zaqar's answer to a queue name or project id it cannot accept.
pub fn bad_identification() -> ZaqarError {
    ZaqarError::api("The format of the submitted queue name or project id is not valid.")
        .retitled("Invalid queue identification")
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_-.".contains(&b)
}

/// Whether `name` is a valid Zaqar queue name.
pub fn is_queue_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_QUEUE_NAME && name.bytes().all(is_name_byte)
}

/// Checks an `X-Project-ID` value that is present and not empty: Zaqar's only rule is its
/// length, in characters.
pub fn check_project(project: &str) -> Result<(), ZaqarError> {
    if project.chars().count() > MAX_PROJECT_ID {
        return Err(bad_identification());
    }
    Ok(())
}

/// What a name under `/v2` names: a queue, or a topic (a fan-out point: its messages go to its
/// subscriptions, and it has no claims). A topic `t` of project `p` is the Tenax queue of the
/// Zaqar queue name `:t` (`p::t`): no Zaqar queue name contains `:`, so no queue is a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Queue,
    Topic,
}

/// Marks a topic's name within the project's part of the Tenax queue names.
const TOPIC_MARK: char = ':';

impl Kind {
    /// The kind a route is about: `/v2/topics/...` names topics.
    pub fn of_route(route: &str) -> Self {
        if route == "/v2/topics" || route.starts_with("/v2/topics/") {
            Self::Topic
        } else {
            Self::Queue
        }
    }

    /// `queues` or `topics`, as in paths and listings.
    pub fn collection(self) -> &'static str {
        match self {
            Self::Queue => "queues",
            Self::Topic => "topics",
        }
    }

    /// `name` of `project` (already checked) as this kind, if `name` is a valid name.
    pub fn resolve(self, project: &str, name: &str) -> Result<QueueRef, ZaqarError> {
        match self {
            Self::Queue => QueueRef::new(project, name),
            Self::Topic => QueueRef::topic(project, name),
        }
    }

    /// The name of a Tenax queue of `project` that is of this kind, if it is one.
    pub fn zaqar_name<'a>(self, project: &str, tenax: &'a str) -> Option<&'a str> {
        let (owner, rest) = tenax_core::model::project::split(tenax)?;
        let name = match self {
            Self::Queue => rest,
            Self::Topic => rest.strip_prefix(TOPIC_MARK)?,
        };
        (owner == project && is_queue_name(name)).then_some(name)
    }
}

/// The kind of the route a request matched.
impl<S: Send + Sync> FromRequestParts<S> for Kind {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let route = parts.extensions.get::<MatchedPath>();
        Ok(route.map_or(Self::Queue, |route| Self::of_route(route.as_str())))
    }
}

/// A Zaqar queue or topic of a project, and the Tenax queue it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRef {
    pub kind: Kind,
    pub project: String,
    pub name: String,
    /// `project:name` (`project::name` for a topic).
    pub tenax: String,
}

impl QueueRef {
    /// The queue `name` of `project` (already checked), if `name` is a valid queue name.
    pub fn new(project: &str, name: &str) -> Result<Self, ZaqarError> {
        if !is_queue_name(name) {
            return Err(bad_identification());
        }
        Ok(Self {
            kind: Kind::Queue,
            project: project.to_owned(),
            name: name.to_owned(),
            tenax: tenax_queue(project, name),
        })
    }

    /// The topic `name` of `project` (already checked), if `name` is a valid topic name (as a
    /// queue name).
    pub fn topic(project: &str, name: &str) -> Result<Self, ZaqarError> {
        if !is_queue_name(name) {
            return Err(ZaqarError::api(
                "The format of the submitted topic name or project id is not valid.",
            )
            .retitled("Invalid topic identification"));
        }
        Ok(Self {
            kind: Kind::Topic,
            project: project.to_owned(),
            name: name.to_owned(),
            tenax: tenax_queue(project, &format!("{TOPIC_MARK}{name}")),
        })
    }

    /// `/v2/queues/{name}` (`/v2/topics/{name}`).
    pub fn href(&self) -> String {
        format!("/v2/{}/{}", self.kind.collection(), self.name)
    }

    /// `/v2/queues/{name}/messages`.
    pub fn messages_href(&self) -> String {
        format!("{}/messages", self.href())
    }

    /// `/v2/queues/{name}/messages/{id}`, with `?claim_id=` while claimed.
    pub fn message_href(&self, id: JobId, claim: Option<ClaimId>) -> String {
        match claim {
            Some(claim) => format!("{}/{id}?claim_id={}", self.messages_href(), claim_id(claim)),
            None => format!("{}/{id}", self.messages_href()),
        }
    }

    /// `/v2/queues/{name}/claims/{claim}`.
    pub fn claim_href(&self, claim: ClaimId) -> String {
        format!("/v2/queues/{}/claims/{}", self.name, claim_id(claim))
    }

    /// Zaqar's "does not exist" description of this queue (topic).
    pub fn missing(&self) -> String {
        let noun = match self.kind {
            Kind::Queue => "Queue",
            Kind::Topic => "Topic",
        };
        format!(
            "{noun} {} does not exist for project {}",
            self.name, self.project
        )
    }
}

/// The Tenax queue of Zaqar queue `name` in `project`.
pub fn tenax_queue(project: &str, name: &str) -> String {
    tenax_core::model::project::queue_of(project, name)
}

/// The Zaqar queue name of a Tenax queue of `project`, if it is one.
pub fn zaqar_queue<'a>(project: &str, tenax: &'a str) -> Option<&'a str> {
    Kind::Queue.zaqar_name(project, tenax)
}

/// A message id as Tenax spells it.
pub fn parse_message_id(text: &str) -> Option<JobId> {
    parse_decimal(text).map(JobId)
}

/// A subscription id as Tenax spells it.
pub fn parse_subscription_id(text: &str) -> Option<SubscriptionId> {
    parse_decimal(text).map(SubscriptionId)
}

fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A claim's id: its number in lowercase hex.
pub fn claim_id(claim: ClaimId) -> String {
    format!("{:x}", claim.0)
}

/// The number of a claim id, if `text` is one.
pub fn parse_claim_id(text: &str) -> Option<ClaimId> {
    if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok().map(ClaimId)
}

/// Python's `repr` of a list of strings, as Zaqar's messages print one: `['a', 'b']`.
pub fn python_list(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|item| {
            let escaped = item.replace('\\', "\\\\");
            if item.contains('\'') && !item.contains('"') {
                format!("\"{escaped}\"")
            } else {
                format!("'{}'", escaped.replace('\'', "\\'"))
            }
        })
        .collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_follow_zaqar() {
        for good in ["a", "A-b_c.9", &"x".repeat(64)] {
            assert!(is_queue_name(good), "{good}");
        }
        for bad in [
            "",
            "has space",
            &"a".repeat(65),
            "café",
            "semi;colon",
            "p:q",
            "a/b",
        ] {
            assert!(!is_queue_name(bad), "{bad}");
        }
    }

    #[test]
    fn projects_map_to_a_prefix() {
        let queue = QueueRef::new("proj-1", "orders").unwrap();
        assert_eq!(queue.tenax, "proj-1:orders");
        assert_eq!(zaqar_queue("proj-1", "proj-1:orders"), Some("orders"));
        assert_eq!(zaqar_queue("proj", "proj-1:orders"), None);
        assert_eq!(zaqar_queue("proj-1", "orders"), None);
        assert!(check_project(&"p".repeat(256)).is_ok());
        assert!(check_project(&"p".repeat(257)).is_err());
        assert!(check_project("JAM Project").is_ok());
        let jam = QueueRef::new("JAM Project", "orders").unwrap();
        assert_eq!(jam.tenax, ":JAM.20Project:orders");
        assert_eq!(zaqar_queue("JAM Project", &jam.tenax), Some("orders"));
        assert_eq!(zaqar_queue("JAM.20Project", &jam.tenax), None);
        assert_eq!(zaqar_queue("", &jam.tenax), None);
    }

    #[test]
    fn topics_have_a_namespace_of_their_own() {
        let topic = QueueRef::topic("p", "news").unwrap();
        assert_eq!(topic.tenax, "p::news");
        assert_eq!(
            topic.message_href(JobId(3), None),
            "/v2/topics/news/messages/3"
        );
        assert_eq!(Kind::Topic.zaqar_name("p", "p::news"), Some("news"));
        assert_eq!(zaqar_queue("p", "p::news"), None);
        assert_eq!(Kind::Topic.zaqar_name("p", "p:news"), None);
        let escaped = QueueRef::topic("JAM Project", "news").unwrap();
        assert_eq!(escaped.tenax, ":JAM.20Project::news");
        assert_eq!(
            Kind::Topic.zaqar_name("JAM Project", &escaped.tenax),
            Some("news")
        );
        assert_eq!(Kind::of_route("/v2/topics/{topic_name}"), Kind::Topic);
        assert_eq!(Kind::of_route("/v2/queues/{queue_name}"), Kind::Queue);
        assert_eq!(
            QueueRef::topic("p", "a b").unwrap_err().title,
            "Invalid topic identification"
        );
    }

    #[test]
    fn ids_round_trip() {
        let claim = ClaimId(0xdead_beef);
        assert_eq!(parse_claim_id(&claim_id(claim)), Some(claim));
        assert_eq!(parse_claim_id("no-such-claim"), None);
        assert_eq!(parse_claim_id("11112222333344445"), None);
        assert_eq!(parse_message_id("42"), Some(JobId(42)));
        assert_eq!(parse_message_id("-1"), None);
        assert_eq!(parse_message_id("99999999999999999999"), None);
        assert_eq!(
            python_list(&["a".into(), "it's".into()]),
            r#"['a', "it's"]"#
        );
    }
}
