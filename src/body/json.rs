//! Typed bodies and SNS envelopes (feature `json`): `Delivery::json` and `Delivery::sns`.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::delivery::Delivery;
use crate::error::Error;

/// An SNS notification, as SNS wraps a message it delivers to an SQS queue (without raw
/// message delivery), from [`Delivery::sns`].
///
/// ```
/// # use sqs_consumer::SnsNotification;
/// # fn example(n: SnsNotification) -> Result<(), sqs_consumer::Error> {
/// #[derive(serde::Deserialize)]
/// struct Order { id: u64 }
///
/// let order: Order = n.json()?; // the published message, decoded
/// println!("{} from {} at {}", order.id, n.topic_arn, n.timestamp);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub struct SnsNotification {
    /// The published message (`Message`).
    pub message: String,
    /// The subject it was published with, if any (`Subject`).
    pub subject: Option<String>,
    /// The topic it was published to (`TopicArn`).
    pub topic_arn: String,
    /// SNS's id of the notification (`MessageId`), not the SQS message id.
    pub message_id: String,
    /// When SNS published it, as SNS sent it (`Timestamp`, ISO 8601).
    pub timestamp: String,
    /// The message attributes it was published with, by name (`MessageAttributes`).
    pub message_attributes: BTreeMap<String, SnsMessageAttribute>,
}

/// One message attribute of an [`SnsNotification`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub struct SnsMessageAttribute {
    /// `String`, `String.Array`, `Number` or `Binary` (`Type`).
    #[serde(rename = "Type")]
    pub data_type: String,
    /// The value as SNS sent it (`Value`; base64 for `Binary`).
    #[serde(rename = "Value")]
    pub value: String,
}

/// The envelope as it arrives: every field optional, so that a missing one can be named.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "Type")]
    kind: Option<String>,
    #[serde(rename = "MessageId")]
    message_id: Option<String>,
    #[serde(rename = "TopicArn")]
    topic_arn: Option<String>,
    #[serde(rename = "Subject")]
    subject: Option<String>,
    #[serde(rename = "Message")]
    message: Option<String>,
    #[serde(rename = "Timestamp")]
    timestamp: Option<String>,
    #[serde(rename = "MessageAttributes", default)]
    message_attributes: BTreeMap<String, SnsMessageAttribute>,
}

/// What `sns()` expects, for its errors.
const ENVELOPE: &str = "an SNS notification envelope";

#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
impl Delivery {
    /// The body, decoded from JSON as a `T`.
    ///
    /// A body that does not decode is [`Error::Decode`], naming `T` and what was wrong.
    ///
    /// ```no_run
    /// # async fn example(delivery: sqs_consumer::Delivery) -> Result<(), sqs_consumer::BoxError> {
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64, items: Vec<String> }
    ///
    /// let order: Order = delivery.json()?;
    /// println!("order {} with {} items", order.id, order.items.len());
    /// delivery.ack().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] when the body is not JSON for a `T`: it names the message, what was
    /// asked for (`` JSON for `Order` ``) and the decoder's reason.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        decode(self.message_id(), self.body())
    }

    /// The body as the SNS notification envelope SNS wraps a message in when it delivers it
    /// to an SQS queue.
    ///
    /// A body that is not such an envelope is [`Error::Decode`] naming the missing field
    /// (`TopicArn`, ...), or, for a body without the envelope at all (a subscription with raw
    /// message delivery on, or a message sent to the queue directly), saying so: read the
    /// body itself then, for example with [`json`](Delivery::json).
    ///
    /// With feature `s3` and `ConsumerBuilder::s3_payloads`, a notification whose `Message`
    /// was an Extended Client pointer has the payload read from S3 as its `message`.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] naming the missing envelope field, or saying the body has no
    /// envelope at all.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example(delivery: sqs_consumer::Delivery) -> Result<(), sqs_consumer::Error> {
    /// let notification = delivery.sns()?;
    /// println!("from {}: {}", notification.topic_arn, notification.message);
    /// delivery.ack().await
    /// # }
    /// ```
    pub fn sns(&self) -> Result<SnsNotification, Error> {
        let mut notification = sns(self.message_id(), self.body())?;
        if let Some(payload) = self.sns_payload() {
            payload.clone_into(&mut notification.message);
        }
        Ok(notification)
    }

    /// The body decoded from JSON as a `T`, whether it is the message itself or an SNS
    /// notification envelope around it (a topic subscription without raw message delivery):
    /// a body whose `Type` is `"Notification"` is read as an envelope and its `Message`
    /// decoded; any other body is decoded as it is. One call for queues fed both ways.
    ///
    /// A body that does not decode is [`Error::Decode`], whose `expected` names `T` and the
    /// form that was tried (the body itself, or the `Message` of an SNS notification), and
    /// whose source says why.
    ///
    /// ```no_run
    /// # async fn example(delivery: sqs_consumer::Delivery) -> Result<(), sqs_consumer::BoxError> {
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    ///
    /// let order: Order = delivery.json_or_sns()?; // `{"id": 7}`, or an envelope around it
    /// println!("order {}", order.id);
    /// delivery.ack().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] naming the form it tried (the body, or an SNS notification's
    /// `Message`) and why that failed.
    pub fn json_or_sns<T: DeserializeOwned>(&self) -> Result<T, Error> {
        match self.sns_payload() {
            Some(payload) => decode(self.message_id(), payload),
            None => json_or_sns(self.message_id(), self.body()),
        }
    }
}

impl SnsNotification {
    /// The published message, decoded from JSON as a `T`.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] when `Message` is not JSON for a `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        decode(&self.message_id, &self.message)
    }
}

/// `text` decoded from JSON as a `T`; an error names `T`.
pub(crate) fn decode<T: DeserializeOwned>(message_id: &str, text: &str) -> Result<T, Error> {
    serde_json::from_str(text).map_err(|err| Error::Decode {
        message_id: message_id.to_owned(),
        expected: format!("JSON for `{}`", short_type_name::<T>()),
        source: Box::new(err),
    })
}

fn json_or_sns<T: DeserializeOwned>(message_id: &str, body: &str) -> Result<T, Error> {
    if !is_sns_notification(body) {
        return decode(message_id, body);
    }
    // An envelope that does not hold together says so as `sns()` does.
    let n = sns(message_id, body)?;
    decode(message_id, &n.message)
        .map_err(|err| in_envelope(err, "in the SNS notification's `Message`"))
}

/// `true` when `body` is JSON whose `Type` is `"Notification"`: an SNS notification.
pub(crate) fn is_sns_notification(body: &str) -> bool {
    serde_json::from_str::<Envelope>(body)
        .is_ok_and(|envelope| envelope.kind.as_deref() == Some("Notification"))
}

/// A decode error of what an envelope held, saying where in the envelope (`within`).
pub(crate) fn in_envelope(err: Error, within: &str) -> Error {
    match err {
        Error::Decode {
            message_id,
            expected,
            source,
        } => Error::Decode {
            message_id,
            expected: format!("{expected} {within}"),
            source,
        },
        other => other,
    }
}

/// `T`'s name without its module paths, for people: `Order`, `Vec<Order>`, `Option<u64>`,
/// not `my_app::handlers::main::{{closure}}::Order`.
fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let path_char = |c: char| c.is_alphanumeric() || "_:{}".contains(c);
    let mut out = String::with_capacity(full.len());
    let mut rest = full;
    while !rest.is_empty() {
        let end = rest.find(|c| !path_char(c)).unwrap_or(rest.len());
        let path = &rest[..end];
        out.push_str(path.rsplit("::").next().unwrap_or(path));
        let delimiters = rest[end..].find(path_char).map_or(rest.len(), |n| end + n);
        out.push_str(&rest[end..delimiters]);
        rest = &rest[delimiters..];
    }
    out
}

/// `body` as an SNS notification envelope; an error names the missing field.
pub(crate) fn sns(message_id: &str, body: &str) -> Result<SnsNotification, Error> {
    let refuse = |why: String| Error::Decode {
        message_id: message_id.to_owned(),
        expected: ENVELOPE.to_owned(),
        source: why.into(),
    };
    let envelope: Envelope = serde_json::from_str(body).map_err(|err| Error::Decode {
        message_id: message_id.to_owned(),
        expected: ENVELOPE.to_owned(),
        source: Box::new(err),
    })?;
    match envelope.kind.as_deref() {
        Some("Notification") => {}
        None => {
            return Err(refuse(
                "no `Type` field (raw message delivery, or a message sent to the queue \
                 directly): read the body itself, e.g. with json()"
                    .into(),
            ))
        }
        Some(other) => {
            return Err(refuse(format!(
                "`Type` is {other:?}, not \"Notification\" (a subscription confirmation?)"
            )))
        }
    }
    let field = |value: Option<String>, name: &str| {
        value.ok_or_else(|| refuse(format!("the envelope has no `{name}` field")))
    };
    Ok(SnsNotification {
        message: field(envelope.message, "Message")?,
        subject: envelope.subject,
        topic_arn: field(envelope.topic_arn, "TopicArn")?,
        message_id: field(envelope.message_id, "MessageId")?,
        timestamp: field(envelope.timestamp, "Timestamp")?,
        message_attributes: envelope.message_attributes,
    })
}

#[cfg(test)]
pub(crate) mod tests;
