//! The pointer format of Amazon's Extended Client libraries (feature `s3`): a message whose
//! body went to S3 carries, instead of the body, a pointer to the object, and its size in a
//! reserved message attribute. This reads it, from an SQS message or an SNS envelope.

use aws_sdk_sqs::types::Message;
use serde_json::Value;

/// The reserved message attributes that mark a pointer and carry the payload's size in bytes:
/// today's name, and the one older producers used.
pub(crate) const SIZE_ATTRIBUTES: [&str; 2] = ["ExtendedPayloadSize", "SQSLargePayloadSize"];

/// The class name the libraries write as the pointer's first element (a repackaged copy of the
/// library writes a longer name ending in this one).
const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";

/// Where a message's payload is stored, from its Extended Client pointer
/// ([`Delivery::payload_location`](crate::Delivery::payload_location)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub struct PayloadLocation {
    bucket: String,
    key: String,
    declared_size: u64,
}

impl PayloadLocation {
    /// The S3 bucket (`s3BucketName`).
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The object's key (`s3Key`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The payload's size in bytes, as the producer declared it (the `ExtendedPayloadSize`
    /// or `SQSLargePayloadSize` attribute); the object read must have exactly this size.
    pub fn declared_size(&self) -> u64 {
        self.declared_size
    }
}

/// How the pointer came: as the SQS message's own body, or as the `Message` of an SNS
/// notification (SNS without raw message delivery).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carrier {
    Sqs,
    Sns,
}

/// A payload read from S3, and how its pointer came.
#[derive(Debug)]
pub(crate) struct Payload {
    pub(crate) carrier: Carrier,
    pub(crate) body: String,
}

/// A message marked as a pointer whose pointer cannot be read: why, and what of the location
/// could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed {
    pub(crate) reason: String,
    pub(crate) bucket: Option<String>,
    pub(crate) key: Option<String>,
}

impl Malformed {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            bucket: None,
            key: None,
        }
    }
}

/// The pointer `message` carries, if it is one: a message with one of the size attributes
/// (or an SNS envelope whose message attributes have one). `Ok(None)`: an ordinary message.
pub(crate) fn find(message: &Message) -> Result<Option<(PayloadLocation, Carrier)>, Malformed> {
    let body = message.body().unwrap_or_default();
    let attributes = message.message_attributes();
    let size = SIZE_ATTRIBUTES
        .iter()
        .find_map(|name| attributes.and_then(|a| a.get(*name)))
        .map(|v| v.string_value().unwrap_or_default());
    if let Some(size) = size {
        return location(body, size).map(|l| Some((l, Carrier::Sqs)));
    }
    // Only a body that could be an envelope with a size attribute is parsed.
    let maybe_sns = body.trim_start().starts_with('{')
        && SIZE_ATTRIBUTES.iter().any(|name| body.contains(name));
    if !maybe_sns {
        return Ok(None);
    }
    let Ok(Value::Object(envelope)) = serde_json::from_str::<Value>(body) else {
        return Ok(None);
    };
    if envelope.get("Type").and_then(Value::as_str) != Some("Notification") {
        return Ok(None);
    }
    let size = SIZE_ATTRIBUTES.iter().find_map(|name| {
        let attribute = envelope.get("MessageAttributes")?.get(*name)?;
        Some(
            attribute
                .get("Value")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
    });
    let Some(size) = size else {
        return Ok(None);
    };
    let pointer = envelope
        .get("Message")
        .and_then(Value::as_str)
        .ok_or_else(|| Malformed::new("the SNS envelope has no `Message` string"))?;
    location(pointer, size).map(|l| Some((l, Carrier::Sns)))
}

/// The location a pointer names, with the declared `size`.
fn location(pointer: &str, size: &str) -> Result<PayloadLocation, Malformed> {
    let (bucket, key) = parse_pointer(pointer).map_err(Malformed::new)?;
    let declared_size = size.trim().parse::<u64>().map_err(|_| Malformed {
        reason: format!("the size attribute is {size:?}, not a whole number of bytes"),
        bucket: Some(bucket.clone()),
        key: Some(key.clone()),
    })?;
    Ok(PayloadLocation {
        bucket,
        key,
        declared_size,
    })
}

/// The bucket and key of a pointer:
/// `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"}]`.
pub(crate) fn parse_pointer(pointer: &str) -> Result<(String, String), String> {
    let value: Value = serde_json::from_str(pointer)
        .map_err(|err| format!("the body is not a pointer (not JSON: {err})"))?;
    let Value::Array(parts) = value else {
        return Err("the body is not a pointer (not a JSON array)".into());
    };
    let [Value::String(class), Value::Object(fields)] = parts.as_slice() else {
        return Err("the pointer is not [class name, {s3BucketName, s3Key}]".into());
    };
    let known = class == POINTER_CLASS
        || class
            .strip_suffix(POINTER_CLASS)
            .is_some_and(|prefix| prefix.ends_with('.'));
    if !known {
        return Err(format!(
            "the pointer's class is {class:?}, not {POINTER_CLASS}"
        ));
    }
    let field = |name: &str| match fields.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(format!("the pointer's {name} is not a non-empty string")),
        None => Err(format!("the pointer has no {name}")),
    };
    Ok((field("s3BucketName")?, field("s3Key")?))
}

#[cfg(test)]
mod tests {
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
}
