//! Running a consumer, as its user sees it: the scenario suite (`scenarios`), `Consumer::run`
//! and its lifecycle on the paused clock (`run`, `lifecycle`), the handler model's edges
//! (`edges`), running unattended (`operations`), where messages come from (`queues`) and
//! flow control (`flow`). Scenarios of `on_both!` run on `MemoryQueue` (paused clock) and on
//! the test server (real time, ignored without one).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod edges;
mod flow;
mod lifecycle;
mod operations;
mod queues;
mod run;
mod scenarios;

guard_logs!();
