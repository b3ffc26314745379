//! `DynamoDbStore`: the idempotency store in a DynamoDB table, shared by every worker of a
//! queue (feature `dynamodb`).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;

use super::{Begun, Hold, Key, Owner, Ownership, Store, StoreError, StoreFuture};
use crate::error::{Error, ErrorKind};

/// The attribute names of a record.
const KEY: &str = "key";
const STATE: &str = "state";
const MESSAGE_ID: &str = "message_id";
const RECEIVE: &str = "receive";
const EXPIRES_AT_MS: &str = "expires_at_ms";
const LEASE_UNTIL_MS: &str = "lease_until_ms";
const TTL: &str = "ttl";

const IN_PROGRESS: &str = "in_progress";
const DONE: &str = "done";

/// How long after its expiry DynamoDB's TTL may delete a record: the store never relies on
/// the deletion (TTL deletes late, up to days), only on `expires_at_ms`.
const TTL_AFTER_EXPIRY: Duration = Duration::from_secs(3600);

/// The idempotency [`Store`] in a DynamoDB table, shared by every worker of a queue: each
/// call is one conditional write (`PutItem`, `UpdateItem` or `DeleteItem`), and a `begin`
/// whose condition fails reads the record it found from the same answer. Feature `dynamodb`.
///
/// You build the `aws_sdk_dynamodb::Client` (its credentials, region, HTTP client and
/// behaviour version are yours); the store sends each call once, with the client's retries
/// turned off for it, since the consumer retries a failed call itself while the delivery's
/// lease allows. The consumer bounds each call to 5 s.
///
/// # The table
///
/// One item per key, its partition key a string named `key` (the [`Key`]'s 64 hex digits),
/// no sort key:
///
/// | attribute | type | what it holds |
/// |---|---|---|
/// | `key` | S | the key, hashed |
/// | `state` | S | `in_progress` or `done` |
/// | `message_id` | S | the owner's SQS message id |
/// | `receive` | S | the owner's receive: a hash of its receipt handle |
/// | `lease_until_ms` | N | when the owner's lease ends (in progress), in milliseconds since the Unix epoch |
/// | `expires_at_ms` | N | when the record expires, in milliseconds since the Unix epoch |
/// | `ttl` | N | when DynamoDB's time to live may delete it: an hour after `expires_at_ms`, in seconds |
///
/// [`create_table`](DynamoDbStore::create_table) makes it (on-demand capacity, TTL on `ttl`);
/// with the AWS CLI:
///
/// ```text
/// aws dynamodb create-table --table-name sqs-idempotency \
///     --attribute-definitions AttributeName=key,AttributeType=S \
///     --key-schema AttributeName=key,KeyType=HASH --billing-mode PAY_PER_REQUEST
/// aws dynamodb update-time-to-live --table-name sqs-idempotency \
///     --time-to-live-specification Enabled=true,AttributeName=ttl
/// ```
///
/// The role needs `dynamodb:PutItem`, `UpdateItem` and `DeleteItem` on the table
/// (`CreateTable`, `DescribeTable` and `UpdateTimeToLive` for `create_table`). DynamoDB's TTL
/// deletes an expired item late (up to a few days): the store reads `expires_at_ms` in every
/// condition and never trusts an item's presence. The store compares `expires_at_ms` with the
/// worker's system clock: keep the workers' clocks in sync (NTP), as AWS's own hosts are.
///
/// ```no_run
/// # async fn example(sqs: aws_sdk_sqs::Client, dynamodb: aws_sdk_dynamodb::Client) -> Result<(), sqs_consumer::Error> {
/// use sqs_consumer::{idempotency::DynamoDbStore, Consumer};
///
/// let consumer = Consumer::builder(sqs, "orders")
///     .idempotency(DynamoDbStore::new(dynamodb, "sqs-idempotency"))
///     .build()?;
/// # let _ = consumer; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    client: Client,
    table: String,
}

impl DynamoDbStore {
    /// The store in the table named `table`, through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// Creates the table `table` as the store needs it (on-demand capacity), waits until it
    /// is active (up to 60 s), and turns its TTL on for `ttl` (a DynamoDB without TTL, as
    /// some local ones are, gets a warning: its expired records stay). A table of that name
    /// that exists already is left as it is.
    ///
    /// # Errors
    ///
    /// [`Error::Idempotency`] naming the DynamoDB action that failed (`CreateTable`,
    /// `DescribeTable`, `UpdateTimeToLive`): retryable for throttling, 5xx and a table that
    /// did not become active within 60 s; fatal otherwise (access denied, a bad name).
    pub async fn create_table(client: &Client, table: &str) -> Result<(), Error> {
        let created = client
            .create_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(KEY)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(|e| table_error("CreateTable", ErrorKind::Fatal, e))?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(KEY)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(|e| table_error("CreateTable", ErrorKind::Fatal, e))?,
            )
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(err) if code_of(&err) == Some("ResourceInUseException") => return Ok(()),
            Err(err) => return Err(sdk_error("CreateTable", err)),
        }
        wait_until_active(client, table).await?;
        let ttl = TimeToLiveSpecification::builder()
            .enabled(true)
            .attribute_name(TTL)
            .build()
            .map_err(|e| table_error("UpdateTimeToLive", ErrorKind::Fatal, e))?;
        let updated = client
            .update_time_to_live()
            .table_name(table)
            .time_to_live_specification(ttl)
            .send()
            .await;
        match updated {
            Ok(_) => Ok(()),
            // A DynamoDB without TTL (some local ones): expired records stay, and are never
            // trusted anyway.
            Err(err) if code_of(&err) == Some("UnknownOperationException") => {
                tracing::warn!(table, "this DynamoDB has no time to live: expired idempotency records stay in the table (the store never trusts them)");
                Ok(())
            }
            Err(err) => Err(sdk_error("UpdateTimeToLive", err)),
        }
    }

    /// The record `owner` writes: `state`, its lease ending `lease` from now and itself
    /// expiring `record` from now.
    fn record(
        &self,
        key: &Key,
        owner: &Owner,
        state: &str,
        lease: Duration,
        record: Duration,
    ) -> Item {
        let now = now_ms();
        let expires_at = now.saturating_add(millis(record));
        let ttl = expires_at / 1000 + TTL_AFTER_EXPIRY.as_secs();
        HashMap::from([
            (KEY.to_owned(), s(key.as_str())),
            (STATE.to_owned(), s(state)),
            (MESSAGE_ID.to_owned(), s(owner.message_id())),
            (RECEIVE.to_owned(), s(owner.receive())),
            (
                LEASE_UNTIL_MS.to_owned(),
                n(now.saturating_add(millis(lease))),
            ),
            (EXPIRES_AT_MS.to_owned(), n(expires_at)),
            (TTL.to_owned(), n(ttl)),
        ])
    }

    async fn begin(&self, key: &Key, owner: &Owner, hold: Hold) -> Result<Begun, StoreError> {
        let now = now_ms();
        let item = self.record(key, owner, IN_PROGRESS, hold.lease(), hold.record());
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(
                "attribute_not_exists(#key) OR #expires < :now \
                 OR (#state = :in_progress AND #message_id = :message_id \
                     AND (#lease < :now OR #receive = :receive))",
            )
            .expression_attribute_names("#key", KEY)
            .expression_attribute_names("#expires", EXPIRES_AT_MS)
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#message_id", MESSAGE_ID)
            .expression_attribute_names("#lease", LEASE_UNTIL_MS)
            .expression_attribute_names("#receive", RECEIVE)
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":in_progress", s(IN_PROGRESS))
            .expression_attribute_values(":message_id", s(owner.message_id()))
            .expression_attribute_values(":receive", s(owner.receive()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .customize()
            .config_override(one_attempt())
            .send()
            .await;
        let found = match put {
            Ok(_) => return Ok(Begun::Started),
            Err(SdkError::ServiceError(service))
                if service.err().is_conditional_check_failed_exception() =>
            {
                match service.into_err() {
                    aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(e) => e.item,
                    _ => None,
                }
            }
            Err(err) => return Err(store_error(err)),
        };
        let found = match found {
            Some(item) => item,
            // A server that does not return the item with the failure: read it.
            None => match self.read(key).await? {
                Some(item) => item,
                // Gone since (given back): try again, once.
                None => {
                    return Ok(Begun::InProgress {
                        ends_in: Duration::ZERO,
                    })
                }
            },
        };
        Ok(what_holds(&found, owner, now))
    }

    /// The record of `key`, read consistently.
    async fn read(&self, key: &Key) -> Result<Option<Item>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, s(key.as_str()))
            .consistent_read(true)
            .customize()
            .config_override(one_attempt())
            .send()
            .await
            .map_err(store_error)?;
        Ok(got.item)
    }

    async fn extend(&self, key: &Key, owner: &Owner, hold: Hold) -> Result<Ownership, StoreError> {
        let now = now_ms();
        let expires_at = now.saturating_add(millis(hold.record()));
        let ttl = expires_at / 1000 + TTL_AFTER_EXPIRY.as_secs();
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(KEY, s(key.as_str()))
            .update_expression("SET #lease = :lease, #expires = :expires, #ttl = :ttl")
            .condition_expression(HELD_BY_OWNER)
            .set_expression_attribute_names(Some(held_names()))
            .set_expression_attribute_values(Some(held_values(owner)))
            .expression_attribute_names("#lease", LEASE_UNTIL_MS)
            .expression_attribute_names("#expires", EXPIRES_AT_MS)
            .expression_attribute_names("#ttl", TTL)
            .expression_attribute_values(":lease", n(now.saturating_add(millis(hold.lease()))))
            .expression_attribute_values(":expires", n(expires_at))
            .expression_attribute_values(":ttl", n(ttl))
            .customize()
            .config_override(one_attempt())
            .send()
            .await;
        ownership(update)
    }

    async fn complete(
        &self,
        key: &Key,
        owner: &Owner,
        keep_for: Duration,
    ) -> Result<Ownership, StoreError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.record(
                key,
                owner,
                DONE,
                Duration::ZERO,
                keep_for,
            )))
            .condition_expression(
                "attribute_not_exists(#key) OR #expires < :now \
                 OR (#message_id = :message_id AND #receive = :receive)",
            )
            .expression_attribute_names("#key", KEY)
            .expression_attribute_names("#expires", EXPIRES_AT_MS)
            .expression_attribute_names("#message_id", MESSAGE_ID)
            .expression_attribute_names("#receive", RECEIVE)
            .expression_attribute_values(":now", n(now_ms()))
            .expression_attribute_values(":message_id", s(owner.message_id()))
            .expression_attribute_values(":receive", s(owner.receive()))
            .customize()
            .config_override(one_attempt())
            .send()
            .await;
        ownership(put)
    }

    async fn abandon(&self, key: &Key, owner: &Owner) -> Result<(), StoreError> {
        let delete = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(KEY, s(key.as_str()))
            .condition_expression(HELD_BY_OWNER)
            .set_expression_attribute_names(Some(held_names()))
            .set_expression_attribute_values(Some(held_values(owner)))
            .customize()
            .config_override(one_attempt())
            .send()
            .await;
        // A record no longer ours is someone else's to keep (or gone): nothing to give back.
        ownership(delete).map(|_| ())
    }
}

impl Store for DynamoDbStore {
    fn begin<'a>(&'a self, key: &'a Key, owner: &'a Owner, hold: Hold) -> StoreFuture<'a, Begun> {
        Box::pin(self.begin(key, owner, hold))
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        hold: Hold,
    ) -> StoreFuture<'a, Ownership> {
        Box::pin(self.extend(key, owner, hold))
    }

    fn complete<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a Owner,
        keep_for: Duration,
    ) -> StoreFuture<'a, Ownership> {
        Box::pin(self.complete(key, owner, keep_for))
    }

    fn abandon<'a>(&'a self, key: &'a Key, owner: &'a Owner) -> StoreFuture<'a, ()> {
        Box::pin(self.abandon(key, owner))
    }
}

type Item = HashMap<String, AttributeValue>;

/// The condition `extend` and `abandon` write under: the record is still `in_progress` and
/// held by the same receive of the same message ([`held_names`], [`held_values`]).
const HELD_BY_OWNER: &str =
    "#state = :in_progress AND #message_id = :message_id AND #receive = :receive";

fn held_names() -> HashMap<String, String> {
    [
        ("#state", STATE),
        ("#message_id", MESSAGE_ID),
        ("#receive", RECEIVE),
    ]
    .into_iter()
    .map(|(name, attribute)| (name.to_owned(), attribute.to_owned()))
    .collect()
}

fn held_values(owner: &Owner) -> Item {
    Item::from([
        (":in_progress".to_owned(), s(IN_PROGRESS)),
        (":message_id".to_owned(), s(owner.message_id())),
        (":receive".to_owned(), s(owner.receive())),
    ])
}

/// What a conditional write's answer says of the record: `Ours` if the write was made,
/// `Taken` if its condition refused it, a [`StoreError`] if the call failed.
fn ownership<O, E, R>(sent: Result<O, SdkError<E, R>>) -> Result<Ownership, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match sent {
        Ok(_) => Ok(Ownership::Ours),
        Err(SdkError::ServiceError(service))
            if service.err().code() == Some("ConditionalCheckFailedException") =>
        {
            Ok(Ownership::Taken)
        }
        Err(err) => Err(store_error(err)),
    }
}

/// What a record that refused `owner`'s `begin` says: done, or held for a while yet (until
/// its lease ends, for a receive of the same message; until it expires, for another message).
fn what_holds(item: &Item, owner: &Owner, now: u64) -> Begun {
    let text = |name| item.get(name).and_then(|v: &AttributeValue| v.as_s().ok());
    let number = |name| {
        item.get(name)
            .and_then(|v: &AttributeValue| v.as_n().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(now)
    };
    if text(STATE).map(String::as_str) == Some(DONE) {
        return Begun::Done;
    }
    let same_message = text(MESSAGE_ID).map(String::as_str) == Some(owner.message_id());
    let until = number(if same_message {
        LEASE_UNTIL_MS
    } else {
        EXPIRES_AT_MS
    });
    Begun::InProgress {
        ends_in: Duration::from_millis(until.saturating_sub(now)),
    }
}

/// One attempt per call: the consumer owns the retries.
fn one_attempt() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::new().retry_config(RetryConfig::disabled())
}

async fn wait_until_active(client: &Client, table: &str) -> Result<(), Error> {
    for _ in 0..120 {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|err| sdk_error("DescribeTable", err))?;
        let status = described.table.and_then(|t| t.table_status);
        if status == Some(TableStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(table_error(
        "DescribeTable",
        ErrorKind::Retryable,
        "the table did not become active within 60 s",
    ))
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The system clock, in milliseconds since the Unix epoch (0 before it).
fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    millis(since)
}

fn code_of<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(service) => service.err().code(),
        _ => None,
    }
}

/// Whether an SDK error may pass: throttling, 5xx, timeouts and failures to reach DynamoDB,
/// but not a request that could not be built or was refused for what it is.
fn is_transient<E, R>(err: &SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(_) => matches!(
            code_of(err),
            Some(
                "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "InternalServerError"
                    | "InternalFailure"
                    | "ServiceUnavailable"
                    | "TransactionConflictException"
                    | "ReplicatedWriteConflictException"
            )
        ),
        SdkError::ConstructionFailure(_) => false,
        SdkError::DispatchFailure(failure) => !failure.is_user(),
        _ => true,
    }
}

fn store_error<E, R>(err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if is_transient(&err) {
        StoreError::retryable(err)
    } else {
        StoreError::fatal(err)
    }
}

fn sdk_error<E, R>(operation: &'static str, err: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = if is_transient(&err) {
        ErrorKind::Retryable
    } else {
        ErrorKind::Fatal
    };
    table_error(operation, kind, err)
}

fn table_error(
    operation: &'static str,
    kind: ErrorKind,
    source: impl Into<crate::error::BoxError>,
) -> Error {
    Error::Idempotency {
        message_id: None,
        operation,
        kind,
        source: source.into(),
    }
}
