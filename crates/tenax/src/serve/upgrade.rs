//! Connections that an HTTP/1.1 upgrade hands to another protocol (Zaqar's websocket): what
//! that protocol needs to stay within the listener's bounds once hyper has let go of the
//! connection.
//!
//! Invariants:
//! - an upgraded connection keeps its place in the connection table until the protocol that
//!   took it over ends: the connection's task waits for every [`Upgraded`] handle to be dropped
//!   before it gives the place up, so websockets count against `--max-connections` and
//!   `--max-connections-per-address` as any connection does;
//! - between two units of work (frames), an upgraded connection is idle: the table may close
//!   it to make room ([`Upgraded::closing`] completes), as it closes an idle HTTP connection;
//! - shutdown closes it too; its idleness is bounded by the protocol itself (a websocket pings,
//!   and closes a peer that answers nothing for [`Upgraded::idle_timeout`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::activity::{Activity, InFlight};

/// Handed to every request of a connection (in its extensions): a handler that upgrades the
/// connection moves it into the task that serves the upgraded protocol, and drops it when that
/// task ends.
#[derive(Debug, Clone)]
pub struct Upgraded {
    activity: Arc<Activity>,
    idle: Duration,
    shutdown: watch::Receiver<bool>,
    /// While any clone lives, the connection's task keeps its place (see [`Holds`]).
    _hold: mpsc::Sender<()>,
}

impl Upgraded {
    /// How long the peer may stay silent (the listener's `--idle-timeout`).
    pub fn idle_timeout(&self) -> Duration {
        self.idle
    }

    /// Completes when the connection must close: the table needs its place (it is idle), or
    /// the server is stopping.
    pub async fn closing(&self) {
        let mut shutdown = self.shutdown.clone();
        if *shutdown.borrow_and_update() {
            return;
        }
        tokio::select! {
            () = self.activity.evicted() => {}
            _ = shutdown.changed() => {}
        }
    }

    /// Marks the connection busy (not to be evicted, as a request in flight) until the guard is
    /// dropped: while one frame is handled.
    pub fn busy(&self) -> Busy {
        Busy {
            _in_flight: self.activity.begin(),
        }
    }
}

/// The connection is busy while this lives.
#[derive(Debug)]
pub struct Busy {
    _in_flight: InFlight,
}

/// The connection task's side: hands out [`Upgraded`] handles and waits for the last to go.
pub(super) struct Holds {
    handle: Upgraded,
    released: mpsc::Receiver<()>,
}

impl Holds {
    pub(super) fn new(
        activity: Arc<Activity>,
        idle: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        // Nothing is ever sent: the channel only tells when every sender is gone.
        let (hold, released) = mpsc::channel(1);
        Self {
            handle: Upgraded {
                activity,
                idle,
                shutdown,
                _hold: hold,
            },
            released,
        }
    }

    /// A handle for one connection's requests.
    pub(super) fn handle(&self) -> Upgraded {
        self.handle.clone()
    }

    /// Completes when no handle but this one's own is left, that is when no upgraded protocol
    /// holds the connection (at once if none took it over).
    pub(super) async fn released(self) {
        let Self {
            handle,
            mut released,
        } = self;
        drop(handle);
        while released.recv().await.is_some() {}
    }
}
