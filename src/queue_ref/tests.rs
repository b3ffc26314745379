use super::*;

#[test]
fn a_queue_is_named_without_its_account() {
    for (given, name) in [
        (
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
            "orders",
        ),
        (
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo/",
            "orders.fifo",
        ),
        ("http://127.0.0.1:4566/000000000000/q?x=1", "q"),
        ("http://localhost:9324/queue/jobs", "jobs"),
        ("http://localhost:9324", "http://localhost:9324"),
        ("http://localhost:9324//?x=1", "http://localhost:9324//?x=1"),
        ("http://localhost:9324/queue/jobs//#top", "jobs"),
        ("jobs", "jobs"),
        ("arn:aws:sqs:eu-west-1:123456789012:jobs.fifo", "jobs.fifo"),
    ] {
        assert_eq!(QueueRef::parse(given).unwrap().name(), name, "{given}");
    }
}

#[test]
fn urls_names_and_arns_are_told_apart() {
    let url = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
    assert_eq!(QueueRef::parse(url).unwrap(), QueueRef::Url(url.into()));
    assert_eq!(
        QueueRef::parse("http://127.0.0.1:4566/000000000000/q").unwrap(),
        QueueRef::Url("http://127.0.0.1:4566/000000000000/q".into())
    );
    for name in ["orders", "orders.fifo", "a", "A_b-9", &"x".repeat(80)] {
        assert_eq!(QueueRef::parse(name).unwrap(), QueueRef::Name(name.into()));
    }
    let arn = QueueRef::parse("arn:aws:sqs:eu-west-1:123456789012:orders.fifo").unwrap();
    assert_eq!(
        arn.name_and_owner(),
        Some(("orders.fifo", Some("123456789012")))
    );
    assert_eq!(arn.region(), Some("eu-west-1"));
    assert!(arn.is_fifo());
    assert!(!QueueRef::parse("orders").unwrap().is_fifo());
    assert!(QueueRef::parse("arn:aws-cn:sqs:cn-north-1:123456789012:q").is_ok());
}

#[test]
fn malformed_queues_are_refused_naming_the_rule() {
    for bad in [
        "",
        "https://",
        "http://",
        "my queue",
        "orders.fifo.fifo",
        ".fifo",
        "ördrs",
        "a/b",
        &"x".repeat(81),
        &format!("{}.fifo", "x".repeat(76)),
        "arn:aws:sqs:us-east-1:123456789012",
        "arn:aws:sns:us-east-1:123456789012:orders",
        "arn:aws:sqs:us-east-1:12345678901:orders",
        "arn:aws:sqs:us-east-1:1234567890ab:orders",
        "arn:aws:sqs::123456789012:orders",
        "arn:aws:sqs:us-east-1:123456789012:bad name",
        "arn:aws:sqs:us-east-1:123456789012:orders:extra",
        "ftp://host/q",
    ] {
        match QueueRef::parse(bad) {
            Err(Error::InvalidConfig { field, allowed, .. }) => {
                assert_eq!(field, "queue", "{bad}");
                assert!(
                    allowed.contains("1 to 80") && allowed.contains("arn:"),
                    "{bad}"
                );
            }
            other => panic!("{bad:?} was not refused: {other:?}"),
        }
    }
}
