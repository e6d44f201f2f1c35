//! Queue settings: read, changed atomically, deleted.

use super::{ChangeError, Engine, Refusal};
use crate::engine::EngineError;
use crate::model::{LimitUse, QueueConfig};

impl Engine {
    /// A queue's stored settings, if it has any.
    pub async fn queue(&self, name: &str) -> Result<Option<QueueConfig>, EngineError> {
        Ok(self.store.queue(name).await?)
    }

    /// Every queue with settings or jobs, by name.
    pub async fn queues(&self) -> Result<Vec<(String, QueueConfig)>, EngineError> {
        Ok(self.store.queues().await?)
    }

    /// Changes a queue's settings atomically, so that concurrent changes (a pause and a new
    /// policy) both hold. `change` gets the stored settings (`None`: none yet) and returns the
    /// new ones, `None` to leave them, or an error to refuse. Returns the settings as stored
    /// after.
    pub async fn update_queue<E: Send>(
        &self,
        name: &str,
        change: impl Fn(Option<&QueueConfig>) -> Result<Option<QueueConfig>, E> + Send + Sync,
    ) -> Result<Option<QueueConfig>, ChangeError<E>> {
        let refusal = Refusal::new();
        let result = self
            .store
            .update_queue(name, &|current| refusal.keep(change(current)))
            .await;
        refusal.result(result)
    }

    /// Deletes a queue's settings and every job in it; its subscriptions stay. Returns how many
    /// jobs went.
    pub async fn delete_queue(&self, name: &str) -> Result<usize, EngineError> {
        Ok(self.store.delete_queue(name, self.now_ms()).await?)
    }

    /// How much of a queue's limits is used now.
    pub async fn limit_use(&self, name: &str) -> Result<LimitUse, EngineError> {
        Ok(self.store.limit_use(name, self.now_ms()).await?)
    }
}
