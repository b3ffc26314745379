use super::*;

#[test]
fn says_its_size_and_the_slots_in_use() {
    let limit = InFlightLimit::new(3);
    let shared = limit.clone();
    assert_eq!((limit.max(), limit.in_use()), (3, 0));
    let held = shared
        .semaphore()
        .clone()
        .try_acquire_many_owned(2)
        .unwrap();
    assert_eq!(
        (limit.max(), limit.in_use()),
        (3, 2),
        "clones share the slots"
    );
    assert_eq!(format!("{limit:?}"), "InFlightLimit { max: 3, in_use: 2 }");
    drop(held);
    assert_eq!(limit.in_use(), 0);
}
