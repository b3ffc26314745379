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
mod tests;
