//! The leak guard: a tracing layer that every log line of the suite passes through, and that
//! fails the test which logs a whole receipt handle or a message body.
//!
//! Every test binary installs it before its first test, as a layer of its global subscriber
//! (`guard_logs!` in the integration tests, `src/lib.rs` for the unit tests), and every
//! subscriber a test sets for itself carries it too (`common::buffered_subscriber`). It
//! looks at the crate's events and spans at every level and at everyone else's from `DEBUG`
//! up.
//!
//! What it looks for: `MemoryQueue`'s receipt handles by their shape
//! (`<16 hex>.<seq>.<receive count>.<16 hex>`), and the bodies and handles registered with
//! [`secret`]: the suite's SQS clients register every body they send and every body and
//! handle they receive (`common::client_for`), and the harness registers the bodies it
//! sends to `MemoryQueue`. Texts shorter than [`MIN_SECRET`] are not looked for.
//!
//! A leak panics where it is logged, which fails the test whose code logged it, and is
//! kept: a binary that logged one exits with 101 at its end, even when the panic was caught
//! on the way (a handler's panic is one of its outcomes).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer};

/// Shorter texts are too common to look for: a test's body may be a word the crate's own
/// lines use ("job", "released").
pub const MIN_SECRET: usize = 12;

/// How many secrets are kept: the latest ones (a test looks for its own).
const KEPT: usize = 20_000;

/// The registered secrets, found by their first [`MIN_SECRET`] bytes, so that a line is
/// searched in one pass whatever their number.
#[derive(Default)]
struct Secrets {
    order: VecDeque<String>,
    by_prefix: HashMap<[u8; MIN_SECRET], Vec<String>>,
}

impl Secrets {
    fn add(&mut self, text: &str) {
        let list = self.by_prefix.entry(prefix(text.as_bytes())).or_default();
        if list.iter().any(|s| s == text) {
            return;
        }
        list.push(text.to_owned());
        self.order.push_back(text.to_owned());
        if self.order.len() > KEPT {
            if let Some(oldest) = self.order.pop_front() {
                if let Some(list) = self.by_prefix.get_mut(&prefix(oldest.as_bytes())) {
                    list.retain(|s| *s != oldest);
                }
            }
        }
    }

    fn found_in(&self, text: &str) -> bool {
        let bytes = text.as_bytes();
        (0..=bytes.len().saturating_sub(MIN_SECRET)).any(|at| {
            bytes.len() >= at + MIN_SECRET
                && self
                    .by_prefix
                    .get(&prefix(&bytes[at..]))
                    .is_some_and(|list| list.iter().any(|s| bytes[at..].starts_with(s.as_bytes())))
        })
    }
}

/// The first [`MIN_SECRET`] bytes of `bytes`, which has at least that many.
fn prefix(bytes: &[u8]) -> [u8; MIN_SECRET] {
    let mut out = [0; MIN_SECRET];
    out.copy_from_slice(&bytes[..MIN_SECRET]);
    out
}

static SECRETS: Mutex<Option<Secrets>> = Mutex::new(None);
static LEAKS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Registers `text` (a body or a receipt handle) as never to be logged whole.
pub fn secret(text: &str) {
    if text.len() >= MIN_SECRET {
        lock(&SECRETS)
            .get_or_insert_with(Secrets::default)
            .add(text);
    }
}

/// What in `text` must not be there, if anything.
pub fn leak_in(text: &str) -> Option<&'static str> {
    if has_memory_handle(text) {
        return Some("a whole MemoryQueue receipt handle");
    }
    let found = lock(&SECRETS).as_ref().is_some_and(|s| s.found_in(text));
    found.then_some("a registered message body or receipt handle")
}

/// Whether `text` holds `<16 hex>.<digits>.<digits>.<16 hex>`, a whole `MemoryQueue` handle.
fn has_memory_handle(text: &str) -> bool {
    let hex16 = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    text.split(|c: char| !(c.is_ascii_hexdigit() || c == '.'))
        .any(|run| {
            let parts: Vec<&str> = run.split('.').collect();
            parts
                .windows(4)
                .any(|w| hex16(w[0]) && digits(w[1]) && digits(w[2]) && hex16(w[3]))
        })
}

/// Fails where a leak is logged, and keeps it for the binary's end.
fn check(what: &str, text: &str) {
    if let Some(leak) = leak_in(text) {
        let line = format!("{what} logged {leak}: {text}");
        lock(&LEAKS).push(line.clone());
        panic!("leak guard: {line}");
    }
}

/// The guard, filtered: the crate at every level, everyone else from `DEBUG` up.
pub fn layer<S>() -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    LeakGuard.with_filter(
        Targets::new()
            .with_target("sqs_consumer", Level::TRACE)
            .with_default(Level::DEBUG),
    )
}

/// The layer itself; see the module docs.
pub struct LeakGuard;

impl<S: Subscriber> Layer<S> for LeakGuard {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut text = Text::default();
        event.record(&mut text);
        check(
            &format!(
                "{} event of {}",
                event.metadata().level(),
                event.metadata().target()
            ),
            &text.0,
        );
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let mut text = Text::default();
        attrs.record(&mut text);
        check(&format!("span {}", attrs.metadata().name()), &text.0);
    }

    fn on_record(&self, _: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut text = Text::default();
        values.record(&mut text);
        check("a span's recorded field", &text.0);
    }
}

/// Every field's value, as a subscriber would print it, one per line; an error with each of
/// its sources.
#[derive(Default)]
struct Text(String);

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = writeln!(self.0, "{field}={value}");
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let _ = write!(self.0, "{field}={value}");
        let mut source = value.source();
        while let Some(err) = source {
            let _ = write!(self.0, ": {err}");
            source = err.source();
        }
        self.0.push('\n');
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = writeln!(self.0, "{field}={value:?}");
    }
}

/// Forgets the leaks whose line holds `marker`: for the guard's own test, which leaks on
/// purpose.
pub fn forget_leaks_with(marker: &str) -> usize {
    let mut leaks = lock(&LEAKS);
    let before = leaks.len();
    leaks.retain(|line| !line.contains(marker));
    before - leaks.len()
}

/// Makes the process exit with 101 at its end if any leak was logged, even one whose panic
/// was caught: called once, by the installer.
pub fn fail_at_exit_on_leaks() {
    extern "C" fn at_exit() {
        let leaks = lock(&LEAKS);
        if !leaks.is_empty() {
            eprintln!("leak guard: {} log line(s) leaked a secret:", leaks.len());
            for line in leaks.iter() {
                eprintln!("  {line}");
            }
            // SAFETY: ends the process at once, as `exit` was about to.
            unsafe { libc::_exit(101) };
        }
    }
    // SAFETY: registers a plain function to run at the process's exit.
    unsafe { libc::atexit(at_exit) };
}
