//! Every statement text the PostgreSQL store can send is prepared against a freshly migrated
//! database, so that a statement that does not parse, names a column the schema lacks, or
//! mixes up its parameters' types fails here rather than in anger.
//!
//! The store lists its statements itself (`store/postgres/statements.rs`): each constant is
//! listed by the macro that declares it, and each built statement (a filter's conditions, a
//! page's direction) with every shape its builder can produce. A builder whose shapes are not
//! listed is caught below: its prefix starts none of them.
//!
//! Skipped (one line on stderr) when there is no PostgreSQL, unless `TENAX_REQUIRE_POSTGRES=1`.

use std::collections::HashSet;

use tenax_postgres::{Database, every_prefix, every_statement, schema};

use crate::common::postgres;

/// What PostgreSQL said of a statement it refused, with where in the text.
fn refusal(error: &tokio_postgres::Error) -> String {
    let Some(db) = error.as_db_error() else {
        return error.to_string();
    };
    let mut said = format!("{}: {}", db.code().code(), db.message());
    if let Some(detail) = db.detail() {
        said.push_str(&format!("; {detail}"));
    }
    if let Some(hint) = db.hint() {
        said.push_str(&format!("; hint: {hint}"));
    }
    if let Some(tokio_postgres::error::ErrorPosition::Original(at)) = db.position() {
        said.push_str(&format!(" (at character {at})"));
    }
    said
}

#[tokio::test]
async fn every_statement_prepares_on_a_migrated_database() {
    let Some(url) = postgres::fresh_database().await else {
        return;
    };
    let database = Database::new(&url, None).expect("the test database's URL");
    let (mut client, connection) = database
        .connect()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e:?}"));
    tokio::spawn(connection);
    schema::migrate(&mut client)
        .await
        .expect("the schema migrates");

    let statements = every_statement();
    let mut refused = Vec::new();
    for (name, text) in &statements {
        if let Err(error) = client.prepare(text).await {
            refused.push(format!("{name}: {}\n{text}", refusal(&error)));
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {} statements do not prepare:\n\n{}",
        refused.len(),
        statements.len(),
        refused.join("\n\n")
    );
    eprintln!("{} statements prepared", statements.len());
}

#[test]
fn every_statement_has_a_name_of_its_own() {
    let mut seen = HashSet::new();
    let twice: Vec<String> = every_statement()
        .into_iter()
        .filter_map(|(name, _)| (!seen.insert(name.clone())).then_some(name))
        .collect();
    assert!(twice.is_empty(), "named twice: {twice:?}");
}

#[test]
fn every_builder_lists_its_shapes() {
    let unlisted: Vec<String> = every_prefix()
        .into_iter()
        .filter(|(_, shapes)| *shapes == 0)
        .map(|(prefix, _)| prefix)
        .collect();
    assert!(
        unlisted.is_empty(),
        "statements are built from these prefixes, but none of their shapes is listed (a \
         module's shapes() is missing from store/postgres/statements.rs, or lists nothing): \
         {unlisted:?}"
    );
}
