//! EventBridge events delivered to SQS (feature `json`): `Delivery::eventbridge`, and
//! `Delivery::json_unwrapped`, one call for a raw body, an SNS notification or an
//! EventBridge event.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::body::json::{decode, in_envelope, is_sns_notification, sns};
use crate::delivery::Delivery;
use crate::error::Error;

/// An EventBridge event, as a rule with an SQS queue as its target delivers it (without an
/// input transformer), from [`Delivery::eventbridge`]: the event's metadata, and its
/// `detail` decoded as a `T`.
///
/// The fields are those of EventBridge's event structure (EventBridge User Guide, "Amazon
/// EventBridge events"); times are kept as EventBridge sent them.
///
/// ```
/// # fn example(delivery: sqs_consumer::Delivery) -> Result<(), sqs_consumer::Error> {
/// #[derive(serde::Deserialize)]
/// struct StateChange { state: String }
///
/// let event = delivery.eventbridge::<StateChange>()?;
/// println!("{} from {} at {}: {}", event.detail_type, event.source, event.time, event.detail.state);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub struct EventBridgeEvent<T> {
    /// EventBridge's id of the event (`id`), not the SQS message id.
    pub id: String,
    /// What sent it (`source`): `aws.<service>` for an AWS service's events.
    pub source: String,
    /// What kind of event it is (`detail-type`).
    pub detail_type: String,
    /// When it happened, as EventBridge sent it (`time`, ISO 8601).
    pub time: String,
    /// The account it happened in (`account`).
    pub account: String,
    /// The region it happened in (`region`).
    pub region: String,
    /// The ARNs of the resources it concerns (`resources`; empty when it has none).
    pub resources: Vec<String>,
    /// The event itself (`detail`), decoded.
    pub detail: T,
}

/// The event as it arrives: every field optional and of any type, so that a missing or
/// wrong one can be named (and a body that is no event told apart).
#[derive(Deserialize)]
struct RawEvent {
    version: Option<Value>,
    id: Option<Value>,
    source: Option<Value>,
    #[serde(rename = "detail-type")]
    detail_type: Option<Value>,
    time: Option<Value>,
    account: Option<Value>,
    region: Option<Value>,
    resources: Option<Value>,
    detail: Option<Box<serde_json::value::RawValue>>,
}

/// What `eventbridge()` expects, for its errors.
const EVENT: &str = "an EventBridge event";

#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
impl Delivery {
    /// The body as an EventBridge event, its `detail` decoded as a `T`, with its source,
    /// detail type, time and id at hand.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] naming the missing event field (`detail-type`, ...), or saying the
    /// body is no EventBridge event at all; or naming `T` when `detail` does not decode.
    pub fn eventbridge<T: DeserializeOwned>(&self) -> Result<EventBridgeEvent<T>, Error> {
        eventbridge(self.message_id(), self.body())
    }

    /// The body decoded from JSON as a `T`, from whichever form it arrived in: the message
    /// itself, an SNS notification around it (its `Message`), or an EventBridge event (its
    /// `detail`), an EventBridge event inside an SNS notification too. One call for a queue
    /// fed by several of them.
    ///
    /// A body whose `Type` is `"Notification"` is read as an SNS notification; one with
    /// EventBridge's `detail-type`, `source` and `detail` as an event; any other as it is.
    ///
    /// ```no_run
    /// # async fn example(delivery: sqs_consumer::Delivery) -> Result<(), sqs_consumer::BoxError> {
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    ///
    /// // `{"id": 7}`, an SNS notification around it, or an event whose `detail` it is
    /// let order: Order = delivery.json_unwrapped()?;
    /// println!("order {}", order.id);
    /// delivery.ack().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] naming the form it tried (the body, an SNS notification's `Message`,
    /// an EventBridge event's `detail`) and why that failed.
    pub fn json_unwrapped<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let message_id = self.message_id();
        if let Some(payload) = self.sns_payload() {
            return unwrap_event(message_id, payload, "in the SNS notification's `Message`");
        }
        if !is_sns_notification(self.body()) {
            return unwrap_event(message_id, self.body(), "");
        }
        let notification = sns(message_id, self.body())?;
        unwrap_event(
            message_id,
            &notification.message,
            "in the SNS notification's `Message`",
        )
    }
}

/// `text` as a `T`: an EventBridge event's `detail`, or the text itself; decode errors say
/// `within` (where the text came from).
fn unwrap_event<T: DeserializeOwned>(
    message_id: &str,
    text: &str,
    within: &str,
) -> Result<T, Error> {
    let result = if is_event(text) {
        eventbridge(message_id, text).map(|event| event.detail)
    } else {
        decode(message_id, text)
    };
    if within.is_empty() {
        result
    } else {
        result.map_err(|err| in_envelope(err, within))
    }
}

/// `true` when `text` is a JSON object with EventBridge's `detail-type`, `source` and
/// `detail`.
fn is_event(text: &str) -> bool {
    serde_json::from_str::<RawEvent>(text).is_ok_and(|event| {
        event.detail_type.is_some() && event.source.is_some() && event.detail.is_some()
    })
}

fn eventbridge<T: DeserializeOwned>(
    message_id: &str,
    body: &str,
) -> Result<EventBridgeEvent<T>, Error> {
    let refuse = |why: String| Error::Decode {
        message_id: message_id.to_owned(),
        expected: EVENT.to_owned(),
        source: why.into(),
    };
    let event: RawEvent = serde_json::from_str(body).map_err(|err| Error::Decode {
        message_id: message_id.to_owned(),
        expected: EVENT.to_owned(),
        source: Box::new(err),
    })?;
    if event.detail_type.is_none() && event.source.is_none() && event.version.is_none() {
        return Err(refuse(
            "no `detail-type`, `source` or `version` field (a message sent to the queue \
             directly, or an event reshaped by an input transformer): read the body itself, \
             e.g. with json()"
                .into(),
        ));
    }
    let field = |value: Option<Value>, name: &str| match value {
        Some(Value::String(text)) => Ok(text),
        Some(other) => Err(refuse(format!("`{name}` is {other}, not a string"))),
        None => Err(refuse(format!("the event has no `{name}` field"))),
    };
    let id = field(event.id, "id")?;
    let source = field(event.source, "source")?;
    let detail_type = field(event.detail_type, "detail-type")?;
    let time = field(event.time, "time")?;
    let account = field(event.account, "account")?;
    let region = field(event.region, "region")?;
    let resources = match event.resources {
        None | Some(Value::Null) => Vec::new(),
        Some(resources) => serde_json::from_value(resources)
            .map_err(|_| refuse("`resources` is not a list of ARNs".into()))?,
    };
    let detail = event
        .detail
        .ok_or_else(|| refuse("the event has no `detail` field".into()))?;
    let detail = decode(message_id, detail.get())
        .map_err(|err| in_envelope(err, "in the EventBridge event's `detail`"))?;
    Ok(EventBridgeEvent {
        id,
        source,
        detail_type,
        time,
        account,
        region,
        resources,
        detail,
    })
}

#[cfg(test)]
mod tests;
