use super::*;
use crate::error::LostReason;

/// A timer's key holds its milliseconds from the keeper's start, rounded down for an
/// extension (never sent late) and up for a deadline (never declared passed early), then
/// its slot.
#[tokio::test(start_paused = true)]
async fn a_timer_key_rounds_extensions_down_and_deadlines_up() {
    let epoch = Instant::now();
    let timers = Timers::new(epoch);
    let ms = Duration::from_millis;
    let between = epoch + Duration::from_micros(2_500);
    let extend = timers.key(between, 7, Rounding::for_timer(Next::Extend));
    let lost = Next::Expire(LostReason::HardDeadline);
    let expire = timers.key(between, 7, Rounding::for_timer(lost));
    assert_eq!(timers.at(extend), epoch + ms(2));
    assert_eq!(timers.at(expire), epoch + ms(3));
    assert_eq!((Timers::slot(extend), Timers::slot(expire)), (7, 7));
    // On a whole millisecond, both are exact.
    let whole = epoch + ms(2);
    let up = timers.key(whole, 7, Rounding::Up);
    assert_eq!(up, timers.key(whole, 7, Rounding::Down));
    assert_eq!((timers.at(up), Timers::slot(up)), (whole, 7));
    // Every slot keeps to its own bits, and the milliseconds to theirs, even past the
    // largest they hold (34 years).
    let last_slot = (1 << SLOT_BITS) - 1;
    let key = timers.key(whole, last_slot, Rounding::Down);
    assert_eq!((timers.at(key), Timers::slot(key)), (whole, last_slot));
    let key = timers.key(epoch + ms(1 << 41), 5, Rounding::Up);
    assert_eq!((key >> SLOT_BITS, Timers::slot(key)), ((1 << 40) - 1, 5));
}

/// The timers due by an instant are every one up to its millisecond, whatever their
/// slots, first first.
#[tokio::test(start_paused = true)]
async fn the_timers_due_by_an_instant_include_every_slot_of_its_millisecond() {
    let epoch = Instant::now();
    let mut timers = Timers::new(epoch);
    let ms = Duration::from_millis;
    let last_slot = (1 << SLOT_BITS) - 1;
    let mut on_time = Vec::new();
    for (at, slot) in [(ms(5), last_slot), (ms(5), 2), (ms(3), 9), (ms(5), 0)] {
        on_time.push(timers.insert(epoch + at, slot, Next::Extend));
    }
    timers.insert(epoch + ms(6), 1, Next::Extend);
    on_time.sort_unstable();
    assert_eq!(timers.due(epoch + Duration::from_micros(5_900)), on_time);
    assert_eq!(timers.first(), Some(epoch + ms(3)));
}
