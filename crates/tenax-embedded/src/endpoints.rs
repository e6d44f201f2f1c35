//! Webhook endpoints' delivery states: a few, held in memory, written through.

use async_trait::async_trait;
use tenax_core::model::EndpointState;
use tenax_core::store::{ChangeEndpoint, EndpointStore, StoreError, to_json_bytes};

use super::EmbeddedStore;
use super::ops::Op;
use super::writer;

#[async_trait]
impl EndpointStore for EmbeddedStore {
    async fn endpoints(&self) -> Result<Vec<EndpointState>, StoreError> {
        let inner = self.inner.lock();
        let mut all: Vec<EndpointState> = inner.endpoint_states.values().cloned().collect();
        all.sort_by(|a, b| a.origin.cmp(&b.origin));
        Ok(all)
    }

    async fn endpoint(&self, origin: &str) -> Result<Option<EndpointState>, StoreError> {
        Ok(self.inner.lock().endpoint_states.get(origin).cloned())
    }

    async fn update_endpoint(
        &self,
        origin: &str,
        change: &ChangeEndpoint<'_>,
    ) -> Result<Option<EndpointState>, StoreError> {
        let (state, receiver) = {
            let mut inner = self.inner.lock();
            let current = inner.endpoint_states.get(origin);
            let Some(mut state) = change(current) else {
                return Ok(current.cloned());
            };
            origin.clone_into(&mut state.origin);
            let receiver = self.writer.submit(vec![Op::PutEndpoint {
                origin: origin.to_owned(),
                state: to_json_bytes(&state),
            }]);
            inner
                .endpoint_states
                .insert(origin.to_owned(), state.clone());
            (state, receiver)
        };
        writer::wait(receiver).await?;
        self.signals.endpoints.notify_waiters();
        Ok(Some(state))
    }
}
