//! A delivery from its receive to its settling: every way it is settled (`settling`), the
//! dead-letter step (`dead_letter`), the keeper that keeps it hidden (`keeper`), and its
//! work recorded once in an idempotency store (`idempotency`).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod dead_letter;
mod idempotency;
mod keeper;
mod settling;

guard_logs!();
