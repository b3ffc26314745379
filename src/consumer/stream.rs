//! `DeliveryStream`: a consumer's deliveries as a `Stream`, with an optional graceful end.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::task::AtomicWaker;
use futures_util::Stream;
use tokio_util::sync::CancellationToken;
use tracing::instrument::WithSubscriber;

use crate::delivery::Delivery;
use crate::engine::{Engine, HandOut};
use crate::error::Error;

/// The deliveries of a [`Consumer`](crate::Consumer), from
/// [`Consumer::stream`](crate::Consumer::stream) or
/// [`Consumer::stream_until`](crate::Consumer::stream_until).
#[must_use = "a stream receives nothing until it is polled"]
pub struct DeliveryStream {
    inbox: Arc<Yielded>,
    /// Cancelled when the stream is dropped: the pump receives no more, and releases what
    /// the receives under way bring.
    shutdown: CancellationToken,
}

/// What the pump has handed out and the stream has not yielded yet.
#[derive(Default)]
struct Yielded {
    items: Mutex<VecDeque<Result<Delivery, Error>>>,
    waker: AtomicWaker,
    closed: AtomicBool,
    /// The stream was dropped: nothing is kept for it any more.
    dropped: AtomicBool,
}

impl Yielded {
    fn push(&self, item: Result<Delivery, Error>) {
        let mut items = self.lock();
        if self.dropped.load(Ordering::Acquire) {
            drop(items);
            drop(item); // a delivery dropped is released at once
            return;
        }
        items.push_back(item);
        drop(items);
        self.waker.wake();
    }

    /// The stream is gone: what it had not yielded is released now, and whatever comes
    /// later at once (the receives under way end in the background).
    fn drop_all(&self) {
        let dropped = {
            let mut items = self.lock();
            self.dropped.store(true, Ordering::Release);
            std::mem::take(&mut *items)
        };
        // Dropped outside the lock.
        drop(dropped);
    }

    /// Drops the deliveries not yielded yet (their run is shutting down: each is released at
    /// once); errors stay to be yielded.
    fn release_buffered(&self) {
        let released: VecDeque<Result<Delivery, Error>> = {
            let mut items = self.lock();
            let (errors, deliveries) = std::mem::take(&mut *items)
                .into_iter()
                .partition(Result::is_err);
            *items = errors;
            deliveries
        };
        // Dropped outside the lock.
        drop(released);
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Result<Delivery, Error>>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl DeliveryStream {
    /// Starts receiving into the stream, on a task of its own; with a `signal`, a graceful
    /// shutdown when it completes.
    pub(crate) fn start(engine: Arc<Engine>, signal: Option<BoxFuture<'static, ()>>) -> Self {
        let inbox = Arc::new(Yielded::default());
        let shutdown = CancellationToken::new();
        let (token, sink) = (shutdown.clone(), inbox.clone());
        let pump = async move {
            let out = sink.clone();
            let hand_out = HandOut::each(Arc::new(move |d| {
                out.push(Ok(d));
                Box::pin(std::future::ready(()))
            }));
            let graceful = signal.is_some();
            let signal = async {
                match signal {
                    Some(signal) => signal.await,
                    None => std::future::pending().await,
                }
            };
            // The signal, `Consumer::shutdown`, or the stream dropped (`token`): no new
            // receive. Only the first two hand out what the receives under way bring.
            let signal = async {
                tokio::select! {
                    () = signal => {}
                    () = token.cancelled() => {}
                }
            };
            let stop = CancellationToken::new();
            // Dropping the stream makes whatever the receives under way bring late at once.
            let mut run = engine.new_run(token.clone(), token.child_token());
            let late = run.late().clone();
            let (result, deadline) = {
                let receiving = engine.receive(&mut run, &hand_out, &stop);
                engine.receive_until(receiving, signal, &stop, &late).await
            };
            if let Err(err) = result {
                sink.push(Err(err));
            }
            if (graceful || stop.is_cancelled()) && !token.is_cancelled() {
                engine
                    .drain_stream(run, deadline, || sink.release_buffered())
                    .await;
            } else {
                token.cancel();
                sink.release_buffered();
                engine.finish_groups(&mut run).await;
                sink.release_buffered();
            }
            sink.close();
        };
        // A spawned task logs for the subscriber its worker sees; this one carries the caller's.
        let pump = tokio::spawn(pump.with_current_subscriber());
        drop(pump); // detached: it ends by itself once the receives under way are in
        Self { inbox, shutdown }
    }
}

impl Stream for DeliveryStream {
    type Item = Result<Delivery, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let inbox = &self.inbox;
        inbox.waker.register(cx.waker());
        if let Some(item) = inbox.lock().pop_front() {
            return Poll::Ready(Some(item));
        }
        if inbox.closed.load(Ordering::Acquire) {
            // Anything pushed before the close is in the queue already.
            return Poll::Ready(inbox.lock().pop_front());
        }
        Poll::Pending
    }
}

impl Drop for DeliveryStream {
    fn drop(&mut self) {
        // Cancelled first: what is dropped now is released as on a shutdown, visible at once.
        self.shutdown.cancel();
        self.inbox.drop_all();
    }
}

impl fmt::Debug for DeliveryStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryStream")
            .field("buffered", &self.inbox.lock().len())
            .finish_non_exhaustive()
    }
}
