//! `ScheduleStore`: schedules and their ticks.
//!
//! | operation                                                                      | cases |
//! |--------------------------------------------------------------------------------|-------|
//! | `schedule`, `schedules`, `update_schedule`, `delete_schedule`, `due_schedules` | `schedules_are_stored_changed_and_deleted`; every reopen |
//! | `record_tick`                                                                  | `a_tick_is_recorded_once_with_its_job` |

use std::sync::Arc;

use tenax_core::model::{JobFilter, Schedule};
use tenax_core::store::Store;

use super::support::*;

fn same(a: &Schedule, b: &Schedule) -> bool {
    serde_json::to_value(a).expect("JSON") == serde_json::to_value(b).expect("JSON")
}

/// Schedules are made, changed atomically, found when due, and deleted; they survive a
/// restart.
pub(crate) async fn schedules_are_stored_changed_and_deleted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(
        store.schedule("a").await.expect("read").map(|s| s.name),
        None
    );
    let a = schedule("a", "q");
    let stored = store
        .update_schedule("a", &|current| {
            assert!(current.is_none());
            Some(a.clone())
        })
        .await
        .expect("made")
        .expect("stored");
    assert!(same(&stored, &a));
    let mut b = schedule("b", "q");
    b.next_tick_ms = Some(T0 + 10 * SECOND);
    store
        .update_schedule("b", &|_| Some(b.clone()))
        .await
        .expect("made");
    let mut paused = schedule("c", "q");
    paused.paused = true;
    paused.next_tick_ms = Some(T0);
    store
        .update_schedule("c", &|_| Some(paused.clone()))
        .await
        .expect("made");
    let names = |list: Vec<Schedule>| list.into_iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(
        names(store.schedules().await.expect("list")),
        ["a", "b", "c"]
    );
    // The maintenance loop wakes for the earliest tick of an unpaused schedule.
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 10 * SECOND)
    );
    // Due: unpaused, next tick at or before now, earliest first.
    assert_eq!(
        names(
            store
                .due_schedules(T0 + 59 * SECOND, 10)
                .await
                .expect("due")
        ),
        ["b"]
    );
    assert_eq!(
        names(
            store
                .due_schedules(T0 + 60 * SECOND, 10)
                .await
                .expect("due")
        ),
        ["b", "a"]
    );
    assert_eq!(
        names(store.due_schedules(T0 + 60 * SECOND, 1).await.expect("due")),
        ["b"]
    );
    // A change sees the stored schedule; `None` leaves it.
    let unchanged = store
        .update_schedule("a", &|current| {
            assert_eq!(current.map(|s| s.revision), Some(1));
            None
        })
        .await
        .expect("read");
    assert!(same(&unchanged.expect("there"), &a));
    let mut changed = a.clone();
    changed.cron = "*/5 * * * *".to_owned();
    changed.revision = 2;
    store
        .update_schedule("a", &|_| Some(changed.clone()))
        .await
        .expect("changed");
    let store = reopen(backend, store, T0).await;
    assert!(same(
        &store.schedule("a").await.expect("read").expect("there"),
        &changed
    ));
    assert!(store.delete_schedule("a").await.expect("deleted"));
    assert!(!store.delete_schedule("a").await.expect("deleted"));
    assert_eq!(names(store.schedules().await.expect("list")), ["b", "c"]);
    let store = reopen(backend, store, T0).await;
    close(store).await;
}

/// A tick's record and its job are stored together, only while the schedule is at the
/// revision the engine read: a second record of the same tick (another server, a restart)
/// stores neither, whoever loses a race.
/// `schedule` (at revision 1) as its tick at `tick` leaves it: revision 2, the tick handled,
/// the next a minute later, one job enqueued.
fn ticked_at(schedule: &Schedule, tick: u64) -> Schedule {
    let mut ticked = schedule.clone();
    ticked.revision = 2;
    ticked.through_ms = tick;
    ticked.next_tick_ms = Some(tick + 60 * SECOND);
    ticked.last_tick_ms = Some(tick);
    ticked.counts.enqueued = 1;
    ticked
}

/// A change decided while a tick is being recorded does not undo the tick: either the tick is
/// recorded first and the change is decided on it, or the change comes first and the tick,
/// made from the revision before it, is refused. The change's closure starts the tick on
/// another thread and gives it time to finish before it decides.
pub(crate) async fn a_change_never_overwrites_a_tick_recorded_meanwhile(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let first = schedule("s", "ticks");
    store
        .update_schedule("s", &|_| Some(first.clone()))
        .await
        .expect("made");
    let tick = T0 + 60 * SECOND;
    let ticked = ticked_at(&first, tick);
    let seen = current_of(&store, "ticks").await;
    let recording: std::sync::Mutex<Option<std::thread::JoinHandle<_>>> =
        std::sync::Mutex::new(None);
    let paused = store
        .update_schedule("s", &|current| {
            let mut slot = recording.lock().expect("the slot");
            if slot.is_none() {
                let (store, ticked) = (store.clone(), ticked.clone());
                let (done, finished) = std::sync::mpsc::channel();
                *slot = Some(std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime");
                    let recorded = runtime.block_on(store.record_tick(
                        &ticked,
                        1,
                        vec![job("ticks").at(tick).kind("tick")],
                        seen,
                        tick,
                    ));
                    let _ = done.send(());
                    recorded
                }));
                // A store that lets the tick through finishes it well within this.
                let _ = finished.recv_timeout(std::time::Duration::from_millis(500));
            }
            let mut changed = current.expect("there").clone();
            changed.paused = true;
            changed.revision += 1;
            Some(changed)
        })
        .await
        .expect("paused")
        .expect("a schedule");
    let recorded = recording
        .lock()
        .expect("the slot")
        .take()
        .expect("the tick was started")
        .join()
        .expect("the tick's thread")
        .expect("answered");
    let stored = store.schedule("s").await.expect("read").expect("there");
    assert!(stored.paused);
    let jobs = store
        .count_jobs(&JobFilter::queue("ticks"))
        .await
        .expect("count");
    match recorded {
        // The tick went first: the pause was decided on it and keeps it.
        Some(made) => {
            assert_eq!(stored.last_tick_ms, Some(tick), "{stored:?}");
            assert_eq!(stored.last_job, made[0].as_ref().map(|e| e.id));
            assert_eq!(jobs, 1);
        }
        // The pause went first: the tick, from the revision before it, stored nothing.
        None => {
            assert_eq!(stored.last_tick_ms, None, "{stored:?}");
            assert_eq!(jobs, 0);
        }
    }
    assert_eq!(stored.revision, paused.revision);
    close(store).await;
}

pub(crate) async fn a_tick_is_recorded_once_with_its_job(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let first = schedule("s", "ticks");
    store
        .update_schedule("s", &|_| Some(first.clone()))
        .await
        .expect("made");
    let tick = T0 + 60 * SECOND;
    let next = ticked_at(&first, tick);
    let jobs = || vec![job("ticks").at(tick).kind("tick")];
    let seen = current_of(&store, "ticks").await;
    let recorded = store
        .record_tick(&next, 1, jobs(), seen, tick)
        .await
        .expect("recorded")
        .expect("at the revision read");
    let made = recorded[0].as_ref().expect("a job").id;
    let stored = store.schedule("s").await.expect("read").expect("there");
    assert_eq!(stored.revision, 2);
    assert_eq!(stored.last_job, Some(made));
    assert_eq!(stored.through_ms, tick);
    // The same tick again: nothing stored.
    let again = store
        .record_tick(&next, 1, jobs(), seen, tick)
        .await
        .expect("answered");
    assert!(again.is_none());
    let count = |store: Arc<dyn Store>| async move {
        store
            .count_jobs(&JobFilter::queue("ticks"))
            .await
            .expect("count")
    };
    assert_eq!(count(store.clone()).await, 1);
    // Two servers racing for the next tick: one wins.
    let mut third = next.clone();
    third.revision = 3;
    let (a, b) = tokio::join!(
        store.record_tick(&third, 2, jobs(), seen, tick),
        store.record_tick(&third, 2, jobs(), seen, tick),
    );
    let won = [a.expect("answered"), b.expect("answered")]
        .into_iter()
        .filter(Option::is_some)
        .count();
    assert_eq!(won, 1);
    assert_eq!(count(store.clone()).await, 2);
    // A record without a job moves the schedule on alone; a deleted schedule records nothing.
    let mut skipped = third.clone();
    skipped.revision = 4;
    skipped.counts.overlapped = 1;
    assert!(
        store
            .record_tick(&skipped, 3, Vec::new(), seen, tick)
            .await
            .expect("answered")
            .is_some()
    );
    // Stored as given: with no job made, `last_job` is what the engine carried forward.
    let kept = store.schedule("s").await.expect("read").expect("there");
    assert!(same(&kept, &skipped));
    let store = reopen(backend, store, tick).await;
    assert_eq!(count(store.clone()).await, 2);
    assert!(store.delete_schedule("s").await.expect("deleted"));
    let mut gone = skipped.clone();
    gone.revision = 5;
    assert!(
        store
            .record_tick(&gone, 4, jobs(), seen, tick)
            .await
            .expect("answered")
            .is_none()
    );
    assert_eq!(count(store.clone()).await, 2);
    close(store).await;
}
