//! The repository's own rules, checked: the docs (`docs`), the layers and the glossary
//! (`layers`), the public API written down (`public_api`), and every example's output
//! (`examples`).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod docs;
mod examples;
mod layers;
mod public_api;

guard_logs!();
