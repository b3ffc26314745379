use std::time::Duration;

use super::*;

fn owner(message_id: &str, receipt: &str) -> Owner {
    Owner::new(message_id, receipt)
}

const T: Duration = Duration::from_secs(30);

/// A claim's hold: its lease for `T`, its record for `2 T`.
const HOLD: Hold = Hold {
    lease: T,
    record: Duration::from_secs(60),
};
const DAY: Duration = Duration::from_secs(86_400);

#[test]
fn keys_are_64_hex_digits_whatever_the_length_and_differ_by_queue() {
    let long = "k".repeat(10_000);
    let key = Key::new("orders", &long);
    assert_eq!(key.as_str().len(), 64);
    assert!(key.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
    assert_ne!(Key::new("orders", "a"), Key::new("payments", "a"));
    assert_ne!(Key::new("ab", "c"), Key::new("a", "bc"));
    assert_eq!(Key::new("orders", "a"), Key::new("orders", "a"));
    // Shown whole, or (in logs and `Debug`) by its first 12 digits.
    assert_eq!(key.to_string(), key.as_str());
    assert_eq!(format!("{key:?}"), format!("Key({})", &key.as_str()[..12]));
}

#[test]
fn an_owner_keeps_no_receipt_handle() {
    let handle = "AQEB".repeat(50);
    let owner = owner("m-1", &handle);
    assert_eq!(owner.receive().len(), 32);
    assert!(!format!("{owner:?}").contains("AQEB"));
    assert_eq!(
        format!("{owner:?}"),
        format!(
            "Owner {{ message_id: \"m-1\", receive: \"{}\" }}",
            &owner.receive()[..8]
        )
    );
    assert_ne!(owner.receive(), Owner::new("m-1", "other").receive());
}

#[tokio::test(start_paused = true)]
async fn begin_starts_a_new_key_then_answers_in_progress_to_another_message() {
    let store = MemoryStore::new();
    let key = Key::new("q", "order-1");
    let first = owner("m-1", "r-1");
    assert_eq!(
        store.begin(&key, &first, HOLD).await.unwrap(),
        Begun::Started
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    let other = owner("m-2", "r-2");
    assert_eq!(
        store.begin(&key, &other, HOLD).await.unwrap(),
        Begun::InProgress {
            ends_in: Duration::from_secs(50)
        },
        "until the record expires"
    );
    assert_eq!(store.in_progress(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_later_receive_of_the_same_message_takes_the_key_over_once_the_earlier_lease_ended() {
    let store = MemoryStore::new();
    let key = Key::new("q", "m-1");
    let (earlier, later) = (owner("m-1", "r-1"), owner("m-1", "r-2"));
    assert_eq!(
        store.begin(&key, &earlier, HOLD).await.unwrap(),
        Begun::Started
    );
    // Handed out twice while held (SQS's standard queues may): it waits for the lease.
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        store.begin(&key, &later, HOLD).await.unwrap(),
        Begun::InProgress {
            ends_in: Duration::from_secs(20)
        }
    );
    assert_eq!(
        store.begin(&key, &earlier, HOLD).await.unwrap(),
        Begun::Started,
        "the same receive again (a retried call)"
    );
    tokio::time::advance(T).await;
    assert_eq!(
        store.begin(&key, &later, HOLD).await.unwrap(),
        Begun::Started
    );
    assert_eq!(
        store.extend(&key, &earlier, HOLD).await.unwrap(),
        Ownership::Taken
    );
    assert_eq!(
        store.complete(&key, &earlier, DAY).await.unwrap(),
        Ownership::Taken
    );
    store.abandon(&key, &earlier).await.unwrap();
    assert_eq!(store.in_progress(), 1, "the later receive's record stays");
    assert_eq!(
        store.complete(&key, &later, DAY).await.unwrap(),
        Ownership::Ours
    );
    assert_eq!(store.done(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_record_is_taken_by_another_message() {
    let store = MemoryStore::new();
    let key = Key::new("q", "order-1");
    let (first, other) = (owner("m-1", "r-1"), owner("m-2", "r-2"));
    store.begin(&key, &first, HOLD).await.unwrap();
    tokio::time::advance(T).await;
    assert!(
        matches!(
            store.begin(&key, &other, HOLD).await.unwrap(),
            Begun::InProgress { .. }
        ),
        "the lease ended, not the record"
    );
    tokio::time::advance(T).await;
    assert_eq!(
        store.begin(&key, &other, HOLD).await.unwrap(),
        Begun::Started
    );
    assert_eq!(
        store.complete(&key, &first, DAY).await.unwrap(),
        Ownership::Taken
    );
}

#[tokio::test(start_paused = true)]
async fn extend_moves_the_expiry_of_the_owners_record_only() {
    let store = MemoryStore::new();
    let key = Key::new("q", "order-1");
    let (first, other) = (owner("m-1", "r-1"), owner("m-2", "r-2"));
    store.begin(&key, &first, HOLD).await.unwrap();
    tokio::time::advance(Duration::from_secs(20)).await;
    assert_eq!(
        store.extend(&key, &first, HOLD).await.unwrap(),
        Ownership::Ours
    );
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(matches!(
        store.begin(&key, &other, HOLD).await.unwrap(),
        Begun::InProgress { ends_in } if ends_in == Duration::from_secs(40)
    ));
    // The lease moved too: a later receive of the same message waits for what is left of it.
    assert!(matches!(
        store.begin(&key, &owner("m-1", "r-9"), HOLD).await.unwrap(),
        Begun::InProgress { ends_in } if ends_in == Duration::from_secs(10)
    ));
    assert_eq!(
        store.extend(&key, &other, HOLD).await.unwrap(),
        Ownership::Taken
    );
}

#[tokio::test(start_paused = true)]
async fn a_done_key_answers_done_until_it_expires_and_abandon_never_reopens_it() {
    let store = MemoryStore::new();
    let key = Key::new("q", "m-1");
    let first = owner("m-1", "r-1");
    store.begin(&key, &first, HOLD).await.unwrap();
    assert_eq!(
        store.complete(&key, &first, DAY).await.unwrap(),
        Ownership::Ours
    );
    assert_eq!(
        store.complete(&key, &first, DAY).await.unwrap(),
        Ownership::Ours,
        "a retried write"
    );
    store.abandon(&key, &first).await.unwrap();
    let again = owner("m-1", "r-2");
    assert_eq!(store.begin(&key, &again, HOLD).await.unwrap(), Begun::Done);
    assert_eq!(
        store.extend(&key, &first, HOLD).await.unwrap(),
        Ownership::Taken
    );
    tokio::time::advance(DAY).await;
    assert_eq!(
        store.begin(&key, &again, HOLD).await.unwrap(),
        Begun::Started
    );
}

#[tokio::test(start_paused = true)]
async fn abandon_removes_the_owners_in_progress_record() {
    let store = MemoryStore::new();
    let key = Key::new("q", "order-1");
    let (first, other) = (owner("m-1", "r-1"), owner("m-2", "r-2"));
    store.begin(&key, &first, HOLD).await.unwrap();
    store.abandon(&key, &other).await.unwrap();
    assert_eq!(store.in_progress(), 1, "another owner's abandon leaves it");
    store.abandon(&key, &first).await.unwrap();
    assert_eq!(store.in_progress(), 0);
    assert_eq!(
        store.begin(&key, &other, HOLD).await.unwrap(),
        Begun::Started
    );
}

#[tokio::test(start_paused = true)]
async fn injected_failures_are_retryable_write_nothing_and_are_counted() {
    let store = MemoryStore::new();
    let key = Key::new("q", "order-1");
    store.fail_next(2);
    for _ in 0..2 {
        let err = store
            .begin(&key, &owner("m-1", "r-1"), HOLD)
            .await
            .unwrap_err();
        assert!(err.is_retryable());
    }
    assert_eq!(store.in_progress(), 0);
    assert_eq!(
        store.begin(&key, &owner("m-1", "r-1"), HOLD).await.unwrap(),
        Begun::Started
    );
    assert_eq!(store.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn expired_records_are_swept_as_others_are_written() {
    let store = MemoryStore::new();
    for i in 0..3_000 {
        let key = Key::new("q", &i.to_string());
        store
            .begin(&key, &owner(&i.to_string(), "r"), Hold::new(T, T))
            .await
            .unwrap();
        if i == 1_000 {
            tokio::time::advance(T).await;
        }
    }
    let records = store.kept();
    assert!(records < 3_000, "{records} records kept");
    assert_eq!(store.in_progress(), 1_999);
}

/// A store that once held many live records still sweeps them once they expire: what it keeps
/// stays within twice the most it held alive.
#[tokio::test(start_paused = true)]
async fn a_store_that_held_many_live_records_still_sweeps_them() {
    let store = MemoryStore::new();
    let begin = |round: u32, i: u32| {
        let (store, id) = (store.clone(), format!("{round}-{i}"));
        async move {
            let key = Key::new("q", &id);
            store
                .begin(&key, &owner(&id, "r"), Hold::new(T, T))
                .await
                .unwrap();
        }
    };
    for round in 0..4 {
        for i in 0..3_000 {
            begin(round, i).await;
        }
        tokio::time::advance(T).await;
    }
    let records = store.kept();
    assert!(records <= 6_000, "{records} records kept");
    assert_eq!(store.in_progress(), 0);
}

#[test]
fn store_errors_say_whether_trying_again_may_help() {
    assert!(StoreError::retryable("throttled").is_retryable());
    assert!(!StoreError::fatal("no such table").is_retryable());
}

#[test]
fn a_key_function_shows_as_its_name_only() {
    let key_fn = crate::engine::claiming::KeyFn(std::sync::Arc::new(|_: &crate::Delivery| {
        Ok::<_, crate::BoxError>(String::new())
    }));
    assert_eq!(format!("{key_fn:?}"), "KeyFn");
}

/// Every claim's task ends with its delivery, and forgets its key: a consumer that has handled
/// its messages holds no key and runs no claim task.
#[tokio::test(start_paused = true)]
async fn claims_end_with_their_deliveries_whatever_becomes_of_them() {
    use crate::{AckMode, BoxError, Consumer, Delivery, MemoryQueue};
    let queue = MemoryQueue::builder()
        .visibility_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    for i in 0..200 {
        queue.send(format!("{i}")).unwrap();
    }
    let consumer = Consumer::in_memory(&queue)
        .idempotency(MemoryStore::new())
        .ack_mode(AckMode::OnSuccess)
        .retry_policy(crate::RetryPolicy::ReleaseNow)
        .build()
        .unwrap();
    let handler = |d: Delivery| async move {
        let n: u64 = d.body().parse()?;
        // Some held past two extensions, some failing once, some dropped, the rest acked.
        tokio::time::sleep(Duration::from_millis(n * 37 % 5000)).await;
        match (n % 4, d.receive_count()) {
            (0, 1) => Err::<(), BoxError>("failed on purpose".into()),
            (1, 1) => {
                drop(d);
                Ok(())
            }
            _ => d.ack().await.map_err(BoxError::from),
        }
    };
    let drained = async {
        while !queue.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        r = consumer.run(handler) => panic!("ended: {r:?}"),
        () = drained => {}
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let recording = consumer.engine().idempotency().unwrap();
    assert_eq!(recording.held_now(), 0);
    assert_eq!(recording.tasks().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_record_is_expired_at_its_expiry_instant() {
    let store = MemoryStore::new();
    let key = Key::new("q", "order-1");
    store.begin(&key, &owner("m-1", "r-1"), HOLD).await.unwrap();
    tokio::time::advance(HOLD.record()).await;
    assert_eq!(store.in_progress(), 0);
    let begun = store.begin(&key, &owner("m-2", "r-2"), HOLD).await.unwrap();
    assert_eq!(begun, Begun::Started);
}
