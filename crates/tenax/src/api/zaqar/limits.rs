//! Zaqar's transport limits (`[transport]` in Zaqar's configuration,
//! `zaqar/transport/validation.py`), settable with `--zaqar-max-…` flags of the same meaning
//! and the same defaults.
//!
//! Invariants:
//! - Every limit is checked at startup ([`Limits::check`]): each is at least 1, and the ttl and
//!   grace maxima are at least their minimum (60 s, so that some value is valid). The size
//!   limits are Zaqar's 400s within the server's own `--max-request-bytes` (a 413 above it,
//!   for every route), as Zaqar's sit within its web server's.
//! - Handlers read the limits from [`Limits`] only, so a changed limit is enforced, and named
//!   in the error, everywhere Zaqar enforces it.

use clap::Args;

pub use super::metadata::MIN_MESSAGE_TTL;

/// Zaqar's minimum ttl and grace of a claim: not settable in Zaqar either.
pub const MIN_CLAIM_TTL: u64 = 60;
pub const MIN_CLAIM_GRACE: u64 = 60;

/// Zaqar's transport limits: the flags of `tenax serve`, checked by [`Limits::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Args)]
pub struct Limits {
    /// Zaqar's `max_queues_per_page`: the largest `limit` of a queue listing.
    #[arg(
        long = "zaqar-max-queues-per-page",
        env = "TENAX_ZAQAR_MAX_QUEUES_PER_PAGE",
        default_value_t = 20
    )]
    pub max_queues_per_page: u64,
    /// Zaqar's `max_messages_per_page`: the largest `limit` of a message listing, and the most
    /// `ids` of a message get or delete.
    #[arg(
        long = "zaqar-max-messages-per-page",
        env = "TENAX_ZAQAR_MAX_MESSAGES_PER_PAGE",
        default_value_t = 20
    )]
    pub max_messages_per_page: u64,
    /// Zaqar's `max_subscriptions_per_page`: the largest `limit` of a subscription listing.
    #[arg(
        long = "zaqar-max-subscriptions-per-page",
        env = "TENAX_ZAQAR_MAX_SUBSCRIPTIONS_PER_PAGE",
        default_value_t = 20
    )]
    pub max_subscriptions_per_page: u64,
    /// Zaqar's `max_messages_per_claim_or_pop`: the largest `limit` of a claim and `pop` of a
    /// delete.
    #[arg(
        long = "zaqar-max-messages-per-claim-or-pop",
        env = "TENAX_ZAQAR_MAX_MESSAGES_PER_CLAIM_OR_POP",
        default_value_t = 20
    )]
    pub max_messages_per_claim_or_pop: u64,
    /// Zaqar's `max_queue_metadata`: the largest queue metadata document, in bytes.
    #[arg(
        long = "zaqar-max-queue-metadata",
        env = "TENAX_ZAQAR_MAX_QUEUE_METADATA",
        default_value_t = 65_536
    )]
    pub max_queue_metadata: u64,
    /// Zaqar's `max_messages_post_size`: the largest message post, in bytes (a queue's
    /// `_max_messages_post_size` may lower it, never raise it).
    #[arg(
        long = "zaqar-max-messages-post-size",
        env = "TENAX_ZAQAR_MAX_MESSAGES_POST_SIZE",
        default_value_t = 262_144
    )]
    pub max_messages_post_size: u64,
    /// Zaqar's `max_message_ttl`: the longest ttl of a message (and of a queue's
    /// `_default_message_ttl`), in seconds.
    #[arg(
        long = "zaqar-max-message-ttl",
        env = "TENAX_ZAQAR_MAX_MESSAGE_TTL",
        default_value_t = 1_209_600
    )]
    pub max_message_ttl: u64,
    /// Zaqar's `max_claim_ttl`: the longest ttl of a claim, in seconds.
    #[arg(
        long = "zaqar-max-claim-ttl",
        env = "TENAX_ZAQAR_MAX_CLAIM_TTL",
        default_value_t = 43_200
    )]
    pub max_claim_ttl: u64,
    /// Zaqar's `max_claim_grace`: the longest grace of a claim, in seconds.
    #[arg(
        long = "zaqar-max-claim-grace",
        env = "TENAX_ZAQAR_MAX_CLAIM_GRACE",
        default_value_t = 43_200
    )]
    pub max_claim_grace: u64,
}

impl Default for Limits {
    /// Zaqar's defaults: the flags' own.
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            limits: Limits,
        }
        <Defaults as clap::Parser>::parse_from(["tenax"]).limits
    }
}

impl Limits {
    /// The limits, if each makes sense.
    pub fn check(&self) -> Result<Self, String> {
        for (flag, value) in [
            ("--zaqar-max-queues-per-page", self.max_queues_per_page),
            ("--zaqar-max-messages-per-page", self.max_messages_per_page),
            (
                "--zaqar-max-subscriptions-per-page",
                self.max_subscriptions_per_page,
            ),
            (
                "--zaqar-max-messages-per-claim-or-pop",
                self.max_messages_per_claim_or_pop,
            ),
            ("--zaqar-max-queue-metadata", self.max_queue_metadata),
            (
                "--zaqar-max-messages-post-size",
                self.max_messages_post_size,
            ),
        ] {
            if value == 0 {
                return Err(format!("{flag}: must be at least 1"));
            }
        }
        for (flag, value, min) in [
            (
                "--zaqar-max-message-ttl",
                self.max_message_ttl,
                MIN_MESSAGE_TTL,
            ),
            ("--zaqar-max-claim-ttl", self.max_claim_ttl, MIN_CLAIM_TTL),
            (
                "--zaqar-max-claim-grace",
                self.max_claim_grace,
                MIN_CLAIM_GRACE,
            ),
        ] {
            if value < min {
                return Err(format!(
                    "{flag}: must be at least {min} (Zaqar's minimum), got {value}"
                ));
            }
        }
        Ok(*self)
    }
}

/// Whether `count` (of ids given) is at most `max`.
pub fn fits(count: usize, max: u64) -> bool {
    u64::try_from(count).is_ok_and(|c| c <= max)
}

/// Whether `limit` (a page size or count the client asked for) is within 1 and `max`.
pub fn within(limit: i64, max: u64) -> bool {
    u64::try_from(limit).is_ok_and(|l| (1..=max).contains(&l))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        limits: Limits,
    }

    fn parse(args: &[&str]) -> Limits {
        Cli::parse_from(std::iter::once("tenax").chain(args.iter().copied())).limits
    }

    #[test]
    fn defaults_are_zaqars() {
        assert_eq!(parse(&[]).check(), Ok(Limits::default()));
    }

    #[test]
    fn limits_are_checked() {
        let changed = parse(&["--zaqar-max-messages-per-page", "5"])
            .check()
            .unwrap();
        assert_eq!(changed.max_messages_per_page, 5);
        let zero = parse(&["--zaqar-max-queues-per-page", "0"]).check();
        assert_eq!(
            zero.unwrap_err(),
            "--zaqar-max-queues-per-page: must be at least 1"
        );
        let short = parse(&["--zaqar-max-claim-grace", "59"]).check();
        assert!(short.unwrap_err().contains("at least 60"));
        assert!(within(20, 20) && !within(21, 20) && !within(0, 20) && !within(-1, 20));
    }
}
