//! The queues under the consumer: `MemoryQueue`'s rules (`memory`), what each implementation
//! answers where AWS is subtle (`fidelity`), a real server's error answers (`server`), and
//! SQS errors through the real SDK (`error_mapping`, `sdk_errors`).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod error_mapping;
mod fidelity;
mod memory;
mod sdk_errors;
mod server;

guard_logs!();
