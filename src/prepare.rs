//! [`Preparing`]: the future of [`crate::KvLayer::prepare_async`], the pipelines of a cache built
//! on a thread of kvpack's own so that the caller's thread (an app's frame loop) never waits on
//! a shader compilation.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

use crate::error::{Error, Result};

#[derive(Default)]
struct State {
    /// The job's result, until a poll or [`Preparing::wait`] takes it.
    result: Option<Result<()>>,
    /// Whether the job has finished (its result may already be taken).
    finished: bool,
    waker: Option<Waker>,
}

/// Pipelines being built in the background ([`crate::KvLayer::prepare_async`]). A [`Future`] (for an async runtime, or polled once per
/// frame) whose output is what the blocking `prepare()` returns; [`Preparing::is_finished`]
/// asks without waiting and [`Preparing::wait`] blocks. Dropping it does not stop the work:
/// the pipelines still land in the context's cache.
#[must_use = "the pipelines are built in the background; poll, wait for or drop this handle"]
pub struct Preparing {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Preparing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preparing")
            .field("finished", &self.is_finished())
            .finish()
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Preparing {
    /// A preparation that is already over, with `result`.
    pub fn ready(result: Result<()>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                result: Some(result),
                finished: true,
                waker: None,
            })),
        }
    }

    /// Runs `job` on a new thread. A thread that cannot be started, or a job that panics, is
    /// [`Error::Gpu`] (during `prepare`).
    pub(crate) fn spawn(job: impl FnOnce() -> Result<()> + Send + 'static) -> Self {
        let state: Arc<Mutex<State>> = Arc::default();
        let shared = state.clone();
        let spawned = std::thread::Builder::new()
            .name("kvpack prepare".into())
            .spawn(move || {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                    .unwrap_or_else(|_| {
                        Err(Error::Gpu {
                            during: "prepare",
                            message: "the pipeline-building thread panicked".into(),
                        })
                    });
                let waker = {
                    let mut s = lock(&shared);
                    s.result = Some(result);
                    s.finished = true;
                    s.waker.take()
                };
                if let Some(w) = waker {
                    w.wake();
                }
            });
        match spawned {
            Ok(_) => Self { state },
            Err(e) => Self::ready(Err(Error::Gpu {
                during: "prepare",
                message: format!("cannot start a thread to build pipelines: {e}"),
            })),
        }
    }

    /// Whether the work is over (never blocks).
    pub fn is_finished(&self) -> bool {
        lock(&self.state).finished
    }

    /// Blocks until the work is over; its result.
    pub fn wait(self) -> Result<()> {
        pollster::block_on(self)
    }
}

impl Future for Preparing {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        let mut s = lock(&self.state);
        if let Some(r) = s.result.take() {
            return Poll::Ready(r);
        }
        if s.finished {
            return Poll::Ready(Err(Error::Config(
                "Preparing polled after it returned its result".into(),
            )));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}
