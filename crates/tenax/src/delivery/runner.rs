//! placeholder
use std::sync::Arc;

use super::Deliveries;
use crate::engine::Engine;

pub async fn run(
    _engine: Arc<Engine>,
    _deliveries: Arc<Deliveries>,
    _stop: tokio::sync::watch::Receiver<bool>,
) {
}
