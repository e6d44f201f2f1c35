//! The connection table: which connections are open, from which client, and what to do when a
//! new one would pass `--max-connections` or its client's `--max-connections-per-address`.
//!
//! The server makes room rather than refusing everyone: a new connection that finds the table
//! (or its client's share of it) full takes the place of the connection least likely to be
//! missed: first the oldest that has not begun a request (silent, or still in its handshake or
//! first head), then the one idle the longest. Only when every connection in its way has a
//! request in flight is it not served: past the client's share it is closed at once (that
//! client holds its share with work in progress), and past the table's size the accept loop
//! stops accepting until a connection ends or goes idle, so new ones wait in the kernel's
//! backlog.
//!
//! A client is an IPv4 address, or an IPv6 /64 (one host commonly holds a whole /64); an
//! IPv4-mapped IPv6 address is its IPv4 address.
//!
//! Invariants: the table holds at most `max` connections and at most `per_address` of any one
//! client; a connection is counted from its admission until it ends or is evicted, whichever
//! comes first (an evicted connection closes within its close grace, outside the count).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::activity::{Activity, Standing};

/// At most one warning this often about a full table or a full share, so that a flood of
/// connections does not become a flood of log lines.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Wakes the accept loop when it waits for room and a connection ends or goes idle.
#[derive(Debug, Default)]
pub(super) struct Room {
    waiting: AtomicBool,
    notify: Notify,
}

impl Room {
    /// A connection ended or has nothing in flight any more.
    pub(super) fn made(&self) {
        if self.waiting.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }
}

/// The accept loop waits for room while this lives.
struct Waiting<'a>(&'a Room);

impl<'a> Waiting<'a> {
    fn start(room: &'a Room) -> Self {
        room.waiting.store(true, Ordering::SeqCst);
        Self(room)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.store(false, Ordering::SeqCst);
    }
}

/// Whom a connection counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    V4(Ipv4Addr),
    /// The first 64 bits.
    V6(u64),
}

impl Client {
    fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4),
                None => Self::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// The table of open connections.
#[derive(Debug)]
pub(super) struct Slots {
    max: usize,
    per_address: usize,
    table: Mutex<Table>,
    room: Arc<Room>,
    last_warning: Mutex<Option<Instant>>,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    /// By admission order, so the first unserved one met is the oldest.
    open: BTreeMap<u64, Entry>,
    held: HashMap<Client, usize>,
}

#[derive(Debug)]
struct Entry {
    client: Client,
    activity: Arc<Activity>,
}

/// What became of a new connection.
#[derive(Debug)]
pub(super) enum Admission {
    Admitted(Slot),
    /// Its client holds its whole share with requests in flight.
    Refused,
    /// The table is full of connections with requests in flight: wait for [`Slots::room`],
    /// and ask again.
    Full,
}

/// A connection's place in the table, given up when dropped.
#[derive(Debug)]
pub(super) struct Slot {
    id: u64,
    activity: Arc<Activity>,
    slots: Arc<Slots>,
}

impl Slot {
    pub(super) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(self.id);
        self.slots.room.made();
    }
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if let Some(held) = self.held.get_mut(&entry.client) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(&entry.client);
            }
        }
        Some(entry)
    }

    /// The connection to close to make room, among those `of` accepts: the oldest unserved
    /// one, else the one idle the longest; none when all have requests in flight.
    fn victim(&self, of: impl Fn(Client) -> bool) -> Option<u64> {
        let mut idlest: Option<(Instant, u64)> = None;
        for (id, entry) in &self.open {
            if !of(entry.client) {
                continue;
            }
            match entry.activity.standing() {
                Standing::Unserved => return Some(*id),
                Standing::Idle(since) if idlest.is_none_or(|(s, _)| since < s) => {
                    idlest = Some((since, *id));
                }
                Standing::Idle(_) | Standing::Busy => {}
            }
        }
        idlest.map(|(_, id)| id)
    }

    fn evict(&mut self, id: u64) {
        if let Some(entry) = self.remove(id) {
            entry.activity.evict();
        }
    }
}

impl Slots {
    /// A table of at most `max` connections, at most `per_address` of them from one client.
    pub(super) fn new(max: usize, per_address: usize) -> Arc<Self> {
        let max = max.max(1);
        Arc::new(Self {
            max,
            per_address: per_address.clamp(1, max),
            table: Mutex::new(Table::default()),
            room: Arc::new(Room::default()),
            last_warning: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock leaves the table consistent (every change is one
        // step), so a poisoned lock is used as it is.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many connections are open.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Completes when a new connection could be admitted: the table has a free place, or a
    /// connection it may close.
    pub(super) async fn room(&self) {
        while !self.has_room() {
            // Told of every change after `waiting` is set, so none between the look and the
            // wait is missed; `waiting` is cleared however the wait ends (this future may be
            // dropped by the accept loop's other branches).
            let notified = self.room.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let _waiting = Waiting::start(&self.room);
            if !self.has_room() {
                notified.await;
            }
        }
    }

    fn has_room(&self) -> bool {
        let table = self.lock();
        table.open.len() < self.max || table.victim(|_| true).is_some()
    }

    /// Admits a connection from `peer` accepted at `accepted`, closing another to make room
    /// if it must.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr, accepted: Instant) -> Admission {
        let client = Client::of(peer);
        let mut table = self.lock();
        if table.held.get(&client).copied().unwrap_or(0) >= self.per_address {
            let Some(victim) = table.victim(|c| c == client) else {
                drop(table);
                self.warn(|| {
                    tracing::warn!(
                        client = %peer,
                        per_address = self.per_address,
                        "a client holds its whole share of connections with requests in \
                         flight (--max-connections-per-address): refusing its new ones"
                    );
                });
                return Admission::Refused;
            };
            table.evict(victim);
            tracing::debug!(client = %peer, "closed a silent or idle connection of the same client to admit a new one");
        } else if table.open.len() >= self.max {
            // The accept loop waited for room before accepting, but it may have gone since.
            let Some(victim) = table.victim(|_| true) else {
                return Admission::Full;
            };
            table.evict(victim);
            self.warn(|| {
                tracing::warn!(
                    max = self.max,
                    "--max-connections reached: closing the oldest silent or idle \
                     connections to admit new ones"
                );
            });
        }
        let id = table.next;
        table.next += 1;
        let activity = Arc::new(Activity::new(accepted, self.room.clone()));
        table.open.insert(
            id,
            Entry {
                client,
                activity: activity.clone(),
            },
        );
        *table.held.entry(client).or_insert(0) += 1;
        Admission::Admitted(Slot {
            id,
            activity,
            slots: self.clone(),
        })
    }

    fn warn(&self, log: impl FnOnce()) {
        let now = Instant::now();
        let mut last = self
            .last_warning
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_none_or(|at| now.duration_since(at) >= WARN_EVERY) {
            *last = Some(now);
            log();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn admitted(admission: Admission) -> Slot {
        match admission {
            Admission::Admitted(slot) => slot,
            Admission::Refused | Admission::Full => panic!("not admitted"),
        }
    }

    fn evicted(slot: &Slot) -> bool {
        slot.activity.was_evicted()
    }

    #[test]
    fn clients_are_ipv4_addresses_or_ipv6_prefixes() {
        assert_eq!(
            Client::of(ip("10.0.0.1")),
            Client::of(ip("::ffff:10.0.0.1"))
        );
        assert_ne!(Client::of(ip("10.0.0.1")), Client::of(ip("10.0.0.2")));
        assert_eq!(
            Client::of(ip("2001:db8:1:2::1")),
            Client::of(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            Client::of(ip("2001:db8:1:2::1")),
            Client::of(ip("2001:db8:1:3::1"))
        );
    }

    #[test]
    fn a_full_table_closes_the_oldest_unserved_then_the_idlest() {
        let slots = Slots::new(3, 3);
        let t0 = Instant::now();
        let a = admitted(slots.admit(ip("10.0.0.1"), t0));
        let b = admitted(slots.admit(ip("10.0.0.2"), t0));
        let c = admitted(slots.admit(ip("10.0.0.3"), t0));
        // a is busy, b idle since 1 s, c idle since 2 s: b goes first, then c.
        let _busy = a.activity().begin();
        b.activity().begin().end_at(t0 + Duration::from_secs(1));
        c.activity().begin().end_at(t0 + Duration::from_secs(2));
        let d = admitted(slots.admit(ip("10.0.0.4"), t0));
        assert!(evicted(&b) && !evicted(&c) && !evicted(&a));
        // d is unserved, so it goes before the idle c.
        let _e = admitted(slots.admit(ip("10.0.0.5"), t0));
        assert!(evicted(&d) && !evicted(&c));
        assert_eq!(slots.open(), 3);
        drop(b);
        assert_eq!(slots.open(), 3, "an evicted slot is not counted twice");
    }

    #[test]
    fn a_client_past_its_share_takes_only_its_own_places() {
        let slots = Slots::new(10, 2);
        let now = Instant::now();
        let other = admitted(slots.admit(ip("10.0.0.9"), now));
        let a1 = admitted(slots.admit(ip("10.0.0.1"), now));
        let a2 = admitted(slots.admit(ip("10.0.0.1"), now));
        let a3 = admitted(slots.admit(ip("10.0.0.1"), now));
        assert!(evicted(&a1) && !evicted(&a2) && !evicted(&other));
        let _w2 = a2.activity().begin();
        let _w3 = a3.activity().begin();
        assert!(matches!(
            slots.admit(ip("10.0.0.1"), now),
            Admission::Refused
        ));
        let _b = admitted(slots.admit(ip("10.0.0.2"), now));
        assert!(!evicted(&other));
    }

    #[test]
    fn a_table_full_of_busy_connections_admits_none() {
        let slots = Slots::new(2, 2);
        let now = Instant::now();
        let a = admitted(slots.admit(ip("10.0.0.1"), now));
        let b = admitted(slots.admit(ip("10.0.0.2"), now));
        let _wa = a.activity().begin();
        let wb = b.activity().begin();
        assert!(matches!(slots.admit(ip("10.0.0.3"), now), Admission::Full));
        drop(wb);
        let _c = admitted(slots.admit(ip("10.0.0.3"), now));
        assert!(evicted(&b) && !evicted(&a));
    }

    #[tokio::test]
    async fn the_accept_loop_waits_while_every_connection_is_busy() {
        let slots = Slots::new(1, 1);
        let a = admitted(slots.admit(ip("10.0.0.1"), Instant::now()));
        // Unserved: it may be closed, so there is room.
        slots.room().await;
        let request = a.activity().begin();
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // Idle: room again.
        drop(request);
        waiting.await.unwrap();
        // Busy, then gone: room again.
        let _request = a.activity().begin();
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.room().await }
        });
        drop(a);
        waiting.await.unwrap();
    }
}
