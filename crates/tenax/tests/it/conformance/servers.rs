//! `ServerStore`: the live servers, and what each says of itself.
//!
//! | operation         | cases |
//! |-------------------|-------|
//! | `describe_server` | `servers_are_listed_with_what_they_say` |
//! | `live_servers`    | `servers_are_listed_with_what_they_say` |

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenax_core::model::{LiveServer, ServerAbout, WorkerInfo, WorkerQueue};
use tenax_core::store::Store;

use super::support::*;

fn about(version: &str, workers: &[&str]) -> ServerAbout {
    ServerAbout {
        version: version.into(),
        started_at_ms: T0,
        leads: version == "1.0.0",
        address: Some(format!("127.0.0.1:{}", version.len())),
        workers: workers
            .iter()
            .map(|name| WorkerInfo {
                name: (*name).into(),
                queues: vec![WorkerQueue {
                    queue: "q".into(),
                    in_flight: 2,
                }],
                streams: 1,
                seen_at_ms: T0,
            })
            .collect(),
    }
}

/// Waits until `store` lists servers as `expected` says of their (this, about) pairs, in
/// id order; a shared store writes its row every second, so this takes a few seconds at most.
async fn wait_for_servers(
    store: &Arc<dyn Store>,
    expected: &[(bool, Option<ServerAbout>)],
) -> Vec<LiveServer> {
    let started = Instant::now();
    loop {
        let listed = store.live_servers(T0).await.expect("servers");
        let seen: Vec<(bool, Option<ServerAbout>)> =
            listed.iter().map(|s| (s.this, s.about.clone())).collect();
        let mut want = expected.to_vec();
        let mut got = seen.clone();
        want.sort_by_key(|(this, about)| (*this, format!("{about:?}")));
        got.sort_by_key(|(this, about)| (*this, format!("{about:?}")));
        if got == want {
            return listed;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the store lists {seen:?}, not {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A store lists itself, saying nothing until it is told what to say and then what its
/// description says (asked again each time: a change shows); on a shared store every server
/// lists every live one, marks itself, and one that closed is not listed any more.
pub(crate) async fn servers_are_listed_with_what_they_say(backend: &impl Backend) {
    let store = backend.open(T0).await;
    wait_for_servers(&store, &[(true, None)]).await;
    let said = Arc::new(parking_lot::Mutex::new(about("1.0.0", &[])));
    let saying = said.clone();
    store.describe_server(Arc::new(move || saying.lock().clone()));
    wait_for_servers(&store, &[(true, Some(about("1.0.0", &[])))]).await;
    *said.lock() = about("1.0.0", &["w1", "w2"]);
    let listed = wait_for_servers(&store, &[(true, Some(about("1.0.0", &["w1", "w2"])))]).await;
    let id = listed[0].id;
    assert!(listed[0].seen_at_ms > 0);

    if store.properties().shared {
        let other = backend.open(T0).await;
        other.describe_server(Arc::new(|| about("1.1.0", &["w3"])));
        let both = [
            (true, Some(about("1.0.0", &["w1", "w2"]))),
            (false, Some(about("1.1.0", &["w3"]))),
        ];
        let listed = wait_for_servers(&store, &both).await;
        assert!(listed.windows(2).all(|w| w[0].id < w[1].id), "by id");
        let mirrored = [
            (false, Some(about("1.0.0", &["w1", "w2"]))),
            (true, Some(about("1.1.0", &["w3"]))),
        ];
        let seen_by_other = wait_for_servers(&other, &mirrored).await;
        assert!(seen_by_other.iter().any(|s| s.id == id && !s.this));
        close(other).await;
        wait_for_servers(&store, &[(true, Some(about("1.0.0", &["w1", "w2"])))]).await;
    }
    close(store).await;
}
