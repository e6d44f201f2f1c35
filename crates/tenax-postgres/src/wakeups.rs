//! Wake-ups across servers: LISTEN/NOTIFY, without triggers.
//!
//! A change wakes this server's waiters at once ([`Wakeups::announce`]) and marks its channel
//! for the other servers. A sender task sends the marked channels with one `pg_notify` query,
//! then waits [`COALESCE`] before it sends again: at most one notification per channel per
//! interval per server, and none is lost (a change during the wait is sent right after it).
//!
//! A listener task holds one connection that LISTENs to every channel and fires the matching
//! signal when a notification comes. When that connection fails it reconnects with backoff,
//! and after every (re)connect fires every signal, so that waiters look again at once (what
//! changed while it was away was not heard). While it is not listening, and always in
//! poll-only mode (LISTEN does not pass through poolers in transaction mode), a poller fires
//! every signal each poll interval instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tenax_core::store::Signals;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::AsyncMessage;

use super::Pool;
use super::connect::{self, Database};
use super::filter::Query;
use super::statements::{Text, batch, prefixes, statements};

/// The shortest time between two notifications of one channel from one server.
const COALESCE: Duration = Duration::from_millis(5);
/// The longest wait between attempts to reconnect the listener.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often the listener checks that its session answers and is on a writable server: a
/// connection that died without a word (no RST), or a primary demoted under it, hears
/// nothing more, and nothing else would tell.
const PROBE: Duration = Duration::from_secs(5);

/// What a change may have made happen: one channel each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    Ready,
    Schedule,
    Subscriptions,
    Released,
    Tokens,
    Endpoints,
    Pools,
}

impl Wakeup {
    const ALL: [Wakeup; 7] = [
        Self::Ready,
        Self::Schedule,
        Self::Subscriptions,
        Self::Released,
        Self::Tokens,
        Self::Endpoints,
        Self::Pools,
    ];

    fn channel(self) -> &'static str {
        match self {
            Self::Ready => "tenax_ready",
            Self::Schedule => "tenax_schedule",
            Self::Subscriptions => "tenax_subscriptions",
            Self::Released => "tenax_released",
            Self::Tokens => "tenax_tokens",
            Self::Endpoints => "tenax_endpoints",
            Self::Pools => "tenax_pools",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    fn of_channel(channel: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.channel() == channel)
    }

    fn fire(self, signals: &Signals) {
        match self {
            Self::Ready => signals.ready.notify_waiters(),
            Self::Schedule => signals.schedule.notify_waiters(),
            Self::Subscriptions => signals.subscriptions.notify_waiters(),
            Self::Released => signals.released.notify_waiters(),
            Self::Tokens => signals.tokens.notify_waiters(),
            Self::Endpoints => signals.endpoints.notify_waiters(),
            Self::Pools => signals.pools.notify_waiters(),
        }
    }
}

fn fire_all(signals: &Signals) {
    for wakeup in Wakeup::ALL {
        wakeup.fire(signals);
    }
}

/// How this server hears of other servers' changes.
#[derive(Debug, Clone)]
pub struct Listening {
    /// LISTEN on a dedicated connection; false: poll only.
    pub listen: bool,
    /// How often to look again while not listening.
    pub poll_interval: Duration,
}

#[derive(Debug)]
pub struct Wakeups {
    signals: Arc<Signals>,
    /// Channels marked for sending, as bits of [`Wakeup::bit`].
    marked: Arc<AtomicU8>,
    send: Arc<Notify>,
    tasks: parking_lot::Mutex<Vec<JoinHandle<()>>>,
}

impl Wakeups {
    /// Starts the sender, and the listener (or the poller) on `database`, firing `signals`.
    pub fn start(
        pool: Pool,
        database: Database,
        listening: &Listening,
        signals: Arc<Signals>,
    ) -> Self {
        let marked = Arc::new(AtomicU8::new(0));
        let send = Arc::new(Notify::new());
        let listening_now = Arc::new(AtomicBool::new(false));
        let mut tasks = vec![tokio::spawn(sender(pool, marked.clone(), send.clone()))];
        if listening.listen {
            tasks.push(tokio::spawn(listener(
                database,
                signals.clone(),
                listening_now.clone(),
            )));
        }
        tasks.push(tokio::spawn(poller(
            signals.clone(),
            listening_now,
            listening.poll_interval,
        )));
        Self {
            signals,
            marked,
            send,
            tasks: parking_lot::Mutex::new(tasks),
        }
    }

    /// The signals this fires, shared.
    pub fn shared_signals(&self) -> Arc<Signals> {
        self.signals.clone()
    }

    /// Wakes this server's waiters for `wakeup` now, and the other servers' soon.
    pub fn announce(&self, wakeup: Wakeup) {
        wakeup.fire(&self.signals);
        self.marked.fetch_or(wakeup.bit(), Ordering::Relaxed);
        self.send.notify_one();
    }

    /// Sends what is marked and stops the tasks.
    pub async fn stop(&self, pool: &Pool) {
        let tasks: Vec<JoinHandle<()>> = self.tasks.lock().drain(..).collect();
        for task in tasks {
            task.abort();
        }
        let marked = self.marked.swap(0, Ordering::Relaxed);
        if marked != 0 {
            // Best effort: the other servers look again on their own when they miss one.
            let _ = send_marked(pool, marked).await;
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        for task in self.tasks.lock().iter() {
            task.abort();
        }
    }
}

async fn send_marked(pool: &Pool, marked: u8) -> Result<(), String> {
    let channels: Vec<&str> = Wakeup::ALL
        .into_iter()
        .filter(|w| marked & w.bit() != 0)
        .map(Wakeup::channel)
        .collect();
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .execute(NOTIFY.text(), &[&channels])
        .await
        .map_err(|e| super::fault("sending wake-ups")(e).to_string())?;
    Ok(())
}

async fn sender(pool: Pool, marked: Arc<AtomicU8>, send: Arc<Notify>) {
    loop {
        send.notified().await;
        let bits = marked.swap(0, Ordering::Relaxed);
        if bits != 0 {
            if let Err(error) = send_marked(&pool, bits).await {
                tracing::debug!(%error, "sending a wake-up to the other servers failed");
            }
        }
        tokio::time::sleep(COALESCE).await;
    }
}

async fn listener(database: Database, signals: Arc<Signals>, listening: Arc<AtomicBool>) {
    let mut backoff = Duration::from_millis(100);
    // Whether a connection was lost or refused before this one: its return is logged, as its
    // loss was.
    let mut lost = false;
    loop {
        match database.connect().await {
            Ok((client, mut connection)) => {
                let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
                let heard = signals.clone();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(AsyncMessage::Notification(note)) => {
                                if let Some(wakeup) = Wakeup::of_channel(note.channel()) {
                                    wakeup.fire(&heard);
                                }
                            }
                            Ok(_) => {}
                            Err(error) => {
                                tracing::warn!(%error, "the PostgreSQL listener lost its connection");
                                break;
                            }
                        }
                    }
                    let _ = done_tx.send(());
                });
                let listens = Wakeup::ALL.map(listen);
                let channels = batch(listens.iter().map(Text::text));
                if client.batch_execute(&channels).await.is_ok() {
                    listening.store(true, Ordering::Relaxed);
                    backoff = Duration::from_millis(100);
                    if lost {
                        tracing::info!("the PostgreSQL listener listens again");
                    }
                    // What changed while not listening was not heard: look again now.
                    fire_all(&signals);
                    let mut done = done_rx;
                    loop {
                        tokio::select! {
                            _ = &mut done => break,
                            () = tokio::time::sleep(PROBE) => {
                                if !connect::writable(&client).await {
                                    tracing::warn!(
                                        "the PostgreSQL listener's session does not answer, or \
                                         is on a read-only server: connecting again"
                                    );
                                    break;
                                }
                            }
                        }
                    }
                }
                listening.store(false, Ordering::Relaxed);
                driver.abort();
                fire_all(&signals);
                lost = true;
            }
            Err(error) => {
                tracing::warn!(%error, "the PostgreSQL listener cannot connect; polling meanwhile");
                lost = true;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn poller(signals: Arc<Signals>, listening: Arc<AtomicBool>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !listening.load(Ordering::Relaxed) {
            fire_all(&signals);
        }
    }
}

/// The statement that listens to `wakeup`'s channel (a name: `LISTEN` takes no parameters).
fn listen(wakeup: Wakeup) -> Query {
    let mut statement = Query::new(LISTEN);
    statement.push(wakeup.channel());
    statement
}

/// Every statement this module builds: a `LISTEN` per channel (sent together, [`batch`]).
pub(super) fn shapes() -> Vec<(String, Query)> {
    Wakeup::ALL
        .into_iter()
        .map(|wakeup| (wakeup.channel().to_owned(), listen(wakeup)))
        .collect()
}

prefixes! {
    LISTEN = "LISTEN ";
}

statements! {
    /// Notifies each channel of `$1`, with no payload.
    NOTIFY = "SELECT pg_notify(c, '') FROM unnest($1::text[]) AS c";
}
