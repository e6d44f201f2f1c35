//! The deployment's pools and flavors: their rules, then the store's (which reaches the
//! databases). Only the admin routes call these.

use super::{Engine, EngineError};
use crate::model::pool::{self, Flavor, Moved, Pool, PoolError, PoolSpec};

impl Engine {
    /// Every pool, by name.
    pub async fn pools(&self) -> Result<Vec<Pool>, EngineError> {
        Ok(self.store.pools().await?)
    }

    /// Pool `name`.
    pub async fn pool(&self, name: &str) -> Result<Pool, EngineError> {
        self.pools()
            .await?
            .into_iter()
            .find(|p| p.spec.name == name)
            .ok_or_else(|| EngineError::Pool(PoolError::NoPool(name.to_owned())))
    }

    /// Registers pool `spec.name`, or sets every setting of the one of that name; true if it
    /// is new. An empty flavor is none.
    pub async fn put_pool(&self, mut spec: PoolSpec) -> Result<bool, EngineError> {
        check_name("name", &spec.name)?;
        spec.flavor = spec.flavor.filter(|f| !f.is_empty());
        if let Some(flavor) = &spec.flavor {
            check_name("flavor", flavor)?;
        }
        if !(spec.uri.starts_with("postgres://") || spec.uri.starts_with("postgresql://")) {
            return Err(invalid(
                "uri",
                "must be a PostgreSQL URL (postgres://user@host:port/database): every pool \
                 is a PostgreSQL database",
            ));
        }
        Ok(self.store.put_pool(spec).await?)
    }

    /// Forgets pool `name`; false if there was none.
    pub async fn delete_pool(&self, name: &str) -> Result<bool, EngineError> {
        Ok(self.store.delete_pool(name).await?)
    }

    /// Every flavor, by name.
    pub async fn flavors(&self) -> Result<Vec<Flavor>, EngineError> {
        Ok(self.store.flavors().await?)
    }

    /// Flavor `name`.
    pub async fn flavor(&self, name: &str) -> Result<Flavor, EngineError> {
        self.flavors()
            .await?
            .into_iter()
            .find(|f| f.name == name)
            .ok_or_else(|| EngineError::Pool(PoolError::NoFlavor(name.to_owned())))
    }

    /// Stores flavor `flavor.name` with exactly its pools (at least one); true if it is new.
    pub async fn put_flavor(&self, flavor: Flavor) -> Result<bool, EngineError> {
        check_name("name", &flavor.name)?;
        if flavor.pools.is_empty() {
            return Err(invalid("pools", "names at least one pool"));
        }
        Ok(self.store.put_flavor(flavor).await?)
    }

    /// Forgets flavor `name`; false if there was none.
    pub async fn delete_flavor(&self, name: &str) -> Result<bool, EngineError> {
        Ok(self.store.delete_flavor(name).await?)
    }

    /// Moves `queue` and the queues `with` it to pool `to` (`tenax queues move`). Their names
    /// were checked by the caller.
    pub async fn move_queues(
        &self,
        queue: &str,
        with: Vec<String>,
        to: &str,
    ) -> Result<Moved, EngineError> {
        check_name("to", to)?;
        let mut queues = vec![queue.to_owned()];
        for other in with {
            if !queues.contains(&other) {
                queues.push(other);
            }
        }
        if let Some(delivery) = queues
            .iter()
            .find(|q| crate::model::subscription::subscription_of_queue(q).is_some())
        {
            return Err(invalid(
                "with",
                &format!("{delivery:?} is a subscription's deliveries: they move with its queue"),
            ));
        }
        Ok(self.store.move_queues(queues, to).await?)
    }
}

fn check_name(field: &'static str, name: &str) -> Result<(), EngineError> {
    pool::check_name(field, name).map_err(EngineError::Pool)
}

fn invalid(field: &'static str, rule: &str) -> EngineError {
    EngineError::Pool(PoolError::Invalid {
        field,
        rule: rule.to_owned(),
    })
}
