use super::*;

fn classify_code(code: &str, status: Option<u16>) -> ErrorKind {
    super::classify_code(code, status, "")
}

#[test]
fn a_lost_delivery_says_why_in_its_own_words_for_each_reason() {
    let reasons = [
        LostReason::ReceiptHandleInvalid,
        LostReason::NotInFlight,
        LostReason::ExtensionFailed,
        LostReason::HardDeadline,
        LostReason::LapsedBeforeAnswer,
    ];
    let said: Vec<String> = reasons
        .iter()
        .map(|&reason| {
            Error::Lost {
                message_id: "m-1".into(),
                reason,
                source: None,
            }
            .to_string()
        })
        .collect();
    assert_eq!(
        said[3],
        "delivery of message m-1 was lost: the 12-hour visibility limit counted from the \
         receive was reached"
    );
    for (i, text) in said.iter().enumerate() {
        let why = text.trim_start_matches("delivery of message m-1 was lost: ");
        assert!(why.len() > 20, "{text}");
        assert!(!said[..i].contains(text), "told apart: {said:?}");
    }
}

#[test]
fn codes_are_classified() {
    assert_eq!(
        classify_code("ReceiptHandleIsInvalid", Some(400)),
        ErrorKind::Lost(LostReason::ReceiptHandleInvalid)
    );
    assert_eq!(
        classify_code("AWS.SimpleQueueService.MessageNotInflight", Some(400)),
        ErrorKind::Lost(LostReason::NotInFlight)
    );
    assert_eq!(
        classify_code("AWS.SimpleQueueService.NonExistentQueue", Some(400)),
        ErrorKind::Fatal
    );
    assert_eq!(classify_code("QueueDoesNotExist", None), ErrorKind::Fatal);
    assert_eq!(
        classify_code("RequestThrottled", Some(400)),
        ErrorKind::Retryable
    );
    assert_eq!(classify_code("Whatever", Some(503)), ErrorKind::Retryable);
    assert_eq!(classify_code("Whatever", Some(429)), ErrorKind::Retryable);
    assert_eq!(classify_code("Whatever", Some(403)), ErrorKind::Fatal);
    assert_eq!(classify_code("Whatever", None), ErrorKind::Retryable);
    assert_eq!(
        classify_code("AccessDeniedException", Some(400)),
        ErrorKind::Fatal
    );
    assert_eq!(
        classify_code("KMS.ThrottlingException", Some(400)),
        ErrorKind::Retryable
    );
}

#[test]
fn kind_and_the_predicates_agree_for_every_class() {
    let sqs = |kind| Error::Sqs {
        operation: "ReceiveMessage",
        code: Some("Code".into()),
        message: "message".into(),
        kind,
        source: "source".into(),
    };
    let lost = ErrorKind::Lost(LostReason::NotInFlight);
    for (kind, expected) in [
        (ErrorKind::Retryable, (false, true, false)),
        (ErrorKind::Fatal, (false, false, true)),
        (lost, (true, false, false)),
    ] {
        let e = sqs(kind);
        assert_eq!(e.kind(), kind);
        assert_eq!((e.is_lost(), e.is_retryable(), e.is_fatal()), expected);
        assert_eq!(e.code(), Some("Code"));
    }
    // Errors that are no SQS call have no code, and the kind their predicate says.
    let invalid = Error::invalid("wait_time", 25, "whole seconds in 0..=20");
    assert_eq!((invalid.kind(), invalid.code()), (ErrorKind::Fatal, None));
    assert!(invalid.is_fatal() && !invalid.is_retryable() && !invalid.is_lost());
    let gone = Error::Lost {
        message_id: "m".into(),
        reason: LostReason::HardDeadline,
        source: None,
    };
    let lost = ErrorKind::Lost(LostReason::HardDeadline);
    assert_eq!((gone.kind(), gone.code()), (lost, None));
    assert!(gone.is_lost() && !gone.is_fatal() && !gone.is_retryable());
    // And every other error is fatal: the same call fails the same way again.
    let refused = Error::PastHardDeadline {
        message_id: "m".into(),
        requested: Duration::from_secs(60),
        allowed: Duration::from_secs(10),
    };
    let thread = Error::KeeperThread {
        source: std::io::Error::other("no thread"),
    };
    for e in [refused, thread] {
        assert_eq!((e.kind(), e.code()), (ErrorKind::Fatal, None), "{e}");
        assert!(e.is_fatal() && !e.is_retryable() && !e.is_lost(), "{e}");
    }
}

#[test]
fn invalid_parameter_value_is_split_by_its_reason() {
    // What AWS answers for an extension of a deleted message or a stale handle.
    let gone = "Value abc for parameter ReceiptHandle is invalid. Reason: Message does not \
                exist or is not available for visibility timeout change.";
    assert_eq!(
        classify("InvalidParameterValue", Some(400), gone),
        Class::Lost(LostReason::ReceiptHandleInvalid)
    );
    assert_eq!(
        classify("InvalidParameterValueException", Some(400), gone),
        Class::Lost(LostReason::ReceiptHandleInvalid)
    );
    // Past the 12-hour limit: the visibility is refused, the delivery is not gone yet.
    let past = "Value 40 for parameter VisibilityTimeout is invalid. Reason: Total \
                VisibilityTimeout for the message is beyond the limit [43200 seconds]";
    assert_eq!(
        classify("InvalidParameterValue", Some(400), past),
        Class::VisibilityRefused
    );
    assert_eq!(
        classify("InvalidParameterValue", Some(400), past).kind(),
        ErrorKind::Fatal
    );
}

#[test]
fn a_chain_shows_every_cause_once() {
    #[derive(Debug, thiserror::Error)]
    #[error("bad body")]
    struct Top(#[source] std::io::Error);
    let err = Top(std::io::Error::other("expected value at line 1 column 1"));
    assert_eq!(
        chain(&err).to_string(),
        "bad body: expected value at line 1 column 1"
    );
    let shared = std::sync::Arc::new(Error::invalid("x", 1, "0"));
    let copy = Error::replicate(&shared);
    assert_eq!(copy.chain().to_string(), copy.to_string(), "no repeat");
}

/// The SDK's credentials chain lists what it tried on lines of their own: the chain
/// (and so the log line and the error's own text) stays one line.
#[test]
fn a_cause_of_several_lines_is_shown_on_one() {
    #[derive(Debug, thiserror::Error)]
    #[error("transport failure")]
    struct Transport(#[source] std::io::Error);
    let credentials = std::io::Error::other(
        "no credentials found in chain. Attempted:\n  Environment: environment variable \
         not set\n  Profile: the credential provider was not enabled\r\n\n",
    );
    let unsent = Error::Sqs {
        operation: "ReceiveMessage",
        code: None,
        message: with_causes("no AWS credentials were found", &Transport(credentials)),
        kind: ErrorKind::Retryable,
        source: Box::new(std::io::Error::other("first line\n  second line")),
    };
    let expected = "SQS ReceiveMessage failed: no AWS credentials were found: transport \
                    failure: no credentials found in chain. Attempted: Environment: \
                    environment variable not set; Profile: the credential provider was not \
                    enabled";
    assert_eq!(unsent.to_string(), expected);
    assert_eq!(
        unsent.chain().to_string(),
        format!("{expected}: first line; second line")
    );
}

#[test]
fn an_answer_of_sqs_shows_its_code_and_message_not_the_sdk_errors_under_it() {
    #[derive(Debug, thiserror::Error)]
    #[error("unhandled error (InternalError)")]
    struct Unhandled(#[source] std::io::Error);
    let sdk = Unhandled(std::io::Error::other(
        "Error { code: \"InternalError\", message: \"try later\", type: \"Receiver\" }",
    ));
    let answered = Error::Sqs {
        operation: "ReceiveMessage",
        code: Some("InternalError".into()),
        message: "try later".into(),
        kind: ErrorKind::Retryable,
        source: Box::new(sdk),
    };
    let text = answered.chain().to_string();
    assert_eq!(
        text,
        "SQS ReceiveMessage failed with InternalError: try later"
    );
    // Through the copy a batch's callers get, too.
    let copy = Error::replicate(&std::sync::Arc::new(answered));
    assert_eq!(copy.chain().to_string(), text);
    // An error SQS did not answer (no code) shows its causes.
    let unsent = Error::Sqs {
        operation: "ReceiveMessage",
        code: None,
        message: "the request could not be sent".into(),
        kind: ErrorKind::Retryable,
        source: Box::new(std::io::Error::other("connection refused")),
    };
    let text = unsent.chain().to_string();
    assert_eq!(
        text,
        "SQS ReceiveMessage failed: the request could not be sent: connection refused"
    );
    // Through the copy a batch's callers get, too: its source is the shared original.
    let copy = Error::replicate(&std::sync::Arc::new(unsent));
    assert_eq!(copy.chain().to_string(), text);
    let shared = std::error::Error::source(&copy).expect("the shared original");
    assert_eq!(
        shared.to_string(),
        "SQS ReceiveMessage failed: the request could not be sent"
    );
}

#[test]
fn invalid_config_names_field_and_range() {
    let e = Error::invalid("receive_batch_size", 11, "1..=10");
    let text = e.to_string();
    assert!(text.contains("receive_batch_size") && text.contains("11") && text.contains("1..=10"));
    assert!(e.is_fatal() && !e.is_retryable() && !e.is_lost());
}

#[test]
fn receipt_handles_in_error_texts_are_cut_to_their_start() {
    let handle = "AQEBzWwaftRI0KuVm4tP+/7q1rGgNqicHq6vxjmoxnWHVpxRNhdYtaYF0Zr8k2J8";
    let aws = format!(
        "Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not \
         exist or is not available for visibility timeout change."
    );
    let short = shorten_handles(&aws);
    assert_eq!(
        short,
        "Value AQEBzWwa… for parameter ReceiptHandle is invalid. Reason: Message does not \
         exist or is not available for visibility timeout change."
    );
    // `MemoryQueue`'s handles are short, and dotted: cut where SQS's answer quotes one.
    let memory = "Value 7a42bf96c50605bf.0.1.488c5ce5273edf3c for parameter ReceiptHandle \
                  is invalid. Reason: Message does not exist or is not available.";
    assert_eq!(
        shorten_handles(memory),
        "Value 7a42bf96… for parameter ReceiptHandle is invalid. Reason: Message does not \
         exist or is not available."
    );
    // Still classified by its reason once shortened.
    assert_eq!(
        classify("InvalidParameterValue", None, &short),
        Class::Lost(LostReason::ReceiptHandleInvalid)
    );
    let moto = format!("The input receipt handle \"{handle}\" is not a valid receipt handle.");
    assert_eq!(
        shorten_handles(&moto),
        "The input receipt handle \"AQEBzWwa…\" is not a valid receipt handle."
    );
    // Words, not a handle, where the handle would be: left alone.
    for words in [
        "Value of the handle for parameter ReceiptHandle is invalid.",
        "No value given for parameter ReceiptHandle.",
    ] {
        assert_eq!(shorten_handles(words), words);
    }
    // Message ids, codes and ordinary words are left alone, and nothing is copied then.
    let plain =
        "message 5fea7756-0ea4-451a-a703-a558b933e274: AWS.SimpleQueueService.NonExistentQueue";
    assert!(matches!(
        shorten_handles(plain),
        std::borrow::Cow::Borrowed(_)
    ));
    // Through a chain of sources too.
    #[derive(Debug, thiserror::Error)]
    #[error("extension failed")]
    struct Top(#[source] std::io::Error);
    let err = Top(std::io::Error::other(aws.clone()));
    let text = chain(&err).to_string();
    assert!(
        !text.contains(handle) && text.contains("AQEBzWwa…"),
        "{text}"
    );
}
