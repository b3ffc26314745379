use super::*;

#[test]
fn durations_read_as_people_write_them() {
    let read = |d: Duration| Secs(d).to_string();
    assert_eq!(read(Duration::from_secs(30)), "30s");
    assert_eq!(read(Duration::from_millis(17_240)), "17.2s");
    assert_eq!(read(Duration::from_millis(17_960)), "18s");
    assert_eq!(read(Duration::from_millis(1_050)), "1.1s");
    assert_eq!(read(Duration::from_millis(250)), "250ms");
    assert_eq!(read(Duration::ZERO), "0ms");
    assert_eq!(read(Duration::from_secs(300)), "5m 0s");
    assert_eq!(read(Duration::from_secs(43_199)), "719m 59s");
    assert_eq!(read(Duration::MAX), "never");
}

#[test]
fn counts_take_the_plural_but_for_one() {
    let receives = |n| Count(n, "receive", "receives").to_string();
    assert_eq!(receives(1), "1 receive");
    assert_eq!(receives(0), "0 receives");
    assert_eq!(receives(3), "3 receives");
}
