use super::*;

#[test]
fn jitter_stays_within_half_and_whole() {
    for _ in 0..1000 {
        let d = jitter(Duration::from_millis(800));
        assert!(d >= Duration::from_millis(400) && d <= Duration::from_millis(800));
    }
    assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
}

/// Both ends of `[d / 2, d]` come up, down to the nanosecond: 200 draws between 1 and
/// 2 ns miss one end with a chance of 2^-199.
#[test]
fn jitter_reaches_both_ends_of_its_range() {
    let draws: std::collections::BTreeSet<Duration> =
        (0..200).map(|_| jitter(Duration::from_nanos(2))).collect();
    assert_eq!(
        draws.into_iter().collect::<Vec<_>>(),
        [Duration::from_nanos(1), Duration::from_nanos(2)]
    );
    assert_eq!(jitter(Duration::from_nanos(1)), Duration::ZERO);
}

#[test]
fn backoff_doubles_up_to_max_and_resets() {
    let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
    let upper: Vec<u64> = vec![100, 200, 350, 350];
    for u in upper {
        let d = b.next_delay();
        assert!(d <= Duration::from_millis(u) && d >= Duration::from_millis(u / 2));
    }
    b.reset();
    assert!(b.next_delay() <= Duration::from_millis(100));
}
