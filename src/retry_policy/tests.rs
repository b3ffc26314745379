use super::*;

const ROOM: Duration = Duration::from_secs(43_000);

#[test]
fn leave_and_release_now() {
    assert_eq!(RetryPolicy::Leave.visibility_on_drop(3, ROOM), None);
    assert_eq!(
        RetryPolicy::ReleaseNow.visibility_on_drop(3, ROOM),
        Some(VisibilityTimeout::ZERO)
    );
}

#[test]
fn backoff_doubles_per_receive_with_jitter_up_to_max() {
    let p = RetryPolicy::backoff(Duration::from_secs(10), Duration::from_secs(300));
    for _ in 0..200 {
        for (count, full) in [(1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (40, 300)] {
            let v = p.visibility_on_drop(count, ROOM).unwrap().secs();
            assert!(
                v >= full / 2 && v <= full,
                "receive {count}: {v} not in {}..={full}",
                full / 2
            );
        }
    }
}

#[test]
fn backoff_never_asks_past_the_12_hour_limit() {
    let p = RetryPolicy::backoff(Duration::from_secs(60), Duration::from_secs(43_200));
    for room in [0, 1, 59, 3_600] {
        let v = p
            .visibility_on_drop(30, Duration::from_secs(room))
            .unwrap()
            .secs();
        assert!(u64::from(v) <= room);
    }
}

#[test]
fn bad_backoffs_are_refused() {
    let s = Duration::from_secs;
    for p in [
        RetryPolicy::backoff(Duration::ZERO, s(10)),
        RetryPolicy::backoff(Duration::from_millis(999), s(10)),
        RetryPolicy::backoff(s(20), s(10)),
        RetryPolicy::backoff(s(11), s(10)),
        RetryPolicy::backoff(s(1), s(43_201)),
    ] {
        let err = p.validate().unwrap_err();
        assert!(err.to_string().contains("retry_policy"), "{err}");
    }
    // The bounds themselves are allowed.
    assert!(RetryPolicy::backoff(s(1), s(43_200)).validate().is_ok());
    assert!(RetryPolicy::backoff(s(5), s(5)).validate().is_ok());
}
