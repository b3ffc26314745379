use aws_sdk_sqs::types::MessageAttributeValue;
use proptest::prelude::*;

use super::*;

fn pointer(class: &str, bucket: &str, key: &str) -> String {
    serde_json::json!([class, {"s3BucketName": bucket, "s3Key": key}]).to_string()
}

fn message(body: &str, attribute: Option<(&str, &str, &str)>) -> Message {
    let mut m = Message::builder().message_id("m-1").body(body);
    if let Some((name, data_type, value)) = attribute {
        let value = MessageAttributeValue::builder()
            .data_type(data_type)
            .string_value(value)
            .build()
            .unwrap();
        m = m.message_attributes(name, value);
    }
    m.build()
}

#[test]
fn both_attribute_names_and_both_class_names_are_pointers() {
    let repackaged = format!("awsv2.repackaged.{POINTER_CLASS}");
    for class in [POINTER_CLASS, repackaged.as_str()] {
        for name in SIZE_ATTRIBUTES {
            let m = message(&pointer(class, "b", "k/1"), Some((name, "Number", "42")));
            let (location, carrier) = find(&m).unwrap().unwrap();
            assert_eq!(carrier, Carrier::Sqs);
            assert_eq!(
                (location.bucket(), location.key(), location.declared_size()),
                ("b", "k/1", 42)
            );
        }
    }
}

#[test]
fn without_a_size_attribute_a_pointer_body_is_an_ordinary_message() {
    let m = message(&pointer(POINTER_CLASS, "b", "k"), None);
    assert_eq!(find(&m), Ok(None));
    let m = message("hello", Some(("tenant", "String", "acme")));
    assert_eq!(find(&m), Ok(None));
}

#[test]
fn an_sns_envelope_with_the_size_attribute_carries_a_pointer() {
    let envelope = serde_json::json!({
        "Type": "Notification",
        "MessageId": "sns-1",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:t",
        "Message": pointer(POINTER_CLASS, "b", "k"),
        "Timestamp": "2026-12-01T00:00:00.000Z",
        "MessageAttributes": {"ExtendedPayloadSize": {"Type": "Number", "Value": "7"}}
    })
    .to_string();
    let (location, carrier) = find(&message(&envelope, None)).unwrap().unwrap();
    assert_eq!((carrier, location.declared_size()), (Carrier::Sns, 7));
    // The same envelope without the attribute is an ordinary notification.
    let plain = envelope.replace("ExtendedPayloadSize", "tenant");
    assert_eq!(find(&message(&plain, None)), Ok(None));
}

#[test]
fn malformed_pointers_say_what_is_wrong() {
    let size = Some(("ExtendedPayloadSize", "Number", "3"));
    for (body, says) in [
        ("plain text", "not JSON"),
        ("{}", "not a JSON array"),
        (r#"["x"]"#, "class name"),
        (&pointer("com.example.Other", "b", "k"), "class"),
        (
            &pointer(
                "xsoftware.amazon.payloadoffloading.PayloadS3Pointer",
                "b",
                "k",
            ),
            "class",
        ),
        (&pointer(POINTER_CLASS, "", "k"), "s3BucketName"),
        (&pointer(POINTER_CLASS, "b", ""), "s3Key"),
        (
            &serde_json::json!([POINTER_CLASS, {"s3BucketName": "b"}]).to_string(),
            "no s3Key",
        ),
        (
            &serde_json::json!([POINTER_CLASS, {"s3BucketName": 1, "s3Key": "k"}]).to_string(),
            "s3BucketName",
        ),
    ] {
        let err = find(&message(body, size)).unwrap_err();
        assert!(err.reason.contains(says), "{body}: {err:?}");
    }
    let err = find(&message(
        &pointer(POINTER_CLASS, "b", "k"),
        Some(("ExtendedPayloadSize", "Number", "-1")),
    ))
    .unwrap_err();
    assert!(err.reason.contains("whole number"), "{err:?}");
    assert_eq!(
        (err.bucket.as_deref(), err.key.as_deref()),
        (Some("b"), Some("k"))
    );
}

proptest! {
    #[test]
    fn any_body_with_the_attribute_is_a_pointer_or_refused_never_a_panic(body in ".*", size in ".*") {
        let m = message(&body, Some(("ExtendedPayloadSize", "Number", &size)));
        match find(&m) {
            Ok(Some(_)) => prop_assert!(parse_pointer(&body).is_ok()),
            Ok(None) => prop_assert!(false, "a message with the attribute is a pointer"),
            Err(err) => prop_assert!(!err.reason.is_empty()),
        }
    }

    #[test]
    fn any_bucket_and_key_round_trip(bucket in "[a-z0-9.-]{1,63}", key in ".{1,200}", size: u64) {
        let m = message(&pointer(POINTER_CLASS, &bucket, &key), Some(("SQSLargePayloadSize", "Number", &size.to_string())));
        let (location, _) = find(&m).unwrap().unwrap();
        prop_assert_eq!((location.bucket(), location.key(), location.declared_size()), (bucket.as_str(), key.as_str(), size));
    }

    #[test]
    fn a_pointer_cut_short_or_with_a_byte_changed_is_never_a_different_location(
        bucket in "[a-z0-9]{1,20}", key in "[a-z0-9/]{1,40}", cut in 0usize..200, byte in 0usize..200, to in any::<char>()
    ) {
        let whole = pointer(POINTER_CLASS, &bucket, &key);
        let short: String = whole.chars().take(cut.min(whole.len().saturating_sub(1))).collect();
        prop_assert!(parse_pointer(&short).is_err());
        let mut changed: Vec<char> = whole.chars().collect();
        let at = byte % changed.len();
        changed[at] = to;
        let changed: String = changed.into_iter().collect();
        if let Ok((b, k)) = parse_pointer(&changed) {
            // Only a change inside the bucket or key itself can still parse.
            prop_assert!(b != bucket || k != key || changed == whole);
            // What parses is what the JSON says: the changed byte may start an
            // escape (`\b`, `\/`, `\uXXXX`), so compare with a plain decode.
            let value: Value = serde_json::from_str(&changed).unwrap();
            prop_assert_eq!(value[1]["s3BucketName"].as_str(), Some(b.as_str()));
            prop_assert_eq!(value[1]["s3Key"].as_str(), Some(k.as_str()));
        }
    }
}
