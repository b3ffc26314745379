//! Payloads (feature `s3`): bodies kept in S3 that a message points to, in the format of
//! Amazon's Extended Client libraries.

pub(crate) mod pointer;
pub(crate) mod store;
