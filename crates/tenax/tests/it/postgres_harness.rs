//! The PostgreSQL test harness (`tests/it/common/postgres.rs`) checked on its own: fresh
//! databases are distinct and usable, and a restart of a private cluster breaks old connections
//! and keeps committed data. On a cluster of the suite's own ([`POSTGRES`]), which the restart
//! must not take from under any other suite's tests.
//!
//! Skipped (one line on stderr) when there is no PostgreSQL, unless `TENAX_REQUIRE_POSTGRES=1`.

use tokio_postgres::{Client, NoTls};

use crate::common::postgres;

/// The restart breaks every connection to the server: the tests of this suite take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// This suite's own PostgreSQL, the one it restarts.
static POSTGRES: postgres::OwnCluster = postgres::OwnCluster::new();

/// A connection to `url`, its connection task on the test's runtime.
async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e:?}"));
    tokio::spawn(connection);
    client
}

/// The values of `x` in table `t`, in order.
async fn values(client: &Client) -> Vec<i32> {
    client
        .query("SELECT x FROM t ORDER BY x", &[])
        .await
        .expect("SELECT from t")
        .iter()
        .map(|row| row.get::<_, i32>(0))
        .collect()
}

/// The name of the database `client` is connected to.
async fn current_database(client: &Client) -> String {
    client
        .query_one("SELECT current_database()", &[])
        .await
        .expect("SELECT current_database()")
        .get(0)
}

#[tokio::test]
async fn fresh_databases_are_distinct_and_usable() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some(first) = POSTGRES.fresh_database().await else {
        return;
    };
    let second = POSTGRES
        .fresh_database()
        .await
        .expect("a second fresh database");
    assert_ne!(first, second, "two fresh databases have the same URL");

    let a = connect(&first).await;
    let b = connect(&second).await;
    let (name_a, name_b) = (current_database(&a).await, current_database(&b).await);
    assert_ne!(name_a, name_b, "two fresh databases are one database");
    assert!(
        name_a.starts_with("tenax_test_"),
        "unexpected database name {name_a}"
    );

    a.batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2), (3)")
        .await
        .expect("CREATE TABLE and INSERT in the first database");
    b.batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (10)")
        .await
        .expect("CREATE TABLE and INSERT in the second database");
    assert_eq!(values(&a).await, [1, 2, 3]);
    assert_eq!(values(&b).await, [10]);

    // Fresh means empty: no table of the others.
    let third = POSTGRES
        .fresh_database()
        .await
        .expect("a third fresh database");
    let c = connect(&third).await;
    let tables: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .await
        .expect("count the tables")
        .get(0);
    assert_eq!(tables, 0, "a fresh database has tables");
}

#[tokio::test]
async fn a_restart_breaks_connections_and_keeps_committed_data() {
    let _turn = ONE_AT_A_TIME.lock().await;
    if std::env::var_os("TENAX_TEST_DATABASE_URL").is_some() {
        eprintln!(
            "SKIPPED: restart_server() needs the private cluster; TENAX_TEST_DATABASE_URL is set"
        );
        return;
    }
    let Some(url) = POSTGRES.fresh_database().await else {
        return;
    };
    let before = connect(&url).await;
    before
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (7), (8)")
        .await
        .expect("CREATE TABLE and INSERT before the restart");

    POSTGRES.restart_server().await;

    assert!(
        before.simple_query("SELECT 1").await.is_err(),
        "a connection made before the restart still answers after it"
    );
    let after = connect(&url).await;
    assert_eq!(
        values(&after).await,
        [7, 8],
        "committed data did not survive the restart"
    );
    after
        .batch_execute("INSERT INTO t VALUES (9)")
        .await
        .expect("INSERT after the restart");
    assert_eq!(values(&after).await, [7, 8, 9]);
}
