use super::*;

#[test]
fn requests_and_entries_are_counted_apart() {
    let mut c = RequestCounts::default();
    c.request(Action::DeleteMessage);
    c.request(Action::DeleteMessageBatch);
    for _ in 0..10 {
        c.entry(Action::DeleteMessageBatch);
    }
    c.request(Action::ChangeMessageVisibilityBatch);
    c.entry(Action::ChangeMessageVisibilityBatch);
    assert_eq!(c.deletes(), 11, "one alone, ten in a batch");
    assert_eq!(c.requests(Action::DeleteMessage), 1);
    assert_eq!(c.requests(Action::DeleteMessageBatch), 1);
    assert_eq!(c.visibility_changes(), 1);
    assert_eq!(c.total(), 3);
    for (i, a) in ACTIONS.iter().enumerate() {
        assert_eq!(*a as usize, i, "{a:?}");
    }
}
