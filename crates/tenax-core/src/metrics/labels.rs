//! Bounded label values. Queues, job types and subscriptions are named by users, and every
//! distinct value of a label is a time series to Prometheus: a label admits the first `limit`
//! distinct values it sees and counts every later one under [`OTHER`].
//!
//! Invariant: a value once admitted stays admitted for the life of the process (its series
//! keeps counting), so the set of series only grows, up to `limit` values per label.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::RwLock;

/// The value every value past the limit is counted under. No queue can be named so (queue
/// names are letters, digits and `-_.:`); a job type could, and would share its series.
pub const OTHER: &str = "(other)";

/// The distinct values one label admits.
#[derive(Debug)]
pub struct Bounded {
    limit: usize,
    admitted: RwLock<HashSet<Arc<str>>>,
    other: Arc<str>,
}

impl Bounded {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            admitted: RwLock::new(HashSet::new()),
            other: Arc::from(OTHER),
        }
    }

    /// The label value `value` is counted under: itself while there is room, else [`OTHER`].
    pub fn admit(&self, value: &str) -> Arc<str> {
        {
            let admitted = self.admitted.read();
            if let Some(known) = admitted.get(value) {
                return known.clone();
            }
            if admitted.len() >= self.limit {
                return self.other.clone();
            }
        }
        let mut admitted = self.admitted.write();
        if let Some(known) = admitted.get(value) {
            return known.clone();
        }
        if admitted.len() >= self.limit {
            return self.other.clone();
        }
        let value: Arc<str> = Arc::from(value);
        admitted.insert(value.clone());
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_the_limit_fold_into_other() {
        let label = Bounded::new(2);
        assert_eq!(&*label.admit("a"), "a");
        assert_eq!(&*label.admit("b"), "b");
        assert_eq!(&*label.admit("c"), OTHER);
        assert_eq!(&*label.admit("a"), "a", "admitted values stay");
        assert_eq!(&*label.admit("d"), OTHER);
    }
}
