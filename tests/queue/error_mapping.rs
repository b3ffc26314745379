//! Every SQS error the crate classifies, sent through the real SDK, leads to the behaviour the
//! guide's errors page (`docs/errors.md`) documents: lost, retried with back-off, or fatal. Service errors
//! come from `aws-smithy-mocks`; timeouts from a connector that never answers; credential and
//! region failures from the SDK's own configuration. All on the paused clock.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{future, ProvideCredentials};
use aws_sdk_sqs::config::http::{HttpRequest, HttpResponse};
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::Client;
use aws_smithy_mocks::mock;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use sqs_consumer::{Consumer, Delivery, Error, LostReason};
use tokio::time::{sleep, timeout, Instant};

use crate::common;

use common::sdk::{
    change_answer, consumer, deletes, deletes_failing, extensions_succeed, mocked, one_deleted,
    one_extended, one_extension_failed, one_message, receive_once, sqs_error, URL,
};
use common::take_one;

/// Whole-request errors that are retried with back-off (status, code as SQS sends it).
const RETRYABLE: &[(u16, &str)] = &[
    (400, "AWS.SimpleQueueService.RequestThrottled"),
    (400, "ThrottlingException"),
    (400, "KMS.ThrottlingException"),
    (400, "KmsThrottled"),
    (403, "OverLimit"),
    (500, "InternalError"),
    (500, "InternalFailure"),
    (503, "ServiceUnavailable"),
    (408, "RequestTimeout"),
    (500, "SomethingNew"),
    (429, "SomethingNewAndThrottled"),
    // Temporary credentials that ran out: the provider hands out fresh ones on a later try.
    (403, "ExpiredToken"),
];

/// Whole-request errors that are fatal: retrying cannot help.
const FATAL: &[(u16, &str)] = &[
    (400, "AWS.SimpleQueueService.NonExistentQueue"),
    (400, "QueueDoesNotExist"),
    (403, "AccessDenied"),
    (400, "AccessDeniedException"),
    (403, "InvalidClientTokenId"),
    (403, "SignatureDoesNotMatch"),
    (400, "KMS.AccessDeniedException"),
    (400, "KmsAccessDenied"),
    (400, "KmsDisabled"),
    (400, "KmsNotFound"),
    (400, "InvalidParameterValue"),
    (400, "InvalidAddress"),
    (400, "AWS.SimpleQueueService.UnsupportedOperation"),
    (400, "SomethingNewFromTheCaller"),
];

/// Entry errors that mean the delivery is gone.
const LOST: &[(&str, LostReason)] = &[
    ("ReceiptHandleIsInvalid", LostReason::ReceiptHandleInvalid),
    (
        "AWS.SimpleQueueService.MessageNotInflight",
        LostReason::NotInFlight,
    ),
    ("MessageNotInflight", LostReason::NotInFlight),
];

fn short(code: &str) -> &str {
    code.rsplit('.').next().unwrap()
}

#[tokio::test(start_paused = true)]
async fn receive_errors_end_the_run_when_fatal_and_are_retried_with_back_off_otherwise() {
    for &(status, code) in FATAL {
        let receive = mock!(Client::receive_message)
            .sequence()
            .http_response(move || sqs_error(status, code))
            .repeatedly()
            .build();
        let client = mocked(&[&receive]);
        let err = timeout(
            Duration::from_secs(60),
            consumer(client).run(|d: Delivery| d.ack()),
        )
        .await
        .unwrap_or_else(|_| panic!("{code}: the run did not end"))
        .unwrap_err();
        assert!(err.is_fatal() && !err.is_retryable(), "{code}: {err}");
        assert_eq!(err.code().map(short), Some(short(code)), "{code}");
        assert_eq!(
            receive.num_calls(),
            1,
            "{code}: a fatal error is not retried"
        );
    }
    for &(status, code) in RETRYABLE {
        let receive = mock!(Client::receive_message)
            .sequence()
            .http_response(move || sqs_error(status, code))
            .times(6)
            .output(one_message)
            .output(|| ReceiveMessageOutput::builder().build())
            .repeatedly()
            .build();
        let (change, delete) = (extensions_succeed(), deletes());
        let client = mocked(&[&receive, &change, &delete]);
        let start = Instant::now();
        let d = take_one(&consumer(client)).await;
        // Six failures, each followed by the consumer's back-off (200 ms doubling, jittered
        // to half of it at least: 100 + 200 + ... + 3,200 ms): never a hot loop.
        assert!(
            start.elapsed() >= Duration::from_millis(6_300),
            "{code}: {:?}",
            start.elapsed()
        );
        assert_eq!(d.message_id(), "m-1", "{code}");
        d.ack().await.unwrap_or_else(|e| panic!("{code}: {e}"));
    }
}

#[tokio::test(start_paused = true)]
async fn extension_errors_lose_the_delivery_only_when_sqs_says_it_is_gone() {
    // Entry errors that mean the message is gone: lost at the first extension.
    for &(code, reason) in LOST {
        let change = mock!(Client::change_message_visibility_batch)
            .then_compute_output(move |req| change_answer(req, |_| true, code));
        let (receive, delete) = (receive_once(), deletes());
        let client = mocked(&[&receive, &change, &delete]);
        let d = take_one(&consumer(client)).await;
        assert_eq!(d.lost().await, reason, "{code}");
        assert_eq!(change.num_calls(), 1, "{code}: not retried");
        let err = d.ack().await.unwrap_err();
        assert!(err.is_lost(), "{code}: {err}");
    }
    // Transient whole-request errors: retried, and the delivery stays held.
    for &(status, code) in RETRYABLE {
        let change = mock!(Client::change_message_visibility_batch)
            .sequence()
            .http_response(move || sqs_error(status, code))
            .times(3)
            .output(one_extended)
            .repeatedly()
            .build();
        let (receive, delete) = (receive_once(), deletes());
        let client = mocked(&[&receive, &change, &delete]);
        let d = take_one(&consumer(client)).await;
        sleep(Duration::from_secs(60)).await;
        assert!(!d.is_lost(), "{code}");
        d.ack().await.unwrap_or_else(|e| panic!("{code}: {e}"));
    }
    // Fatal whole-request errors (access denied, say): retried with back-off until the
    // deadline, since only SQS can say the message is gone; then the delivery is lost.
    // InvalidParameterValue is the one exception: on an extension it is SQS refusing the
    // visibility (an_extension_refused_as_invalid_stops_extending_until_the_deadline).
    let fatal = FATAL
        .iter()
        .filter(|(_, code)| *code != "InvalidParameterValue");
    for &(status, code) in fatal {
        let change = mock!(Client::change_message_visibility_batch)
            .sequence()
            .http_response(move || sqs_error(status, code))
            .repeatedly()
            .build();
        let (receive, delete) = (receive_once(), deletes());
        let client = mocked(&[&receive, &change, &delete]);
        let d = take_one(&consumer(client)).await;
        let start = Instant::now();
        assert_eq!(d.lost().await, LostReason::ExtensionFailed, "{code}");
        // Due at 5 s, lost when the visibility ran out at 10 s: tries at least 100 ms apart
        // between (about 15), never a burst of them as the deadline nears.
        assert!(start.elapsed() <= Duration::from_secs(10), "{code}");
        assert!(
            (2..=16).contains(&change.num_calls()),
            "{code}: {} calls",
            change.num_calls()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_extension_refused_as_invalid_stops_extending_until_the_deadline() {
    // What SQS answers when an extension would end past its 12-hour limit by its own clock.
    let change = mock!(Client::change_message_visibility_batch)
        .sequence()
        .http_response(|| sqs_error(400, "InvalidParameterValue"))
        .repeatedly()
        .build();
    let (receive, delete) = (receive_once(), deletes());
    let client = mocked(&[&receive, &change, &delete]);
    let d = take_one(&consumer(client)).await;
    let start = Instant::now();
    assert_eq!(d.lost().await, LostReason::HardDeadline);
    // Refused at 5 s, not asked again, lost when the visibility ends at 10 s.
    assert_eq!(change.num_calls(), 1, "not retried");
    assert_eq!(start.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn ack_errors_are_lost_fatal_or_retried() {
    for &(code, _) in LOST {
        let (receive, change, delete) =
            (receive_once(), extensions_succeed(), deletes_failing(code));
        let client = mocked(&[&receive, &change, &delete]);
        let err = take_one(&consumer(client)).await.ack().await.unwrap_err();
        assert!(err.is_lost(), "{code}: {err}");
        assert_eq!(delete.num_calls(), 1, "{code}");
    }
    for &(status, code) in FATAL {
        let delete = mock!(Client::delete_message_batch)
            .sequence()
            .http_response(move || sqs_error(status, code))
            .repeatedly()
            .build();
        let (receive, change) = (receive_once(), extensions_succeed());
        let client = mocked(&[&receive, &change, &delete]);
        let err = take_one(&consumer(client)).await.ack().await.unwrap_err();
        assert!(err.is_fatal(), "{code}: {err}");
        assert_eq!(
            delete.num_calls(),
            1,
            "{code}: a fatal error is not retried"
        );
    }
    for &(status, code) in RETRYABLE {
        let delete = mock!(Client::delete_message_batch)
            .sequence()
            .http_response(move || sqs_error(status, code))
            .times(2)
            .output(one_deleted)
            .build();
        let (receive, change) = (receive_once(), extensions_succeed());
        let client = mocked(&[&receive, &change, &delete]);
        let d = take_one(&consumer(client)).await;
        d.ack().await.unwrap_or_else(|e| panic!("{code}: {e}"));
        assert_eq!(delete.num_calls(), 3, "{code}");
    }
}

// ---- Timeouts, credentials, region: no mocked answer, the SDK's own failures ----

/// A connector that answers `ReceiveMessage` with one message and then nothing, and never
/// answers anything else (or, with `hang_receives`, nothing at all).
#[derive(Debug, Clone, Default)]
struct Silent {
    hang_receives: bool,
    receives: Arc<AtomicUsize>,
    others: Arc<AtomicUsize>,
}

impl HttpConnector for Silent {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        if target.ends_with("ReceiveMessage") && !self.hang_receives {
            let body = if self.receives.fetch_add(1, SeqCst) == 0 {
                r#"{"Messages":[{"MessageId":"m-1","ReceiptHandle":"handle-1","Body":"work"}]}"#
            } else {
                "{}"
            };
            let mut response = HttpResponse::new(StatusCode::try_from(200).unwrap(), body.into());
            response
                .headers_mut()
                .insert("content-type", "application/x-amz-json-1.0");
            return HttpConnectorFuture::ready(Ok(response));
        }
        if target.ends_with("ReceiveMessage") {
            self.receives.fetch_add(1, SeqCst);
        } else {
            self.others.fetch_add(1, SeqCst);
        }
        HttpConnectorFuture::new(std::future::pending())
    }
}

impl HttpClient for Silent {
    fn http_connector(
        &self,
        _: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

fn client_with(
    http: Silent,
    credentials: impl ProvideCredentials + 'static,
    region: Option<&'static str>,
) -> Client {
    let mut config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .credentials_provider(credentials)
        .http_client(http);
    config.set_region(region.map(Region::new));
    Client::from_conf(config.build())
}

fn test_credentials() -> Credentials {
    Credentials::new("test", "test", None, None, "test")
}

/// A consumer of a server answered by `http`, with test credentials and a region, and the
/// given settings.
fn silent_consumer(
    http: &Silent,
    settings: impl FnOnce(sqs_consumer::ConsumerBuilder) -> sqs_consumer::ConsumerBuilder,
) -> Consumer {
    let client = client_with(http.clone(), test_credentials(), Some("us-east-1"));
    settings(Consumer::builder(client, URL)).build().unwrap()
}

/// A delivery held for a 600 s visibility, received through `http`.
async fn held_long(http: &Silent) -> Delivery {
    let consumer = silent_consumer(http, |b| b.visibility_timeout(Duration::from_secs(600)));
    take_one(&consumer).await
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_receive_times_out_and_is_retried() {
    let http = Silent {
        hang_receives: true,
        ..Silent::default()
    };
    let consumer = silent_consumer(&http, |b| {
        b.visibility_timeout(Duration::from_secs(10))
            .wait_time(Duration::ZERO)
    });
    let run = timeout(Duration::from_secs(65), consumer.run(|d: Delivery| d.ack())).await;
    assert!(run.is_err(), "the run goes on: {run:?}");
    // Each try gives up after 10 s, then backs off: 4 to 6 tries in 65 s.
    let tries = http.receives.load(SeqCst);
    assert!((4..=6).contains(&tries), "{tries} tries");
}

/// A stop waits for the receive under way, but not for ever: a server that never answers
/// loses it at its bound (wait time + request timeout), and no receive follows.
#[tokio::test(start_paused = true)]
async fn a_stop_while_a_receive_goes_unanswered_ends_at_its_request_timeout() {
    let http = Silent {
        hang_receives: true,
        ..Silent::default()
    };
    let (wait, request_timeout) = (Duration::from_secs(2), Duration::from_secs(3));
    let consumer = silent_consumer(&http, |b| {
        b.visibility_timeout(Duration::from_secs(10))
            .wait_time(wait)
            .request_timeout(request_timeout)
    });
    let start = tokio::time::Instant::now();
    let signal = tokio::time::sleep(Duration::from_secs(1));
    consumer
        .run_until(|d: Delivery| d.ack(), signal)
        .await
        .unwrap();
    let took = start.elapsed();
    let bound = wait + request_timeout;
    assert!(
        took >= bound && took < bound + Duration::from_millis(100),
        "{took:?}, the receive's bound {bound:?}"
    );
    assert_eq!(http.receives.load(SeqCst), 1, "no receive after the signal");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_ack_times_out_as_a_retryable_error() {
    let http = Silent::default();
    let d = held_long(&http).await;
    let start = Instant::now();
    let err = d.ack().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("no answer"), "{err}");
    // Tries of 10 s each, retried (by the ack, and only by it) while its 20 s window lasts;
    // the message comes back when its visibility timeout lapses, as with any failed ack.
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(20) && elapsed < Duration::from_secs(21),
        "{elapsed:?}"
    );
    assert_eq!(http.others.load(SeqCst), 2, "one request per try");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_extension_loses_the_delivery_at_its_deadline_not_later() {
    let http = Silent::default();
    let consumer = silent_consumer(&http, |b| {
        b.visibility_timeout(Duration::from_secs(10))
            .request_timeout(Duration::from_secs(2))
    });
    let d = take_one(&consumer).await;
    let received = d.received_at();
    assert_eq!(d.lost().await, LostReason::ExtensionFailed);
    // Due at 5 s; each try gives up after 2 s and is tried again (by the keeper) until
    // the visibility ends at 10 s.
    let lost_after = received.elapsed();
    assert!(
        lost_after <= Duration::from_secs(10) + Duration::from_millis(50),
        "{lost_after:?}"
    );
    let tries = http.others.load(SeqCst);
    assert!((2..=3).contains(&tries), "{tries} tries");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_release_gives_up_after_its_tries() {
    let http = Silent::default();
    let d = held_long(&http).await;
    let start = Instant::now();
    let err = d.release().await.unwrap_err();
    assert!(
        err.is_retryable() && err.to_string().contains("no answer"),
        "{err}"
    );
    // Four tries of 10 s, with back-off (100 ms doubling, jittered) between them.
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(40) && elapsed < Duration::from_secs(42),
        "{elapsed:?}"
    );
    assert_eq!(http.others.load(SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_queue_attribute_read_times_out_and_is_retried() {
    // No visibility timeout set: the consumer reads the queue's own at start.
    let http = Silent::default();
    let consumer = silent_consumer(&http, |b| b);
    let run = timeout(Duration::from_secs(65), consumer.run(|d: Delivery| d.ack())).await;
    assert!(run.is_err(), "the run goes on: {run:?}");
    // Each read gives up after 10 s, then backs off (200 ms doubling): 4 to 6 reads in 65 s,
    // and no receive before one succeeds.
    let reads = http.others.load(SeqCst);
    assert!((4..=6).contains(&reads), "{reads} reads");
    assert_eq!(http.receives.load(SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stop_while_the_queue_attribute_read_goes_unanswered_ends_at_once() {
    let http = Silent::default();
    let consumer = silent_consumer(&http, |b| b);
    let start = tokio::time::Instant::now();
    let signal = tokio::time::sleep(Duration::from_secs(3));
    let run = timeout(
        Duration::from_secs(60),
        consumer.run_until(|d: Delivery| d.ack(), signal),
    );
    run.await.expect("the stop ends the start-up").unwrap();
    // Nothing is taken by a read of the queue's attributes: no need to wait for its answer.
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(http.receives.load(SeqCst), 0, "no receive ever started");
}

/// Makes a credentials provider's error.
type Failure = fn() -> CredentialsError;

/// A credentials provider that always fails with the error its `Failure` makes.
#[derive(Debug)]
struct FailingCredentials(Failure);

impl ProvideCredentials for FailingCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::ready(Err((self.0)()))
    }
}

/// Times out `failures` times, then hands out credentials.
#[derive(Debug)]
struct FlakyCredentials {
    failures: usize,
    calls: Arc<AtomicUsize>,
}

impl ProvideCredentials for FlakyCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        let call = self.calls.fetch_add(1, SeqCst);
        future::ProvideCredentials::ready(if call < self.failures {
            Err(CredentialsError::provider_timed_out(Duration::from_secs(1)))
        } else {
            Ok(test_credentials())
        })
    }
}

fn fatal_message(err: &Error) -> String {
    assert!(err.is_fatal(), "{err}");
    err.to_string()
}

#[tokio::test(start_paused = true)]
async fn a_missing_region_ends_the_run_with_a_clear_error() {
    let client = client_with(Silent::default(), test_credentials(), None);
    let err = consumer(client)
        .run(|d: Delivery| d.ack())
        .await
        .unwrap_err();
    assert!(fatal_message(&err).contains("region"), "{err}");
}

/// A broken credentials configuration (here a profile the provider cannot use) ends the run
/// at its first failure: retrying would read the same configuration.
#[tokio::test(start_paused = true)]
async fn a_broken_credentials_configuration_ends_the_run_at_once() {
    let (err, took) = run_with_credentials_failing(|| {
        CredentialsError::invalid_configuration("profile `jobs` has no role_arn (test)")
    })
    .await;
    assert!(
        fatal_message(&err).contains("the AWS credentials configuration is invalid"),
        "{err}"
    );
    assert_eq!(took, Duration::ZERO, "not retried");
}

/// The error a consumer with default settings ends its run with, and how long the run took,
/// when its credentials provider always fails with `fail`'s error.
async fn run_with_credentials_failing(fail: Failure) -> (Error, Duration) {
    let client = client_with(
        Silent::default(),
        FailingCredentials(fail),
        Some("us-east-1"),
    );
    let start = Instant::now();
    let err = consumer(client)
        .run(|d: Delivery| d.ack())
        .await
        .unwrap_err();
    (err, start.elapsed())
}

/// Every kind of credentials failure (none found: the chain says "not found"; a provider
/// that fails: an instance metadata service answering 403; one that times out) is retried,
/// and ends `run` with that error once failures have gone on for `give_up_after`, within one
/// back-off more. Each retried failure is one short line, rate-limited.
#[tokio::test(start_paused = true)]
async fn every_kind_of_credentials_failure_ends_the_run_after_give_up_after() {
    let kinds: [(Failure, &str); 3] = [
        (
            // As `aws-config`'s chain says it: each provider tried on a line of its own.
            || {
                CredentialsError::not_loaded(
                    "no credentials found in chain (test). Attempted:\n  Environment: \
                     environment variable not set\n  Profile: the credential provider was not \
                     enabled",
                )
            },
            "no AWS credentials were found",
        ),
        (
            || CredentialsError::provider_error("IMDS answered 403 Forbidden (test)"),
            "the AWS credentials provider failed",
        ),
        (
            || CredentialsError::provider_timed_out(Duration::from_secs(1)),
            "the AWS credentials provider failed",
        ),
    ];
    let give_up_after = Duration::from_secs(60);
    for (fail, says) in kinds {
        let (logs, _guard) = common::capture_logs();
        let client = client_with(
            Silent::default(),
            FailingCredentials(fail),
            Some("us-east-1"),
        );
        let consumer = Consumer::builder(client, URL)
            .visibility_timeout(Duration::from_secs(10))
            .give_up_after(give_up_after)
            .build()
            .unwrap();
        let start = Instant::now();
        let err = consumer.run(|d: Delivery| d.ack()).await.unwrap_err();
        let took = start.elapsed();
        assert!(err.is_retryable(), "{err}");
        assert!(err.to_string().contains(says), "{err}");
        // The back-off doubles from 200 ms to at most 20 s: one more than that at most.
        assert!(
            took >= give_up_after && took <= give_up_after + Duration::from_secs(20),
            "{took:?}"
        );
        let stats = consumer.stats();
        assert!(stats.receive_failures >= 6, "{stats:?}");
        assert_eq!(stats.consecutive_receive_failures, stats.receive_failures);
        assert_eq!(
            stats.since_last_receive, None,
            "no receive was ever answered"
        );
        let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        // One line per failure, whatever the error's text holds: no line goes on another.
        for line in text.lines() {
            assert!(
                !line.starts_with(char::is_whitespace) && !line.is_empty(),
                "{line:?} in {text}"
            );
            if line.contains("Attempted:") {
                assert!(line.contains("Attempted: Environment: "), "{line}");
                assert!(line.contains("; Profile: "), "{line}");
            }
        }
        let warns: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
        // At the 1st, 2nd, 4th, 8th, ... failure: a handful, not one per failure.
        let expected = (u64::BITS - stats.receive_failures.leading_zeros()) as usize;
        assert_eq!(warns.len(), expected, "{text}");
        for line in &warns {
            assert!(
                line.contains("receive failed; retrying") && line.contains(says),
                "{line}"
            );
            assert!(
                line.contains("retry_in=") && line.contains("give_up_in="),
                "{line}"
            );
            // The error chain only (the providers' list included): no SDK `Debug` dump.
            assert!(line.len() < 700, "{} bytes: {line}", line.len());
            for debug in ["{", "Some(", "source:", "ConnectorError"] {
                assert!(!line.contains(debug), "{debug} in {line}");
            }
        }
        let last = text.lines().rev().find(|l| l.contains(" ERROR ")).unwrap();
        assert!(
            last.contains("give_up_after (1m 0s)") && last.contains(says),
            "{last}"
        );
    }
}

/// The calls before the first receive (here the read of the queue's visibility timeout, none
/// being set) count as receives: failing for `give_up_after`, they end `run` too.
#[tokio::test(start_paused = true)]
async fn a_start_whose_calls_keep_failing_gives_up_too() {
    let client = client_with(
        Silent::default(),
        FailingCredentials(|| CredentialsError::not_loaded("none (test)")),
        Some("us-east-1"),
    );
    let consumer = Consumer::builder(client, URL)
        .give_up_after(Duration::from_secs(30))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = consumer.run(|d: Delivery| d.ack()).await.unwrap_err();
    let took = start.elapsed();
    assert!(err.to_string().contains("GetQueueAttributes"), "{err}");
    assert!(
        took >= Duration::from_secs(30) && took <= Duration::from_secs(61),
        "{took:?}"
    );
    let stats = consumer.stats();
    assert!(stats.receive_failures >= 5, "{stats:?}");
    assert_eq!(stats.since_last_receive, None);
}

/// Without a `give_up_after` of its own, a consumer gives up after 5 minutes.
#[tokio::test(start_paused = true)]
async fn the_default_give_up_after_is_five_minutes() {
    let (err, took) = run_with_credentials_failing(|| {
        CredentialsError::provider_error("IMDS answered 403 (test)")
    })
    .await;
    assert!(err.is_retryable(), "{err}");
    assert!(
        took >= Duration::from_secs(300) && took <= Duration::from_secs(320),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_credentials_provider_timing_out_is_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let credentials = FlakyCredentials {
        failures: 3,
        calls: calls.clone(),
    };
    let client = client_with(Silent::default(), credentials, Some("us-east-1"));
    let d = take_one(&consumer(client)).await;
    assert_eq!(d.message_id(), "m-1");
    assert!(calls.load(SeqCst) >= 4);
}

// ---- One owner per retry: the SDK makes one attempt per call ----

/// Counts calls (executions) and HTTP attempts of every operation.
#[derive(Debug, Clone, Default)]
struct Attempts {
    calls: Arc<AtomicUsize>,
    attempts: Arc<AtomicUsize>,
}

impl aws_smithy_runtime_api::client::interceptors::Intercept for Attempts {
    fn name(&self) -> &'static str {
        "Attempts"
    }

    fn read_before_execution(
        &self,
        _: &aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef<'_>,
        _: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        self.calls.fetch_add(1, SeqCst);
        Ok(())
    }

    fn read_before_attempt(
        &self,
        _: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        self.attempts.fetch_add(1, SeqCst);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_sdk_makes_one_attempt_per_call_even_when_the_client_would_retry() {
    // Every kind of call fails transiently a few times, on a client configured for three
    // attempts per call: the consumer's calls still make one attempt each, because the
    // consumer retries them itself (receive, extension, ack).
    let receive = mock!(Client::receive_message)
        .sequence()
        .http_response(|| sqs_error(500, "InternalError"))
        .times(3)
        .output(one_message)
        .output(|| ReceiveMessageOutput::builder().build())
        .repeatedly()
        .build();
    let change = mock!(Client::change_message_visibility_batch)
        .sequence()
        .http_response(|| sqs_error(503, "ServiceUnavailable"))
        .times(2)
        .output(one_extended)
        .repeatedly()
        .build();
    let delete = mock!(Client::delete_message_batch)
        .sequence()
        .http_response(|| sqs_error(500, "InternalError"))
        .times(2)
        .output(one_deleted)
        .build();
    let counted = Attempts::default();
    let interceptor = counted.clone();
    let client = aws_smithy_mocks::mock_client!(
        aws_sdk_sqs,
        aws_smithy_mocks::RuleMode::MatchAny,
        &[&receive, &change, &delete],
        move |conf| conf
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::standard().with_max_attempts(3))
            .interceptor(interceptor.clone())
    );
    let d = take_one(&consumer(client)).await;
    sleep(Duration::from_secs(12)).await; // two extension rounds, the first retried
    assert!(!d.is_lost());
    d.ack()
        .await
        .expect("the ack gets through on its third try");
    assert!(receive.num_calls() >= 4, "{}", receive.num_calls());
    assert!(change.num_calls() >= 3, "{}", change.num_calls());
    assert_eq!(delete.num_calls(), 3);
    let (calls, attempts) = (counted.calls.load(SeqCst), counted.attempts.load(SeqCst));
    assert!(calls >= 10, "{calls}");
    assert_eq!(attempts, calls, "an SDK retry happened");
}

#[tokio::test(start_paused = true)]
async fn an_extension_of_a_message_that_no_longer_exists_loses_the_delivery_at_once() {
    // What AWS answers (a batch entry's code and message) when the message was deleted or
    // received again by someone else: not a refused visibility, a lost delivery. The answer
    // quotes the whole receipt handle; the warning shows only its start.
    const HANDLE: &str = "AQEBzWwaftRI0KuVm4tP7q1rGgNqicHq6vxjmoxnWHVpxRNhdYtaYF0Zr8k2J8pQ";
    let (logs, _guard) = common::capture_logs();
    let change = mock!(Client::change_message_visibility_batch).then_output(|| {
        one_extension_failed(
            "InvalidParameterValue",
            &format!(
                "Value {HANDLE} for parameter ReceiptHandle is invalid. Reason: Message does \
                 not exist or is not available for visibility timeout change."
            ),
        )
    });
    let (receive, delete) = (receive_once(), deletes());
    let client = mocked(&[&receive, &change, &delete]);
    let d = take_one(&consumer(client)).await;
    let received = d.received_at();
    assert_eq!(d.lost().await, LostReason::ReceiptHandleInvalid);
    assert_eq!(
        received.elapsed(),
        Duration::from_secs(5),
        "lost at the first round"
    );
    assert_eq!(change.num_calls(), 1, "not retried");
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("delivery lost"))
        .unwrap_or_else(|| panic!("a warning: {text}"));
    assert!(
        line.contains("Value AQEBzWwa… for parameter ReceiptHandle") && !text.contains(HANDLE),
        "{line}"
    );
}
