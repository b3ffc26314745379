use super::*;

fn field_of(err: Error) -> &'static str {
    match err {
        Error::InvalidConfig { field, .. } => field,
        other => panic!("not an InvalidConfig: {other}"),
    }
}

#[test]
fn visibility_is_whole_seconds_up_to_twelve_hours() {
    let s = Duration::from_secs;
    assert_eq!(visibility_secs("v", s(0)).unwrap(), 0);
    assert_eq!(visibility_secs("v", s(43_200)).unwrap(), 43_200);
    for bad in [s(43_201), Duration::from_millis(1500), s(u64::MAX)] {
        assert_eq!(field_of(visibility_secs("v", bad).unwrap_err()), "v");
    }
}

#[test]
fn wait_and_delay_are_whole_seconds_in_range() {
    let s = Duration::from_secs;
    assert!(wait_time("w", s(20)).is_ok() && wait_time("w", s(21)).is_err());
    assert!(wait_time("w", Duration::from_millis(100)).is_err());
    assert!(delay("d", s(900)).is_ok() && delay("d", s(901)).is_err());
    let err = delay("delay", s(901)).unwrap_err().to_string();
    assert!(err.contains("delay") && err.contains("0..=900"), "{err}");
}

#[test]
fn rounding_up_and_ranges() {
    assert_eq!(secs_rounded_up(Duration::from_millis(1001)), 2);
    assert_eq!(secs_rounded_up(Duration::from_secs(3)), 3);
    assert_eq!(in_range("n", 5u32, 1..=10, "1..=10").unwrap(), 5);
    let err = in_range("n", 0u32, 1..=10, "1..=10")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`n`") && err.contains("1..=10"), "{err}");
}

#[test]
fn message_attribute_names_follow_sqs_rules() {
    for ok in [
        "All",
        ".*",
        "tenant",
        "trace-parent_2",
        "bar.*",
        "a.b",
        &"x".repeat(256),
    ] {
        assert!(message_attribute_name("n", ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        ".x",
        "x.",
        "a..b",
        "AWS.x",
        "amazon.y",
        "sp ace",
        "é",
        &"x".repeat(257),
    ] {
        let err = message_attribute_name("message_attribute_names", bad).unwrap_err();
        assert!(err.to_string().contains("message_attribute_names"), "{bad}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_extension_limit_keeps_the_margin() {
    let r = Instant::now();
    assert_eq!(extension_limit(r), r + Duration::from_secs(43_195));
}
