//! The request log: one line per answered request, formatted and written by a thread of its
//! own, so that a request's thread pays for neither.
//!
//! The request's thread queues the line's fields ([`RequestLog::record`]): a few clones of
//! reference-counted values into a bounded queue, no formatting, no write to stderr, and no
//! wake-up of the log's thread while that thread is busy. The log's thread turns each into the
//! `request` event at info (the same event, fields and target as when it was logged in place,
//! so `TENAX_LOG` filters and `--log-format` apply as before) and writes the lines of a drain
//! together: with [`LogWriter`] as the log's writer, in one `write` to stderr instead of one per
//! line.
//!
//! What that changes for a reader of the log:
//! - a request's line appears up to [`PAUSE`] after its answer, and its timestamp is when it
//!   was written; `latency_ms` is the request's own, measured on its thread;
//! - a request never waits for its line: when the queue is full (stderr blocked, or a burst
//!   beyond what the thread formats), lines are dropped and counted, and the thread logs how
//!   many at warn once it catches up. Every other event (warnings, errors) is written in place,
//!   as before.
//!
//! Invariant: lines are written in the order their requests were answered, and the last ones
//! reach stderr before the server exits ([`RequestLog::flush`], called when it stops serving).

use std::cell::RefCell;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::Duration;

use axum::extract::MatchedPath;
use axum::http::Method;
use tenax_core::metrics::http::UNMATCHED;

/// The target of the `request` event: the module that logged it in place before it had a
/// thread of its own, so that filters written for it (`tenax::api::guard=warn`) still apply.
const TARGET: &str = "tenax::api::guard";

/// Lines waiting for the log's thread. At 100 000 requests a second the thread drains about
/// 500 per [`PAUSE`]; the rest is room for bursts and for a stderr that is briefly slow.
const QUEUE: usize = 32_768;

/// How long the log's thread sleeps after a drain while requests keep coming. Requests that
/// come meanwhile queue their lines without waking it; when none came, it blocks until the
/// next one wakes it.
const PAUSE: Duration = Duration::from_millis(5);

/// Lines formatted by the log's thread are gathered up to this size before they are written.
const BATCH_BYTES: usize = 64 * 1024;

/// One request's line, as its thread leaves it.
struct Line {
    method: Method,
    /// The route template the router matched; `None` for [`UNMATCHED`].
    route: Option<MatchedPath>,
    status: u16,
    latency: Duration,
    request_id: Arc<str>,
}

enum Entry {
    Line(Line),
    /// Answered once every entry before it is written.
    Flush(mpsc::Sender<()>),
}

/// The queue to the log's thread; cheap to clone, one per server.
#[derive(Clone)]
pub struct RequestLog {
    queue: SyncSender<Entry>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLog")
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RequestLog {
    /// Starts the log's thread. It ends once every clone of the answer is dropped and it has
    /// written what was queued.
    pub fn start() -> std::io::Result<Self> {
        let (queue, lines) = mpsc::sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        std::thread::Builder::new()
            .name("tenax-request-log".into())
            .spawn(move || write_lines(&lines, &counted))?;
        Ok(Self { queue, dropped })
    }

    /// Queues one answered request's line; never waits.
    pub fn record(
        &self,
        method: Method,
        route: Option<MatchedPath>,
        status: u16,
        latency: Duration,
        request_id: Arc<str>,
    ) {
        let line = Line {
            method,
            route,
            status,
            latency,
            request_id,
        };
        match self.queue.try_send(Entry::Line(line)) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits (at most `within`) until every line queued before the call is written.
    pub fn flush(&self, within: Duration) {
        let (done, written) = mpsc::channel();
        if self.queue.send(Entry::Flush(done)).is_ok() {
            let _ = written.recv_timeout(within);
        }
    }
}

/// The log's thread: blocks while no request comes; while they come, drains the queue, writes
/// what it drained, and sleeps [`PAUSE`] so that the next lines queue without a wake-up.
fn write_lines(lines: &Receiver<Entry>, dropped: &AtomicU64) {
    BATCH.with_borrow_mut(|batch| *batch = Some(Vec::with_capacity(BATCH_BYTES)));
    while let Ok(first) = lines.recv() {
        let mut next = Some(first);
        loop {
            while let Some(entry) = next.take().or_else(|| lines.try_recv().ok()) {
                match entry {
                    Entry::Line(line) => emit(&line),
                    Entry::Flush(done) => {
                        write_batch();
                        let _ = done.send(());
                    }
                }
            }
            write_batch();
            let lost = dropped.swap(0, Ordering::Relaxed);
            if lost > 0 {
                tracing::warn!(
                    target: TARGET,
                    dropped = lost,
                    "request log lines dropped: the log could not keep up with the requests"
                );
                write_batch();
            }
            std::thread::sleep(PAUSE);
            match lines.try_recv() {
                Ok(entry) => next = Some(entry),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
    }
}

fn emit(line: &Line) {
    let route = line.route.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
    // Microseconds as a number of milliseconds with three decimals, in both formats.
    let latency_ms = (line.latency.as_secs_f64() * 1_000_000.0).round() / 1_000.0;
    tracing::info!(
        target: TARGET,
        method = %line.method,
        route = %route,
        status = line.status,
        latency_ms,
        request_id = %line.request_id,
        "request"
    );
    if BATCH.with_borrow(|batch| batch.as_ref().is_some_and(|b| b.len() >= BATCH_BYTES)) {
        write_batch();
    }
}

thread_local! {
    /// On the log's thread, the lines formatted since the last write; `None` on every other
    /// thread, whose events [`LogWriter`] writes in place.
    static BATCH: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Writes the log thread's gathered lines to stderr in one write, under stderr's lock so that
/// no other thread's line lands inside them.
fn write_batch() {
    BATCH.with_borrow_mut(|batch| {
        if let Some(batch) = batch.as_mut().filter(|b| !b.is_empty()) {
            let _ = std::io::stderr().lock().write_all(batch);
            batch.clear();
        }
    });
}

/// The server's log writer: stderr, except on the request log's thread, where lines are
/// gathered and written a drain at a time.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

/// What [`LogWriter`] hands the formatter for one event.
#[derive(Debug)]
pub enum EventWriter {
    Stderr(std::io::Stderr),
    Batch,
}

impl std::io::Write for EventWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Stderr(stderr) => stderr.write(bytes),
            Self::Batch => {
                BATCH.with_borrow_mut(|batch| match batch.as_mut() {
                    Some(batch) => batch.extend_from_slice(bytes),
                    // Only made on the log's thread, where the batch always exists.
                    None => drop(std::io::stderr().write_all(bytes)),
                });
                Ok(bytes.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stderr(stderr) => stderr.flush(),
            Self::Batch => Ok(()),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        if BATCH.with_borrow(Option::is_some) {
            EventWriter::Batch
        } else {
            EventWriter::Stderr(std::io::stderr())
        }
    }
}
