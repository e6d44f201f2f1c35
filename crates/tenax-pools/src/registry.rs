//! The deployment's pools and flavors through the store (the servers' APIs): the rules are
//! [`crate::admin`]'s; after each change this server loads the pools at once, and the others
//! when the catalogue tells them.

use std::time::Instant;

use async_trait::async_trait;
use tenax_core::model::pool::{Flavor, Moved, Pool, PoolError, PoolSpec};
use tenax_core::store::{PoolStore, StoreError};

use super::{PooledStore, admin};

impl PooledStore {
    /// Refuses a flavor that does not exist.
    pub(crate) async fn check_flavor(&self, flavor: &str) -> Result<(), StoreError> {
        if self
            .catalogue
            .flavors()
            .await?
            .iter()
            .any(|f| f.name == flavor)
        {
            Ok(())
        } else {
            Err(StoreError::Pool(PoolError::NoFlavor(flavor.to_owned())))
        }
    }

    /// Loads the pools after a change this server made: twice when the change named a new
    /// database, since the pool takes queues once this server has said it loaded it (at once
    /// when no other server lags).
    async fn reload(&self, twice: bool) -> Result<(), StoreError> {
        self.load(Instant::now()).await?;
        if twice {
            self.load(Instant::now()).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl PoolStore for PooledStore {
    async fn pools(&self) -> Result<Vec<Pool>, StoreError> {
        admin::list(&self.catalogue).await
    }

    async fn put_pool(&self, spec: PoolSpec) -> Result<bool, StoreError> {
        let created = admin::register(&self.catalogue, &self.shared, spec, &self.clock).await?;
        self.reload(true).await?;
        Ok(created)
    }

    async fn delete_pool(&self, name: &str) -> Result<bool, StoreError> {
        let deleted = admin::remove(&self.catalogue, name).await?;
        self.reload(false).await?;
        Ok(deleted)
    }

    async fn flavors(&self) -> Result<Vec<Flavor>, StoreError> {
        admin::flavors(&self.catalogue).await
    }

    async fn put_flavor(&self, flavor: Flavor) -> Result<bool, StoreError> {
        let created = admin::put_flavor(&self.catalogue, flavor).await?;
        self.reload(false).await?;
        Ok(created)
    }

    async fn delete_flavor(&self, name: &str) -> Result<bool, StoreError> {
        let deleted = self.catalogue.delete_flavor(name).await?;
        self.reload(false).await?;
        Ok(deleted)
    }

    async fn move_queues(&self, queues: Vec<String>, to: &str) -> Result<Moved, StoreError> {
        PooledStore::move_queues(self, queues, to).await
    }
}
