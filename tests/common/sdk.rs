//! Mocked SQS answers for the tests that go through the real SDK with `aws-smithy-mocks`.

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::operation::change_message_visibility_batch::{
    ChangeMessageVisibilityBatchInput, ChangeMessageVisibilityBatchOutput,
};
use aws_sdk_sqs::operation::delete_message_batch::{
    DeleteMessageBatchInput, DeleteMessageBatchOutput,
};
use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchResultEntry, DeleteMessageBatchResultEntry,
    Message,
};
use aws_sdk_sqs::Client;
use aws_smithy_mocks::{mock, Rule};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;

/// An SQS error answer as the service sends it (JSON body plus the query-compatible header).
pub fn sqs_error(status: u16, code: &str) -> HttpResponse {
    let short = code.rsplit('.').next().unwrap_or(code);
    let body = format!(r#"{{"__type":"com.amazonaws.sqs#{short}","message":"{short} (test)"}}"#);
    let mut response =
        HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::from(body));
    response
        .headers_mut()
        .insert("x-amzn-query-error", format!("{code};Sender"));
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

/// One message, `m-1` with receipt handle `handle-1`.
pub fn one_message() -> ReceiveMessageOutput {
    ReceiveMessageOutput::builder()
        .messages(
            Message::builder()
                .message_id("m-1")
                .receipt_handle("handle-1")
                .body("work")
                .build(),
        )
        .build()
}

/// Receives one message, then nothing.
pub fn receive_once() -> Rule {
    mock!(Client::receive_message)
        .sequence()
        .output(one_message)
        .output(|| ReceiveMessageOutput::builder().build())
        .repeatedly()
        .build()
}

/// The mocked queue's URL.
pub const URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs";

/// A client answered by `rules` (any rule that matches a request answers it).
pub fn mocked(rules: &[&Rule]) -> Client {
    aws_smithy_mocks::mock_client!(aws_sdk_sqs, aws_smithy_mocks::RuleMode::MatchAny, rules)
}

/// A consumer of the mocked queue with a 10 s visibility timeout.
pub fn consumer(client: Client) -> sqs_consumer::Consumer {
    sqs_consumer::Consumer::builder(client, URL)
        .visibility_timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap()
}

fn entry_error(id: &str, code: &str) -> BatchResultErrorEntry {
    BatchResultErrorEntry::builder()
        .id(id)
        .sender_fault(true)
        .code(code)
        .message("test")
        .build()
        .unwrap()
}

/// A `ChangeMessageVisibilityBatch` answer: entries whose receipt handle `fails` accepts
/// fail with `code`, the others succeed.
pub fn change_answer(
    req: &ChangeMessageVisibilityBatchInput,
    fails: impl Fn(&str) -> bool,
    code: &str,
) -> ChangeMessageVisibilityBatchOutput {
    let (mut ok, mut failed) = (vec![], vec![]);
    for e in req.entries() {
        if fails(e.receipt_handle()) {
            failed.push(entry_error(e.id(), code));
        } else {
            ok.push(
                ChangeMessageVisibilityBatchResultEntry::builder()
                    .id(e.id())
                    .build()
                    .unwrap(),
            );
        }
    }
    ChangeMessageVisibilityBatchOutput::builder()
        .set_successful(Some(ok))
        .set_failed(Some(failed))
        .build()
        .unwrap()
}

/// A `DeleteMessageBatch` answer: every entry fails with `failed_with`, or every one succeeds.
pub fn delete_answer(
    req: &DeleteMessageBatchInput,
    failed_with: Option<&str>,
) -> DeleteMessageBatchOutput {
    let (mut ok, mut failed) = (vec![], vec![]);
    for e in req.entries() {
        match failed_with {
            Some(code) => failed.push(entry_error(e.id(), code)),
            None => ok.push(
                DeleteMessageBatchResultEntry::builder()
                    .id(e.id())
                    .build()
                    .unwrap(),
            ),
        }
    }
    DeleteMessageBatchOutput::builder()
        .set_successful(Some(ok))
        .set_failed(Some(failed))
        .build()
        .unwrap()
}

/// The lone delivery's extension (entry `0`) failed with `code` and SQS's `message`, with
/// `SenderFault` false as AWS sends it for these.
pub fn one_extension_failed(code: &str, message: &str) -> ChangeMessageVisibilityBatchOutput {
    ChangeMessageVisibilityBatchOutput::builder()
        .failed(
            BatchResultErrorEntry::builder()
                .id("0")
                .sender_fault(false)
                .code(code)
                .message(message)
                .build()
                .unwrap(),
        )
        .set_successful(Some(vec![]))
        .build()
        .unwrap()
}

/// Every extension succeeds.
pub fn extensions_succeed() -> Rule {
    mock!(Client::change_message_visibility_batch)
        .then_compute_output(|req| change_answer(req, |_| false, ""))
}

/// Every delete succeeds.
pub fn deletes() -> Rule {
    mock!(Client::delete_message_batch).then_compute_output(|req| delete_answer(req, None))
}

/// Every delete entry fails with `code`.
pub fn deletes_failing(code: &'static str) -> Rule {
    mock!(Client::delete_message_batch)
        .then_compute_output(move |req| delete_answer(req, Some(code)))
}

/// A successful answer for entry `0`, the lone delivery's, in a sequence of answers.
pub fn one_extended() -> ChangeMessageVisibilityBatchOutput {
    ChangeMessageVisibilityBatchOutput::builder()
        .successful(
            ChangeMessageVisibilityBatchResultEntry::builder()
                .id("0")
                .build()
                .unwrap(),
        )
        .set_failed(Some(vec![]))
        .build()
        .unwrap()
}

/// A successful answer for entry `0`, the lone delivery's, in a sequence of answers.
pub fn one_deleted() -> DeleteMessageBatchOutput {
    DeleteMessageBatchOutput::builder()
        .successful(
            DeleteMessageBatchResultEntry::builder()
                .id("0")
                .build()
                .unwrap(),
        )
        .set_failed(Some(vec![]))
        .build()
        .unwrap()
}
