//! [`JobStream`]: the jobs of a streaming take, one NDJSON line each.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use tokio::time::{Instant, Sleep};

use crate::error::{Error, Result};
use crate::model::TakenJob;

/// How long a stream may send nothing before it is taken for dead. The server writes a line
/// at least every second: a job, or an empty keep-alive line.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The jobs of `POST /api/take/stream`, as they are pushed: a [`Stream`] of
/// `Result<TakenJob>`. Keep-alive lines are skipped (and counted).
///
/// The stream ends (`None`) when the server closes it, and yields one error and ends when the
/// connection breaks or stays silent past the idle timeout. Dropping it closes the
/// connection: the server puts the jobs it still holds for it back to ready, without using an
/// attempt.
pub struct JobStream {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buffer: Vec<u8>,
    idle: Duration,
    silence: Pin<Box<Sleep>>,
    keep_alives: u64,
    done: bool,
}

impl std::fmt::Debug for JobStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobStream")
            .field("buffered", &self.buffer.len())
            .field("idle_timeout", &self.idle)
            .field("keep_alives", &self.keep_alives)
            .field("done", &self.done)
            .finish()
    }
}

impl JobStream {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        Self {
            body: Box::pin(response.bytes_stream()),
            buffer: Vec::new(),
            idle: DEFAULT_IDLE_TIMEOUT,
            silence: Box::pin(tokio::time::sleep(DEFAULT_IDLE_TIMEOUT)),
            keep_alives: 0,
            done: false,
        }
    }

    /// How long the stream may stay silent (no job, no keep-alive) before it yields
    /// [`Error::StreamStalled`] and ends. Default 10 s.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self.silence.as_mut().reset(Instant::now() + idle);
        self
    }

    /// Keep-alive lines received so far.
    pub fn keep_alives(&self) -> u64 {
        self.keep_alives
    }

    /// The next complete line of the buffer, without its newline.
    fn next_line(&mut self) -> Option<Vec<u8>> {
        let end = self.buffer.iter().position(|b| *b == b'\n')?;
        let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
        line.pop();
        Some(line)
    }
}

impl Stream for JobStream {
    type Item = Result<TakenJob>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(line) = this.next_line() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    this.keep_alives += 1;
                    continue;
                }
                let job = serde_json::from_slice::<TakenJob>(&line).map_err(|e| {
                    Error::UnexpectedAnswer {
                        status: 200,
                        message: format!(
                            "a stream line is not a job ({e}): {}",
                            String::from_utf8_lossy(&line)
                        ),
                        request_id: None,
                    }
                });
                return Poll::Ready(Some(job));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.body.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.buffer.extend_from_slice(&chunk);
                    let idle = this.idle;
                    this.silence.as_mut().reset(Instant::now() + idle);
                }
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    this.buffer.clear();
                    return Poll::Ready(Some(Err(Error::Transport(error))));
                }
                Poll::Ready(None) => {
                    // A line cut off by the end of the answer is not a job.
                    this.done = true;
                    this.buffer.clear();
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if this.silence.as_mut().poll(cx).is_ready() {
                        this.done = true;
                        return Poll::Ready(Some(Err(Error::StreamStalled(this.idle))));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
