//! The keeper thread: where a consumer's keeper, its settle batchers and its settle retries
//! run.
//!
//! By default, with a real client, they run on a thread of their own with a small
//! current-thread runtime, so handlers that block every worker thread of the application's
//! runtime (CPU-bound or blocking code in an async handler) delay only the handlers, not the
//! extensions that keep their messages hidden. Their SQS calls then go through a client with
//! connections of its own: a connection is driven by the runtime that opened it, so one
//! opened on the application's runtime would stall with it.
//!
//! The thread lives as long as anything may need it (the consumer, a delivery, a settle call
//! under way): each of them holds the [`KeeperRuntime`], and the last one dropped only signals
//! the thread, which then stops its runtime and ends.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tracing::instrument::WithSubscriber;

/// The keeper thread's name, as the operating system shows it.
pub(crate) const THREAD_NAME: &str = "sqs-keeper";

/// Where the keeper of one consumer and its settle calls run.
#[derive(Clone, Default)]
pub(crate) enum KeeperRuntime {
    /// On the runtime of whoever first needs it: `MemoryQueue` consumers (their clock is the
    /// test's), and consumers with isolation off.
    #[default]
    Caller,
    /// On a thread of its own.
    Thread(Arc<KeeperThread>),
}

impl KeeperRuntime {
    /// A keeper runtime on a new thread of its own.
    pub(crate) fn thread() -> std::io::Result<Self> {
        KeeperThread::start().map(|t| Self::Thread(Arc::new(t)))
    }

    /// `true` on a thread of its own.
    pub(crate) fn is_isolated(&self) -> bool {
        matches!(self, KeeperRuntime::Thread(_))
    }

    /// The runtime the keeper and the settle calls run on: the thread's, else `caller`'s if
    /// given, else the current one (`None`: outside any runtime).
    pub(crate) fn runtime(&self, caller: Option<&Handle>) -> Option<Handle> {
        match self {
            KeeperRuntime::Thread(thread) => Some(thread.handle.clone()),
            KeeperRuntime::Caller => caller.cloned().or_else(|| Handle::try_current().ok()),
        }
    }

    /// Spawns `task` where the keeper runs; `false` when there is no runtime to run it on. The
    /// task logs for the subscriber in force here (a thread-scoped one too), not the thread's.
    pub(crate) fn spawn<F>(&self, task: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self.runtime(None) {
            Some(runtime) => {
                runtime.spawn(task.with_current_subscriber());
                true
            }
            None => false,
        }
    }
}

impl fmt::Debug for KeeperRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeeperRuntime::Caller => "Caller",
            KeeperRuntime::Thread(_) => "Thread",
        })
    }
}

/// The inbox of a task that runs where a [`KeeperRuntime`] says: the task starts on first use, and
/// again if the runtime it ran on has gone away since.
pub(crate) struct Mailbox<T> {
    keeper_runtime: KeeperRuntime,
    tx: Mutex<Option<mpsc::UnboundedSender<T>>>,
}

impl<T: Send + 'static> Mailbox<T> {
    pub(crate) fn new(keeper_runtime: KeeperRuntime) -> Self {
        Self {
            keeper_runtime,
            tx: Mutex::new(None),
        }
    }

    /// Hands `item` to the task, starting it with `start` if there is none or its runtime is
    /// gone (twice at most: a send fails only then). Gives `item` back when there is no
    /// runtime to start it on.
    pub(crate) fn send<F>(
        &self,
        mut item: T,
        start: impl Fn(mpsc::UnboundedReceiver<T>) -> F,
    ) -> Result<(), T>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        for _ in 0..2 {
            let Some(sender) = self.inbox(&start) else {
                return Err(item);
            };
            match sender.send(item) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(back)) => item = back,
            }
        }
        Err(item)
    }

    fn inbox<F>(
        &self,
        start: &impl Fn(mpsc::UnboundedReceiver<T>) -> F,
    ) -> Option<mpsc::UnboundedSender<T>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        match &*tx {
            Some(sender) if !sender.is_closed() => Some(sender.clone()),
            _ => {
                let (sender, rx) = mpsc::unbounded_channel();
                if !self.keeper_runtime.spawn(start(rx)) {
                    return None;
                }
                *tx = Some(sender.clone());
                Some(sender)
            }
        }
    }
}

impl<T> fmt::Debug for Mailbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mailbox")
            .field("keeper_runtime", &self.keeper_runtime)
            .finish_non_exhaustive()
    }
}

/// A thread running a current-thread runtime until it is dropped.
pub(crate) struct KeeperThread {
    handle: Handle,
    /// Dropping it tells the thread to stop.
    _stop: oneshot::Sender<()>,
}

impl KeeperThread {
    fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                // Ends when the last `KeeperThread` handle is dropped (the sender with it);
                // dropping the runtime then cancels whatever is left on it.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(Self {
            handle,
            _stop: stop,
        })
    }
}

#[cfg(test)]
mod tests;
