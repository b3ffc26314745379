//! A delivery from its receive to its settling: every way it is settled (`settling`), the
//! dead-letter step (`dead_letter`), and the keeper that keeps it hidden (`keeper`).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod dead_letter;
mod keeper;
mod settling;

guard_logs!();
