//! Every table of the format, in one list ([`every_table`]), and what is done to all of them at
//! once: copying a store's file into a new one (the scrub of `sealing`, a backup of `backup`),
//! and counting their rows.
//!
//! Invariant: [`every_table`] visits every table [`crate::check_format`] makes, no other, and a
//! copy refuses a file that holds a table it does not visit (it would be lost).

use std::collections::BTreeMap;

use redb::{
    Database, MultimapTableHandle as _, ReadTransaction, ReadableTable, ReadableTableMetadata,
    TableDefinition, TableHandle as _, WriteTransaction,
};
use tenax_core::store::StoreError;

use super::fault;
use super::tables::{
    ATTEMPTS, BATCHES, CHILDREN, COMPLETED, COMPLETED_AT, COMPLETED_COUNTS, COMPLETED_EXPIRING,
    ENDPOINTS, ERRORS, JOBS, META, PAYLOAD_KEY, POLICIES, QUEUES, SCHEDULES, SCRUB_PENDING, STARTS,
    STATES, SUBSCRIPTIONS, TOKENS,
};

/// Something done to each table in turn.
trait Visit {
    fn table<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        table: TableDefinition<K, V>,
    ) -> Result<(), StoreError>;
}

/// Visits every table of the format.
fn every_table(visit: &mut impl Visit) -> Result<(), StoreError> {
    visit.table(JOBS)?;
    visit.table(STATES)?;
    visit.table(POLICIES)?;
    visit.table(ERRORS)?;
    visit.table(QUEUES)?;
    visit.table(SUBSCRIPTIONS)?;
    visit.table(ATTEMPTS)?;
    visit.table(TOKENS)?;
    visit.table(ENDPOINTS)?;
    visit.table(COMPLETED)?;
    visit.table(COMPLETED_AT)?;
    visit.table(COMPLETED_EXPIRING)?;
    visit.table(COMPLETED_COUNTS)?;
    visit.table(META)?;
    visit.table(SCHEDULES)?;
    visit.table(STARTS)?;
    visit.table(CHILDREN)?;
    visit.table(BATCHES)?;
    visit.table(PAYLOAD_KEY)
}

/// The names of every table of the format.
pub(super) fn table_names() -> Vec<String> {
    struct Names(Vec<String>);
    impl Visit for Names {
        fn table<K: redb::Key + 'static, V: redb::Value + 'static>(
            &mut self,
            table: TableDefinition<K, V>,
        ) -> Result<(), StoreError> {
            self.0.push(table.name().to_owned());
            Ok(())
        }
    }
    let mut names = Names(Vec::new());
    let _ = every_table(&mut names);
    names.0
}

/// Copies every table that `from` sees into `to` in one commit, without `meta`'s scrub mark.
/// Refuses a file holding a table it does not know: it would be lost. `what` names the work in
/// errors.
pub(super) fn copy_tables(
    from: &ReadTransaction,
    to: &Database,
    what: &'static str,
) -> Result<(), StoreError> {
    let known = table_names();
    let unknown: Vec<String> = from
        .list_tables()
        .map_err(fault(what))?
        .map(|t| t.name().to_owned())
        .filter(|name| !known.contains(name))
        .chain(
            from.list_multimap_tables()
                .map_err(fault(what))?
                .map(|t| t.name().to_owned()),
        )
        .collect();
    if !unknown.is_empty() {
        return Err(StoreError::Corrupt(format!(
            "the store holds tables this version does not know ({}): it cannot be copied",
            unknown.join(", ")
        )));
    }
    struct Copy<'a> {
        from: &'a ReadTransaction,
        to: &'a WriteTransaction,
        what: &'static str,
    }
    impl Visit for Copy<'_> {
        fn table<K: redb::Key + 'static, V: redb::Value + 'static>(
            &mut self,
            table: TableDefinition<K, V>,
        ) -> Result<(), StoreError> {
            let what = self.what;
            let source = match self.from.open_table(table) {
                Ok(source) => source,
                // A table the file has not made yet has no rows to copy.
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
                Err(e) => return Err(fault(what)(e)),
            };
            let mut target = self.to.open_table(table).map_err(fault(what))?;
            for row in source.iter().map_err(fault(what))? {
                let (key, value) = row.map_err(fault(what))?;
                target
                    .insert(key.value(), value.value())
                    .map_err(fault(what))?;
            }
            Ok(())
        }
    }
    let write = to.begin_write().map_err(fault(what))?;
    every_table(&mut Copy {
        from,
        to: &write,
        what,
    })?;
    write
        .open_table(META)
        .map_err(fault(what))?
        .remove(SCRUB_PENDING)
        .map_err(fault(what))?;
    write.commit().map_err(fault(what))
}

/// How many rows each table of the format holds, by name (a table not made yet: 0).
pub(super) fn row_counts(tx: &ReadTransaction) -> Result<BTreeMap<String, u64>, StoreError> {
    struct Count<'a> {
        tx: &'a ReadTransaction,
        counts: BTreeMap<String, u64>,
    }
    impl Visit for Count<'_> {
        fn table<K: redb::Key + 'static, V: redb::Value + 'static>(
            &mut self,
            table: TableDefinition<K, V>,
        ) -> Result<(), StoreError> {
            let what = "counting the store's rows";
            let rows = match self.tx.open_table(table) {
                Ok(opened) => opened.len().map_err(fault(what))?,
                Err(redb::TableError::TableDoesNotExist(_)) => 0,
                Err(e) => return Err(fault(what)(e)),
            };
            self.counts.insert(table.name().to_owned(), rows);
            Ok(())
        }
    }
    let mut count = Count {
        tx,
        counts: BTreeMap::new(),
    };
    every_table(&mut count)?;
    Ok(count.counts)
}

#[cfg(test)]
mod tests {
    use redb::ReadableDatabase as _;

    use super::*;
    use crate::{EmbeddedOptions, EmbeddedStore};

    /// A table added to the format but not to [`every_table`] would be lost by a copy.
    #[test]
    fn the_copy_visits_every_table_of_the_format() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            EmbeddedStore::open(dir.path(), &EmbeddedOptions::default(), 100).expect("opens");
        store.writer.shutdown();
        let tx = store.db.begin_read().unwrap();
        let mut found: Vec<String> = tx
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_owned())
            .collect();
        found.sort();
        let mut copied = table_names();
        copied.sort();
        assert_eq!(found, copied);
        assert_eq!(tx.list_multimap_tables().unwrap().count(), 0);
    }
}
