//! The servers using the store: one, this process. It is live as long as the store is open,
//! and says of itself what the engine describes.

use async_trait::async_trait;
use parking_lot::Mutex;
use tenax_core::clock::UnixMs;
use tenax_core::model::LiveServer;
use tenax_core::store::{DescribeServer, ServerStore, StoreError};

use super::EmbeddedStore;

/// This process, as the one server.
pub(super) struct ThisServer {
    /// Random, as a shared store's server ids are, so that the ids of two stores' servers
    /// (shown side by side) are not all the same.
    id: u64,
    describe: Mutex<Option<DescribeServer>>,
}

impl std::fmt::Debug for ThisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThisServer").field("id", &self.id).finish()
    }
}

impl ThisServer {
    pub(super) fn new() -> Self {
        Self {
            id: rand::random(),
            describe: Mutex::new(None),
        }
    }
}

#[async_trait]
impl ServerStore for EmbeddedStore {
    fn describe_server(&self, describe: DescribeServer) {
        *self.server.describe.lock() = Some(describe);
    }

    async fn live_servers(&self, now_ms: UnixMs) -> Result<Vec<LiveServer>, StoreError> {
        let describe = self.server.describe.lock().clone();
        Ok(vec![LiveServer {
            id: self.server.id,
            this: true,
            seen_at_ms: now_ms,
            about: describe.map(|describe| describe()),
        }])
    }
}
