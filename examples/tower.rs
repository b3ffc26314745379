//! A handler as a `tower` service: the layers a service stack already uses wrap it (feature
//! `tower`; no AWS account needed, it runs on an in-memory queue).
//!
//! Twelve jobs go through a tracing layer (each call in a `job` span), a rate limit of 4 per
//! second, a concurrency limit of 3 and a timeout of 2 s. One job takes 3 s the first time:
//! the timeout stops it, the retry policy releases it at once, and the second try is quick.
//! The service's `poll_ready` holds back receives while the limits are full.
//!
//! ```text
//! cargo run --example tower --features tower   # the log on stderr, then on stdout:
//! done: 12 messages, 12 acked, 1 timed out and tried again, at most 3 at once
//! ```
//!
//! `tests/project/examples.rs` checks every number against what happened.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use sqs_consumer::{BoxError, Consumer, Delivery, MemoryQueue, RetryPolicy, ServiceHandler, Stats};
use tower::{Service, ServiceBuilder};
use tracing::Instrument;

/// What the example saw: the consumer's stats and the most calls that ran at once.
#[derive(Debug)]
pub struct Summary {
    pub stats: Stats,
    pub most_at_once: usize,
}

/// The example itself: writes its summary to `out`.
pub async fn run(out: &mut impl std::io::Write) -> Result<Summary, BoxError> {
    let queue = MemoryQueue::new();
    for i in 1..=12 {
        queue.send(if i == 5 {
            "slow job".to_owned()
        } else {
            format!("job {i}")
        })?;
    }
    let consumer = Consumer::in_memory(&queue)
        .retry_policy(RetryPolicy::ReleaseNow)
        .wait_time(Duration::from_secs(1))
        .build()?;

    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (now, peak) = (running.clone(), most.clone());
    let service = ServiceBuilder::new()
        .layer(tower::layer::layer_fn(Traced))
        .buffer(16) // makes the rate limit below `Clone`, as the consumer needs
        .rate_limit(4, Duration::from_secs(1))
        .concurrency_limit(3)
        .timeout(Duration::from_secs(2))
        .service_fn(move |delivery: Delivery| {
            let (now, peak) = (now.clone(), peak.clone());
            async move {
                let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(at_once, Ordering::SeqCst);
                let _running = Leave(now);
                if delivery.body() == "slow job" && delivery.receive_count() == 1 {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                tracing::info!("done");
                delivery.ack().await
            }
        });

    let drained = async {
        while !queue.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    consumer
        .run_until(ServiceHandler::new(service), drained)
        .await?;

    let stats = consumer.stats();
    let most_at_once = most.load(Ordering::SeqCst);
    writeln!(
        out,
        "done: 12 messages, {} acked, {} timed out and tried again, at most {} at once",
        stats.acked, stats.handler_errors, most_at_once
    )?;
    Ok(Summary {
        stats,
        most_at_once,
    })
}

/// Counts a call as ended when dropped (a timeout drops it mid-way).
struct Leave(Arc<AtomicUsize>);

impl Drop for Leave {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A tracing layer's service: each call in a `job` span with its receive count.
#[derive(Clone)]
pub struct Traced<S>(pub S);

impl<S: Service<Delivery>> Service<Delivery> for Traced<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = tracing::instrument::Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        let span = tracing::info_span!("job", receive_count = delivery.receive_count());
        self.0.call(delivery).instrument(span)
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    run(&mut std::io::stdout()).await?;
    Ok(())
}
