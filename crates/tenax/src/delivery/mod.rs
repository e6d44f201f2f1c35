//! Webhook delivery: subscriptions' deliveries POSTed to their endpoints, retried by policy.

pub mod address;
pub mod outcome;
pub mod signing;
pub mod throttle;
