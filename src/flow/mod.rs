//! Flow control: how many deliveries a consumer holds at once (its slots, and an
//! `InFlightLimit` several consumers share) and how fast it receives them (`RateLimit`).

pub(crate) mod in_flight_limit;
pub(crate) mod rate_limit;
pub(crate) mod slot;
