//! `DeliveryStream`: a consumer's deliveries as a `Stream`.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::delivery::Delivery;
use crate::dispatch::{Dispatch, Engine};
use crate::error::Error;

/// The deliveries of a [`Consumer`](crate::Consumer), from
/// [`Consumer::stream`](crate::Consumer::stream).
pub struct DeliveryStream {
    rx: mpsc::UnboundedReceiver<Result<Delivery, Error>>,
    pump: AbortHandle,
    _shutdown: DropGuard,
}

impl DeliveryStream {
    /// Starts receiving into the stream, on a task of its own.
    pub(crate) fn start(engine: Arc<Engine>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let pump = tokio::spawn(async move {
            let out = tx.clone();
            let dispatch: Dispatch = Arc::new(move |d| {
                // A send fails only once the stream is gone; the delivery is then dropped
                // and released.
                let _ = out.send(Ok(d));
                Box::pin(std::future::ready(()))
            });
            engine
                .pump(dispatch, token, |err| {
                    let _ = tx.send(Err(err));
                })
                .await;
        });
        Self {
            rx,
            pump: pump.abort_handle(),
            _shutdown: shutdown.drop_guard(),
        }
    }
}

impl Stream for DeliveryStream {
    type Item = Result<Delivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for DeliveryStream {
    fn drop(&mut self) {
        // Only a signal; the drop guard then marks the remaining deliveries for release.
        self.pump.abort();
    }
}

impl fmt::Debug for DeliveryStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryStream")
            .field("buffered", &self.rx.len())
            .finish_non_exhaustive()
    }
}
