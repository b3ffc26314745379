//! The handler model: its scenarios on both sides (`model`), its finer points on `MemoryQueue`
//! (`details`), and tower services as handlers (`services`, feature `tower`).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod details;
mod model;
mod services;

guard_logs!();
