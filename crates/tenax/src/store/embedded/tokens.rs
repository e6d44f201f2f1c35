//! API tokens: stored hashed, held in memory (a few per deployment), written through.

use super::EmbeddedStore;
use super::writer::{self, Op};
use crate::auth::TokenRecord;
use crate::store::{StoreError, to_json_bytes};

impl EmbeddedStore {
    /// Stores a token (id 0: a new one, whose id is assigned) and returns it.
    pub async fn put_token(&self, mut record: TokenRecord) -> Result<TokenRecord, StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if record.id == 0 {
                record.id = inner.next_token_id;
                inner.next_token_id += 1;
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

    /// Deletes a token; false if there was none.
    pub async fn delete_token(&self, id: u64) -> Result<bool, StoreError> {
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

    /// Every token, by id.
    pub fn tokens(&self) -> Vec<TokenRecord> {
        self.inner.lock().tokens.values().cloned().collect()
    }
}
