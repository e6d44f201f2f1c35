//! Webhook endpoints' delivery state (a pause, a circuit breaker): read, and changed atomically
//! by the delivery runtime's rules (`crate::delivery::backpressure`).

use super::Engine;
use crate::engine::EngineError;
use crate::model::EndpointState;

impl Engine {
    /// Every endpoint that has a delivery state, by origin.
    pub async fn endpoint_states(&self) -> Result<Vec<EndpointState>, EngineError> {
        Ok(self.store.endpoints().await?)
    }

    pub async fn endpoint_state(&self, origin: &str) -> Result<Option<EndpointState>, EngineError> {
        Ok(self.store.endpoint(origin).await?)
    }

    /// Changes an endpoint's state atomically: `change` gets it as stored (`None`: none yet)
    /// and returns the new one, or `None` to leave it. Returns it as stored after.
    pub async fn update_endpoint(
        &self,
        origin: &str,
        change: impl Fn(Option<&EndpointState>) -> Option<EndpointState> + Send + Sync,
    ) -> Result<Option<EndpointState>, EngineError> {
        Ok(self.store.update_endpoint(origin, &change).await?)
    }
}
