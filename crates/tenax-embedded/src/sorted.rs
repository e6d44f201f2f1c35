//! A commit's blind writes to the job tables, gathered and written in key order.
//!
//! A blind write sets or removes a row without reading the table first (a job's body at
//! enqueue, its state at a transition, its completed rows). Blind writes to different keys
//! commute, and of several to one key only the last counts, so a commit may gather them and
//! write each table's once, sorted: through one redb cursor for a run of neighbouring keys, and
//! one `retain_in` pass for a run of neighbouring removals, instead of a descent from the root
//! and a rewrite of the leaf for every row. Measured on a table of a million rows, removing a
//! thousand neighbouring rows and adding a thousand in order costs 0.45 µs a job this way and
//! 1.6 µs row by row.
//!
//! The invariant that keeps this exact: an op that reads one of these tables, or writes it
//! other than blindly, has the gathered writes flushed first (see `ops`), so it sees the table
//! as applying the ops one by one would have left it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Bound;

use redb::{Key, Table, Value};

/// The longest walk past rows already in the table between two written keys before the cursor
/// seeks afresh (a seek costs about as much as a walk of this many rows).
const MAX_WALK: usize = 8;

/// The widest gap between two removed ids that one `retain_in` pass spans (it visits every row
/// in between).
const MAX_REMOVAL_GAP: u64 = 8;

/// A table's writes in key order, each key once: the rows to set, and the keys to remove.
pub type Sorted<K, V> = (Vec<(K, V)>, Vec<K>);

/// Blind writes to one table, in the order they were made: a value sets the key, `None`
/// removes it.
#[derive(Debug)]
pub struct Writes<K, V> {
    rows: Vec<(K, Option<V>)>,
}

impl<K, V> Default for Writes<K, V> {
    fn default() -> Self {
        Self { rows: Vec::new() }
    }
}

impl<K: Ord, V> Writes<K, V> {
    pub fn put(&mut self, key: K, value: V) {
        self.rows.push((key, Some(value)));
    }

    pub fn remove(&mut self, key: K) {
        self.rows.push((key, None));
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The writes in key order, each key's last only; leaves this empty.
    pub fn take_sorted(&mut self) -> Sorted<K, V> {
        let mut rows = std::mem::take(&mut self.rows);
        // Stable: a key's writes stay in the order they were made, the last last.
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let mut last: Vec<(K, Option<V>)> = Vec::with_capacity(rows.len());
        for row in rows {
            match last.last_mut() {
                Some(previous) if previous.0 == row.0 => *previous = row,
                _ => last.push(row),
            }
        }
        let mut puts = Vec::with_capacity(last.len());
        let mut removals = Vec::new();
        for (key, value) in last {
            match value {
                Some(value) => puts.push((key, value)),
                None => removals.push(key),
            }
        }
        (puts, removals)
    }
}

/// Sets each of `rows` (sorted by key, each key once) in `table`, replacing a row there.
pub fn put_sorted<'r, K, V, KB, VB>(
    table: &mut Table<'_, K, V>,
    rows: impl IntoIterator<Item = (KB, VB)>,
) -> Result<(), redb::Error>
where
    K: Key + 'static,
    V: Value + 'static,
    KB: Borrow<K::SelfType<'r>>,
    VB: Borrow<V::SelfType<'r>>,
{
    let mut rows = rows.into_iter().peekable();
    while let Some((first, _)) = rows.peek() {
        let mut cursor = table.lower_bound_mut(Bound::Included(first.borrow()))?;
        // The cursor sits in the gap before the first row at or after the next key.
        while let Some((key, _)) = rows.peek() {
            let mut walked = 0;
            let found = loop {
                let order = match cursor.peek_next()? {
                    None => Ordering::Greater,
                    Some((there, _)) => K::compare(
                        K::as_bytes(&there.value()).as_ref(),
                        K::as_bytes(key.borrow()).as_ref(),
                    ),
                };
                if order != Ordering::Less || walked == MAX_WALK {
                    break order;
                }
                cursor.next()?;
                walked += 1;
            };
            match found {
                // Far from the last key: seek to this one afresh.
                Ordering::Less => break,
                Ordering::Equal => drop(cursor.remove_next()?),
                Ordering::Greater => {}
            }
            let Some((key, value)) = rows.next() else {
                break;
            };
            cursor.insert_before(key.borrow(), value.borrow())?;
        }
        cursor.close()?;
    }
    Ok(())
}

/// Removes each of `ids` (sorted, each once) from `table` where it is there: a run of
/// neighbouring ids in one pass.
pub fn remove_sorted<V: Value + 'static>(
    table: &mut Table<'_, u64, V>,
    ids: &[u64],
) -> Result<(), redb::Error> {
    let mut rest = ids;
    while let Some(&first) = rest.first() {
        let run = rest
            .windows(2)
            .position(|pair| pair[1] - pair[0] > MAX_REMOVAL_GAP)
            .map_or(rest.len(), |end| end + 1);
        let (ids, after) = rest.split_at(run);
        rest = after;
        if let [id] = ids {
            table.remove(*id)?;
            continue;
        }
        let last = ids[ids.len() - 1];
        let mut next = ids.iter().peekable();
        table.retain_in(first..=last, |id, _| {
            while next.next_if(|&&removed| removed < id).is_some() {}
            next.next_if_eq(&&id).is_none()
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use redb::{
        Database, ReadableDatabase, ReadableTable, TableDefinition, backends::InMemoryBackend,
    };

    use super::*;

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    const PAIRS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("pairs");

    /// A tiny deterministic generator, so a failure names its seed.
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    fn memory_db() -> Database {
        Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .expect("database")
    }

    /// Random writes, gathered and written sorted, leave the table exactly as writing them one
    /// by one leaves a map: neighbours, far keys, overwrites, removals of rows there and not.
    #[test]
    fn gathered_writes_match_writes_one_by_one() {
        for seed in 0..200 {
            let mut rng = Lcg(seed);
            let db = memory_db();
            let mut model = BTreeMap::new();
            for _round in 0..4 {
                let tx = db.begin_write().expect("tx");
                {
                    let mut table = tx.open_table(T).expect("table");
                    let mut writes = Writes::default();
                    let span = match rng.below(3) {
                        0 => 16,
                        1 => 300,
                        _ => 100_000,
                    };
                    for _ in 0..rng.below(400) {
                        let key = rng.below(span);
                        if rng.below(3) == 0 {
                            writes.remove(key);
                            model.remove(&key);
                        } else {
                            let value = rng.below(1_000);
                            writes.put(key, value);
                            model.insert(key, value);
                        }
                    }
                    let (puts, removals) = writes.take_sorted();
                    remove_sorted(&mut table, &removals).expect("removed");
                    put_sorted(&mut table, puts).expect("put");
                }
                tx.commit().expect("commit");
            }
            let tx = db.begin_read().expect("read");
            let table = tx.open_table(T).expect("table");
            let rows: BTreeMap<u64, u64> = table
                .iter()
                .expect("iter")
                .map(|row| {
                    let (k, v) = row.expect("row");
                    (k.value(), v.value())
                })
                .collect();
            assert_eq!(rows, model, "seed {seed}");
        }
    }

    /// Keys of two parts and borrowed values: a run inside one queue's range, between rows
    /// already there, and a replaced row.
    #[test]
    fn tuple_keys_go_between_rows_already_there() {
        let db = memory_db();
        let write = |rows: Vec<((&str, u64), &[u8])>| {
            let tx = db.begin_write().expect("tx");
            {
                let mut table = tx.open_table(PAIRS).expect("table");
                put_sorted(&mut table, rows).expect("put");
            }
            tx.commit().expect("commit");
        };
        write(vec![(("a", 1), b"1"), (("a", 5), b"5"), (("b", 2), b"2")]);
        write(vec![
            (("a", 2), b"2"),
            (("a", 5), b"five"),
            (("a", 9), b"9"),
            (("c", 1), b"1"),
        ]);
        let tx = db.begin_read().expect("read");
        let table = tx.open_table(PAIRS).expect("table");
        let rows: Vec<(String, u64, Vec<u8>)> = table
            .iter()
            .expect("iter")
            .map(|row| {
                let (k, v) = row.expect("row");
                let (queue, id) = k.value();
                (queue.to_owned(), id, v.value().to_vec())
            })
            .collect();
        let expected: Vec<(String, u64, Vec<u8>)> = [
            ("a", 1, &b"1"[..]),
            ("a", 2, b"2"),
            ("a", 5, b"five"),
            ("a", 9, b"9"),
            ("b", 2, b"2"),
            ("c", 1, b"1"),
        ]
        .into_iter()
        .map(|(q, id, v)| (q.to_owned(), id, v.to_vec()))
        .collect();
        assert_eq!(rows, expected);
    }
}
