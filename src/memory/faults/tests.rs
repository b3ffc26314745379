use super::*;

#[test]
fn faults_are_drawn_in_their_shares_and_only_for_their_actions() {
    let f = Faults::new(7)
        .internal_error(0.25)
        .throttle(0.05)
        .lost_answer(0.05)
        .held_answer(0.05, Duration::from_secs(12))
        .actions([Action::ReceiveMessage]);
    f.validate().unwrap();
    let mut state = f.seed();
    let mut injected = InjectedFaults::default();
    for _ in 0..10_000 {
        if let Some(fault) = f.pick(Action::ReceiveMessage, next_draw(&mut state)) {
            injected.count(fault);
        }
    }
    let near = |n: u64, p: f64| (n as f64 - 10_000.0 * p).abs() < 10_000.0 * 0.02;
    assert!(near(injected.internal_error, 0.25), "{injected:?}");
    assert!(near(injected.throttle, 0.05) && near(injected.lost_answer, 0.05));
    assert!(near(injected.held_answer, 0.05), "{injected:?}");
    assert_eq!(f.pick(Action::DeleteMessageBatch, 0.0), None);
}

#[test]
fn shares_beyond_one_are_refused() {
    let err = Faults::new(1).internal_error(0.7).throttle(0.4).validate();
    assert!(err.unwrap_err().to_string().contains("faults"));
    assert!(Faults::new(1).lost_answer(-0.1).validate().is_err());
}
