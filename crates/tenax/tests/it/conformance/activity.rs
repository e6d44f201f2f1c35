//! `ActivityStore`: the activity per minute, which every server adds to.
//!
//! | operation         | cases |
//! |-------------------|-------|
//! | `add_activity`    | `a_minutes_counts_add_up_across_writers`, `activity_is_read_by_window`, `old_minutes_are_purged` |
//! | `activity`        | `activity_is_read_by_window`; every case; every reopen (`snapshot`, where `durable_activity`) |
//! | `purge_activity`  | `old_minutes_are_purged` |

use std::sync::Arc;

use tenax_core::model::activity::{Counts, MINUTE_MS, Minute};
use tenax_core::store::Store;

use super::support::*;

/// The first minute of the cases: T0's.
const M0: u64 = T0 / MINUTE_MS * MINUTE_MS;

fn counts(enqueued: u64, completed: u64, dead: u64) -> Counts {
    Counts {
        enqueued,
        completed,
        failed: dead,
        dead,
        delivered: 1,
        delivery_failed: 0,
    }
}

fn minute(n: u64, counts: Counts) -> Minute {
    Minute {
        at_ms: M0 + n * MINUTE_MS,
        counts,
    }
}

/// Every minute `store` holds in the day around T0.
async fn held(store: &Arc<dyn Store>) -> Vec<(u64, Counts)> {
    store
        .activity(M0 - 600 * MINUTE_MS, M0 + 600 * MINUTE_MS)
        .await
        .expect("activity")
        .into_iter()
        .map(|m| ((m.at_ms - M0) / MINUTE_MS, m.counts))
        .collect()
}

/// Counts added to a minute add up, from one writer several times and from two writers at
/// once (two servers on a shared backend, two tasks of one server otherwise): no addition is
/// lost to another. A backend that keeps them across a restart still has them after.
pub(crate) async fn a_minutes_counts_add_up_across_writers(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(held(&store).await, [], "nothing counted yet");
    store
        .add_activity(&[minute(0, counts(2, 1, 0)), minute(1, counts(5, 0, 1))])
        .await
        .expect("added");
    store
        .add_activity(&[minute(1, counts(1, 1, 0))])
        .await
        .expect("added");
    assert_eq!(
        held(&store).await,
        [
            (0, counts(2, 1, 0)),
            (
                1,
                Counts {
                    delivered: 2,
                    ..counts(6, 1, 1)
                }
            )
        ]
    );

    let other = if store.properties().shared {
        backend.open(T0).await
    } else {
        store.clone()
    };
    let writers: Vec<_> = [store.clone(), other.clone()]
        .into_iter()
        .map(|writer| {
            tokio::spawn(async move {
                for _ in 0..20 {
                    writer
                        .add_activity(&[minute(1, counts(1, 2, 0)), minute(2, counts(0, 1, 0))])
                        .await
                        .expect("added");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("a writer");
    }
    let expected = [
        (0, counts(2, 1, 0)),
        (
            1,
            Counts {
                delivered: 42,
                ..counts(46, 81, 1)
            },
        ),
        (
            2,
            Counts {
                delivered: 40,
                ..counts(0, 40, 0)
            },
        ),
    ];
    assert_eq!(held(&store).await, expected);
    assert_eq!(held(&other).await, expected, "every writer reads the sums");
    if Arc::ptr_eq(&store, &other) {
        // The same store: let go of it, so that it can be reopened.
        drop(other);
    } else {
        close(other).await;
    }

    let durable = store.properties().durable_activity;
    let store = reopen(backend, store, T0).await;
    if durable {
        assert_eq!(held(&store).await, expected, "kept across a restart");
    } else {
        assert_eq!(held(&store).await, [], "counted again from the start");
    }
    close(store).await;
}

/// A read gives the minutes of its window that hold counts, both ends included, oldest first
/// whatever order they were added in.
pub(crate) async fn activity_is_read_by_window(backend: &impl Backend) {
    let store = backend.open(T0).await;
    store
        .add_activity(&[minute(3, counts(3, 0, 0)), minute(7, counts(7, 0, 0))])
        .await
        .expect("added");
    store
        .add_activity(&[minute(1, counts(1, 0, 0)), minute(5, counts(5, 0, 0))])
        .await
        .expect("added");
    let read = |from: u64, to: u64| {
        let store = store.clone();
        async move {
            store
                .activity(M0 + from * MINUTE_MS, M0 + to * MINUTE_MS)
                .await
                .expect("activity")
                .iter()
                .map(|m| ((m.at_ms - M0) / MINUTE_MS, m.counts.enqueued))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(read(0, 10).await, [(1, 1), (3, 3), (5, 5), (7, 7)]);
    assert_eq!(read(3, 5).await, [(3, 3), (5, 5)], "both ends included");
    assert_eq!(read(4, 4).await, [], "a minute without counts");
    assert_eq!(read(8, 100).await, []);
    close(store).await;
}

/// Purging forgets the minutes that started before its time, and says how many; the others
/// stay, and a purge that finds nothing changes nothing.
pub(crate) async fn old_minutes_are_purged(backend: &impl Backend) {
    let store = backend.open(T0).await;
    store
        .add_activity(&[
            minute(0, counts(1, 0, 0)),
            minute(1, counts(2, 0, 0)),
            minute(2, counts(3, 0, 0)),
        ])
        .await
        .expect("added");
    assert_eq!(store.purge_activity(M0 + MINUTE_MS + 1).await, Ok(2));
    assert_eq!(held(&store).await, [(2, counts(3, 0, 0))]);
    assert_eq!(store.purge_activity(M0 + MINUTE_MS).await, Ok(0));
    // Counts added to a minute kept go on adding up.
    store
        .add_activity(&[minute(2, counts(1, 0, 0))])
        .await
        .expect("added");
    assert_eq!(
        held(&store).await,
        [(
            2,
            Counts {
                delivered: 2,
                ..counts(4, 0, 0)
            }
        )]
    );
    close(store).await;
}
