use std::fmt;
use std::sync::{Arc, Mutex};

use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use super::*;
use crate::memory::{Action, MemoryQueue};

/// Keeps each warning's message.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        struct Text<'a>(&'a mut String);
        impl tracing::field::Visit for Text<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
                if field.name() == "message" {
                    *self.0 = format!("{value:?}");
                }
            }
        }
        let mut text = String::new();
        event.record(&mut Text(&mut text));
        self.0.lock().unwrap().push(text);
    }
}

/// Releases, as a dropped run's receive does, the two messages `q` holds (received
/// first) and, with `stale`, one whose receipt the queue no longer knows; the warnings
/// logged.
async fn release_two(q: &MemoryQueue, stale: bool) -> Vec<String> {
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry()
        .with(crate::leak_guard::layer())
        .with(warnings.clone());
    let _logs = tracing::subscriber::set_default(subscriber);
    let mut received = q.receive(2, Duration::ZERO).await.unwrap();
    if stale {
        received.push(
            Message::builder()
                .receipt_handle("AQEB-no-longer-known")
                .build(),
        );
    }
    release(Queue::new(q.clone()), received).await;
    let logged = warnings.0.lock().unwrap().clone();
    logged
}

fn queue_of_two() -> MemoryQueue {
    let q = MemoryQueue::new();
    q.send("a").unwrap();
    q.send("b").unwrap();
    q
}

#[tokio::test(start_paused = true)]
async fn a_release_warns_only_when_some_entry_failed() {
    let q = queue_of_two();
    assert_eq!(release_two(&q, false).await, Vec::<String>::new());
    assert_eq!(q.len(), 2, "both visible again");
    let logged = release_two(&q, true).await;
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].starts_with("releasing messages of a dropped run's receive failed"));
}

#[tokio::test(start_paused = true)]
async fn a_release_is_tried_once_on_a_fatal_error_and_four_times_on_transient_ones() {
    for (code, tries) in [("AccessDenied", 1), ("InternalError", RELEASE_TRIES)] {
        let q = queue_of_two();
        q.fail_next(Action::ChangeMessageVisibilityBatch, code, 10);
        let logged = release_two(&q, false).await;
        let requests = q.requests().requests(Action::ChangeMessageVisibilityBatch);
        assert_eq!(requests, u64::from(tries), "{code}");
        assert_eq!(logged.len(), 1, "{code}: one warning, {logged:?}");
    }
}
