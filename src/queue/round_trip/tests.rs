use super::*;

#[test]
fn the_round_trip_is_a_moving_average_of_answered_requests() {
    let rtt = RoundTrip::default();
    assert_eq!(rtt.get(), Duration::ZERO, "unknown before any answer");
    rtt.learn(Duration::from_millis(40));
    assert_eq!(rtt.get(), Duration::from_millis(40), "the first as it is");
    rtt.learn(Duration::from_millis(120));
    assert_eq!(
        rtt.get(),
        Duration::from_millis(50),
        "one slow answer weighs an eighth"
    );
    for _ in 0..50 {
        rtt.learn(Duration::from_millis(8));
    }
    assert!(
        rtt.get() < Duration::from_millis(9),
        "it follows the server"
    );
    assert_eq!(rtt.clone().get(), rtt.get(), "clones share it");
}
