//! Typed bodies (feature `json`): JSON decoded into your type, SNS notifications, and
//! EventBridge events, each read from a delivery's body.

pub(crate) mod eventbridge;
pub(crate) mod json;
