//! What happens to a delivery before its handler sees it, in the delivery's own task (its
//! lease kept meanwhile): its payload read from S3 (`payload_reading.rs`, feature `s3`), then
//! its idempotency key claimed (`claiming.rs`). A delivery a step settles or gives up on is
//! handed to no one.

use std::sync::Arc;

use futures_util::future::{join_all, BoxFuture};

use crate::delivery::Delivery;
#[cfg(feature = "s3")]
use crate::engine::payload_reading;
use crate::engine::{claiming, Engine, HandOut, HandTo};

/// One step before a handler sees a delivery: `None` when the step settled it or gave up on
/// it.
type Prepare = Arc<dyn Fn(Delivery) -> BoxFuture<'static, Option<Delivery>> + Send + Sync>;

/// Runs `steps` on `delivery` in turn, while each gives it back.
async fn prepare(steps: &[Prepare], delivery: Delivery) -> Option<Delivery> {
    let mut delivery = delivery;
    for step in steps {
        delivery = step(delivery).await?;
    }
    Some(delivery)
}

impl HandOut {
    /// The same, each delivery through `steps` first (a batch's each at once).
    fn preceded_by(&self, steps: Arc<[Prepare]>) -> HandOut {
        let to = match &self.to {
            HandTo::Each(each) => {
                let each = each.clone();
                HandTo::Each(Arc::new(move |d| {
                    let (each, steps) = (each.clone(), steps.clone());
                    Box::pin(async move {
                        if let Some(d) = prepare(&steps, d).await {
                            each(d).await;
                        }
                    })
                }))
            }
            HandTo::Batch(to_handler) => {
                let to_handler = to_handler.clone();
                HandTo::Batch(Arc::new(move |deliveries, shutdown| {
                    let (to_handler, steps) = (to_handler.clone(), steps.clone());
                    Box::pin(async move {
                        let prepared = deliveries.into_iter().map(|d| prepare(&steps, d));
                        let deliveries: Vec<_> =
                            join_all(prepared).await.into_iter().flatten().collect();
                        if !deliveries.is_empty() {
                            to_handler(deliveries, shutdown).await;
                        }
                    })
                }))
            }
        };
        HandOut {
            to,
            ready: self.ready.clone(),
        }
    }
}

impl Engine {
    /// `hand_out`, each delivery prepared first, in the delivery's own task (its lease kept
    /// meanwhile): its payload read from S3 when the consumer reads payloads, then its
    /// idempotency key claimed when the consumer has a store. A delivery a step settles or
    /// gives up on is handed to no one.
    pub(crate) fn preparing(&self, hand_out: &HandOut) -> HandOut {
        let mut steps: Vec<Prepare> = Vec::new();
        #[cfg(feature = "s3")]
        if self.ctx.payloads().is_some() {
            steps.push(Arc::new(|d| Box::pin(payload_reading::resolve(d))));
        }
        if self.ctx.idempotency().is_some() {
            let key_fn = self.idempotency_key.clone();
            steps.push(Arc::new(move |d| {
                Box::pin(claiming::claim(d, key_fn.clone()))
            }));
        }
        if steps.is_empty() {
            return hand_out.clone();
        }
        hand_out.preceded_by(steps.into())
    }
}
