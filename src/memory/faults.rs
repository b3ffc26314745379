//! Random faults a `MemoryQueue` can inject into the calls a consumer makes, as a network
//! and a busy server would: errors, throttling, answers lost after the call took effect, and
//! answers held past the caller's patience.

use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::memory::counts::Action;

/// Random failures for a [`MemoryQueue`](crate::MemoryQueue) to inject into the calls a
/// [`Consumer`](crate::Consumer) makes of it (`ReceiveMessage`, `DeleteMessageBatch`,
/// `ChangeMessageVisibilityBatch`, `GetQueueAttributes`), drawn per call from a seeded
/// generator, so a run can be repeated. Set with
/// [`MemoryQueueBuilder::faults`](crate::memory::MemoryQueueBuilder::faults).
///
/// ```
/// use std::time::Duration;
/// use sqs_consumer::{MemoryQueue};
/// use sqs_consumer::memory::{Action, Faults};
///
/// let queue = MemoryQueue::builder()
///     .faults(
///         Faults::new(42)
///             .internal_error(0.2)
///             .lost_answer(0.05)
///             .held_answer(0.05, Duration::from_secs(15))
///             .actions([Action::DeleteMessageBatch]),
///     )
///     .build()?;
/// # Ok::<(), sqs_consumer::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Faults {
    seed: u64,
    internal_error: f64,
    throttle: f64,
    lost_answer: f64,
    held_answer: f64,
    hold_for: Duration,
    actions: Vec<Action>,
}

/// What was injected so far, from [`MemoryQueue::injected`](crate::MemoryQueue::injected).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InjectedFaults {
    /// Calls answered `500 InternalError` without acting.
    pub internal_error: u64,
    /// Calls answered `ThrottlingException` without acting.
    pub throttle: u64,
    /// Calls that took effect, whose answer was then lost (the caller saw a failure).
    pub lost_answer: u64,
    /// Calls that took effect, whose answer was then held back.
    pub held_answer: u64,
}

/// One fault, as drawn for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    InternalError,
    Throttle,
    LostAnswer,
    HeldAnswer(Duration),
}

impl Faults {
    /// No faults yet, drawn from a generator seeded with `seed`. Applies to every call a
    /// consumer makes until [`actions`](Faults::actions) narrows it.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            internal_error: 0.0,
            throttle: 0.0,
            lost_answer: 0.0,
            held_answer: 0.0,
            hold_for: Duration::ZERO,
            actions: vec![
                Action::ReceiveMessage,
                Action::DeleteMessageBatch,
                Action::ChangeMessageVisibilityBatch,
                Action::GetQueueAttributes,
            ],
        }
    }

    /// The share of calls answered `500 InternalError`, without acting. Defaults to 0.
    pub fn internal_error(mut self, probability: f64) -> Self {
        self.internal_error = probability;
        self
    }

    /// The share of calls answered `ThrottlingException`, without acting. Defaults to 0.
    pub fn throttle(mut self, probability: f64) -> Self {
        self.throttle = probability;
        self
    }

    /// The share of calls that take effect and then fail as a dropped connection would: the
    /// caller sees a transient failure of a call that did happen. Defaults to 0.
    pub fn lost_answer(mut self, probability: f64) -> Self {
        self.lost_answer = probability;
        self
    }

    /// The share of calls that take effect and whose answer then comes `hold_for` late (a
    /// consumer gives up on it after its request timeout). Defaults to 0.
    pub fn held_answer(mut self, probability: f64, hold_for: Duration) -> Self {
        self.held_answer = probability;
        self.hold_for = hold_for;
        self
    }

    /// The actions to disturb. Defaults to every call a consumer makes.
    pub fn actions(mut self, actions: impl IntoIterator<Item = Action>) -> Self {
        self.actions = actions.into_iter().collect();
        self
    }

    /// Checks the probabilities: each in 0.0..=1.0, adding up to at most 1.0.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let all = [
            self.internal_error,
            self.throttle,
            self.lost_answer,
            self.held_answer,
        ];
        let each_ok = all.iter().all(|p| (0.0..=1.0).contains(p));
        if !each_ok || all.iter().sum::<f64>() > 1.0 {
            return Err(Error::invalid(
                "faults",
                all,
                "probabilities in 0.0..=1.0 adding up to at most 1.0",
            ));
        }
        Ok(())
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// The fault for a call of `action`, given a uniform draw in `0.0..1.0`.
    pub(crate) fn pick(&self, action: Action, draw: f64) -> Option<Fault> {
        if !self.actions.contains(&action) {
            return None;
        }
        let mut edge = 0.0;
        for (p, fault) in [
            (self.internal_error, Fault::InternalError),
            (self.throttle, Fault::Throttle),
            (self.lost_answer, Fault::LostAnswer),
            (self.held_answer, Fault::HeldAnswer(self.hold_for)),
        ] {
            edge += p;
            if draw < edge {
                return Some(fault);
            }
        }
        None
    }
}

impl InjectedFaults {
    pub(crate) fn count(&mut self, fault: Fault) {
        let slot = match fault {
            Fault::InternalError => &mut self.internal_error,
            Fault::Throttle => &mut self.throttle,
            Fault::LostAnswer => &mut self.lost_answer,
            Fault::HeldAnswer(_) => &mut self.held_answer,
        };
        *slot += 1;
    }
}

/// The error a caller sees when the answer to a call that took effect was lost.
pub(crate) fn lost_answer(action: Action) -> Error {
    Error::Sqs {
        operation: action.name(),
        code: None,
        message: "the connection dropped after the call took effect (injected)".into(),
        kind: ErrorKind::Retryable,
        source: "connection dropped (injected)".into(),
    }
}

/// The next number of a splitmix64 sequence, as a uniform draw in `0.0..1.0`.
pub(crate) fn next_draw(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests;
