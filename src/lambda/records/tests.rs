use super::*;

/// A record as Lambda sends it (from AWS's documentation of the SQS event).
const RECORD: &str = r#"{
    "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
    "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
    "body": "Test message.",
    "attributes": {
        "ApproximateReceiveCount": "3",
        "SentTimestamp": "1545082649183",
        "SenderId": "AIDAIENQZJOLO23YVJ4VO",
        "ApproximateFirstReceiveTimestamp": "1545082649185",
        "MessageGroupId": "g1"
    },
    "messageAttributes": {
        "tenant": {"stringValue": "acme", "dataType": "String"},
        "raw": {"binaryValue": "AAEC", "dataType": "Binary"},
        "broken": {"stringValue": "no type"}
    },
    "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
    "eventSource": "aws:sqs",
    "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:my-queue",
    "awsRegion": "us-east-2"
}"#;

#[test]
fn a_record_made_of_a_message_reads_back_as_it() {
    let record: SqsMessage = serde_json::from_str(RECORD).unwrap();
    let arn = record.event_source_arn.clone().unwrap();
    let again = record_of_message(&arn, message(record.clone()));
    let mut expected = record;
    expected.message_attributes.remove("broken");
    assert_eq!(again, expected);
}

fn record_of_message(arn: &str, m: Message) -> SqsMessage {
    record(arn, m)
}

#[test]
fn a_record_reads_as_the_message_a_receive_brings() {
    let record: SqsMessage = serde_json::from_str(RECORD).unwrap();
    let m = message(record);
    assert_eq!(m.message_id(), Some("059f36b4-87a3-44ab-83d2-661975830a7d"));
    assert_eq!(
        m.receipt_handle(),
        Some("AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a")
    );
    assert_eq!(m.body(), Some("Test message."));
    assert_eq!(m.md5_of_body(), Some("e4e68fb7bd0e697a0ae8f1bb342846b3"));
    let system = m.attributes().unwrap();
    let get = |name| system.get(&name).map(String::as_str);
    assert_eq!(
        get(MessageSystemAttributeName::ApproximateReceiveCount),
        Some("3")
    );
    assert_eq!(
        get(MessageSystemAttributeName::SentTimestamp),
        Some("1545082649183")
    );
    assert_eq!(get(MessageSystemAttributeName::MessageGroupId), Some("g1"));
    let attributes = m.message_attributes().unwrap();
    assert_eq!(attributes["tenant"].string_value(), Some("acme"));
    assert_eq!(attributes["tenant"].data_type(), "String");
    let raw = attributes["raw"].binary_value().unwrap();
    assert_eq!(raw.as_ref(), [0u8, 1, 2]);
    assert!(!attributes.contains_key("broken"), "no data type: skipped");
}
