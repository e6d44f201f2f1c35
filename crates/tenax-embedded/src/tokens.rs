//! API tokens: stored hashed, held in memory (a few per deployment), written through.

use async_trait::async_trait;
use tenax_core::auth::TokenRecord;
use tenax_core::store::{StoreError, TokenStore, to_json_bytes};

use super::EmbeddedStore;
use super::ops::Op;
use super::writer;

#[async_trait]
impl TokenStore for EmbeddedStore {
    async fn put_token(&self, mut record: TokenRecord) -> Result<TokenRecord, StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if record.id == 0 {
                record.id = inner.next_token_id;
                inner.next_token_id += 1;
            } else if !inner.tokens.contains_key(&record.id) {
                // Revoked meanwhile: it stays revoked.
                return Ok(record);
            }
            let receiver = self.writer.submit(vec![Op::PutToken {
                id: record.id,
                record: to_json_bytes(&record),
            }]);
            inner.tokens.insert(record.id, record.clone());
            receiver
        };
        writer::wait(receiver).await?;
        Ok(record)
    }

    async fn delete_token(&self, id: u64) -> Result<bool, StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if inner.tokens.remove(&id).is_none() {
                return Ok(false);
            }
            self.writer.submit(vec![Op::DeleteToken { id }])
        };
        writer::wait(receiver).await?;
        Ok(true)
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        Ok(self.inner.lock().tokens.values().cloned().collect())
    }
}
