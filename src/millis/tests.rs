use super::*;

/// An instant kept as [`Millis`] comes back never later, and less than a millisecond
/// earlier, on either side of the epoch; whole milliseconds come back as they were.
#[tokio::test(start_paused = true)]
async fn an_instant_kept_in_millis_comes_back_never_later_and_within_a_millisecond() {
    let epoch = Epoch::now();
    let start = Instant::now();
    let micros = [0, 1, 999, 1_000, 1_500, 2_000, 43_200_000_001];
    let after = micros.map(|us| start + Duration::from_micros(us));
    let before = micros.map(|us| start - Duration::from_micros(us));
    for instant in after.into_iter().chain(before) {
        let back = epoch.instant(epoch.millis(instant));
        assert!(back <= instant, "{back:?} is later than {instant:?}");
        assert!(
            instant - back < Duration::from_millis(1),
            "{back:?} is a millisecond or more before {instant:?}"
        );
        let whole = (instant.max(start) - instant.min(start)).subsec_micros() % 1_000 == 0;
        if whole {
            assert_eq!(back, instant);
        }
    }
}

/// A span in four bytes: rounded down, 0 before its start, capped.
#[tokio::test(start_paused = true)]
async fn millis_after_rounds_down_and_saturates() {
    let start = Instant::now();
    assert_eq!(millis_after(start, start + Duration::from_micros(1_999)), 1);
    assert_eq!(
        millis_after(start, start + Duration::from_secs(43_200)),
        43_200_000
    );
    assert_eq!(millis_after(start + Duration::from_secs(1), start), 0);
    let far = start + Duration::from_millis(u64::from(u32::MAX) + 5);
    assert_eq!(millis_after(start, far), u32::MAX);
}
