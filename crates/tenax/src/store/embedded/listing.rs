//! The listing index of the embedded store: every job's id in one ordered set per (queue, type,
//! status), so that a page of jobs filtered by any of the three starts at its cursor and reads
//! only what it shows (the sets are merged in id order), and a count by them is a sum of set
//! sizes. Types are interned as small numbers: a job's entry holds 4 bytes for its type.
//!
//! Invariant (kept by [`Index`](super::index::Index), which calls [`Listing::add`] and
//! [`Listing::remove`] wherever it places and unplaces an entry): each job's id is in exactly
//! the one set of its current queue, type and status.

use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use crate::model::{JobId, Status};
use crate::store::Order;

/// A job type, interned.
pub type KindId = u32;

/// Which set a job is in.
pub type Group = (Arc<str>, KindId, Status);

#[derive(Debug, Default)]
pub struct Listing {
    sets: HashMap<Group, BTreeSet<JobId>>,
    kinds: HashMap<Box<str>, KindId>,
    kind_names: Vec<Arc<str>>,
}

impl Listing {
    /// The number of a job type, made on first sight.
    pub fn intern_kind(&mut self, kind: &str) -> KindId {
        if let Some(id) = self.kinds.get(kind) {
            return *id;
        }
        let id = KindId::try_from(self.kind_names.len()).unwrap_or(KindId::MAX);
        self.kinds.insert(kind.into(), id);
        self.kind_names.push(Arc::from(kind));
        id
    }

    /// The number of a type some job has had, if any has.
    pub fn kind_id(&self, kind: &str) -> Option<KindId> {
        self.kinds.get(kind).copied()
    }

    pub fn kind_name(&self, id: KindId) -> &str {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.kind_names.get(i))
            .map_or("", |name| name)
    }

    pub fn add(&mut self, group: Group, id: JobId) {
        self.sets.entry(group).or_default().insert(id);
    }

    pub fn remove(&mut self, group: &Group, id: JobId) {
        if let Some(set) = self.sets.get_mut(group) {
            set.remove(&id);
            if set.is_empty() {
                self.sets.remove(group);
            }
        }
    }

    /// The groups `keep` accepts.
    fn groups<'a>(
        &'a self,
        keep: &'a (dyn Fn(&Group) -> bool + 'a),
    ) -> impl Iterator<Item = (&'a Group, &'a BTreeSet<JobId>)> + 'a {
        self.sets.iter().filter(move |(group, _)| keep(group))
    }

    /// How many jobs are in the groups `keep` accepts.
    pub fn count(&self, keep: &dyn Fn(&Group) -> bool) -> u64 {
        self.groups(keep).map(|(_, set)| set.len() as u64).sum()
    }

    /// The ids of the groups `keep` accepts, past `after` in `order`, lazily merged: each step
    /// costs a heap operation over the groups, whatever the number of jobs.
    pub fn ids<'a>(
        &'a self,
        keep: &'a (dyn Fn(&Group) -> bool + 'a),
        after: Option<JobId>,
        order: Order,
    ) -> Merged<'a> {
        let cursors: Vec<Cursor<'a>> = self
            .groups(keep)
            .map(|(_, set)| -> Cursor<'a> {
                match (order, after) {
                    (Order::Ascending, Some(after)) => Box::new(
                        set.range((Bound::Excluded(after), Bound::Unbounded))
                            .copied(),
                    ),
                    (Order::Ascending, None) => Box::new(set.iter().copied()),
                    (Order::Descending, Some(after)) => Box::new(set.range(..after).rev().copied()),
                    (Order::Descending, None) => Box::new(set.iter().rev().copied()),
                }
            })
            .collect();
        Merged::new(cursors, order)
    }
}

type Cursor<'a> = Box<dyn Iterator<Item = JobId> + 'a>;

/// Several id-ordered iterators as one, in `order`.
pub struct Merged<'a> {
    cursors: Vec<Cursor<'a>>,
    /// The head of each cursor, keyed so that the heap's greatest is the next in order.
    heads: BinaryHeap<(u64, usize)>,
    order: Order,
}

impl std::fmt::Debug for Merged<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged")
            .field("cursors", &self.cursors.len())
            .field("order", &self.order)
            .finish()
    }
}

impl<'a> Merged<'a> {
    fn new(mut cursors: Vec<Cursor<'a>>, order: Order) -> Self {
        let mut heads = BinaryHeap::with_capacity(cursors.len());
        for (at, cursor) in cursors.iter_mut().enumerate() {
            if let Some(id) = cursor.next() {
                heads.push((key(id, order), at));
            }
        }
        Self {
            cursors,
            heads,
            order,
        }
    }
}

/// Heap key: the greatest key comes out first.
fn key(id: JobId, order: Order) -> u64 {
    match order {
        Order::Descending => id.0,
        Order::Ascending => u64::MAX - id.0,
    }
}

impl Iterator for Merged<'_> {
    type Item = JobId;

    fn next(&mut self) -> Option<JobId> {
        let (k, at) = self.heads.pop()?;
        let id = match self.order {
            Order::Descending => JobId(k),
            Order::Ascending => JobId(u64::MAX - k),
        };
        if let Some(next) = self.cursors.get_mut(at).and_then(Iterator::next) {
            self.heads.push((key(next, self.order), at));
        }
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_merge_in_id_order_from_the_cursor() {
        let mut listing = Listing::default();
        let (q, r): (Arc<str>, Arc<str>) = (Arc::from("q"), Arc::from("r"));
        let a = listing.intern_kind("a");
        let b = listing.intern_kind("b");
        assert_eq!(listing.intern_kind("a"), a);
        assert_eq!(listing.kind_name(b), "b");
        for (id, group) in [
            (1, (q.clone(), a, Status::Ready)),
            (2, (r.clone(), a, Status::Ready)),
            (3, (q.clone(), b, Status::Dead)),
            (4, (q.clone(), a, Status::Ready)),
            (5, (r.clone(), b, Status::Ready)),
        ] {
            listing.add(group, JobId(id));
        }
        let all = |_: &Group| true;
        let ids = |keep: &dyn Fn(&Group) -> bool, after, order| -> Vec<u64> {
            listing.ids(keep, after, order).map(|id| id.0).collect()
        };
        assert_eq!(ids(&all, None, Order::Ascending), [1, 2, 3, 4, 5]);
        assert_eq!(ids(&all, Some(JobId(4)), Order::Descending), [3, 2, 1]);
        assert_eq!(ids(&all, Some(JobId(2)), Order::Ascending), [3, 4, 5]);
        let ready_q = |g: &Group| *g.0 == *"q" && g.2 == Status::Ready;
        assert_eq!(ids(&ready_q, None, Order::Descending), [4, 1]);
        assert_eq!(listing.count(&ready_q), 2);
        listing.remove(&(q.clone(), b, Status::Dead), JobId(3));
        assert_eq!(listing.count(&all), 4);
        assert_eq!(listing.sets.len(), 3, "an empty set is dropped");
    }
}
