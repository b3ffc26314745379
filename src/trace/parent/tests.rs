use super::*;

#[test]
fn a_w3c_traceparent_reads_as_the_spec_says() {
    let p = parse_w3c(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        Some("congo=t61rcWkgMzE"),
    )
    .unwrap();
    assert_eq!(p.trace_id, "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(p.span_id, "b7ad6b7169203331");
    assert!(p.sampled);
    assert_eq!(p.trace_state.as_deref(), Some("congo=t61rcWkgMzE"));
    assert_eq!(p.carrier, TraceCarrier::W3c);
    assert_eq!(
        p.traceparent(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    let unsampled = parse_w3c(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        None,
    )
    .unwrap();
    assert!(!unsampled.sampled);
    // A later version may add fields after the flags.
    assert!(parse_w3c(
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
        None
    )
    .is_ok());
}

#[test]
fn a_malformed_traceparent_says_why() {
    for (header, why) in [
        ("garbage", "not <version>"),
        (
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "version",
        ),
        (
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            "nothing after",
        ),
        (
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "trace id",
        ),
        (
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "trace id",
        ),
        (
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "parent id",
        ),
        (
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
            "flags",
        ),
    ] {
        let err = parse_w3c(header, None).unwrap_err().to_string();
        assert!(err.contains(why), "{header}: {err}");
    }
}

#[test]
fn an_x_ray_header_reads_as_a_w3c_trace() {
    let p =
        parse_x_ray("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
            .unwrap();
    assert_eq!(p.trace_id, "5759e988bd862e3fe1be46a994272793");
    assert_eq!(p.span_id, "53995c3f42cd8ad8");
    assert!(p.sampled);
    assert_eq!(p.carrier, TraceCarrier::XRay);
    // Fields in another order, another field among them, sampling deferred.
    let p = parse_x_ray("Sampled=?;Lineage=a87bd80c:0;Parent=53995c3f42cd8ad8;Root=1-5759e988-bd862e3fe1be46a994272793")
        .unwrap();
    assert!(!p.sampled);
    assert_eq!(p.trace_id, "5759e988bd862e3fe1be46a994272793");
    for (header, why) in [
        (
            "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
            "no Parent",
        ),
        ("Parent=53995c3f42cd8ad8", "no Root"),
        (
            "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root is not",
        ),
        (
            "Root=1-5759e988-bd862e3f;Parent=53995c3f42cd8ad8",
            "Root is not",
        ),
        (
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=xyz",
            "Parent is not",
        ),
    ] {
        let err = parse_x_ray(header).unwrap_err().to_string();
        assert!(err.contains(why), "{header}: {err}");
    }
}
