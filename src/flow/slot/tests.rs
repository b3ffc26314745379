use super::*;

/// Semaphores of `own` slots, a shared budget of `shared` and a settle budget of
/// `settles`, and a slot taken from the first two.
fn taken(own: usize, shared: usize, settles: usize) -> ([Arc<Semaphore>; 3], Slot) {
    let sources = [own, shared, settles].map(|n| Arc::new(Semaphore::new(n)));
    let slot = Slot::new(
        sources[0].clone().try_acquire_owned().unwrap(),
        Some(sources[1].clone().try_acquire_owned().unwrap()),
        &sources[2],
    );
    (sources, slot)
}

fn free(sources: &[Arc<Semaphore>; 3]) -> [usize; 3] {
    sources.each_ref().map(|s| s.available_permits())
}

#[test]
fn a_slot_freed_early_frees_both_budgets_and_holds_a_settle_until_dropped() {
    let (sources, mut slot) = taken(2, 2, 2);
    assert_eq!(free(&sources), [1, 1, 2]);
    assert!(!slot.is_freed_early());
    assert!(slot.free_early());
    assert!(slot.is_freed_early());
    assert_eq!(free(&sources), [2, 2, 1]);
    assert!(!slot.free_early(), "once only");
    drop(slot);
    assert_eq!(free(&sources), [2, 2, 2]);
}

#[test]
fn with_no_settle_left_the_slot_stays_taken_until_dropped() {
    let (sources, mut slot) = taken(2, 2, 0);
    assert!(!slot.free_early());
    assert!(!slot.is_freed_early());
    assert_eq!(free(&sources), [1, 1, 0]);
    drop(slot);
    assert_eq!(free(&sources), [2, 2, 0]);
}

#[test]
fn a_slot_of_nothing_is_never_freed_early() {
    let mut slot = Slot::default();
    assert!(!slot.free_early());
    assert!(!slot.is_freed_early());
}
