use super::*;
use crate::test_support::decode_error;

const ENVELOPE_BODY: &str = r#"{
    "Type": "Notification",
    "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
    "TopicArn": "arn:aws:sns:us-west-2:123456789012:orders",
    "Subject": "new order",
    "Message": "{\"id\": 7}",
    "Timestamp": "2026-11-30T12:00:00.000Z",
    "SignatureVersion": "1",
    "Signature": "EXAMPLE",
    "SigningCertURL": "https://sns.us-west-2.amazonaws.com/cert.pem",
    "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe",
    "MessageAttributes": {"tenant": {"Type": "String", "Value": "acme"}}
}"#;

#[derive(Debug, Deserialize, PartialEq)]
struct Order {
    id: u64,
}

#[test]
fn an_envelope_decodes_with_its_fields_and_message() {
    let n = sns("m-1", ENVELOPE_BODY).unwrap();
    assert_eq!(n.topic_arn, "arn:aws:sns:us-west-2:123456789012:orders");
    assert_eq!(n.subject.as_deref(), Some("new order"));
    assert_eq!(n.timestamp, "2026-11-30T12:00:00.000Z");
    assert_eq!(n.message_attributes["tenant"].value, "acme");
    assert_eq!(n.json::<Order>().unwrap(), Order { id: 7 });
}

#[test]
fn a_bad_envelope_names_what_is_wrong() {
    let missing = ENVELOPE_BODY.replace("\"TopicArn\"", "\"Topic\"");
    let (expected, why) = decode_error(sns("m-1", &missing));
    assert_eq!(expected, ENVELOPE);
    assert!(why.contains("`TopicArn`"), "{why}");
    let (_, why) = decode_error(sns("m-1", r#"{"id": 7}"#));
    assert!(why.contains("raw message delivery"), "{why}");
    let (_, why) = decode_error(sns("m-1", r#"{"Type": "SubscriptionConfirmation"}"#));
    assert!(why.contains("SubscriptionConfirmation"), "{why}");
    let (_, why) = decode_error(sns("m-1", "not json"));
    assert!(why.contains("expected"), "{why}");
}

#[test]
fn json_or_sns_reads_a_plain_body_or_an_envelope_and_names_the_form_it_tried() {
    assert_eq!(
        json_or_sns::<Order>("m-1", r#"{"id": 7}"#).unwrap(),
        Order { id: 7 }
    );
    assert_eq!(
        json_or_sns::<Order>("m-1", ENVELOPE_BODY).unwrap(),
        Order { id: 7 }
    );
    let (expected, why) = decode_error(json_or_sns::<Order>("m-1", r#"{"id": "x"}"#));
    assert_eq!(expected, "JSON for `Order`");
    assert!(why.contains("invalid type"), "{why}");
    let bad_message = ENVELOPE_BODY.replace(r#"{\"id\": 7}"#, "not json");
    assert_ne!(bad_message, ENVELOPE_BODY);
    let (expected, why) = decode_error(json_or_sns::<Order>("m-1", &bad_message));
    assert_eq!(
        expected,
        "JSON for `Order` in the SNS notification's `Message`"
    );
    assert!(why.contains("expected"), "{why}");
    let no_topic = ENVELOPE_BODY.replace("\"TopicArn\"", "\"Topic\"");
    let (expected, why) = decode_error(json_or_sns::<Order>("m-1", &no_topic));
    assert_eq!(expected, ENVELOPE);
    assert!(why.contains("`TopicArn`"), "{why}");
}

#[test]
fn a_body_that_does_not_decode_names_the_type() {
    let (expected, why) = decode_error(decode::<Order>("m-1", r#"{"id": "seven"}"#));
    assert!(expected.contains("Order"), "{expected}");
    assert!(why.contains("invalid type"), "{why}");
    let err = decode::<Order>("m-9", "[]").unwrap_err().to_string();
    assert_eq!(
        err,
        "message m-9: not JSON for `Order`: invalid length 0, expected struct Order with 1 \
         element at line 1 column 2"
    );
}

#[test]
fn type_names_lose_their_paths_and_closures() {
    assert_eq!(short_type_name::<Order>(), "Order");
    assert_eq!(short_type_name::<Vec<Order>>(), "Vec<Order>");
    assert_eq!(
        short_type_name::<std::collections::HashMap<String, Option<u64>>>(),
        "HashMap<String, Option<u64>>"
    );
    assert_eq!(short_type_name::<(u8, [Order; 2])>(), "(u8, [Order; 2])");
    let in_closure = || {
        #[derive(Deserialize)]
        struct Local;
        short_type_name::<Local>()
    };
    assert_eq!(in_closure(), "Local");
}
