//! The manual: how the consumer behaves, page by page.
//!
//! Each page is a module with no items, only documentation (its source is `docs/<page>.md`
//! in the repository; its examples run as doc tests). Start with
//! [`lifecycle`], then [`handlers`] and [`settings`]; [`semantics`] states the
//! guarantees exactly. Every promise of these pages has a test that fails when it is false:
//! `contributing/claims.md` in the repository names each one's.

#[doc = include_str!("../docs/lifecycle.md")]
pub mod lifecycle {}

#[doc = include_str!("../docs/handlers.md")]
pub mod handlers {}

#[doc = include_str!("../docs/settings.md")]
pub mod settings {}

#[doc = include_str!("../docs/semantics.md")]
pub mod semantics {}

#[doc = include_str!("../docs/keeper.md")]
pub mod keeper {}

#[doc = include_str!("../docs/flow_control.md")]
pub mod flow_control {}

#[doc = include_str!("../docs/fifo.md")]
pub mod fifo {}

#[doc = include_str!("../docs/shutdown.md")]
pub mod shutdown {}

#[doc = include_str!("../docs/errors.md")]
pub mod errors {}

#[doc = include_str!("../docs/idempotency.md")]
pub mod idempotency {}

#[doc = include_str!("../docs/bad_input.md")]
pub mod bad_input {}

#[doc = include_str!("../docs/integrations.md")]
#[cfg(all(feature = "json", feature = "from-env"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "json", feature = "from-env"))))]
pub mod integrations {}

#[doc = include_str!("../docs/tower.md")]
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower {}

#[doc = include_str!("../docs/payloads.md")]
#[cfg(feature = "s3")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub mod payloads {}

#[doc = include_str!("../docs/lambda.md")]
#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod lambda {}

#[doc = include_str!("../docs/cost.md")]
pub mod cost {}

#[doc = include_str!("../docs/testing.md")]
pub mod testing {}
