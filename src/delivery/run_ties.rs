//! What the deliveries of one run share: its shutdown signal, its keeper, its runtime, how
//! many of them are still held, and the settle calls they left running.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::keeper::Keeper;

/// What the deliveries of one run (a `run_until`, or a stream) share: the run's shutdown
/// signal, the runtime it receives on (a dropped delivery's release runs there), and how many
/// of them are still held (a stream's graceful shutdown waits for none).
#[derive(Debug)]
pub(crate) struct RunTies {
    shutdown: CancellationToken,
    /// The consumer's keeper, which keeps the deliveries hidden.
    keeper: Keeper,
    runtime: Option<Handle>,
    held: AtomicUsize,
    /// Signalled when the last one is dropped.
    none_held: Notify,
    /// The settle calls its deliveries left running in the background (the releases of
    /// deliveries dropped unsettled, the deletes of redeliveries whose ack was lost): an
    /// event's end waits for them, and for no other run's.
    background: TaskTracker,
}

impl RunTies {
    pub(crate) fn new(shutdown: CancellationToken, keeper: Keeper) -> Arc<Self> {
        Arc::new(Self {
            shutdown,
            keeper,
            runtime: Handle::try_current().ok(),
            held: AtomicUsize::new(0),
            none_held: Notify::new(),
            background: TaskTracker::new(),
        })
    }

    pub(crate) fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// The consumer's keeper, which keeps the run's deliveries hidden.
    pub(crate) fn keeper(&self) -> &Keeper {
        &self.keeper
    }

    /// The settle calls its deliveries left running in the background.
    pub(crate) fn background(&self) -> &TaskTracker {
        &self.background
    }

    /// The runtime the run receives on, if it was made inside one.
    pub(crate) fn runtime(&self) -> Option<&Handle> {
        self.runtime.as_ref()
    }

    /// One more delivery of the run is held.
    pub(crate) fn delivery_held(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// A delivery of the run was dropped: wakes whoever waits for none, after the last.
    pub(crate) fn delivery_dropped(&self) {
        if self.held.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.none_held.notify_waiters();
        }
    }

    /// Deliveries of the run still held.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Completes once no delivery of the run is held.
    pub(crate) async fn none_held(&self) {
        loop {
            let dropped = self.none_held.notified();
            tokio::pin!(dropped);
            dropped.as_mut().enable();
            if self.held() == 0 {
                return;
            }
            dropped.await;
        }
    }
}
