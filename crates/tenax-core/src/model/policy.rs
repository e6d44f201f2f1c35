//! A policy as stored: its canonical native JSON and the policy that JSON means, parsed once.
//!
//! Invariant: `json` is `native::to_json(&parsed)`, so what is stored, shown and obeyed agree. A
//! `StoredPolicy` is made from a parsed policy ([`StoredPolicy::new`]) or read back from its JSON
//! (deserialising parses it: a stored policy that no longer parses is an error there, never a
//! silent fallback to a default).

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use tenax_policy::RetryPolicy;
use tenax_policy::spelling::native;

#[derive(Clone, PartialEq)]
pub struct StoredPolicy {
    json: Value,
    parsed: Arc<RetryPolicy>,
}

impl StoredPolicy {
    pub fn new(policy: RetryPolicy) -> Self {
        Self {
            json: native::to_json(&policy),
            parsed: Arc::new(policy),
        }
    }

    /// The canonical native JSON.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The policy, to decide by.
    pub fn policy(&self) -> &Arc<RetryPolicy> {
        &self.parsed
    }
}

/// The canonical JSON says all there is to say.
impl std::fmt::Debug for StoredPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoredPolicy({})", self.json)
    }
}

impl From<RetryPolicy> for StoredPolicy {
    fn from(policy: RetryPolicy) -> Self {
        Self::new(policy)
    }
}

impl Serialize for StoredPolicy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StoredPolicy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let json = Value::deserialize(deserializer)?;
        let parsed = native::parse(&json)
            .map_err(|e| serde::de::Error::custom(format!("a stored policy: {e}")))?;
        Ok(Self {
            json,
            parsed: Arc::new(parsed),
        })
    }
}

#[cfg(test)]
mod tests {
    use tenax_policy::Shape;

    use super::*;

    #[test]
    fn stored_policies_round_trip_and_refuse_garbage() {
        let stored = StoredPolicy::new(RetryPolicy::new(Shape::Fixed { delay_ms: 5_000 }));
        let text = serde_json::to_string(&stored).unwrap();
        let back: StoredPolicy = serde_json::from_str(&text).unwrap();
        assert_eq!(back, stored);
        assert_eq!(back.policy().delay_ms(1), 5_000);
        assert!(serde_json::from_str::<StoredPolicy>(r#"{"type": "nope"}"#).is_err());
    }
}
