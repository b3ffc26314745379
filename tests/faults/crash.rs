//! Crash recovery with a real process: a consumer process is killed with SIGKILL in the middle
//! of its work, a second consumer finishes the queue, and nothing is lost. The killed process
//! is this test binary run again for its `crash_child` entry point, which is ignored in an
//! ordinary run (it is not a test on its own: it runs only as the parent's child).

use crate::common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{left_on_server, secs, server_client, server_queue_with};
use sqs_consumer::{Consumer, Delivery};
use tokio::time::{sleep, Instant};

const MESSAGES: usize = 200;
/// The child is killed once it has acked this many messages and has at least
/// `MID_HANDLING` more mid-handling (started, not acked), as far as its output shows.
const ACKED_FIRST: usize = MESSAGES / 4;
const MID_HANDLING: usize = 5;
const CHILD_QUEUE: &str = "SQS_CONSUMER_CRASH_CHILD_QUEUE";

/// The consumer process that gets killed: handles each message slowly, reporting
/// `handling <body>` before and `acked <body>` after its ack on stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of `a_consumer_killed_mid_work_loses_nothing`, not a test"]
async fn crash_child() {
    // Run on its own (the test command includes ignored tests) it has nothing to do.
    let Ok(url) = std::env::var(CHILD_QUEUE) else {
        return;
    };
    crate::require_server!("crash_child");
    let consumer = Consumer::builder(server_client(), url)
        .visibility_timeout(secs(3))
        .wait_time(secs(1))
        .max_in_flight(20)
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        println!("handling {}", d.body());
        sleep(Duration::from_millis(300)).await;
        let body = d.body().to_owned();
        d.ack().await?;
        println!("acked {body}");
        Ok::<_, sqs_consumer::Error>(())
    };
    // Runs until the parent kills the process.
    consumer.run(handler).await.unwrap();
}

/// The bodies on lines that start with `prefix`.
fn bodies(lines: &[String], prefix: &str) -> BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(prefix).map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an SQS-compatible server: scripts/with-sqs-server.sh cargo test -- --ignored"]
async fn a_consumer_killed_mid_work_loses_nothing() {
    crate::require_server!("a_consumer_killed_mid_work_loses_nothing");
    let client = server_client();
    let url = server_queue_with(&client, MESSAGES).await;

    // The first process: killed once it has acked a quarter of the messages.
    let mut child = common::KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash::crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_QUEUE, &url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the test binary runs again"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        })
    };
    // Killed only once its work is provably under way: a quarter acked, and several messages
    // started and not acked (their handlers sleep 300 ms between the two lines).
    let start = Instant::now();
    let mid_handling_at_kill = loop {
        let seen = lines.lock().unwrap().clone();
        let acked = bodies(&seen, "acked ");
        let mid = bodies(&seen, "handling ").difference(&acked).count();
        if acked.len() >= ACKED_FIRST && mid >= MID_HANDLING {
            child.0.kill().expect("SIGKILL"); // `Child::kill` sends SIGKILL on Unix
            break mid;
        }
        assert!(
            start.elapsed() < secs(60),
            "the child acked {} with {mid} mid-handling",
            acked.len()
        );
        sleep(Duration::from_millis(5)).await;
    };
    let status = child.0.wait().unwrap();
    reader.join().unwrap();
    let lines = lines.lock().unwrap().clone();
    let first_acked = bodies(&lines, "acked ");
    let cut_off: BTreeSet<String> = bodies(&lines, "handling ")
        .difference(&first_acked)
        .cloned()
        .collect();
    assert!(
        cut_off.len() >= MID_HANDLING,
        "killed while handlers were at work"
    );

    // The second consumer finishes the queue; what the first held comes back after its
    // visibility timeout (3 s), since nothing extends it any more.
    let second: Arc<Mutex<Vec<String>>> = Arc::default();
    // One receive at a time: the test server is not atomic under concurrent receives, and
    // this consumer must handle each message once.
    let consumer = Consumer::builder(server_client(), url.clone())
        .visibility_timeout(secs(3))
        .wait_time(secs(1))
        .max_concurrent_receives(1)
        .build()
        .unwrap();
    let handler = {
        let second = second.clone();
        move |d: Delivery| {
            let second = second.clone();
            async move {
                let body = d.body().to_owned();
                d.ack().await?;
                second.lock().unwrap().push(body);
                Ok::<_, sqs_consumer::Error>(())
            }
        }
    };
    let restart = Instant::now();
    let done = async {
        while left_on_server(&client, &url).await > 0 {
            assert!(restart.elapsed() < secs(90), "the queue was not finished");
            sleep(Duration::from_millis(100)).await;
        }
    };
    consumer.run_until(handler, done).await.unwrap();
    let second: Vec<String> = second.lock().unwrap().clone();
    let second_set: BTreeSet<String> = second.iter().cloned().collect();

    // Nothing lost: the queue is empty, and every message was acked by the killed process or
    // handled once by the survivor, except those whose ack the kill cut short after SQS had
    // taken it (the child started them and never said "acked", and they did not come back).
    let all: BTreeSet<String> = (0..MESSAGES).map(|i| format!("m{i}")).collect();
    let union: BTreeSet<String> = first_acked.union(&second_set).cloned().collect();
    let deleted_unreported: BTreeSet<String> = all.difference(&union).cloned().collect();
    assert!(
        deleted_unreported.is_subset(&cut_off),
        "never handled: {:?}",
        deleted_unreported.difference(&cut_off).collect::<Vec<_>>()
    );
    let twice: BTreeSet<String> = first_acked.intersection(&second_set).cloned().collect();
    assert!(twice.is_empty(), "acked by both: {twice:?}");
    assert_eq!(
        second.len(),
        second_set.len(),
        "a duplicate in the second consumer"
    );
    assert_eq!(left_on_server(&client, &url).await, 0);
    common::report(&format!(
        "crash: killed ({status}) after {} acks with {mid_handling_at_kill} messages \
         mid-handling as far as its output showed ({} by its whole output); the second \
         consumer handled {} ({} of those again) in {:.1?}; {} deleted before the kill \
         without saying so; none lost, none acked twice",
        first_acked.len(),
        cut_off.len(),
        second_set.len(),
        cut_off.intersection(&second_set).count(),
        restart.elapsed(),
        deleted_unreported.len()
    ));
}

/// Whether process `pid` still exists (a child that was waited for is gone).
fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_child_whose_guard_is_dropped_is_killed() {
    let child = common::KillOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    let pid = child.0.id();
    assert!(alive(pid));
    let start = std::time::Instant::now();
    drop(child);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "waited for the child"
    );
    assert!(!alive(pid), "the child outlived its guard");
}

#[test]
fn a_child_past_its_bound_is_killed_and_fails_the_test() {
    // The child prints its pid, then sleeps far past the bound.
    let mut command = Command::new("sh");
    command.args(["-c", "echo $$; exec sleep 60"]);
    let start = std::time::Instant::now();
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        common::output_within(&mut command, Duration::from_millis(500))
    }))
    .expect_err("a child past its bound fails the test");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "waited for the child"
    );
    let message = failed
        .downcast_ref::<String>()
        .expect("the failure says why");
    assert!(message.contains("ran longer than 500ms"), "{message}");
    let pid: u32 = message
        .lines()
        .last()
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {message:?}"));
    assert!(!alive(pid), "the child outlived its bound");
}
