use super::*;
use crate::test_support::decode_error;

/// An event as EventBridge delivers it to an SQS target: the example of EventBridge's
/// User Guide ("Amazon EventBridge events"), an EC2 state change.
const EVENT_BODY: &str = r#"{
    "version": "0",
    "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
    "detail-type": "EC2 Instance State-change Notification",
    "source": "aws.ec2",
    "account": "111122223333",
    "time": "2017-12-22T18:43:48Z",
    "region": "us-west-1",
    "resources": ["arn:aws:ec2:us-west-1:123456789012:instance/i-1234567890abcdef0"],
    "detail": {"instance-id": "i-1234567890abcdef0", "state": "terminated"}
}"#;

#[derive(Debug, Deserialize, PartialEq)]
struct StateChange {
    #[serde(rename = "instance-id")]
    instance_id: String,
    state: String,
}

#[test]
fn an_event_decodes_with_its_metadata_and_detail() {
    let event = eventbridge::<StateChange>("m-1", EVENT_BODY).unwrap();
    assert_eq!(event.id, "6a7e8feb-b491-4cf7-a9f1-bf3703467718");
    assert_eq!(event.source, "aws.ec2");
    assert_eq!(event.detail_type, "EC2 Instance State-change Notification");
    assert_eq!(event.time, "2017-12-22T18:43:48Z");
    assert_eq!(
        (event.account.as_str(), event.region.as_str()),
        ("111122223333", "us-west-1")
    );
    assert_eq!(event.resources.len(), 1);
    assert_eq!(event.detail.state, "terminated");
    assert_eq!(event.detail.instance_id, "i-1234567890abcdef0");
}

#[test]
fn a_bad_event_names_what_is_wrong() {
    let no_type = EVENT_BODY.replace("\"detail-type\"", "\"kind\"");
    let (expected, why) = decode_error(eventbridge::<StateChange>("m-1", &no_type));
    assert_eq!(expected, EVENT);
    assert!(why.contains("`detail-type`"), "{why}");
    let (_, why) = decode_error(eventbridge::<StateChange>("m-1", r#"{"id": 7}"#));
    assert!(why.contains("sent to the queue directly"), "{why}");
    let numbered = EVENT_BODY.replace("\"111122223333\"", "111122223333");
    let (_, why) = decode_error(eventbridge::<StateChange>("m-1", &numbered));
    assert_eq!(why, "`account` is 111122223333, not a string");
    let bad_detail = EVENT_BODY.replace("\"terminated\"", "7");
    let (expected, why) = decode_error(eventbridge::<StateChange>("m-1", &bad_detail));
    assert_eq!(
        expected,
        "JSON for `StateChange` in the EventBridge event's `detail`"
    );
    assert!(why.contains("invalid type"), "{why}");
    let (expected, _) = decode_error(eventbridge::<StateChange>("m-1", "not json"));
    assert_eq!(expected, EVENT);
}

#[test]
fn unwrapping_reads_a_raw_body_or_an_events_detail() {
    let raw = r#"{"instance-id": "i-1", "state": "running"}"#;
    assert_eq!(
        unwrap_event::<StateChange>("m-1", raw, "").unwrap().state,
        "running"
    );
    let detail = unwrap_event::<StateChange>("m-1", EVENT_BODY, "").unwrap();
    assert_eq!(detail.state, "terminated");
    // A body that merely has a `source` field is not taken for an event.
    let look_alike = r#"{"source": "web", "detail": 1}"#;
    let (expected, _) = decode_error(unwrap_event::<StateChange>("m-1", look_alike, ""));
    assert_eq!(expected, "JSON for `StateChange`");
}
