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
    lines: Lines,
    idle: Duration,
    silence: Pin<Box<Sleep>>,
    keep_alives: u64,
    done: bool,
}

impl std::fmt::Debug for JobStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobStream")
            .field("buffered", &self.lines.unread())
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
            lines: Lines::default(),
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
}

/// The bytes received and not yet read as lines.
///
/// A chunk can hold many lines (a take of 1000 jobs arrives as one write of ~300 KiB), so a
/// line is read in place: the bytes of the lines read are dropped once per chunk, when the
/// next one arrives, never by moving the rest of the buffer up after each line.
#[derive(Debug, Default)]
struct Lines {
    buffer: Vec<u8>,
    /// Where the unread bytes start.
    start: usize,
    /// Where the search for the next newline goes on: the unread bytes before it have none.
    searched: usize,
}

impl Lines {
    fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.searched -= self.start;
            self.start = 0;
        }
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete line, without its newline.
    fn next_line(&mut self) -> Option<&[u8]> {
        let Some(at) = self.buffer[self.searched..]
            .iter()
            .position(|b| *b == b'\n')
        else {
            self.searched = self.buffer.len();
            return None;
        };
        let (start, end) = (self.start, self.searched + at);
        self.start = end + 1;
        self.searched = self.start;
        Some(&self.buffer[start..end])
    }

    fn unread(&self) -> usize {
        self.buffer.len() - self.start
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

impl Stream for JobStream {
    type Item = Result<TakenJob>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(line) = this.lines.next_line() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    this.keep_alives += 1;
                    continue;
                }
                let job =
                    serde_json::from_slice::<TakenJob>(line).map_err(|e| Error::UnexpectedAnswer {
                        status: 200,
                        message: format!(
                            "a stream line is not a job ({e}): {}",
                            String::from_utf8_lossy(line)
                        ),
                        request_id: None,
                    });
                return Poll::Ready(Some(job));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.body.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.lines.push(&chunk);
                    let idle = this.idle;
                    this.silence.as_mut().reset(Instant::now() + idle);
                }
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    this.lines.clear();
                    return Poll::Ready(Some(Err(Error::Transport(error))));
                }
                Poll::Ready(None) => {
                    // A line cut off by the end of the answer is not a job.
                    this.done = true;
                    this.lines.clear();
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

#[cfg(test)]
mod tests {
    use super::Lines;

    fn read_all(lines: &mut Lines) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(line) = lines.next_line() {
            out.push(String::from_utf8_lossy(line).into_owned());
        }
        out
    }

    #[test]
    fn lines_split_across_chunks_come_out_whole_and_in_order() {
        let mut lines = Lines::default();
        lines.push(b"{\"a\":1}\n\n{\"b\"");
        assert_eq!(read_all(&mut lines), ["{\"a\":1}", ""]);
        assert_eq!(lines.unread(), 4);
        lines.push(b":2");
        assert_eq!(read_all(&mut lines), Vec::<String>::new());
        lines.push(b"}\n \n{\"c\":3}\n");
        assert_eq!(read_all(&mut lines), ["{\"b\":2}", " ", "{\"c\":3}"]);
        assert_eq!(lines.unread(), 0);
        lines.push(b"{\"d\":4}");
        lines.clear();
        assert_eq!(lines.unread(), 0);
        assert_eq!(read_all(&mut lines), Vec::<String>::new());
    }

    #[test]
    fn reading_a_line_moves_no_bytes_and_a_chunk_drops_the_lines_read() {
        // One chunk of many lines (a take of 1000 jobs arrives so): reading them must not
        // shift the rest of the buffer after each line, which made reading a chunk quadratic.
        let line = format!("{{\"id\":1,\"payload\":\"{}\"}}\n", "x".repeat(300));
        let mut lines = Lines::default();
        lines.push(line.repeat(1000).as_bytes());
        let (address, length) = (lines.buffer.as_ptr(), lines.buffer.len());
        for _ in 0..1000 {
            assert_eq!(lines.next_line().map(<[u8]>::len), Some(line.len() - 1));
            assert_eq!(lines.buffer.as_ptr(), address);
            assert_eq!(lines.buffer.len(), length);
        }
        assert_eq!(lines.next_line(), None);
        lines.push(b"{\"id\":2}\n");
        assert_eq!(lines.buffer.len(), 9, "the lines read are gone");
        assert_eq!(read_all(&mut lines), ["{\"id\":2}"]);
    }
}
