//! The entry points of a [`Consumer`](crate::Consumer): `Consumer::builder` (a queue
//! through a client), `Consumer::from_env` and `Consumer::in_memory`.

use crate::builder::queues::Source;
use crate::builder::ConsumerBuilder;
use crate::consumer::Consumer;
use crate::memory::MemoryQueue;

impl Consumer {
    /// A consumer of `queue`, through `client`.
    ///
    /// `queue` is the queue's URL (as `CreateQueue` and `GetQueueUrl` return it), its name
    /// (`orders`, `orders.fifo`: in the client's account and region), or its ARN
    /// (`arn:aws:sqs:us-east-1:123456789012:orders`: a queue of that account, which may be
    /// another one's if its policy lets you in; the ARN's region must be the client's). A
    /// name or an ARN costs one `GetQueueUrl` when the consumer starts (or at the first
    /// [`queue_url`](Consumer::queue_url) or [`backlog`](Consumer::backlog)); from then on
    /// logs and `Debug` show the URL. [`build`](ConsumerBuilder::build) refuses a malformed
    /// one, naming the rule; a queue that does not exist ends `run` with an error naming it,
    /// after that one request.
    ///
    /// The consumer's calls make one attempt each (the client's own retry setting is
    /// overridden for them; nothing else of the client changes): the consumer retries each
    /// call on its own terms, and bounds each with its
    /// [`request_timeout`](ConsumerBuilder::request_timeout).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use sqs_consumer::{Consumer, Delivery};
    ///
    /// let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    /// let client = aws_sdk_sqs::Client::new(&config);
    /// let consumer = Consumer::builder(client, "jobs") // or its URL, or its ARN
    ///     .visibility_timeout(Duration::from_secs(60))
    ///     .max_in_flight(64)
    ///     .build()?;
    /// consumer
    ///     .run(|delivery: Delivery| async move {
    ///         println!("got {}", delivery.body());
    ///         delivery.ack().await
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(client: aws_sdk_sqs::Client, queue: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder::new(Source::Sqs {
            client,
            queue: queue.into(),
        })
    }

    /// A builder for a consumer of `queue` (a URL, a name or an ARN, as for
    /// [`builder`](Consumer::builder)), through a client configured the
    /// standard AWS way: credentials, region and endpoint from the environment, the shared
    /// config and credentials files, and the instance or container role
    /// (`aws_config::defaults`), `AWS_ENDPOINT_URL_SQS` included (so a local server needs no
    /// code change). The client's behavior version is pinned by this crate
    /// (`BehaviorVersion::v2026_01_12`); build your own client and use
    /// [`builder`](Consumer::builder) to choose another.
    ///
    /// With the default feature `from-env`. Credential sources that need an optional
    /// `aws-config` feature (SSO, `credential_process`) work once you enable that feature of
    /// `aws-config` in your own `Cargo.toml`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), sqs_consumer::Error> {
    /// use sqs_consumer::{Consumer, Delivery};
    ///
    /// let consumer = Consumer::from_env("jobs")
    ///     .await
    ///     .max_in_flight(64)
    ///     .build()?;
    /// consumer.run(|delivery: Delivery| delivery.ack()).await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "from-env")]
    #[cfg_attr(docsrs, doc(cfg(feature = "from-env")))]
    pub async fn from_env(queue: impl Into<String>) -> ConsumerBuilder {
        let config = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
            .load()
            .await;
        Consumer::builder(aws_sdk_sqs::Client::new(&config), queue)
    }

    /// A consumer of an in-memory queue, for tests and examples.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), sqs_consumer::Error> {
    /// use std::time::Duration;
    /// use sqs_consumer::{Consumer, MemoryQueue};
    ///
    /// let queue = MemoryQueue::new();
    /// queue.send("hello")?;
    /// let consumer = Consumer::in_memory(&queue)
    ///     .wait_time(Duration::from_secs(1))
    ///     .build()?;
    /// assert!(!consumer.has_isolated_keeper()); // all on your runtime, paused clock included
    /// # Ok(()) }
    /// ```
    pub fn in_memory(queue: &MemoryQueue) -> ConsumerBuilder {
        ConsumerBuilder::new(Source::Memory(queue.clone()))
    }
}
