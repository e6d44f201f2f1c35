//! A per-subscription rate limit under which deliveries wait; none is ever dropped.
//!
//! A token bucket: each delivery sent takes one token, the bucket holds at most one second's
//! worth of tokens (the burst), and refills continuously at the rate. The dispatcher asks how many
//! deliveries it may send now ([`Throttle::take`]) and, when none, when to ask again
//! ([`Throttle::next_token_at`]); deliveries not granted stay due and are sent later.
//!
//! Invariants:
//! - Time is a parameter: every method takes `now_ms`, so tests simulate time exactly.
//! - Tokens are counted in thousandths as integers, so refilling at 1 ms steps loses nothing:
//!   over any span of `t` ms no more than `capacity + rate * t / 1000` tokens are granted.
//! - The content never exceeds the capacity, and a clock that steps backwards neither adds nor
//!   removes tokens.
//! - The rate is never zero: an unthrottled subscription has no `Throttle` at all (`None`).

use std::num::NonZeroU32;

/// Thousandths of a token per token.
const MILLI: u64 = 1000;

/// A token bucket allowing `per_second` deliveries per second, in bursts of up to `per_second`.
#[derive(Debug)]
pub struct Throttle {
    /// Tokens per second, which is also thousandths of a token per millisecond.
    per_second: NonZeroU32,
    /// Thousandths of a token in the bucket as of `updated_ms`; at most `capacity_milli()`.
    milli_tokens: u64,
    /// The latest `now_ms` seen; tokens have been added up to this time.
    updated_ms: u64,
}

impl Throttle {
    /// A full bucket allowing `per_second` deliveries per second.
    pub fn new(per_second: NonZeroU32, now_ms: u64) -> Self {
        let mut throttle = Self {
            per_second,
            milli_tokens: 0,
            updated_ms: now_ms,
        };
        throttle.milli_tokens = throttle.capacity_milli();
        throttle
    }

    /// The rate, in deliveries per second.
    pub fn rate(&self) -> NonZeroU32 {
        self.per_second
    }

    /// Takes up to `want` whole tokens available at `now_ms` and returns how many were taken.
    pub fn take(&mut self, want: usize, now_ms: u64) -> usize {
        self.refill(now_ms);
        let want_tokens = u64::try_from(want).unwrap_or(u64::MAX);
        let granted = want_tokens.min(self.milli_tokens / MILLI);
        self.milli_tokens -= granted * MILLI;
        // `granted` is at most `want`, so it fits in a usize.
        usize::try_from(granted).unwrap_or(want)
    }

    /// Returns `n` tokens taken but not used (fewer deliveries were due than granted); the
    /// content still never exceeds the capacity.
    pub fn give_back(&mut self, n: usize) {
        let returned = u64::try_from(n).unwrap_or(u64::MAX).saturating_mul(MILLI);
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(returned)
            .min(self.capacity_milli());
    }

    /// The earliest time at or after `now_ms` at which at least one whole token is available.
    pub fn next_token_at(&self, now_ms: u64) -> u64 {
        let at = now_ms.max(self.updated_ms);
        let have = self.milli_tokens_at(now_ms);
        if have >= MILLI {
            return at;
        }
        let missing = MILLI - have;
        let rate = u64::from(self.per_second.get());
        at.saturating_add(missing.div_ceil(rate))
    }

    /// Changes the rate from `now_ms` on: tokens gained until then count at the old rate, and the
    /// content is cut to the new capacity if that is smaller.
    pub fn set_rate(&mut self, per_second: NonZeroU32, now_ms: u64) {
        self.refill(now_ms);
        self.per_second = per_second;
        self.milli_tokens = self.milli_tokens.min(self.capacity_milli());
    }

    /// Adds the tokens gained until `now_ms`.
    fn refill(&mut self, now_ms: u64) {
        self.milli_tokens = self.milli_tokens_at(now_ms);
        self.updated_ms = self.updated_ms.max(now_ms);
    }

    /// The content at `now_ms`, in thousandths of a token, without taking anything.
    fn milli_tokens_at(&self, now_ms: u64) -> u64 {
        let elapsed_ms = now_ms.saturating_sub(self.updated_ms);
        let gained = elapsed_ms.saturating_mul(u64::from(self.per_second.get()));
        self.milli_tokens
            .saturating_add(gained)
            .min(self.capacity_milli())
    }

    /// One second's worth of tokens, in thousandths.
    fn capacity_milli(&self) -> u64 {
        u64::from(self.per_second.get()) * MILLI
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: u32) -> NonZeroU32 {
        NonZeroU32::new(per_second).unwrap()
    }

    #[test]
    fn grants_a_burst_then_one_token_per_interval() {
        let mut throttle = Throttle::new(rate(10), 0);
        assert_eq!(throttle.take(100, 0), 10);
        assert_eq!(throttle.take(100, 0), 0);
        assert_eq!(throttle.next_token_at(0), 100);
        assert_eq!(throttle.take(1, 99), 0);
        assert_eq!(throttle.next_token_at(99), 100);
        assert_eq!(throttle.take(100, 100), 1);
        assert_eq!(throttle.take(100, 150), 0);
        assert_eq!(throttle.next_token_at(150), 200);
        assert_eq!(throttle.take(100, 200), 1);
        assert_eq!(throttle.take(100, 500), 3);
    }

    #[test]
    fn tokens_given_back_can_be_taken_again_up_to_the_capacity() {
        let mut throttle = Throttle::new(rate(10), 0);
        assert_eq!(throttle.take(8, 0), 8);
        throttle.give_back(5);
        assert_eq!(throttle.take(100, 0), 7);
        throttle.give_back(100);
        assert_eq!(throttle.take(100, 0), 10);
    }

    #[test]
    fn grants_no_more_than_wanted() {
        let mut throttle = Throttle::new(rate(10), 0);
        assert_eq!(throttle.take(0, 0), 0);
        assert_eq!(throttle.take(3, 0), 3);
        assert_eq!(throttle.take(3, 0), 3);
        assert_eq!(throttle.take(usize::MAX, 0), 4);
    }

    #[test]
    fn a_simulated_run_grants_the_rate_plus_one_burst() {
        let mut throttle = Throttle::new(rate(10), 0);
        let granted: usize = (0..=10_000).map(|ms| throttle.take(1000, ms)).sum();
        assert_eq!(granted, 10 * 10 + 10);
    }

    #[test]
    fn slow_rates_lose_no_fractions() {
        // 3 per second: a token every 333.33 ms, so 3 tokens per 1000 ms exactly.
        let mut throttle = Throttle::new(rate(3), 0);
        assert_eq!(throttle.take(10, 0), 3);
        let granted: usize = (1..=60_000).map(|ms| throttle.take(1, ms)).sum();
        assert_eq!(granted, 180);
    }

    #[test]
    fn a_rate_of_one_allows_one_per_second() {
        let mut throttle = Throttle::new(rate(1), 5_000);
        assert_eq!(throttle.take(5, 5_000), 1);
        assert_eq!(throttle.next_token_at(5_000), 6_000);
        assert_eq!(throttle.take(5, 5_999), 0);
        assert_eq!(throttle.take(5, 6_000), 1);
    }

    #[test]
    fn the_bucket_never_holds_more_than_one_second() {
        let mut throttle = Throttle::new(rate(10), 0);
        assert_eq!(throttle.take(1000, 3_600_000), 10);
        assert_eq!(throttle.take(1000, u64::MAX), 10);
    }

    #[test]
    fn next_token_at_is_now_when_a_token_is_there() {
        let mut throttle = Throttle::new(rate(10), 0);
        assert_eq!(throttle.next_token_at(0), 0);
        assert_eq!(throttle.next_token_at(42), 42);
        throttle.take(10, 0);
        assert_eq!(throttle.next_token_at(1_000), 1_000);
    }

    #[test]
    fn next_token_at_rounds_up_to_the_millisecond() {
        let mut throttle = Throttle::new(rate(3), 0);
        throttle.take(3, 0);
        // 1000 / 3 = 333.33 ms.
        assert_eq!(throttle.next_token_at(0), 334);
        assert_eq!(throttle.take(1, 333), 0);
        assert_eq!(throttle.take(1, 334), 1);
    }

    #[test]
    fn a_fast_rate_refills_within_a_millisecond() {
        let mut throttle = Throttle::new(rate(5_000), 0);
        assert_eq!(throttle.take(10_000, 0), 5_000);
        assert_eq!(throttle.next_token_at(0), 1);
        assert_eq!(throttle.take(10_000, 1), 5);
    }

    #[test]
    fn a_clock_stepping_back_changes_nothing() {
        let mut throttle = Throttle::new(rate(10), 1_000);
        assert_eq!(throttle.take(10, 1_000), 10);
        assert_eq!(throttle.take(10, 500), 0);
        assert_eq!(throttle.next_token_at(500), 1_100);
        assert_eq!(throttle.take(10, 1_100), 1);
    }

    #[test]
    fn set_rate_counts_past_time_at_the_old_rate() {
        let mut throttle = Throttle::new(rate(10), 0);
        assert_eq!(throttle.take(10, 0), 10);
        // 500 ms at 10/s is 5 tokens; then 100/s from there on.
        throttle.set_rate(rate(100), 500);
        assert_eq!(throttle.rate(), rate(100));
        assert_eq!(throttle.take(100, 500), 5);
        assert_eq!(throttle.take(100, 600), 10);
    }

    #[test]
    fn set_rate_cuts_the_content_to_the_new_capacity() {
        let mut throttle = Throttle::new(rate(100), 0);
        throttle.set_rate(rate(2), 0);
        assert_eq!(throttle.take(100, 0), 2);
        assert_eq!(throttle.next_token_at(0), 500);
    }

    #[test]
    fn a_large_rate_does_not_overflow() {
        let mut throttle = Throttle::new(NonZeroU32::MAX, 0);
        let burst = usize::try_from(u32::MAX).unwrap();
        assert_eq!(throttle.take(usize::MAX, 0), burst);
        assert_eq!(throttle.next_token_at(0), 1);
        assert_eq!(throttle.take(usize::MAX, u64::MAX), burst);
    }
}
