//! API tokens: made, revoked and listed through the store; recognised from memory.
//!
//! Invariants:
//! - The book holds a token's hash, never the token; a presented token is hashed and looked up.
//! - A token's last use is kept in memory and written to the store at most once a minute per
//!   token (by the maintenance loop), so authenticating a request never costs a disk write;
//!   `last_used_at` may lag by that much.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use super::Engine;
use crate::auth::token::{self, NewToken, TokenRecord};
use crate::auth::{Principal, Role, Scope};
use crate::engine::EngineError;
use crate::store::StoreError;

/// The tokens the server knows, by hash.
#[derive(Debug)]
pub struct TokenBook {
    by_hash: RwLock<HashMap<String, Arc<Known>>>,
    /// Changed (its count goes up) whenever a token leaves the book, after it left: what
    /// [`Engine::revoked`] waits for.
    removals: tokio::sync::watch::Sender<u64>,
}

impl Default for TokenBook {
    fn default() -> Self {
        Self {
            by_hash: RwLock::default(),
            removals: tokio::sync::watch::Sender::new(0),
        }
    }
}

#[derive(Debug)]
struct Known {
    principal: Principal,
    /// When it was last used (ms); 0: not since the server started.
    last_used_ms: AtomicU64,
    /// The last use already written to the store.
    flushed_ms: AtomicU64,
}

fn principal_of(record: &TokenRecord) -> Principal {
    Principal::new(
        Some(record.id),
        Arc::from(record.name.as_str()),
        record.role,
        Scope::of(&record.queues),
        Scope::of(&record.projects),
    )
}

impl TokenBook {
    /// Whether the stored token `id` is still in the book.
    fn knows(&self, id: u64) -> bool {
        self.by_hash
            .read()
            .values()
            .any(|known| known.principal.token == Some(id))
    }

    fn removed(&self) {
        self.removals.send_modify(|count| *count += 1);
    }

    fn insert(&self, hash: String, principal: Principal, last_used_ms: u64) {
        let known = Known {
            principal,
            last_used_ms: AtomicU64::new(last_used_ms),
            flushed_ms: AtomicU64::new(last_used_ms),
        };
        self.by_hash.write().insert(hash, Arc::new(known));
    }
}

impl Engine {
    /// Loads the stored tokens (at start-up).
    pub async fn load_tokens(&self) -> Result<(), EngineError> {
        for record in self.store.tokens().await? {
            let principal = principal_of(&record);
            let used = record.last_used_at_ms.unwrap_or(0);
            self.tokens.insert(record.hash.clone(), principal, used);
        }
        Ok(())
    }

    /// Loads the stored tokens again: another server may have made or revoked one. Tokens
    /// still stored keep their last use as this server knows it; `--admin-token` stays.
    pub async fn reload_tokens(&self) -> Result<(), EngineError> {
        let records = self.store.tokens().await?;
        let mut book = self.tokens.by_hash.write();
        let mut next: HashMap<String, Arc<Known>> = book
            .iter()
            .filter(|(_, known)| known.principal.token.is_none())
            .map(|(hash, known)| (hash.clone(), known.clone()))
            .collect();
        for record in records {
            let known = match book.get(&record.hash) {
                Some(known) if known.principal.token == Some(record.id) => Arc::new(Known {
                    principal: principal_of(&record),
                    last_used_ms: AtomicU64::new(known.last_used_ms.load(Ordering::Relaxed)),
                    flushed_ms: AtomicU64::new(known.flushed_ms.load(Ordering::Relaxed)),
                }),
                _ => {
                    let used = record.last_used_at_ms.unwrap_or(0);
                    Arc::new(Known {
                        principal: principal_of(&record),
                        last_used_ms: AtomicU64::new(used),
                        flushed_ms: AtomicU64::new(used),
                    })
                }
            };
            next.insert(record.hash.clone(), known);
        }
        let removed = book.keys().any(|hash| !next.contains_key(hash));
        *book = next;
        drop(book);
        if removed {
            self.tokens.removed();
        }
        Ok(())
    }

    /// Accepts `secret` as an admin token without storing it (`--admin-token`).
    pub fn accept_admin_token(&self, secret: &str) {
        let principal = Principal::new(
            None,
            Arc::from("--admin-token"),
            Role::Admin,
            Scope::all(),
            Scope::all(),
        );
        self.tokens.insert(token::hash(secret), principal, 0);
    }

    /// Who `secret` is, if it is a known token; notes its use.
    pub fn authenticate(&self, secret: &str) -> Option<Principal> {
        let hash = token::hash(secret);
        let book = self.tokens.by_hash.read();
        let known = book.get(&hash)?;
        known.last_used_ms.store(self.now_ms(), Ordering::Relaxed);
        Some(known.principal.clone())
    }

    /// Whether a stored, unscoped admin token exists (then no first-start token is made).
    pub async fn has_admin_token(&self) -> Result<bool, EngineError> {
        Ok(self
            .store
            .tokens()
            .await?
            .iter()
            .any(|t| t.role == Role::Admin && t.queues.is_empty() && t.projects.is_empty()))
    }

    /// Makes a token; its secret is in the answer and nowhere else.
    pub async fn create_token(
        &self,
        name: String,
        role: Role,
        queues: Vec<String>,
        projects: Vec<String>,
    ) -> Result<NewToken, EngineError> {
        let secret = token::generate().map_err(|e| StoreError::storage("generating a token", e))?;
        let record = TokenRecord {
            id: 0,
            name,
            hash: token::hash(&secret),
            role,
            queues,
            projects,
            created_at_ms: self.now_ms(),
            last_used_at_ms: None,
        };
        let record = self.store.put_token(record).await?;
        self.tokens
            .insert(record.hash.clone(), principal_of(&record), 0);
        Ok(NewToken { secret, record })
    }

    /// Revokes token `id`: it is refused from now on. False if there is none.
    pub async fn revoke_token(&self, id: u64) -> Result<bool, EngineError> {
        let revoked = self.store.delete_token(id).await?;
        self.tokens
            .by_hash
            .write()
            .retain(|_, known| known.principal.token != Some(id));
        self.tokens.removed();
        Ok(revoked)
    }

    /// Whether the stored token `id` is known (not revoked).
    pub fn knows_token(&self, id: u64) -> bool {
        self.tokens.knows(id)
    }

    /// Completes once the stored token `token` is revoked (here, or on another server of the
    /// cluster, once this one has loaded the change); never for `None` (`--admin-token`, or
    /// authentication off). Long polls and streams end on it, so that a revoked worker holds
    /// no connection and no job.
    pub async fn revoked(&self, token: Option<u64>) {
        let Some(id) = token else {
            return std::future::pending().await;
        };
        // Subscribed before looking, so a removal in between is seen.
        let mut removals = self.tokens.removals.subscribe();
        while self.tokens.knows(id) {
            if removals.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Every stored token (without secrets), with its last use as memory knows it.
    pub async fn list_tokens(&self) -> Result<Vec<TokenRecord>, EngineError> {
        let used: HashMap<u64, u64> = {
            let book = self.tokens.by_hash.read();
            book.values()
                .filter_map(|k| Some((k.principal.token?, k.last_used_ms.load(Ordering::Relaxed))))
                .collect()
        };
        let mut tokens = self.store.tokens().await?;
        for record in &mut tokens {
            if let Some(&at) = used.get(&record.id).filter(|at| **at > 0) {
                record.last_used_at_ms = Some(at);
            }
        }
        Ok(tokens)
    }

    /// Writes the last use of every token used since it was last written.
    pub async fn flush_token_use(&self) -> Result<(), EngineError> {
        let changed: Vec<(u64, u64, Arc<Known>)> = {
            let book = self.tokens.by_hash.read();
            book.values()
                .filter_map(|known| {
                    let id = known.principal.token?;
                    let used = known.last_used_ms.load(Ordering::Relaxed);
                    (used > known.flushed_ms.load(Ordering::Relaxed))
                        .then(|| (id, used, known.clone()))
                })
                .collect()
        };
        if changed.is_empty() {
            return Ok(());
        }
        let mut stored: HashMap<u64, TokenRecord> = self
            .store
            .tokens()
            .await?
            .into_iter()
            .map(|t| (t.id, t))
            .collect();
        for (id, used, known) in changed {
            if let Some(mut record) = stored.remove(&id) {
                record.last_used_at_ms = Some(used);
                self.store.put_token(record).await?;
            }
            known.flushed_ms.store(used, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Keeps the token book in step with the store until `shutdown` turns true: on a store shared
/// by several servers, a token made or revoked on one is known to all within moments.
pub async fn follow(engine: Arc<Engine>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        let changed = engine.signals().tokens.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        tokio::select! {
            () = &mut changed => {}
            _ = shutdown.changed() => return,
        }
        if let Err(error) = engine.reload_tokens().await {
            tracing::warn!(%error, "loading the API tokens again failed");
        }
    }
}
