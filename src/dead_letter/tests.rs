use super::*;

fn message(attributes: usize) -> Message {
    let mut b = Message::builder()
        .message_id("m-1")
        .body("poison")
        .attributes(
            MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
            "1700000000000",
        );
    for i in 0..attributes {
        let value = MessageAttributeValue::builder()
            .data_type("Number")
            .string_value(i.to_string())
            .build()
            .unwrap();
        b = b.message_attributes(format!("a{i}"), value);
    }
    b.build()
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[test]
fn the_failure_is_json_with_every_field() {
    let failure = Failure::Error("outer: \"inner\"\n\\ \u{1}".into());
    let copy = DeadLetter::copy(&message(2), &failure, 3, at(1_700_000_005_000), "q");
    assert!(copy.carries_failure);
    assert_eq!(
        copy.failure,
        "{\"error\":\"outer: \\\"inner\\\"\\n\\\\ \\u0001\",\"cause\":\"error\",\
         \"receive_count\":3,\"first_received_at_ms\":1700000000000,\
         \"last_received_at_ms\":1700000005000,\"source_queue\":\"q\",\
         \"message_id\":\"m-1\"}"
    );
    let value = &copy.attributes[FAILURE_ATTRIBUTE];
    assert_eq!(value.data_type(), "String");
    assert_eq!(value.string_value(), Some(copy.failure.as_str()));
    assert_eq!(copy.attributes.len(), 3, "both of the user's kept");
    assert_eq!(copy.attributes["a1"].data_type(), "Number");
}

#[test]
fn ten_attributes_are_kept_and_the_failure_left_out() {
    let copy = DeadLetter::copy(&message(10), &Failure::Panic("boom".into()), 1, at(0), "q");
    assert!(!copy.carries_failure);
    assert_eq!(copy.attributes.len(), 10);
    assert!(!copy.attributes.contains_key(FAILURE_ATTRIBUTE));
    assert!(copy.failure.contains("handler panicked: boom"));
}

#[test]
fn an_older_failure_is_replaced_even_among_ten() {
    let old = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("old")
        .build()
        .unwrap();
    let mut with_old = message(9);
    with_old
        .message_attributes
        .get_or_insert_with(HashMap::new)
        .insert(FAILURE_ATTRIBUTE.into(), old);
    let copy = DeadLetter::copy(&with_old, &Failure::Reason("bad".into()), 4, at(0), "q");
    assert!(copy.carries_failure);
    assert_eq!(copy.attributes.len(), 10);
    let value = copy.attributes[FAILURE_ATTRIBUTE].string_value().unwrap();
    assert!(value.contains("\"error\":\"bad\""), "{value}");
}

#[test]
fn a_long_error_is_cut_on_a_character_boundary() {
    let error_of = |text: String| {
        let copy = DeadLetter::copy(&message(0), &Failure::Error(text), 1, at(0), "q");
        let field = copy
            .failure
            .split("\",\"cause\"")
            .next()
            .unwrap()
            .to_owned();
        field.strip_prefix("{\"error\":\"").unwrap().to_owned()
    };
    // Two-byte characters: 4,093 bytes would split one, so 4,092 are kept.
    let error = error_of("é".repeat(MAX_ERROR_BYTES));
    assert!(error.ends_with("..."), "marked as cut");
    assert_eq!(error.len(), MAX_ERROR_BYTES - 1, "as much as fits");
    // One-byte characters: exactly 4 KiB, the mark included.
    let error = error_of("x".repeat(MAX_ERROR_BYTES + 1));
    assert_eq!(error, format!("{}...", "x".repeat(MAX_ERROR_BYTES - 3)));
    // Up to the limit, nothing is cut.
    let error = error_of("x".repeat(MAX_ERROR_BYTES));
    assert_eq!(error, "x".repeat(MAX_ERROR_BYTES));
    let timeout = Failure::Timeout(Duration::from_secs(30));
    assert_eq!(timeout.text(), "handler timed out after 30s");
    assert_eq!(timeout.cause(), "timeout");
}
