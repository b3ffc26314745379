//! Shutdown and pause latency: from the signal to `run_until` returning, and from `pause` to
//! no receive under way.
//!
//! ```text
//! cargo bench --bench shutdown
//! SQS_TEST_ENDPOINT=http://127.0.0.1:PORT cargo bench --bench shutdown   # also against a server
//! ```
//!
//! Three cases, each run several times (medians reported, the machine being noisy):
//! - idle: the consumer is in a long poll (`POLL`) of an empty queue; the stop sends no new
//!   receive and waits for that one to end (abandoning it would leave the server free to hand
//!   it the next message, hidden for a visibility timeout). Signal to return is at most the
//!   poll's wait.
//! - draining: N handlers are running at the signal and finish (ack) 50 ms after it. Signal
//!   to return, minus those 50 ms, is what the shutdown itself costs.
//! - pause: the consumer is in a long poll (`POLL`); `pause()` starts no new receive and the
//!   one under way ends within its wait. From the call to no slot reserved by a receive
//!   (`Stats::reserved` 0), and from `resume()` to a receive under way again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqs_consumer::{Consumer, ConsumerBuilder, Delivery, MemoryQueue};
use tokio::sync::watch;
use tokio::time::{sleep, Instant};

mod common;

const IDLE_RUNS: usize = 20;
const DRAIN_RUNS: usize = 10;
const HANDLER_TAIL: Duration = Duration::from_millis(50);
/// The long polls' wait in the idle and pause cases: a stop or a pause waits for the poll.
const POLL: Duration = Duration::from_secs(2);

/// A fresh queue per run: in memory, or on the server.
enum Target {
    Memory,
    Server(aws_sdk_sqs::Client),
}

impl Target {
    async fn queue(
        &self,
        name: &str,
    ) -> (
        ConsumerBuilder,
        Box<dyn Fn(usize) -> futures::future::BoxFuture<'static, ()>>,
    ) {
        match self {
            Target::Memory => {
                let q = MemoryQueue::new();
                let sender = q.clone();
                (
                    Consumer::in_memory(&q),
                    Box::new(move |n| {
                        for i in 0..n {
                            sender.send(format!("m{i}")).unwrap();
                        }
                        Box::pin(async {})
                    }),
                )
            }
            Target::Server(client) => {
                let url = client
                    .create_queue()
                    .queue_name(name)
                    .send()
                    .await
                    .unwrap()
                    .queue_url
                    .unwrap();
                let (c, u) = (client.clone(), url.clone());
                (
                    Consumer::builder(client.clone(), url),
                    Box::new(move |n| {
                        let (c, u) = (c.clone(), u.clone());
                        Box::pin(async move {
                            for i in 0..n {
                                c.send_message()
                                    .queue_url(&u)
                                    .message_body(format!("m{i}"))
                                    .send()
                                    .await
                                    .unwrap();
                            }
                        })
                    }),
                )
            }
        }
    }
}

async fn idle(target: &Target, run: usize) -> Duration {
    let (builder, _) = target
        .queue(&format!("bench-idle-{}-{run}", std::process::id()))
        .await;
    let consumer = builder.wait_time(POLL).build().unwrap();
    let signalled = std::sync::Mutex::new(None::<Instant>);
    let signal = async {
        sleep(Duration::from_millis(300)).await; // the long poll is under way
        *signalled.lock().unwrap() = Some(Instant::now());
    };
    consumer
        .run_until(|d: Delivery| d.ack(), signal)
        .await
        .unwrap();
    let at = signalled.lock().unwrap().unwrap();
    at.elapsed()
}

async fn draining(target: &Target, handlers: usize, run: usize) -> Duration {
    let (builder, send) = target
        .queue(&format!(
            "bench-drain-{}-{handlers}-{run}",
            std::process::id()
        ))
        .await;
    send(handlers).await;
    let consumer = builder
        .max_in_flight(handlers)
        .wait_time(Duration::from_secs(1))
        .build()
        .unwrap();
    let (tx, rx) = watch::channel(None::<Instant>);
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let handler = move |d: Delivery| {
        let (mut rx, s) = (rx.clone(), s.clone());
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            let _ = rx.wait_for(|at| at.is_some()).await;
            sleep(HANDLER_TAIL).await;
            d.ack().await
        }
    };
    let signal = async {
        while started.load(Ordering::SeqCst) < handlers {
            sleep(Duration::from_millis(5)).await;
        }
        tx.send(Some(Instant::now())).unwrap();
    };
    consumer.run_until(handler, signal).await.unwrap();
    let at = tx.borrow().unwrap();
    at.elapsed().saturating_sub(HANDLER_TAIL)
}

/// How long a pause takes to leave no receive under way, and a resume to start one; `None`
/// for one that did not happen within the poll's wait and 5 s more.
async fn pausing(target: &Target, run: usize) -> (Option<Duration>, Option<Duration>) {
    let (builder, _) = target
        .queue(&format!("bench-pause-{}-{run}", std::process::id()))
        .await;
    let consumer = Arc::new(builder.wait_time(POLL).build().unwrap());
    let c = consumer.clone();
    let running = tokio::spawn(async move { c.run(|d: Delivery| d.ack()).await });
    sleep(Duration::from_millis(300)).await; // the long poll is under way
    assert!(consumer.stats().reserved > 0);
    // From `start` until a receive is (`true`) or is not under way; bounded to the poll's
    // wait and 5 s more of looking.
    let until = |reserved: bool, start: Instant| {
        let consumer = consumer.clone();
        async move {
            while (consumer.stats().reserved > 0) != reserved
                && start.elapsed() < POLL + Duration::from_secs(5)
            {
                tokio::task::yield_now().await;
            }
            ((consumer.stats().reserved > 0) == reserved).then(|| start.elapsed())
        }
    };
    let start = Instant::now();
    consumer.pause();
    let stopped = until(false, start).await;
    sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    consumer.resume();
    let restarted = until(true, start).await;
    running.abort();
    (stopped, restarted)
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

/// As [`report`], for runs that may not have seen it happen within their bound: those are
/// counted apart, never averaged in.
fn report_bounded(what: &str, v: Vec<Option<Duration>>) {
    let runs = v.len();
    let seen: Vec<Duration> = v.into_iter().flatten().collect();
    if seen.len() < runs {
        println!(
            "{what:<52} {} of {runs} runs did not see it within the bound; left out",
            runs - seen.len()
        );
    }
    if seen.is_empty() {
        println!("{what:<52} n/a: no run saw it");
    } else {
        report(what, seen);
    }
}

fn report(what: &str, v: Vec<Duration>) {
    let runs = v.len();
    let (med, max) = median(v);
    println!(
        "{what:<52} median {:>9.3} ms   max {:>9.3} ms   ({runs} runs)",
        ms(med),
        ms(max)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn bench(name: &str, target: Target) {
    let (mut stops, mut restarts) = (Vec::new(), Vec::new());
    for run in 0..IDLE_RUNS {
        let (stop, restart) = pausing(&target, run).await;
        stops.push(stop);
        restarts.push(restart);
    }
    report_bounded(&format!("{name}: pause -> no receive under way"), stops);
    report_bounded(&format!("{name}: resume -> a receive under way"), restarts);
    let mut v = Vec::new();
    for run in 0..IDLE_RUNS {
        v.push(idle(&target, run).await);
    }
    report(
        &format!("{name}: signal -> return, idle in a {POLL:?} poll"),
        v,
    );
    for handlers in [1, 16, 64] {
        let mut v = Vec::new();
        for run in 0..DRAIN_RUNS {
            v.push(draining(&target, handlers, run).await);
        }
        report(
            &format!("{name}: signal -> return, {handlers} handlers draining"),
            v,
        );
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("shutdown latency (beyond the handlers' own 50 ms)");
        bench("memory", Target::Memory).await;
        if let Ok(endpoint) = std::env::var("SQS_TEST_ENDPOINT") {
            bench("server", Target::Server(common::plain_client(&endpoint))).await;
        } else {
            println!("(set SQS_TEST_ENDPOINT to measure against an SQS-compatible server too)");
        }
    });
}
