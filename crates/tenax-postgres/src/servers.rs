//! The servers sharing the database: each writes its row every [`BEAT`], with what it says of
//! itself (`about`: its version, start, address, lead and workers, as JSON); those seen within
//! [`alive!`] are counted, so that a limit set for the whole cluster can be shared among them
//! (see [`tenax_core::store::StoreLifecycle::servers`]), and listed with what they said
//! ([`ServerStore`]). Rows of servers gone a minute are removed by whichever server sees them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tenax_core::clock::UnixMs;
use tenax_core::model::{LiveServer, ServerAbout};
use tenax_core::store::{DescribeServer, ServerStore, StoreError, to_json_bytes};

use super::filter::Query;
use super::rows::{unid, untime};
use super::statements::{Text, prefixes, statements};
use super::transitions::{execute, query};
use super::{Pool, PostgresStore, fault};

/// How this server describes itself, once the engine has said ([`ServerStore::describe_server`]).
#[derive(Clone, Default)]
pub struct Describing(Arc<Mutex<Option<DescribeServer>>>);

impl Describing {
    /// What this server says of itself now, as its row holds it (JSON); `None` until the engine
    /// has said how. Asked without the lock held: describing takes locks of its own.
    fn text(&self) -> Option<String> {
        let describe = self.0.lock().clone();
        describe.map(|describe| String::from_utf8(to_json_bytes(&describe())).unwrap_or_default())
    }
}

impl std::fmt::Debug for Describing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let given = self.0.lock().is_some();
        f.debug_struct("Describing").field("given", &given).finish()
    }
}

/// How often a server writes its row.
pub const BEAT: Duration = Duration::from_secs(1);
/// A server not seen for this long is not counted, and if it leads, its lead is ended.
/// Keep in step with docs/postgres.md.
macro_rules! alive {
    () => {
        "5 seconds"
    };
}
pub(crate) use alive;

/// What the lead's session calls itself, followed by the server's id, so that the others can
/// tell whose session holds the lead.
macro_rules! lead_session {
    () => {
        "tenax-lead "
    };
}

/// Where the server's id starts in the lead's session name, counting from 1 (as `substr`
/// does): just past [`lead_session!`].
macro_rules! lead_session_id_at {
    () => {
        "12"
    };
}
const _: () = assert!(lead_session!().len() + 1 == 12);

/// Writes this server's row, with what it says of itself, and counts the live servers into
/// `count`, every [`BEAT`].
pub async fn beat(pool: Pool, server: i64, count: Arc<AtomicUsize>, describing: Describing) {
    let mut ticks = tokio::time::interval(BEAT);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match once(&pool, server, describing.text().as_deref()).await {
            Ok(live) => count.store(live.max(1), Ordering::Relaxed),
            Err(error) => {
                tracing::debug!(%error, "counting the servers failed; keeping the last count");
            }
        }
    }
}

async fn once(pool: &Pool, server: i64, about: Option<&str>) -> Result<usize, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    execute(&client, &SEEN, &[&server, &about])
        .await
        .map_err(|e| super::fault("writing this server's row")(e).to_string())?;
    let rows = query(&client, &COUNT_LIVE, &[])
        .await
        .map_err(|e| super::fault("counting the servers")(e).to_string())?;
    Ok(rows
        .first()
        .and_then(|r| usize::try_from(r.get::<_, i64>(0)).ok())
        .unwrap_or(1))
}

/// Removes this server's row: it is gone at once rather than after [`alive!`].
pub async fn leave(pool: &Pool, server: i64) {
    if let Ok(client) = pool.get().await {
        let _ = execute(&client, &LEAVE, &[&server]).await;
    }
}

/// How many servers wrote their row within [`alive!`]: the servers using the database now.
pub async fn live(client: &tokio_postgres::Client) -> Result<usize, tenax_core::store::StoreError> {
    let row = client
        .query_one(LIVE.text(), &[])
        .await
        .map_err(super::fault("counting the servers"))?;
    Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

#[async_trait]
impl ServerStore for PostgresStore {
    fn describe_server(&self, describe: DescribeServer) {
        *self.describing.0.lock() = Some(describe);
    }

    /// A row whose `about` does not read (written by a later version in a shape this one does
    /// not know) is listed without it, rather than failing the list.
    async fn live_servers(&self, _now_ms: UnixMs) -> Result<Vec<LiveServer>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &LIST_LIVE, &[])
            .await
            .map_err(fault("listing the servers"))?;
        let mut servers: Vec<LiveServer> = rows
            .iter()
            .map(|row| {
                let server: i64 = row.get(0);
                let about = row.get::<_, Option<&str>>(2).and_then(|text| {
                    serde_json::from_str::<ServerAbout>(text)
                        .map_err(|error| {
                            tracing::debug!(server, %error, "a server's row says what this one cannot read");
                        })
                        .ok()
                });
                LiveServer {
                    id: unid(server),
                    this: server == self.server,
                    seen_at_ms: untime(row.get(1)),
                    about,
                }
            })
            .collect();
        // By id as the seam names it (unsigned), not as the column orders it (signed).
        servers.sort_by_key(|s| s.id);
        Ok(servers)
    }
}

/// Names the lead's session after `server` (see [`unseat_silent_leader`]).
pub async fn name_lead_session(
    client: &tokio_postgres::Client,
    server: i64,
) -> Result<(), tenax_core::store::StoreError> {
    client
        .simple_query(lead_session_name(server).text())
        .await
        .map_err(super::fault("naming the lead's session"))?;
    Ok(())
}

/// Ends the session holding the advisory lock `lock` in this database (advisory locks are per
/// database: another database's holder leads another cluster) when it is a lead's session
/// whose server has not written its row within [`alive!`]: the server was paused, or lost
/// PostgreSQL while PostgreSQL kept its session (a partition leaves a session open until TCP
/// gives up on it, which takes hours with the default keepalives). Answers the id of the
/// server whose lead was ended.
///
/// Safe if the silent server comes back: its session is gone, so its next check finds it has
/// lost the lead; a maintenance pass it was in the middle of is safe beside the new leader's,
/// as every maintenance step claims its rows (`FOR UPDATE SKIP LOCKED`, schedule revisions).
pub async fn unseat_silent_leader(
    client: &tokio_postgres::Client,
    lock: i64,
) -> Result<Option<String>, tenax_core::store::StoreError> {
    let rows = client
        .query(UNSEAT_SILENT_LEADER.text(), &[&lock])
        .await
        .map_err(super::fault("looking for a silent leader"))?;
    Ok(rows.first().map(|row| row.get(0)))
}

/// The statement that names the lead's session after `server` (a literal: `SET` takes no
/// parameters).
fn lead_session_name(server: i64) -> Query {
    let mut statement = Query::new(NAME_LEAD_SESSION);
    statement.push(&format!("{server}'"));
    statement
}

/// Every statement this module builds: the lead session's name, for a negative and a
/// positive id (ids are random 64 bits; the text differs only by the number).
pub(super) fn shapes() -> Vec<(String, Query)> {
    [i64::MIN, i64::MAX]
        .into_iter()
        .map(|server| (server.to_string(), lead_session_name(server)))
        .collect()
}

prefixes! {
    NAME_LEAD_SESSION = concat!("SET application_name = '", lead_session!());
}

statements! {
    /// Writes this server's row (`$1`) and what it says of itself (`$2`, JSON).
    SEEN = "INSERT INTO tenax_servers (id, seen_at, about) VALUES ($1, now(), $2)
         ON CONFLICT (id) DO UPDATE SET seen_at = now(), about = EXCLUDED.about";
    /// Forgets servers gone a minute, and counts those seen within [`alive!`].
    COUNT_LIVE = concat!(
        "WITH gone AS (
                 DELETE FROM tenax_servers WHERE seen_at < now() - interval '1 minute'
             )
             SELECT count(*) FROM tenax_servers WHERE seen_at > now() - interval '",
        alive!(),
        "'"
    );
    LEAVE = "DELETE FROM tenax_servers WHERE id = $1";
    /// The servers seen within [`alive!`]: when each was seen (ms, the database's clock) and
    /// what it says of itself.
    LIST_LIVE = concat!(
        "SELECT id, (extract(epoch FROM seen_at) * 1000)::bigint, about FROM tenax_servers
         WHERE seen_at > now() - interval '",
        alive!(),
        "'"
    );
    LIVE = concat!(
        "SELECT count(*) FROM tenax_servers WHERE seen_at > now() - interval '",
        alive!(),
        "'"
    );
    /// Ends the session holding advisory lock `$1` when it is a lead's session whose server
    /// has not been seen within [`alive!`]; answers that server's id.
    UNSEAT_SILENT_LEADER = concat!(
        "WITH holder AS (
                     SELECT l.pid,
                            CASE WHEN a.application_name ~ '^",
        lead_session!(),
        "-?[0-9]+$'
                                 THEN substr(a.application_name, ",
        lead_session_id_at!(),
        ")
                            END AS server
                     FROM pg_locks l
                     JOIN pg_stat_activity a ON a.pid = l.pid
                     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                       AND l.database = (
                           SELECT oid FROM pg_database WHERE datname = current_database()
                       )
                       AND l.classid::bigint = ($1::bigint >> 32)
                       AND l.objid::bigint = ($1::bigint & 4294967295)
                 )
                 SELECT h.server, pg_terminate_backend(h.pid)
                 FROM holder h
                 WHERE h.server IS NOT NULL
                   AND NOT EXISTS (
                       SELECT 1 FROM tenax_servers t
                       WHERE t.id::text = h.server AND t.seen_at > now() - interval '",
        alive!(),
        "'
                   )"
    );
}
