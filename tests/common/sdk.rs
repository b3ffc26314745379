//! Mocked SQS answers for the tests that go through the real SDK with `aws-smithy-mocks`.

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::types::Message;
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
