//! A future polled only when one of its own wake-ups has fired, for a connection's watch
//! (its next bound, an eviction, the shutdown), which shares a task with hyper's connection.
//!
//! The connection's task wakes for every frame read and every response written; polling the
//! watch each time (a timer, two `Notify` waits, each taking a lock) cost 1 to 2 µs of CPU a
//! request on HTTP/2, measured (docs/benchmarks.md). Polled through [`Lazy`], a wake-up that is
//! not the watch's costs an atomic swap and a waker registration.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Whether a [`Lazy`] future's own waker fired since it was last polled, and the task to wake.
#[derive(Debug, Default)]
struct Woken {
    fired: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// `future`, polled by [`Lazy::poll_woken`] only when it has asked to be (and the first time).
#[derive(Debug)]
pub(super) struct Lazy<F> {
    future: F,
    woken: Arc<Woken>,
    waker: Waker,
}

impl<F: Future + Unpin> Lazy<F> {
    pub(super) fn new(future: F) -> Self {
        let woken = Arc::new(Woken {
            fired: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(woken.clone());
        Self {
            future,
            woken,
            waker,
        }
    }

    /// Polls the future if its waker fired since the last poll; else only remembers the task
    /// to wake when it does.
    pub(super) fn poll_woken(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.woken.task.register(cx.waker());
        if !self.woken.fired.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        Pin::new(&mut self.future).poll(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts its polls; ready once `ready` is set, waking through the waker it was given.
    struct Probe {
        polls: Arc<AtomicUsize>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
        ready: Arc<AtomicBool>,
    }

    impl Future for Probe {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn it_is_polled_first_and_then_only_after_its_own_wake_up() {
        let polls = Arc::new(AtomicUsize::new(0));
        let waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let ready = Arc::new(AtomicBool::new(false));
        let mut lazy = Lazy::new(Probe {
            polls: polls.clone(),
            waker: waker.clone(),
            ready: ready.clone(),
        });
        let task = Arc::new(Woken::default());
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        assert!(lazy.poll_woken(&mut cx).is_pending());
        assert!(lazy.poll_woken(&mut cx).is_pending());
        assert!(lazy.poll_woken(&mut cx).is_pending());
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "others' wake-ups do not poll it"
        );
        ready.store(true, Ordering::SeqCst);
        let own = waker.lock().unwrap().take().unwrap();
        own.wake();
        assert!(
            task.fired.load(Ordering::SeqCst),
            "its wake-up wakes the task"
        );
        assert!(lazy.poll_woken(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
