//! What the crate tells an operator: its log lines (`logs`) and the `delivery` span joined to
//! the producer's trace (`continuation`, feature `opentelemetry`). The binary's global
//! subscriber exports spans to memory for `continuation`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod continuation;
mod logs;

guard_logs!(continuation::exporting_layer());
