use super::*;
use crate::limits::{extension_limit, HARD_LIMIT};
use crate::test_support::seconds;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The schedule of a lease of `timeout` seconds (the tests' numbers are seconds).
fn next_extension(deadline: Instant, timeout: u32, limit: Instant) -> Option<Extension> {
    super::next_extension(deadline, seconds(timeout.into()), limit)
}

fn next_due(ext: &Extension, timeout: u32, previous: Previous) -> Instant {
    super::next_due(ext, seconds(timeout.into()), previous)
}

#[tokio::test(start_paused = true)]
async fn extends_at_half_by_whole_timeout() {
    let r = Instant::now();
    let ext = next_extension(r + secs(30), 30, extension_limit(r)).expect("an extension");
    assert_eq!(ext.at, r + secs(15));
    assert_eq!(ext.visibility_timeout.secs(), 30);
}

#[tokio::test(start_paused = true)]
async fn the_next_round_keeps_its_place_within_the_window() {
    let r = Instant::now();
    let ms = Duration::from_millis;
    // T = 10 s; the previous extension was due at 5 s.
    let due = r + secs(5);
    let plan = |sent: Instant| {
        next_extension(sent + secs(10), 10, extension_limit(r)).expect("an extension")
    };
    // Sent 200 ms early to share a request, answered 10 ms later: due 5 s and the round
    // trip after its own due time, not 5 s after it was sent.
    let sent = due - ms(200);
    assert_eq!(
        next_due(
            &plan(sent),
            10,
            Previous {
                due,
                sent,
                answered: sent + ms(10)
            }
        ),
        due + ms(5_010)
    );
    // Sent on time, answered 30 ms later: 5 s after the answer.
    assert_eq!(
        next_due(
            &plan(due),
            10,
            Previous {
                due,
                sent: due,
                answered: due + ms(30)
            }
        ),
        due + ms(5_030)
    );
    // Answered 2 s later: never more than the window past halfway (5 s after sending).
    assert_eq!(
        next_due(
            &plan(due),
            10,
            Previous {
                due,
                sent: due,
                answered: due + secs(2)
            }
        ),
        due + secs(5) + COALESCE_WINDOW
    );
    // At T = 1 s the window is an eighth of it.
    let ext = next_extension(due + secs(1), 1, extension_limit(r)).expect("an extension");
    assert_eq!(
        next_due(
            &ext,
            1,
            Previous {
                due,
                sent: due,
                answered: due + ms(400)
            }
        ),
        due + ms(625)
    );
    // The capped last extension keeps its own time.
    let capped = Extension {
        at: r + secs(7),
        visibility_timeout: seconds(3),
    };
    assert_eq!(
        next_due(
            &capped,
            10,
            Previous {
                due,
                sent: due,
                answered: due + secs(1)
            }
        ),
        capped.at
    );
}

#[tokio::test(start_paused = true)]
async fn zero_timeout_has_no_extension() {
    let r = Instant::now();
    assert_eq!(next_extension(r, 0, extension_limit(r)), None);
}

#[tokio::test(start_paused = true)]
async fn the_last_extension_ends_exactly_at_the_limit() {
    let r = Instant::now();
    let limit = extension_limit(r);
    let mut deadline = r + secs(30);
    let mut capped = 0;
    let mut rounds = 0;
    while let Some(ext) = next_extension(deadline, 30, limit) {
        rounds += 1;
        assert!(ext.at < deadline, "sent before the current deadline");
        let ends = ext.at + secs(u64::from(ext.visibility_timeout.secs()));
        assert!(ends <= limit, "never past receive + 12 h - margin");
        if ext.visibility_timeout.secs() < 30 {
            capped += 1;
            assert_eq!(ends, limit);
        }
        deadline = ends;
        assert!(rounds < 10_000, "the schedule must end");
    }
    assert_eq!(capped, 1);
    assert_eq!(deadline, limit);
}

#[tokio::test(start_paused = true)]
async fn a_capped_extension_waits_for_the_limit_only_up_to_a_quarter_of_the_timeout() {
    // T = 2 s: the usual time is 1 s before the deadline.
    let usual = Instant::now() + secs(100);
    let deadline = usual + secs(1);
    // The limit leaves 1.4 s from then: 1 s sent 0.4 s later (within T / 4) ends at it.
    assert_eq!(
        next_extension(deadline, 2, usual + Duration::from_millis(1_400)),
        Some(Extension {
            at: usual + Duration::from_millis(400),
            visibility_timeout: seconds(1)
        })
    );
    // It leaves 1.7 s: waiting 0.7 s would leave too little time for retries, and 1 s
    // sent at the usual time ends at the deadline, gaining nothing: no extension.
    assert_eq!(
        next_extension(deadline, 2, usual + Duration::from_millis(1_700)),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_timeout_is_cut_to_the_limit() {
    let r = Instant::now();
    let limit = extension_limit(r);
    let ext = next_extension(r + secs(30_000), 30_000, limit).expect("one extension");
    assert!(ext.visibility_timeout.secs() < 30_000);
    assert_eq!(
        ext.at + secs(u64::from(ext.visibility_timeout.secs())),
        limit
    );
    assert!(ext.at < r + secs(30_000));
    // After it, nothing more can be gained.
    assert_eq!(next_extension(limit, 30_000, limit), None);
}

#[tokio::test(start_paused = true)]
async fn a_twelve_hour_timeout_needs_no_extension() {
    // The receive itself already hides the message past the limit.
    let r = Instant::now();
    assert_eq!(
        next_extension(r + secs(43_200), 43_200, extension_limit(r)),
        None
    );
}

mod properties {
    //! Properties of the whole extension schedule, for any timeout and receive time.
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn every_schedule_stays_inside_the_limits(
            timeout in prop_oneof![0u32..=120, 0u32..=43_200],
            // Where the receive falls on the clock, and how long the answer took (a long
            // poll answers up to 20 s after the request; the first deadline counts from
            // the answer).
            received_offset_ms in 0u64..=1_000_000_000,
            answer_ms in 0u64..=20_000,
        ) {
            let r = Instant::now() + Duration::from_millis(received_offset_ms);
            let hard = r + HARD_LIMIT;
            let limit = extension_limit(r);
            let t = Duration::from_secs(u64::from(timeout));
            let mut deadline = r + Duration::from_millis(answer_ms) + t;
            let mut last_sent = r;
            let mut rounds = 0u32;
            while let Some(ext) = next_extension(deadline, timeout, limit) {
                rounds += 1;
                prop_assert!(timeout > 0, "no extension at all when T = 0");
                prop_assert!(ext.visibility_timeout.secs() > 0, "an extension of 0 at T = {}", timeout);
                prop_assert!(ext.visibility_timeout.secs() <= timeout);
                prop_assert!(ext.at < deadline, "sent at or after the deadline it extends");
                prop_assert!(ext.at >= last_sent, "the schedule goes back in time");
                let ends = ext.at + Duration::from_secs(u64::from(ext.visibility_timeout.secs()));
                prop_assert!(ends <= hard, "asks past receive + 12 h");
                prop_assert!(ends <= limit, "eats into the margin before the 12-hour limit");
                prop_assert!(ends > deadline, "an extension that gains nothing");
                prop_assert!(rounds <= 2 * 43_200 + 2, "the schedule does not end");
                last_sent = ext.at;
                deadline = ends;
            }
            if timeout > 0 {
                // Nothing given away: the message stays hidden to within a second of the
                // limit (visibility is whole seconds), or its first deadline was later.
                prop_assert!(deadline + Duration::from_secs(1) > limit, "stops early");
            }
        }
    }
}
