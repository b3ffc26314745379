//! A worker as Kubernetes (or ECS, or systemd) runs it:
//!
//! - it stops gracefully on SIGTERM ([`shutdown_signal`](sqs_consumer::shutdown_signal)):
//!   with the default settings within 28 s, inside the 30 s grace period Kubernetes gives
//!   before SIGKILL, what it still holds released for another worker;
//! - `GET /healthz` answers `200 ok`, or `503` once receives have failed with none answered
//!   for longer than `UNHEALTHY_AFTER_SECS` (default 60 s: three long polls), for a liveness
//!   probe; a receive that keeps failing for 5 minutes (`give_up_after`) ends the process
//!   anyway, with the error;
//! - `GET /metrics` exports the consumer's counters for Prometheus.
//!
//! ```text
//! QUEUE_URL=https://sqs.eu-west-1.amazonaws.com/123456789012/jobs cargo run --example kubernetes \
//!     --features metrics
//! serving /healthz and /metrics on http://0.0.0.0:8080
//! ...                                   # then SIGTERM (kubectl delete pod, docker stop):
//! stopped: 120 received, 120 acked, 0 released, 0 receive failures
//! ```
//!
//! `HEALTH_ADDR` (default `0.0.0.0:8080`) is where the two endpoints listen; `HOLD_SECS`
//! (default 0) makes the handler hold each message that long before acking. In the pod:
//!
//! ```yaml
//! terminationGracePeriodSeconds: 30   # the default; a stop takes at most 28 s
//! livenessProbe:
//!   httpGet: { path: /healthz, port: 8080 }
//!   periodSeconds: 10
//!   failureThreshold: 3
//! ```

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sqs_consumer::{BoxError, Consumer, Delivery, Stats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Unhealthy: receives failing, and none answered for longer than `unhealthy_after` (since
/// the consumer started, if none ever was: `running_for`). A queue that is merely quiet, or a
/// worker whose `max_in_flight` slots are all busy, stays healthy: no receive fails then.
fn healthy(stats: &Stats, running_for: Duration, unhealthy_after: Duration) -> bool {
    stats.consecutive_receive_failures == 0
        || stats.since_last_receive.unwrap_or(running_for) <= unhealthy_after
}

/// Serves `/healthz` and `/metrics` on `listener` until the process ends.
async fn serve(
    listener: TcpListener,
    consumer: Consumer,
    metrics: PrometheusHandle,
    unhealthy_after: Duration,
) {
    let started = tokio::time::Instant::now();
    while let Ok((mut stream, _)) = listener.accept().await {
        let (consumer, metrics) = (consumer.clone(), metrics.clone());
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&request[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/healthz" if healthy(&consumer.stats(), started.elapsed(), unhealthy_after) => {
                    ("200 OK", "ok\n".to_owned())
                }
                "/healthz" => {
                    let stats = consumer.stats();
                    let quiet = stats.since_last_receive.unwrap_or(started.elapsed());
                    let body = format!(
                        "receives failing: {} in a row, none answered for {} s\n",
                        stats.consecutive_receive_failures,
                        quiet.as_secs()
                    );
                    ("503 Service Unavailable", body)
                }
                "/metrics" => ("200 OK", metrics.render()),
                _ => ("404 Not Found", "not found\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

fn env_secs(name: &str, default: u64) -> Duration {
    let secs = std::env::var(name).ok().and_then(|s| s.parse().ok());
    Duration::from_secs(secs.unwrap_or(default))
}

/// The error, if any, said on one line (its `Display`: what failed and why), not its `Debug`.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match work_until_stopped().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn work_until_stopped() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            // The consumer says what failed in one line; the SDK's credentials chain would
            // add its own, with its whole `Debug` output.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,aws_config=error".into()),
        )
        .with_writer(std::io::stderr)
        // Escape codes only on a terminal: not in the lines a log collector keeps.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Installed before the consumer is built: its counters register with it.
    let metrics = PrometheusBuilder::new().install_recorder()?;

    let queue_url = std::env::var("QUEUE_URL").map_err(|_| "set QUEUE_URL to the queue's URL")?;
    let hold = env_secs("HOLD_SECS", 0);
    let unhealthy_after = env_secs("UNHEALTHY_AFTER_SECS", 60);
    let consumer = Consumer::from_env(queue_url).await.build()?;

    let addr = std::env::var("HEALTH_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".into());
    let listener = TcpListener::bind(&addr).await?;
    println!(
        "serving /healthz and /metrics on http://{}",
        listener.local_addr()?
    );
    tokio::spawn(serve(listener, consumer.clone(), metrics, unhealthy_after));

    let handler = move |delivery: Delivery| async move {
        tokio::time::sleep(hold).await;
        delivery.ack().await
    };
    let ended = consumer
        .run_until(handler, sqs_consumer::shutdown_signal())
        .await;
    let s = consumer.stats();
    println!(
        "stopped: {} received, {} acked, {} released, {} receive failures",
        s.received, s.acked, s.released, s.receive_failures
    );
    Ok(ended?)
}
