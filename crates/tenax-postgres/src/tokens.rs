//! API tokens (stored hashed). A change is announced to every server, whose token books
//! load them again.

use async_trait::async_trait;
use tenax_core::auth::TokenRecord;
use tenax_core::store::{StoreError, TokenStore, from_json_bytes};

use super::rows::{id, json, unid};
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

#[async_trait]
impl TokenStore for PostgresStore {
    async fn put_token(&self, mut record: TokenRecord) -> Result<TokenRecord, StoreError> {
        let what = "storing a token";
        let client = self.client().await?;
        let sql = if record.id == 0 {
            let next = query(&client, &NEXT_ID, &[]).await.map_err(fault(what))?;
            record.id = unid(next.first().map_or(0, |r| r.get(0)));
            &INSERT
        } else {
            // Revoked meanwhile (by any server): it stays revoked.
            &UPDATE
        };
        execute(&client, sql, &[&id(record.id), &json(&record)])
            .await
            .map_err(fault(what))?;
        self.announce(Wakeup::Tokens);
        Ok(record)
    }

    async fn delete_token(&self, token: u64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let deleted = execute(&client, &DELETE, &[&id(token)])
            .await
            .map_err(fault("deleting a token"))?;
        if deleted > 0 {
            self.announce(Wakeup::Tokens);
        }
        Ok(deleted > 0)
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &LIST, &[])
            .await
            .map_err(fault("reading tokens"))?;
        rows.iter()
            .map(|r| from_json_bytes("token", r.get::<_, &str>(0).as_bytes()))
            .collect()
    }
}

statements! {
    NEXT_ID = "SELECT nextval('tenax_token_ids')";
    INSERT = "INSERT INTO tenax_tokens (id, body) VALUES ($1, $2)";
    UPDATE = "UPDATE tenax_tokens SET body = $2 WHERE id = $1";
    DELETE = "DELETE FROM tenax_tokens WHERE id = $1";
    LIST = "SELECT body FROM tenax_tokens ORDER BY id";
}
