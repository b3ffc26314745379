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
    assert_eq!(
        VisibilityTimeout::of("v", s(0)).unwrap(),
        VisibilityTimeout::ZERO
    );
    assert_eq!(
        VisibilityTimeout::of("v", s(43_200)).unwrap().secs(),
        43_200
    );
    for bad in [s(43_201), Duration::from_millis(1500), s(u64::MAX)] {
        assert_eq!(field_of(VisibilityTimeout::of("v", bad).unwrap_err()), "v");
    }
    assert_eq!(
        field_of(VisibilityTimeout::of_consumer("c", s(0)).unwrap_err()),
        "c"
    );
    assert_eq!(VisibilityTimeout::of_consumer("c", s(1)).unwrap().secs(), 1);
}

#[test]
fn computed_visibility_is_capped_at_twelve_hours_and_goes_to_the_wire_as_is() {
    assert_eq!(
        VisibilityTimeout::at_most_max(u64::MAX),
        VisibilityTimeout::MAX
    );
    assert_eq!(VisibilityTimeout::at_most_max(43_201).secs(), 43_200);
    let t = VisibilityTimeout::at_most_max(90);
    assert_eq!(
        (t.secs(), t.wire(), t.duration()),
        (90, 90, Duration::from_secs(90))
    );
    assert!(VisibilityTimeout::ZERO.is_zero() && !t.is_zero());
    assert_eq!(t.to_string(), "90");
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
