//! Running unattended, each scenario on `MemoryQueue` (paused clock) and on the test server
//! (real time): a stop with the default settings fits a 30 s grace period and leaves nothing
//! hidden; the health fields during and after an outage of receives; what a failing receive
//! and a body that does not decode log. And, on the server, the Kubernetes example as a child
//! process: its `/healthz` and `/metrics`, an outage, SIGTERM while a poll waits and while a
//! handler outlives the shutdown timeout. Figures are printed
//! (`cargo test --test consumer operations:: -- --nocapture`).

use crate::common;

use std::time::Duration;

use common::faults::{FaultProxy, Faults};
use common::{capture_logs, eventually, report, run_while, secs, Kind, TestQueue};
use sqs_consumer::memory::Action;
use sqs_consumer::{Consumer, ConsumerBuilder, Delivery};
use tokio::time::{sleep, Instant};

on_both!(
    a_stop_with_the_default_settings_ends_within_28_s_and_leaves_nothing_hidden,
    the_health_fields_follow_an_outage_of_receives,
    a_failing_receive_logs_one_short_line,
    receives_failing_for_give_up_after_end_the_run_with_the_last_error,
);

/// The longest a stop may take with the default settings: inside Kubernetes' 30 s.
const WORST_STOP: Duration = Duration::from_secs(28);

/// The worst case for a stop with the default settings: a long poll (20 s) under way at the
/// signal, and a handler that outlives the shutdown timeout (25 s). The stop waits for both,
/// cancels the handler at 25 s, releases its message, and returns within 28 s; the message is
/// visible again at once.
async fn a_stop_with_the_default_settings_ends_within_28_s_and_leaves_nothing_hidden(kind: Kind) {
    let q = TestQueue::new(kind, 60).await;
    q.send("outlives the shutdown timeout").await;
    let (logs, _guard) = capture_logs();
    let consumer = q.consumer().build().unwrap();
    let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
    let handler = move |d: Delivery| {
        let started_tx = started_tx.clone();
        async move {
            let _ = started_tx.send(());
            sleep(secs(3600)).await;
            d.ack().await
        }
    };
    let signalled = std::sync::Arc::new(std::sync::Mutex::new(None));
    let signal = {
        let signalled = signalled.clone();
        let mut started = started;
        async move {
            started.recv().await;
            // The next receive starts at once: a long poll of 20 s is under way now.
            sleep(Duration::from_millis(200)).await;
            *signalled.lock().unwrap() = Some(Instant::now());
        }
    };
    consumer.run_until(handler, signal).await.unwrap();
    let took = signalled.lock().unwrap().expect("signalled").elapsed();
    report(&format!(
        "stop with defaults ({kind:?}): {took:.2?} from the signal to the return"
    ));
    assert!(
        took >= secs(25) && took <= WORST_STOP,
        "the stop took {took:?}"
    );
    let stats = consumer.stats();
    assert_eq!((stats.released, stats.in_flight), (1, 0), "{stats:?}");
    let again = q.receive_raw(Duration::ZERO).await;
    assert_eq!(again.len(), 1, "released, visible again at once");
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    for said in [
        "stopping: no new receive",
        "waiting for 1 receive under way, up to 19.",
        // Once the receive is in, at 20 s: what is left of the shutdown timeout.
        "waiting for 1 running handler to finish, up to ",
        "handlers still running at the shutdown timeout",
    ] {
        assert!(text.contains(said), "{said:?} is not in the log:\n{text}");
    }
    let stopped = text
        .lines()
        .find(|l| l.contains("consumer stopped"))
        .unwrap();
    // 25 s to 28 s, as people write it.
    assert!(stopped.contains(" stopping_for=2"), "{stopped}");
}

/// An ack still retrying through an outage of deletes when the shutdown timeout passes does
/// not hold the stop past its 3 s: the stop returns at 28 s with the defaults, and the
/// message, not deleted, comes back after its visibility timeout.
#[tokio::test(start_paused = true)]
async fn acks_still_retrying_hold_a_stop_3_s_past_its_timeout_at_most() {
    let q = common::memory_queue(60);
    q.send("acked during an outage").unwrap();
    let (logs, _guard) = capture_logs();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let handler = move |d: Delivery| {
        let started_tx = started_tx.clone();
        async move {
            let _ = started_tx.send(());
            sleep(secs(24)).await;
            // Its tries go on for up to 20 s: past the shutdown timeout and the 3 s after it.
            d.ack().await
        }
    };
    let signal = async move {
        started.recv().await;
        for action in [Action::DeleteMessage, Action::DeleteMessageBatch] {
            q.fail_for(action, "InternalError", secs(600));
        }
    };
    let start = Instant::now();
    consumer.run_until(handler, signal).await.unwrap();
    let took = start.elapsed();
    assert!(took > secs(25) && took <= WORST_STOP, "{took:?}");
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("1 ack or release still unanswered 3s after the shutdown timeout"),
        "{text}"
    );
    assert_eq!(consumer.stats().acked, 0);
}

/// How long the outage of receives lasts.
const OUTAGE: Duration = Duration::from_secs(6);

/// A consumer of `q` whose receives an outage can stop: through a proxy on a server, with
/// injected failures on `MemoryQueue`.
struct ReceiveOutage {
    q: TestQueue,
    proxy: Option<FaultProxy>,
}

impl ReceiveOutage {
    async fn new(kind: Kind) -> Self {
        let q = TestQueue::new(kind, 30).await;
        let proxy = match kind {
            Kind::Memory => None,
            Kind::Server => {
                Some(FaultProxy::start(&common::server_endpoint(), Faults::none(), 1).await)
            }
        };
        Self { q, proxy }
    }

    fn consumer(&self) -> ConsumerBuilder {
        match (&self.q, &self.proxy) {
            (TestQueue::Server { url, .. }, Some(proxy)) => {
                Consumer::builder(common::client_for(&proxy.endpoint), url.clone())
            }
            _ => self.q.consumer(),
        }
    }

    /// From now on, for `duration`, every receive fails with a 500.
    fn start(&self, duration: Duration) {
        match (&self.q, &self.proxy) {
            (TestQueue::Memory(memory), _) => {
                memory.fail_for(Action::ReceiveMessage, "InternalError", duration);
            }
            (_, Some(proxy)) => proxy.outage(&["ReceiveMessage"], duration),
            _ => unreachable!("a server queue has its proxy"),
        }
    }
}

/// During an outage, `receive_failures` and `consecutive_receive_failures` grow and so does
/// `since_last_receive`; once receives are answered again, the run of failures is over and
/// `since_last_receive` is short again.
async fn the_health_fields_follow_an_outage_of_receives(kind: Kind) {
    let outage = ReceiveOutage::new(kind).await;
    let consumer = outage.consumer().wait_time(secs(1)).build().unwrap();
    let scenario = async {
        let before = consumer.stats();
        assert_eq!(before.since_last_receive, None, "no receive answered yet");
        eventually("a first receive answered", secs(30), || {
            consumer.stats().since_last_receive.is_some()
        })
        .await;
        outage.start(OUTAGE);
        let started = Instant::now();
        sleep(OUTAGE / 2).await;
        let during = consumer.stats();
        assert!(during.receive_failures >= 2, "{during:?}");
        assert_eq!(during.consecutive_receive_failures, during.receive_failures);
        // The poll under way at the outage's start is answered within its 1 s wait and the
        // server's time to answer (a second at most here, with both cores busy).
        let quiet = during.since_last_receive.unwrap();
        assert!(quiet >= OUTAGE / 2 - secs(1) - secs(1), "{during:?}");
        eventually("receives answered again", secs(30), || {
            consumer.stats().consecutive_receive_failures == 0
        })
        .await;
        let after = consumer.stats();
        assert!(started.elapsed() >= OUTAGE, "answered during the outage");
        assert!(after.receive_failures >= during.receive_failures);
        assert!(after.since_last_receive.unwrap() < secs(2), "{after:?}");
        report(&format!(
            "health ({kind:?}): {} s into a {} s outage: receive_failures {}, consecutive {}, \
             since_last_receive {:.1?}; after it: receive_failures {}, consecutive {}, \
             since_last_receive {:.1?}, answered again {:.1?} after its start",
            (OUTAGE / 2).as_secs(),
            OUTAGE.as_secs(),
            during.receive_failures,
            during.consecutive_receive_failures,
            quiet,
            after.receive_failures,
            after.consecutive_receive_failures,
            after.since_last_receive.unwrap(),
            started.elapsed(),
        ));
    };
    run_while(&consumer, |d: Delivery| d.ack(), scenario).await;
}

/// Receives that keep failing end `run` with the last error once they have failed for
/// `give_up_after` with none answered: within one back-off (and one request) more.
async fn receives_failing_for_give_up_after_end_the_run_with_the_last_error(kind: Kind) {
    let outage = ReceiveOutage::new(kind).await;
    let give_up_after = secs(5);
    let consumer = outage
        .consumer()
        .visibility_timeout(secs(30))
        .give_up_after(give_up_after)
        .build()
        .unwrap();
    outage.start(secs(120));
    let start = Instant::now();
    let ended = tokio::time::timeout(secs(60), consumer.run(|d: Delivery| d.ack())).await;
    let took = start.elapsed();
    let err = ended.expect("the run ends by itself").unwrap_err();
    report(&format!(
        "give up ({kind:?}): give_up_after {give_up_after:?}, run ended after {took:.2?} with: \
         {err}"
    ));
    assert!(err.is_retryable(), "the last error itself: {err}");
    assert!(err.to_string().contains("InternalError"), "{err}");
    // The back-off doubles from 200 ms, each wait jittered between half and whole: the
    // failures before 5 s take at most the waits up to 3.2 s, so the one in force when
    // `give_up_after` passes is at most 6.4 s, and the failure that ends the run comes at
    // most that (and a request) later.
    assert!(
        took >= give_up_after && took <= give_up_after + Duration::from_millis(6_400) + secs(2),
        "{took:?}"
    );
    let stats = consumer.stats();
    assert_eq!(stats.consecutive_receive_failures, stats.receive_failures);
    assert!(stats.receive_failures >= 5, "{stats:?}");
}

/// A failing receive logs one line an operator can read: what failed, the error chain, how
/// many in a row, when the next try goes and when the consumer gives up; and one line when
/// receives are answered again.
async fn a_failing_receive_logs_one_short_line(kind: Kind) {
    let outage = ReceiveOutage::new(kind).await;
    let (logs, _guard) = capture_logs();
    let consumer = outage.consumer().wait_time(secs(1)).build().unwrap();
    let scenario = async {
        eventually("a first receive answered", secs(30), || {
            consumer.stats().since_last_receive.is_some()
        })
        .await;
        outage.start(secs(2));
        // The line comes just after the counters reset, from the receive loop's thread: the
        // wait is for both, so that the test never reads the log in between.
        eventually("receives failed, then answered again", secs(30), || {
            let s = consumer.stats();
            let logged =
                String::from_utf8_lossy(&logs.lock().unwrap()).contains("receives answered again");
            s.receive_failures > 0 && s.consecutive_receive_failures == 0 && logged
        })
        .await;
    };
    run_while(&consumer, |d: Delivery| d.ack(), scenario).await;
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let first = text
        .lines()
        .find(|l| l.contains("receive failed; retrying"))
        .expect("a line for the failure");
    report(&format!("a failing receive ({kind:?}): {first}"));
    assert!(first.contains(" WARN "), "{first}");
    assert!(
        first.contains("error=SQS ReceiveMessage failed with InternalError"),
        "{first}"
    );
    assert!(first.contains(" failures=1 "), "{first}");
    let retry_in = first.split(" retry_in=").nth(1).unwrap();
    assert!(
        retry_in.starts_with(char::is_numeric) && retry_in.contains("ms "),
        "{first}"
    );
    assert!(first.ends_with("give_up_in=5m 0s"), "{first}");
    assert!(first.len() < 400, "{} bytes: {first}", first.len());
    for debug in ["{", "Some(", "source:", "Instant"] {
        assert!(!first.contains(debug), "{debug} in {first}");
    }
    let again = text
        .lines()
        .find(|l| l.contains("receives answered again"))
        .expect("a line when receives are answered again");
    assert!(
        again.contains(" INFO ") && again.contains("failing_for="),
        "{again}"
    );
}

/// A handler that returns a decode error logs it on one line: the message, what was
/// expected with the type's short name, and why.
#[cfg(feature = "json")]
#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_decode_logs_what_failed_once() {
    #[derive(Debug, serde::Deserialize)]
    struct Order {
        id: u64,
    }
    let q = common::memory_queue(30);
    let id = q.send(r#"{"order": 7}"#).unwrap();
    let (logs, _guard) = capture_logs();
    let consumer = Consumer::in_memory(&q).build().unwrap();
    let handler = |d: Delivery| async move {
        let order: Order = d.json()?;
        assert!(order.id > 0, "never reached: the body does not decode");
        d.ack().await
    };
    let failed = async {
        eventually("the handler failed", secs(60), || {
            consumer.stats().handler_errors == 1
        })
        .await;
    };
    run_while(&consumer, handler, failed).await;
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("handler failed"))
        .expect("the handler's failure is logged");
    report(&format!("a decode error: {line}"));
    let said =
        format!("message {id}: not JSON for `Order`: missing field `id` at line 1 column 12");
    assert!(line.contains(&said), "{line}");
    let error = line.split(" error=").nth(1).unwrap();
    assert_eq!(
        error.matches("JSON").count(),
        1,
        "what failed, said once: {line}"
    );
    assert!(!error.contains("operations::"), "{line}");
}

/// The Kubernetes example as a child process, and what an operator sees of it.
#[cfg(all(feature = "from-env", feature = "signal", feature = "metrics"))]
mod kubernetes {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use common::KillOnDrop;

    /// The example's binary, built beside this test by `cargo test`.
    fn example_binary() -> std::path::PathBuf {
        let exe = std::env::current_exe().expect("the test's own path");
        let dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>");
        let binary = dir.join("examples").join("kubernetes");
        assert!(
            binary.exists(),
            "{} is missing: `cargo test --all-features` builds it",
            binary.display()
        );
        binary
    }

    /// A running example: its output, line by line, as it comes.
    struct Worker {
        child: KillOnDrop,
        stdout: Arc<Mutex<Vec<String>>>,
        stderr: Arc<Mutex<Vec<String>>>,
    }

    fn collect(pipe: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        lines
    }

    impl Worker {
        /// The example, consuming `url` through `endpoint`, with `env` on top.
        fn start(endpoint: &str, url: &str, env: &[(&str, &str)]) -> Self {
            let mut command = Command::new(example_binary());
            command
                .env("QUEUE_URL", url)
                .env("AWS_ENDPOINT_URL_SQS", endpoint)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test")
                .env("HEALTH_ADDR", "127.0.0.1:0")
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = command.spawn().expect("the example starts");
            let stdout = collect(child.stdout.take().expect("piped"));
            let stderr = collect(child.stderr.take().expect("piped"));
            Self {
                child: KillOnDrop(child),
                stdout,
                stderr,
            }
        }

        fn said(&self, what: &str) -> bool {
            self.stderr.lock().unwrap().iter().any(|l| l.contains(what))
        }

        fn log(&self) -> String {
            self.stderr.lock().unwrap().join("\n")
        }

        /// Where `/healthz` and `/metrics` are served.
        async fn address(&self) -> String {
            let prefix = "serving /healthz and /metrics on http://";
            let mut address = None;
            eventually("the example serves its endpoints", secs(30), || {
                let stdout = self.stdout.lock().unwrap();
                address = stdout
                    .first()
                    .and_then(|l| l.strip_prefix(prefix).map(str::to_owned));
                address.is_some()
            })
            .await;
            address.unwrap()
        }

        fn terminate(&self) -> Instant {
            let pid = self.child.0.id().to_string();
            let sent = Command::new("kill").args(["-TERM", &pid]).status();
            assert!(sent.expect("kill runs").success(), "kill -TERM {pid}");
            Instant::now()
        }

        /// Waits (bounded) for the exit: its status, and how long after `sent` it came.
        async fn exit(
            &mut self,
            sent: Instant,
            limit: Duration,
        ) -> (std::process::ExitStatus, Duration) {
            loop {
                if let Some(status) = self.child.0.try_wait().expect("the child's status") {
                    return (status, sent.elapsed());
                }
                assert!(
                    sent.elapsed() < limit,
                    "still running {limit:?} after SIGTERM:\n{}",
                    self.log()
                );
                sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// `GET path` from `address`: the status code and the body.
    async fn get(address: &str, path: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connects");
        let request = format!("GET {path} HTTP/1.1\r\nhost: {address}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        (status, body)
    }

    /// The value of the first sample of `metric` in a Prometheus page.
    fn sample(page: &str, metric: &str) -> Option<f64> {
        page.lines()
            .find(|l| l.starts_with(metric) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// A worker that cannot start says why on one line (the error's `Display`, not its
    /// `Debug`) and exits 1.
    #[test]
    fn the_example_says_why_it_cannot_start_on_one_line_and_exits_1() {
        let out = common::output_within(
            Command::new(example_binary())
                .env("QUEUE_URL", "not a queue")
                .env("AWS_REGION", "us-east-1")
                .env("HEALTH_ADDR", "127.0.0.1:0")
                .env("NO_COLOR", "1"),
            secs(60),
        );
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr.lines().last().unwrap_or_default();
        assert!(
            line.starts_with("error: invalid setting `queue`: \"not a queue\" is not allowed"),
            "{stderr}"
        );
        assert!(!stderr.contains("InvalidConfig {"), "{stderr}");
    }

    /// The worker through an outage of receives (its probe fails, its metrics say why) and
    /// back; then SIGTERM with a long poll under way and a handler that outlives the
    /// shutdown timeout: it exits 0 within 28 s, its message visible again at once. Beside
    /// it, a worker on an empty queue sent SIGTERM while its poll waits: it exits within the
    /// poll's wait, and says so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
    async fn the_example_reports_health_and_stops_on_sigterm_within_28_s() {
        crate::require_server!(
            "kubernetes::the_example_reports_health_and_stops_on_sigterm_within_28_s"
        );
        let proxy = FaultProxy::start(&common::server_endpoint(), Faults::none(), 1).await;
        let busy = TestQueue::new(Kind::Server, 60).await;
        let idle = TestQueue::new(Kind::Server, 60).await;
        let (TestQueue::Server { url: busy_url, .. }, TestQueue::Server { url: idle_url, .. }) =
            (&busy, &idle)
        else {
            unreachable!("server queues")
        };
        let outage = secs(8);
        proxy.outage(&["ReceiveMessage"], outage);
        let outage_started = Instant::now();
        let hold = [("HOLD_SECS", "3600"), ("UNHEALTHY_AFTER_SECS", "2")];
        let mut worker = Worker::start(&proxy.endpoint, busy_url, &hold);
        let mut idle_worker = Worker::start(&common::server_endpoint(), idle_url, &[]);
        let address = worker.address().await;

        // During the outage: unhealthy once receives have failed for 2 s, and the metrics say
        // why.
        let mut probe = (0, String::new());
        while outage_started.elapsed() < outage - secs(1) {
            probe = get(&address, "/healthz").await;
            if probe.0 == 503 {
                break;
            }
            sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(probe.0, 503, "unhealthy during the outage: {probe:?}");
        assert!(probe.1.contains("receives failing"), "{probe:?}");
        let (_, metrics) = get(&address, "/metrics").await;
        let failing = sample(&metrics, "sqs_consumer_consecutive_receive_failures");
        assert!(failing >= Some(1.0), "{metrics}");
        report(&format!(
            "kubernetes example: {:.1?} into the outage, /healthz {} ({}), \
             sqs_consumer_consecutive_receive_failures {failing:?}",
            outage_started.elapsed(),
            probe.0,
            probe.1.trim()
        ));

        // The message the next answered receive brings: the handler holds it for an hour.
        busy.send("outlives the shutdown timeout").await;
        let healthy_again = async {
            loop {
                if get(&address, "/healthz").await.0 == 200 {
                    return;
                }
                sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::time::timeout(secs(40), healthy_again)
            .await
            .expect("healthy again after the outage");
        let (_, metrics) = get(&address, "/metrics").await;
        assert_eq!(
            sample(&metrics, "sqs_consumer_consecutive_receive_failures"),
            Some(0.0)
        );
        assert!(sample(&metrics, "sqs_consumer_receive_failures_total") >= Some(1.0));
        assert!(sample(&metrics, "sqs_consumer_last_receive_timestamp_seconds") > Some(1e9));
        let received = async {
            loop {
                let (_, page) = get(&address, "/metrics").await;
                if sample(&page, "sqs_consumer_received_total") == Some(1.0) {
                    return;
                }
                sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(secs(30), received)
            .await
            .expect("the message received");
        // The next long poll starts as the message is handed out: now both are under way.
        sleep(Duration::from_millis(500)).await;

        assert!(
            idle_worker.said("consumer started"),
            "{}",
            idle_worker.log()
        );
        let idle_sent = idle_worker.terminate();
        let sent = worker.terminate();
        let ((status, took), (idle_status, idle_took)) = tokio::join!(
            worker.exit(sent, WORST_STOP + secs(2)),
            idle_worker.exit(idle_sent, secs(25)),
        );
        report(&format!(
            "kubernetes example: SIGTERM to exit {took:.2?} with a poll under way and a handler \
             outliving the shutdown timeout; {idle_took:.2?} with only a poll under way"
        ));
        assert!(status.success(), "{status:?}:\n{}", worker.log());
        assert!(took <= WORST_STOP, "{took:?}:\n{}", worker.log());
        assert!(
            idle_status.success(),
            "{idle_status:?}:\n{}",
            idle_worker.log()
        );
        assert!(
            idle_took <= secs(21),
            "{idle_took:?}:\n{}",
            idle_worker.log()
        );
        for said in [
            "SIGTERM received: stopping",
            "waiting for 1 receive under way",
        ] {
            assert!(idle_worker.said(said), "{said:?}:\n{}", idle_worker.log());
            assert!(worker.said(said), "{said:?}:\n{}", worker.log());
        }
        assert!(
            worker.said("handlers still running at the shutdown timeout"),
            "{}",
            worker.log()
        );
        let last = worker
            .stdout
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default();
        assert!(
            last.starts_with("stopped: 1 received, 0 acked, 1 released, "),
            "{last}"
        );
        // Nothing left hidden: the message is back at once.
        let again = busy.receive_raw(Duration::ZERO).await;
        assert_eq!(again.len(), 1, "released before the exit");
        assert_eq!(
            idle.counts().await,
            (0, 0),
            "nothing hidden on the idle queue"
        );
    }
}
