//! Reading a delivery's payload from S3 before its handler sees it (feature `s3`): the
//! delivery's lease is kept meanwhile (it holds its slot, and the keeper extends it), transient
//! failures are retried a few times, and a payload that cannot be read keeps the delivery from
//! every handler: it is counted, logged once at `error`, and meets the retry policy.

use crate::delivery::Delivery;
use crate::error::{Error, ErrorKind};
use crate::payload::pointer::{self, Malformed, Payload};
use crate::stats::Counter;

/// `delivery`, its payload read if it carries a pointer; `None` when the payload could not be
/// read (the delivery then met the retry policy) or the delivery was lost meanwhile.
pub(crate) async fn resolve(mut delivery: Delivery) -> Option<Delivery> {
    let Some(store) = delivery.context().payloads().cloned() else {
        return Some(delivery);
    };
    let (location, carrier) = match pointer::find(delivery.message()) {
        Ok(None) => return Some(delivery),
        Ok(Some(found)) => found,
        Err(malformed) => {
            let err = malformed_error(&delivery, malformed);
            return give_up(delivery, err).await;
        }
    };
    let lost = delivery.lost();
    let read = tokio::select! {
        read = store.read_retrying(&location) => read,
        reason = lost => {
            tracing::warn!(parent: delivery.span(), message_id = %delivery.message_id(), %reason, "delivery lost while its payload was read; dropped");
            return None;
        }
    };
    match read {
        Ok(body) => {
            delivery.set_payload(location, Payload { carrier, body });
            Some(delivery)
        }
        Err(err) => {
            let err = Error::Payload {
                message_id: delivery.message_id().to_owned(),
                bucket: location.bucket().to_owned(),
                key: location.key().to_owned(),
                reason: err.reason,
                kind: err.kind,
                source: err.source,
            };
            give_up(delivery, err).await
        }
    }
}

fn malformed_error(delivery: &Delivery, malformed: Malformed) -> Error {
    Error::Payload {
        message_id: delivery.message_id().to_owned(),
        bucket: malformed.bucket.unwrap_or_default(),
        key: malformed.key.unwrap_or_default(),
        source: malformed.reason.clone().into(),
        reason: malformed.reason,
        kind: ErrorKind::Fatal,
    }
}

/// A payload that cannot be read: counted, logged once, and the delivery meets the failure
/// step as a failing handler's does: the consumer's dead-letter step once it is due (the
/// copy names the payload's error), the retry policy and its back-off otherwise (and the
/// queue's redrive policy after its receives). It reaches no handler, so nothing acks it.
async fn give_up(delivery: Delivery, err: Error) -> Option<Delivery> {
    delivery.context().count(Counter::PayloadFailures);
    let then = if delivery.dead_letter_due() {
        "it moves to the dead-letter queue"
    } else {
        "it gets the retry policy"
    };
    if let Error::Payload {
        message_id,
        bucket,
        key,
        reason,
        ..
    } = &err
    {
        tracing::error!(
            parent: delivery.span(),
            %message_id,
            %bucket,
            %key,
            error = %reason,
            retryable = err.is_retryable(),
            "the message's payload could not be read from S3; {then}"
        );
    }
    let message_id = delivery.message_id().to_owned();
    let failure = err.chain().to_string();
    if let Err(failed) = delivery.give_up(failure).await {
        tracing::warn!(%message_id, error = %failed.chain(), "the failure step failed; the message returns when its visibility lapses");
    }
    None
}
