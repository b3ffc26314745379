use std::time::Duration;

use super::*;

/// A call made a task of its own, dropped before its answer, takes its task with it:
/// nothing keeps working for a request nobody waits for.
#[tokio::test(start_paused = true)]
async fn a_call_dropped_before_its_answer_ends_its_task() {
    let (started_tx, started) = tokio::sync::oneshot::channel();
    // Dropped with the call's future: the receiving end then learns it.
    let (alive, task_gone) = tokio::sync::oneshot::channel::<()>();
    let mut call = Box::pin(as_task("ReceiveMessage", async move {
        let _alive = alive;
        let _ = started_tx.send(());
        std::future::pending::<Result<(), Error>>().await
    }));
    tokio::select! {
        _ = started => {}
        _ = &mut call => unreachable!("the call never answers"),
    }
    drop(call);
    // On the paused clock, a task left running would let the hour pass at once.
    let ended = tokio::time::timeout(Duration::from_secs(3600), task_gone).await;
    assert!(ended.is_ok(), "the dropped call's task still runs");
}

/// The call's task runs in the caller's span, for the caller's subscriber (here one set
/// for the test's thread only, while the task runs on a worker): what the SDK logs stays
/// under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_made_a_task_runs_in_the_callers_span() {
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::layer::SubscriberExt::with(
            tracing_subscriber::registry(),
            crate::leak_guard::layer(),
        ));
    let seen = as_task("ReceiveMessage", async {
        Ok::<_, Error>(tracing::Span::current().metadata().map(|m| m.name()))
    })
    .instrument(tracing::info_span!("run"))
    .await;
    assert_eq!(seen.ok().flatten(), Some("run"));
}

/// A panic in the call goes on where the call is awaited.
#[tokio::test]
async fn a_panic_in_a_call_made_a_task_goes_on_where_it_is_awaited() {
    let awaited = tokio::spawn(as_task("ReceiveMessage", async {
        panic!("in the call");
        #[allow(unreachable_code)]
        Ok::<(), Error>(())
    }))
    .await;
    assert!(awaited.is_err_and(|ended| ended.is_panic()));
}

/// A call cut off by its runtime shutting down (awaited off that runtime) is a
/// retryable error that says so, not a panic.
#[test]
fn a_call_cut_off_by_its_runtime_shutting_down_is_a_retryable_error() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let (started_tx, started) = std::sync::mpsc::channel();
    let handle = runtime.handle().clone();
    let awaiting = std::thread::spawn(move || {
        let _in_context = handle.enter();
        futures::executor::block_on(as_task("ReceiveMessage", async move {
            started_tx.send(()).unwrap();
            std::future::pending::<Result<(), Error>>().await
        }))
    });
    started.recv().unwrap();
    runtime.shutdown_background();
    let err = awaiting.join().expect("no panic").unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("runtime shut down"), "{err}");
}

/// Each way a request fails short of SQS's own answer says what failed and whether a
/// retry can help: a request not built, or refused by the client before it was sent, is
/// fatal; one that got no answer in time, reached no server or whose answer could not be
/// read is retryable.
#[test]
fn failures_before_an_answer_say_what_failed_and_whether_to_retry() {
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageError;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;

    type Failure = SdkError<ReceiveMessageError, HttpResponse>;
    let unreadable = HttpResponse::new(
        StatusCode::try_from(200).expect("a valid status"),
        aws_smithy_types::body::SdkBody::from("{not json"),
    );
    // (failure, kind, what the message starts with, the cause it then gives)
    for (err, kind, (says, cause)) in [
        (
            Failure::construction_failure("no region"),
            ErrorKind::Fatal,
            ("the request could not be built", "no region"),
        ),
        (
            Failure::dispatch_failure(ConnectorError::user("a bad endpoint".into())),
            ErrorKind::Fatal,
            ("the request could not be sent", "a bad endpoint"),
        ),
        (
            Failure::dispatch_failure(ConnectorError::io("connection refused".into())),
            ErrorKind::Retryable,
            ("the request could not be sent", "connection refused"),
        ),
        (
            Failure::timeout_error("no answer"),
            ErrorKind::Retryable,
            ("the request timed out", ""),
        ),
        (
            Failure::response_error("expected a JSON object", unreadable),
            ErrorKind::Retryable,
            ("the response could not be read", "expected a JSON object"),
        ),
    ] {
        let Error::Sqs {
            operation,
            message,
            kind: got,
            ..
        } = sdk_error("ReceiveMessage", err)
        else {
            panic!("an SQS error")
        };
        assert_eq!(operation, "ReceiveMessage");
        assert_eq!(got, kind, "{message}");
        assert!(message.starts_with(says), "{message}");
        assert!(message.contains(cause), "{message}");
    }
}

/// Numbers go to the SDK as they are, and one too large for its `i32` as the largest
/// (which SQS refuses, naming the field) rather than wrapped round.
#[test]
fn numbers_reach_the_request_unchanged_or_capped() {
    assert_eq!(to_i32(10usize), 10);
    assert_eq!(to_i32(20u64), 20);
    assert_eq!(to_i32(43_200u32), 43_200);
    assert_eq!(to_i32(u64::MAX), i32::MAX);
}

/// Made outside any runtime's context, the call is polled where it is awaited.
#[test]
fn outside_a_runtime_a_call_runs_where_it_is_awaited() {
    let answer = futures_util::FutureExt::now_or_never(as_task("ReceiveMessage", async {
        Ok::<_, Error>(7)
    }));
    assert_eq!(answer.map(Result::ok), Some(Some(7)));
}
