//! The activity per minute, in memory: the one server using the store adds its counts, which
//! start again at a restart (as they did before they were behind the seam). A day of minutes at
//! most ([`MinuteRing`]).

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::activity::Minute;
use tenax_core::store::{ActivityStore, StoreError};

use super::EmbeddedStore;

#[async_trait]
impl ActivityStore for EmbeddedStore {
    async fn add_activity(&self, minutes: &[Minute]) -> Result<(), StoreError> {
        let mut ring = self.activity.lock();
        for minute in minutes {
            ring.add(minute.at_ms, &minute.counts);
        }
        Ok(())
    }

    async fn activity(&self, from_ms: UnixMs, to_ms: UnixMs) -> Result<Vec<Minute>, StoreError> {
        Ok(self.activity.lock().held(from_ms, to_ms))
    }

    async fn purge_activity(&self, before_ms: UnixMs) -> Result<usize, StoreError> {
        Ok(self.activity.lock().purge(before_ms))
    }
}
