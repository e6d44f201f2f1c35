//! Seeing a policy before it runs: every retry's delay, the running total, the jitter band and
//! the whole window.

use serde::{Deserialize, Serialize};

use crate::policy::RetryPolicy;

/// One row of a preview. `delay_ms` is the delay without jitter (capped); the band is what jitter
/// can make of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewRow {
    pub retry: u32,
    pub delay_ms: u64,
    pub cumulative_ms: u64,
    pub min_delay_ms: u64,
    pub max_delay_ms: u64,
}

/// The preview of a whole policy. Its JSON form is a stable interface:
/// `{"retries": [{"retry", "delay_ms", "cumulative_ms", "min_delay_ms", "max_delay_ms"}, ...],
///   "window_ms"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    pub retries: Vec<PreviewRow>,
    /// The sum of all delays without jitter: the longest a job spends retrying.
    pub window_ms: u64,
}

impl Preview {
    /// Every retry the policy allows. With a maximum window, the retries whose cumulative delay
    /// (without jitter) stays within it.
    pub fn of(policy: &RetryPolicy) -> Self {
        let mut retries = Vec::new();
        let mut cumulative_ms = 0u64;
        let mut previous_high = None;
        for retry in 1..=policy.retry_limit {
            let delay_ms = policy.delay_ms(retry);
            let next = cumulative_ms.saturating_add(delay_ms);
            if policy.max_window_ms.is_some_and(|window| next > window) {
                break;
            }
            cumulative_ms = next;
            let (min_delay_ms, max_delay_ms) = policy.jitter_band_ms(retry, previous_high);
            previous_high = Some(max_delay_ms);
            retries.push(PreviewRow {
                retry,
                delay_ms,
                cumulative_ms,
                min_delay_ms,
                max_delay_ms,
            });
        }
        Self {
            retries,
            window_ms: cumulative_ms,
        }
    }

    /// The shortest total jitter allows.
    pub fn min_window_ms(&self) -> u64 {
        self.retries
            .iter()
            .fold(0, |sum, row| sum.saturating_add(row.min_delay_ms))
    }

    /// The longest total jitter allows.
    pub fn max_window_ms(&self) -> u64 {
        self.retries
            .iter()
            .fold(0, |sum, row| sum.saturating_add(row.max_delay_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::DAY_MS;
    use crate::phased::to_f64;

    #[test]
    fn default_policy_preview() {
        let preview = Preview::of(&RetryPolicy::default());
        assert_eq!(preview.retries.len(), 25);
        assert_eq!(preview.window_ms, 2_154_020_000);
        let first = preview.retries[0];
        assert_eq!(
            first,
            PreviewRow {
                retry: 1,
                delay_ms: 16_000,
                cumulative_ms: 16_000,
                min_delay_ms: 16_000,
                max_delay_ms: 46_000
            }
        );
        let days = |ms: u64| to_f64(ms) / to_f64(DAY_MS);
        assert!(days(preview.min_window_ms()) > 24.0 && days(preview.max_window_ms()) < 26.0);
    }

    #[test]
    fn json_shape_is_stable() {
        let preview = Preview {
            retries: vec![PreviewRow {
                retry: 1,
                delay_ms: 5_000,
                cumulative_ms: 5_000,
                min_delay_ms: 5_000,
                max_delay_ms: 5_000,
            }],
            window_ms: 5_000,
        };
        assert_eq!(
            serde_json::to_string(&preview).ok(),
            Some(
                r#"{"retries":[{"retry":1,"delay_ms":5000,"cumulative_ms":5000,"min_delay_ms":5000,"max_delay_ms":5000}],"window_ms":5000}"#
                    .to_owned()
            )
        );
    }
}
