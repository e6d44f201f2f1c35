//! Webhook endpoints' delivery states: a row each, the state as JSON. A change locks the row
//! (or inserts it: a server that inserts the same origin first makes the other run again),
//! and wakes every server's runners (`tenax_endpoints`).

use async_trait::async_trait;
use tenax_core::model::EndpointState;
use tenax_core::store::{ChangeEndpoint, EndpointStore, StoreError, from_json_bytes};

use super::rows::json;
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, RETRIES, fault, is_conflict};

fn state_of(text: &str) -> Result<EndpointState, StoreError> {
    from_json_bytes("endpoint state", text.as_bytes())
}

#[async_trait]
impl EndpointStore for PostgresStore {
    async fn endpoints(&self) -> Result<Vec<EndpointState>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &LIST, &[])
            .await
            .map_err(fault("reading endpoint states"))?;
        rows.iter().map(|r| state_of(r.get(0))).collect()
    }

    async fn endpoint(&self, origin: &str) -> Result<Option<EndpointState>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &ENDPOINT, &[&origin])
            .await
            .map_err(fault("reading an endpoint state"))?;
        rows.first().map(|r| state_of(r.get(0))).transpose()
    }

    async fn update_endpoint(
        &self,
        origin: &str,
        change: &ChangeEndpoint<'_>,
    ) -> Result<Option<EndpointState>, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_update_endpoint(origin, change).await {
                // Another server stored the endpoint's first state meanwhile: again, on it.
                Err(error) if is_conflict(&error) && attempt < RETRIES => continue,
                done => return done,
            }
        }
    }
}

impl PostgresStore {
    async fn try_update_endpoint(
        &self,
        origin: &str,
        change: &ChangeEndpoint<'_>,
    ) -> Result<Option<EndpointState>, StoreError> {
        let what = "changing an endpoint state";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(&tx, &ENDPOINT_FOR_UPDATE, &[&origin])
            .await
            .map_err(fault(what))?;
        let current = rows.first().map(|r| state_of(r.get(0))).transpose()?;
        let Some(mut state) = change(current.as_ref()) else {
            return Ok(current);
        };
        origin.clone_into(&mut state.origin);
        let sql = if current.is_some() { &UPDATE } else { &INSERT };
        execute(&tx, sql, &[&origin, &json(&state)])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        self.announce(Wakeup::Endpoints);
        Ok(Some(state))
    }
}

statements! {
    LIST = "SELECT body FROM tenax_endpoints ORDER BY origin COLLATE \"C\"";
    ENDPOINT = "SELECT body FROM tenax_endpoints WHERE origin = $1";
    ENDPOINT_FOR_UPDATE = "SELECT body FROM tenax_endpoints WHERE origin = $1 FOR UPDATE";
    UPDATE = "UPDATE tenax_endpoints SET body = $2 WHERE origin = $1";
    INSERT = "INSERT INTO tenax_endpoints (origin, body) VALUES ($1, $2)";
}
