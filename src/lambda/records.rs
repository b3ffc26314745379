//! An SQS event's records as the messages a receive would have brought: the same body,
//! receipt handle, system attributes and message attributes, so a `Delivery` reads the same
//! in Lambda as in a worker.

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::sqs::{SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};

/// The message `record` carries.
pub(crate) fn message(record: SqsMessage) -> Message {
    let mut message = Message::builder()
        .set_message_id(record.message_id)
        .set_receipt_handle(record.receipt_handle)
        .set_body(record.body)
        .set_md5_of_body(record.md5_of_body)
        .set_md5_of_message_attributes(record.md5_of_message_attributes);
    for (name, value) in record.attributes {
        message = message.attributes(MessageSystemAttributeName::from(name.as_str()), value);
    }
    for (name, value) in record.message_attributes {
        match attribute(value) {
            Some(value) => message = message.message_attributes(name, value),
            None => tracing::debug!(%name, "skipped a message attribute without a data type"),
        }
    }
    message.build()
}

/// The record Lambda would send for `message`, received from the queue `queue_arn` names.
pub(crate) fn record(queue_arn: &str, message: Message) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.attributes = message
        .attributes()
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
        .collect();
    record.message_attributes = message
        .message_attributes()
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.clone(), record_attribute(value)))
        .collect();
    record.message_id = message.message_id;
    record.receipt_handle = message.receipt_handle;
    record.body = message.body;
    record.md5_of_body = message.md5_of_body;
    record.md5_of_message_attributes = message.md5_of_message_attributes;
    record.event_source = Some("aws:sqs".to_owned());
    // arn:aws:sqs:REGION:ACCOUNT:NAME
    record.aws_region = queue_arn.split(':').nth(3).map(str::to_owned);
    record.event_source_arn = Some(queue_arn.to_owned());
    record
}

/// A message attribute as a record carries it.
fn record_attribute(value: &MessageAttributeValue) -> SqsMessageAttribute {
    let data = |blob: &Blob| {
        let mut data = Base64Data::default();
        data.extend_from_slice(blob.as_ref());
        data
    };
    let mut attribute = SqsMessageAttribute::default();
    attribute.data_type = Some(value.data_type().to_owned());
    attribute.string_value = value.string_value().map(str::to_owned);
    attribute.binary_value = value.binary_value().map(data);
    attribute.string_list_values = value.string_list_values().to_vec();
    attribute.binary_list_values = value.binary_list_values().iter().map(data).collect();
    attribute
}

/// A record's message attribute as SQS gives it (`None` without the data type SQS requires).
fn attribute(value: SqsMessageAttribute) -> Option<MessageAttributeValue> {
    let blob = |data: Base64Data| Blob::new(data.0);
    let strings = Some(value.string_list_values).filter(|v| !v.is_empty());
    let binaries: Vec<Blob> = value.binary_list_values.into_iter().map(blob).collect();
    MessageAttributeValue::builder()
        .set_data_type(value.data_type)
        .set_string_value(value.string_value)
        .set_binary_value(value.binary_value.map(blob))
        .set_string_list_values(strings)
        .set_binary_list_values(Some(binaries).filter(|v| !v.is_empty()))
        .build()
        .ok()
}

#[cfg(test)]
mod tests;
