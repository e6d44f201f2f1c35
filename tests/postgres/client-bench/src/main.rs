//! Tenax's hot PostgreSQL statements on two client crates: tokio-postgres with the
//! deadpool-postgres pool (what Tenax uses), and sqlx's `PgPool`. Each statement is sent as
//! Tenax sends it: prepared once per connection, arrays as parameters, one statement per
//! operation. See README.md.
//!
//! For each round, each client and each concurrency (1 and 8 tasks, a pool of 8):
//! - `insert-1`: single-job enqueues, the shape of a small enqueue's shared commit;
//! - `insert-1000`: batches of 1000 jobs in one `INSERT … SELECT FROM unnest(…)`;
//! - `take-1000`: takes of up to 1000 jobs (`FOR UPDATE SKIP LOCKED`) until none is left;
//! - `complete-1000`: batched completions of everything taken, 1000 at a time.
//!
//! Rounds interleave the clients; the medians of the rounds are printed as a Markdown table.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sqlx::Row as _;

/// Tenax's schema, applied to an empty `public` schema at start.
const MIGRATIONS: [&str; 3] = [
    include_str!("../../../../crates/tenax-postgres/src/migrations/0001_jobs.sql"),
    include_str!("../../../../crates/tenax-postgres/src/migrations/0002_servers.sql"),
    include_str!("../../../../crates/tenax-postgres/src/migrations/0003_facts.sql"),
];

// The statements, as in crates/tenax/src/store/postgres (inserts.rs INSERT_SHARED, leases.rs
// TAKE, transitions.rs COMPLETE) when this was written.

const INSERT: &str = "WITH facts AS (SELECT version FROM tenax_facts),
      stored AS (INSERT INTO tenax_jobs (queue, kind, payload, priority, unique_key,
          created_at, expires_at, origin, parent, traceparent, policy, status, run_at, id)
      SELECT queue, kind, payload, priority, unique_key, created_at, expires_at, origin, parent,
          traceparent, policy, status, run_at, nextval('tenax_job_ids') FROM unnest(
          $1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bigint[],
          $7::bigint[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::smallint[],
          $13::bigint[], $14::bigint[]) AS u(queue, kind, payload, priority, unique_key,
          created_at, expires_at, origin, parent, traceparent, policy, status, run_at, seen)
      WHERE u.seen = (SELECT version FROM facts) RETURNING id)
 SELECT (SELECT version FROM facts), ARRAY(SELECT id FROM stored ORDER BY id)";

const TAKE: &str = "WITH picked AS (
        SELECT r.id FROM unnest($1::text[]) AS q(name)
        CROSS JOIN LATERAL (
            SELECT id, priority FROM tenax_jobs
            WHERE status = 1 AND queue = q.name
            ORDER BY priority DESC, id
            LIMIT $2::bigint
            FOR UPDATE SKIP LOCKED
        ) AS r
        WHERE NOT EXISTS (SELECT 1 FROM tenax_queues c WHERE c.name = q.name AND c.paused)
          AND ($3::bigint IS NULL OR EXISTS (
              SELECT 1 FROM tenax_subscriptions s WHERE s.id = $3::bigint AND s.enabled))
        ORDER BY r.priority DESC, r.id
        LIMIT $2::bigint
    ), taken AS (
        UPDATE tenax_jobs j SET status = 2, lease_token = $4::bigint + j.id,
            lease_expires_at = $5::bigint, taken_at = $6::bigint, claim_id = $7::bigint,
            expires_at = CASE WHEN j.expires_at IS NULL OR $8::bigint IS NULL
                THEN j.expires_at ELSE greatest(j.expires_at, $8::bigint) END
        FROM picked WHERE j.id = picked.id
        RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.failures,
            j.lease_token, j.created_at, j.expires_at, j.parent, j.traceparent
    ), recorded AS (
        INSERT INTO tenax_claims (id, record, over_at)
        SELECT $7::bigint, $9::text, $10::bigint
        WHERE $9::text IS NOT NULL AND EXISTS (SELECT 1 FROM taken)
        ON CONFLICT (id) DO UPDATE SET record = excluded.record, over_at = excluded.over_at
    )
    SELECT * FROM taken";

const COMPLETE: &str = "WITH done AS (
        DELETE FROM tenax_jobs j
        USING unnest($1::bigint[], $2::bigint[]) AS a(id, token)
        WHERE j.id = a.id AND j.lease_token = a.token
        RETURNING j.*
    ), kept AS (
        INSERT INTO tenax_finished (id, queue, kind, payload, priority, unique_key, created_at,
            expires_at, origin, parent, traceparent, policy, status, run_at, failures,
            first_failure_at, last_delay, finished_at, dead_reason, errors, attempts,
            lease_token, lease_expires_at, taken_at, claim_id)
        SELECT id, queue, kind, payload, priority, unique_key, created_at, expires_at,
            origin, parent, traceparent, policy, 3, run_at, failures, first_failure_at,
            last_delay, $3::bigint, dead_reason, errors,
            CASE WHEN $5::text IS NULL THEN attempts ELSE array_append(attempts, $5::text) END,
            NULL, NULL, NULL, NULL
        FROM done WHERE $4::bool
    )
    SELECT id, lease_token FROM done";

const POOL: usize = 8;
const SINGLES: usize = 8_000;
const BATCHES: usize = 300;
const BATCH: usize = 1_000;

/// New jobs, one array per column, as Tenax sends them.
struct Rows {
    queue: Vec<String>,
    kind: Vec<String>,
    payload: Vec<String>,
    priority: Vec<i32>,
    unique_key: Vec<Option<String>>,
    created_at: Vec<i64>,
    expires_at: Vec<Option<i64>>,
    origin: Vec<Option<String>>,
    parent: Vec<Option<i64>>,
    traceparent: Vec<Option<String>>,
    policy: Vec<Option<String>>,
    status: Vec<i16>,
    run_at: Vec<i64>,
    seen: Vec<i64>,
}

impl Rows {
    /// `n` ready jobs, read against facts version 1 (the schema's first).
    fn ready(n: usize) -> Self {
        let now = now_ms();
        Self {
            queue: vec!["bench".to_owned(); n],
            kind: vec!["job".to_owned(); n],
            payload: (0..n)
                .map(|i| format!(r#"{{"n":{i},"pad":"0123456789abcdef"}}"#))
                .collect(),
            priority: vec![0; n],
            unique_key: vec![None; n],
            created_at: vec![now; n],
            expires_at: vec![None; n],
            origin: vec![None; n],
            parent: vec![None; n],
            traceparent: vec![None; n],
            policy: vec![None; n],
            status: vec![1; n],
            run_at: vec![now; n],
            seen: vec![1; n],
        }
    }
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("a time")
}

#[derive(Clone)]
enum Pool {
    TokioPostgres(deadpool_postgres::Pool),
    Sqlx(sqlx::PgPool),
}

impl Pool {
    fn name(&self) -> &'static str {
        match self {
            Pool::TokioPostgres(_) => "tokio-postgres + deadpool",
            Pool::Sqlx(_) => "sqlx PgPool",
        }
    }

    /// Stores `rows`: how many were stored.
    async fn insert(&self, rows: &Rows) -> usize {
        match self {
            Pool::TokioPostgres(pool) => {
                let client = pool.get().await.expect("a connection");
                let statement = client.prepare_cached(INSERT).await.expect("prepared");
                let row = client
                    .query_one(
                        &statement,
                        &[
                            &rows.queue,
                            &rows.kind,
                            &rows.payload,
                            &rows.priority,
                            &rows.unique_key,
                            &rows.created_at,
                            &rows.expires_at,
                            &rows.origin,
                            &rows.parent,
                            &rows.traceparent,
                            &rows.policy,
                            &rows.status,
                            &rows.run_at,
                            &rows.seen,
                        ],
                    )
                    .await
                    .expect("inserted");
                row.get::<_, Vec<i64>>(1).len()
            }
            Pool::Sqlx(pool) => {
                let row = sqlx::query(INSERT)
                    .bind(&rows.queue[..])
                    .bind(&rows.kind[..])
                    .bind(&rows.payload[..])
                    .bind(&rows.priority[..])
                    .bind(&rows.unique_key[..])
                    .bind(&rows.created_at[..])
                    .bind(&rows.expires_at[..])
                    .bind(&rows.origin[..])
                    .bind(&rows.parent[..])
                    .bind(&rows.traceparent[..])
                    .bind(&rows.policy[..])
                    .bind(&rows.status[..])
                    .bind(&rows.run_at[..])
                    .bind(&rows.seen[..])
                    .fetch_one(pool)
                    .await
                    .expect("inserted");
                row.get::<Vec<i64>, _>(1).len()
            }
        }
    }

    /// Takes up to `max` jobs: (id, lease token) each.
    async fn take(&self, max: i64) -> Vec<(i64, i64)> {
        let queues = vec!["bench".to_owned()];
        let now = now_ms();
        let base: i64 = 1 << 40;
        let none: Option<i64> = None;
        let no_text: Option<String> = None;
        match self {
            Pool::TokioPostgres(pool) => {
                let client = pool.get().await.expect("a connection");
                let statement = client.prepare_cached(TAKE).await.expect("prepared");
                client
                    .query(
                        &statement,
                        &[
                            &queues,
                            &max,
                            &none,
                            &base,
                            &(now + 30_000),
                            &now,
                            &none,
                            &none,
                            &no_text,
                            &none,
                        ],
                    )
                    .await
                    .expect("taken")
                    .iter()
                    .map(|row| {
                        let _payload: &str = row.get(3);
                        (row.get(0), row.get(6))
                    })
                    .collect()
            }
            Pool::Sqlx(pool) => sqlx::query(TAKE)
                .bind(&queues[..])
                .bind(max)
                .bind(none)
                .bind(base)
                .bind(now + 30_000)
                .bind(now)
                .bind(none)
                .bind(none)
                .bind(no_text.as_deref())
                .bind(none)
                .fetch_all(pool)
                .await
                .expect("taken")
                .iter()
                .map(|row| {
                    let _payload: &str = row.get(3);
                    (row.get(0), row.get(6))
                })
                .collect(),
        }
    }

    /// Completes the jobs of `leases`, keeping them as finished: how many were completed.
    async fn complete(&self, leases: &[(i64, i64)]) -> usize {
        let ids: Vec<i64> = leases.iter().map(|l| l.0).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
        let now = now_ms();
        let attempt: Option<String> = None;
        match self {
            Pool::TokioPostgres(pool) => {
                let client = pool.get().await.expect("a connection");
                let statement = client.prepare_cached(COMPLETE).await.expect("prepared");
                client
                    .query(&statement, &[&ids, &tokens, &now, &true, &attempt])
                    .await
                    .expect("completed")
                    .len()
            }
            Pool::Sqlx(pool) => sqlx::query(COMPLETE)
                .bind(&ids[..])
                .bind(&tokens[..])
                .bind(now)
                .bind(true)
                .bind(attempt.as_deref())
                .fetch_all(pool)
                .await
                .expect("completed")
                .len(),
        }
    }

    /// Opens every connection of the pool, so that no run pays for connecting.
    async fn warm(&self) {
        join_all((0..POOL).map(|_| async {
            match self {
                Pool::TokioPostgres(pool) => {
                    let client = pool.get().await.expect("a connection");
                    client.simple_query("SELECT 1").await.expect("an answer");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Pool::Sqlx(pool) => {
                    let mut connection = pool.acquire().await.expect("a connection");
                    sqlx::query("SELECT 1")
                        .execute(&mut *connection)
                        .await
                        .expect("an answer");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }))
        .await;
    }
}

/// Runs `work(task)` on `tasks` tasks at once: the wall time and the sum of what they return.
async fn timed<F, Fut>(tasks: usize, work: F) -> (Duration, usize)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = usize> + Send + 'static,
{
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks).map(|task| tokio::spawn(work(task))).collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("a task");
    }
    (started.elapsed(), total)
}

fn rate(done: usize, took: Duration) -> f64 {
    done as f64 / took.as_secs_f64()
}

/// One run of the four workloads with `tasks` tasks: jobs per second of each.
async fn run(pool: &Pool, admin: &tokio_postgres::Client, tasks: usize) -> [f64; 4] {
    // One statement each: VACUUM refuses the transaction that several would make.
    for statement in [
        "TRUNCATE tenax_jobs, tenax_finished",
        "VACUUM ANALYZE tenax_jobs",
    ] {
        admin.batch_execute(statement).await.expect(statement);
    }
    let per_task = SINGLES / tasks;
    let (took, singles) = timed(tasks, |_| {
        let pool = pool.clone();
        async move {
            let one = Rows::ready(1);
            let mut stored = 0;
            for _ in 0..per_task {
                stored += pool.insert(&one).await;
            }
            stored
        }
    })
    .await;
    let insert_1 = rate(singles, took);

    let batch = std::sync::Arc::new(Rows::ready(BATCH));
    let (took, bulk) = timed(tasks, |task| {
        let (pool, batch) = (pool.clone(), batch.clone());
        async move {
            let mut stored = 0;
            for _ in (task..BATCHES).step_by(tasks) {
                stored += pool.insert(&batch).await;
            }
            stored
        }
    })
    .await;
    let insert_1000 = rate(bulk, took);
    admin
        .batch_execute("ANALYZE tenax_jobs")
        .await
        .expect("analysed");

    let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (took, count) = timed(tasks, |_| {
        let (pool, taken) = (pool.clone(), taken.clone());
        async move {
            let mut count = 0;
            loop {
                let leases = pool.take(BATCH as i64).await;
                if leases.is_empty() {
                    break count;
                }
                count += leases.len();
                taken.lock().expect("the list").extend(leases);
            }
        }
    })
    .await;
    assert_eq!(count, singles + bulk, "every job taken once");
    let take_1000 = rate(count, took);

    let leases: Vec<Vec<(i64, i64)>> = std::mem::take(&mut *taken.lock().expect("the list"))
        .chunks(BATCH)
        .map(<[_]>::to_vec)
        .collect();
    let leases = std::sync::Arc::new(leases);
    let (took, completed) = timed(tasks, |task| {
        let (pool, leases) = (pool.clone(), leases.clone());
        async move {
            let mut completed = 0;
            for chunk in leases.iter().skip(task).step_by(tasks) {
                completed += pool.complete(chunk).await;
            }
            completed
        }
    })
    .await;
    assert_eq!(completed, count, "every job completed once");
    let complete_1000 = rate(completed, took);
    [insert_1, insert_1000, take_1000, complete_1000]
}

const WORKLOADS: [&str; 4] = ["insert-1", "insert-1000", "take-1000", "complete-1000"];

#[tokio::main]
async fn main() {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TENAX_PG_URL").ok())
        .expect("the database URL: an argument or TENAX_PG_URL");
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .map(|r| r.parse().expect("ROUNDS: a number"))
        .unwrap_or(3);

    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connected");
    tokio::spawn(connection);
    admin
        .batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        .await
        .expect("an empty schema");
    for migration in MIGRATIONS {
        admin.batch_execute(migration).await.expect("migrated");
    }

    let config: tokio_postgres::Config = url.parse().expect("a URL");
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pools = [
        Pool::TokioPostgres(
            deadpool_postgres::Pool::builder(manager)
                .max_size(POOL)
                .build()
                .expect("a pool"),
        ),
        Pool::Sqlx(
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(u32::try_from(POOL).expect("a size"))
                .connect(&url)
                .await
                .expect("a pool"),
        ),
    ];
    for pool in &pools {
        pool.warm().await;
    }

    // (client, tasks, workload) -> jobs/s of each round.
    let mut results: BTreeMap<(&str, usize, usize), Vec<f64>> = BTreeMap::new();
    for round in 1..=rounds {
        // Interleaved: each round runs both clients, in turn first.
        let order: Vec<&Pool> = if round % 2 == 1 {
            pools.iter().collect()
        } else {
            pools.iter().rev().collect()
        };
        for tasks in [1, 8] {
            for pool in &order {
                let rates = run(pool, &admin, tasks).await;
                println!(
                    "round {round}, {}, {tasks} task(s): {}",
                    pool.name(),
                    WORKLOADS
                        .iter()
                        .zip(rates)
                        .map(|(w, r)| format!("{w} {r:.0}/s"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                for (at, rate) in rates.into_iter().enumerate() {
                    results
                        .entry((pool.name(), tasks, at))
                        .or_default()
                        .push(rate);
                }
            }
        }
    }

    println!();
    println!(
        "| jobs/s (median of {rounds}) | tasks | {} |",
        pools.iter().map(Pool::name).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|---|---|---|");
    for tasks in [1, 8] {
        for (at, workload) in WORKLOADS.iter().enumerate() {
            let cells: Vec<String> = pools
                .iter()
                .map(|pool| format!("{:.0}", median(&results[&(pool.name(), tasks, at)])))
                .collect();
            println!("| {workload} | {tasks} | {} |", cells.join(" | "));
        }
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}
