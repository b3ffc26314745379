use super::*;

#[test]
fn remembers_until_taken_and_stays_bounded() {
    let deletes = UnfinishedDeletes::default();
    deletes.remember("a", Unfinished::Move);
    deletes.remember("a", Unfinished::Ack);
    assert_eq!(deletes.take("a"), Some(Unfinished::Move), "the first kind");
    assert_eq!(deletes.take("a"), None);
    for i in 0..CAPACITY + 5 {
        deletes.remember(&i.to_string(), Unfinished::Ack);
    }
    assert_eq!(deletes.take("0"), None, "the oldest is forgotten");
    assert_eq!(
        deletes.take(&(CAPACITY + 4).to_string()),
        Some(Unfinished::Ack)
    );
    let inner = deletes.inner.lock().unwrap();
    assert_eq!(inner.ids.len(), CAPACITY - 1);
    assert_eq!(inner.order.len(), CAPACITY - 1);
}
