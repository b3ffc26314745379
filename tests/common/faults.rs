//! A fault-injecting HTTP proxy on 127.0.0.1, between the SDK and the test server.
//!
//! It reads each HTTP/1.1 request the SDK sends, and for the SQS actions (or S3 ones, named
//! by their method: `GetObject` for a GET) it is told to
//! disturb, draws a fault: answer `500 InternalError` or a throttling error itself, reset the
//! connection before the server sees the request, forward the request and drop the
//! connection instead of answering (the call took effect, the client saw a failure), or
//! forward it and hold the answer longer than the client waits. Everything else is passed
//! through unchanged. A fresh connection to the server serves each request.
//!
//! Deletes reach the server one at a time: moto rebuilds its list of messages on each delete
//! without a lock, so two deletes at once can bring back messages the first one deleted (the
//! client was told they were deleted, and they are handed out again a timeout later). AWS
//! does not; the proxy keeps that race of the server's out of what the tests count.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How often each fault happens, per request to a disturbed action.
#[derive(Debug, Clone)]
pub struct Faults {
    pub internal_error: f64,
    pub throttle: f64,
    pub reset_before: f64,
    pub drop_after: f64,
    pub delay: f64,
    pub delay_for: Duration,
    /// The actions (`ReceiveMessage`, `DeleteMessageBatch`, ...) to disturb.
    pub actions: &'static [&'static str],
}

impl Faults {
    /// No fault: the proxy only forwards (and counts, or refuses what `refuse_next` says).
    pub fn none() -> Self {
        Self {
            internal_error: 0.0,
            throttle: 0.0,
            reset_before: 0.0,
            drop_after: 0.0,
            delay: 0.0,
            delay_for: Duration::ZERO,
            actions: &[],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    InternalError,
    Throttle,
    ResetBefore,
    DropAfter,
    Delay,
}

/// What the proxy did.
#[derive(Debug, Default, Clone)]
pub struct FaultLog {
    /// Requests seen, per action.
    pub requests: BTreeMap<String, u64>,
    /// Faults injected, per kind and action.
    pub injected: BTreeMap<(Fault, String), u64>,
    /// Message ids in answers the client never saw (dropped or held too long): the server
    /// hid those messages for a visibility timeout nobody could extend.
    pub unseen_receives: Vec<String>,
}

impl FaultLog {
    pub fn count(&self, fault: Fault) -> u64 {
        self.injected
            .iter()
            .filter(|((f, _), _)| *f == fault)
            .map(|(_, n)| n)
            .sum()
    }
}

pub struct FaultProxy {
    pub endpoint: String,
    pub log: Arc<Mutex<FaultLog>>,
    refusals: Refusals,
    outage: Outage,
    task: JoinHandle<()>,
}

/// What an outage or a storm does to each request of its actions.
#[derive(Debug, Clone, Copy)]
enum Disturbance {
    Fail,
    Delay(Duration),
}

/// The actions under an outage or a storm, and until when.
#[derive(Debug, Clone, Copy)]
struct Disturbed {
    actions: &'static [&'static str],
    what: Disturbance,
    until: tokio::time::Instant,
}

type Outage = Arc<Mutex<Option<Disturbed>>>;

/// What the outage or storm under way does to a request of `action`, if any.
fn disturbance(outage: &Outage, action: &str) -> Option<Disturbance> {
    let disturbed = (*outage.lock().unwrap())?;
    let on = disturbed.actions.contains(&action) && tokio::time::Instant::now() < disturbed.until;
    on.then_some(disturbed.what)
}

/// Requests to refuse before any fault is drawn: per action, the error code and how many
/// more times.
type Refusals = Arc<Mutex<BTreeMap<String, (&'static str, usize)>>>;

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts the proxy in front of `upstream` (an `http://host:port` endpoint).
    pub async fn start(upstream: &str, faults: Faults, seed: u64) -> FaultProxy {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("the test server's endpoint as http://127.0.0.1:port");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(FaultLog::default()));
        let rng = Arc::new(Mutex::new(seed | 1));
        let faults = Arc::new(faults);
        let deletes = Arc::new(tokio::sync::Mutex::new(()));
        let refusals = Refusals::default();
        let outage = Outage::default();
        let task = {
            let (log, refusals, outage) = (log.clone(), refusals.clone(), outage.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (log, rng, faults) = (log.clone(), rng.clone(), faults.clone());
                    let shared = Shared {
                        faults,
                        rng,
                        log,
                        deletes: deletes.clone(),
                        refusals: refusals.clone(),
                        outage: outage.clone(),
                    };
                    tokio::spawn(serve(client, upstream, shared));
                }
            })
        };
        FaultProxy {
            endpoint,
            log,
            refusals,
            outage,
            task,
        }
    }

    /// Answers the next `times` requests of `action` with `403 code` (a fatal error, such as
    /// `AccessDenied`), without forwarding them.
    pub fn refuse_next(&self, action: &str, code: &'static str, times: usize) {
        let mut refusals = self.refusals.lock().unwrap();
        refusals.insert(action.to_owned(), (code, times));
    }

    /// An outage of `actions` for `duration` from now: their requests are answered `500
    /// InternalError` by the proxy itself, never forwarded.
    pub fn outage(&self, actions: &'static [&'static str], duration: Duration) {
        self.disturb(actions, Disturbance::Fail, duration);
    }

    /// A delay storm on `actions` for `duration` from now: every request is forwarded, and
    /// its answer held `hold` (then the connection dropped, as for a `Delay` fault).
    pub fn storm(&self, actions: &'static [&'static str], duration: Duration, hold: Duration) {
        self.disturb(actions, Disturbance::Delay(hold), duration);
    }

    fn disturb(&self, actions: &'static [&'static str], what: Disturbance, duration: Duration) {
        let until = tokio::time::Instant::now() + duration;
        *self.outage.lock().unwrap() = Some(Disturbed {
            actions,
            what,
            until,
        });
    }

    pub fn log(&self) -> FaultLog {
        self.log.lock().unwrap().clone()
    }
}

/// xorshift64*: reproducible draws from the seed.
fn draw(rng: &Mutex<u64>) -> f64 {
    let mut s = rng.lock().unwrap();
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    let x = s.wrapping_mul(0x2545_f491_4f6c_dd1d);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

fn pick(faults: &Faults, rng: &Mutex<u64>) -> Option<Fault> {
    let mut x = draw(rng);
    for (p, fault) in [
        (faults.internal_error, Fault::InternalError),
        (faults.throttle, Fault::Throttle),
        (faults.reset_before, Fault::ResetBefore),
        (faults.drop_after, Fault::DropAfter),
        (faults.delay, Fault::Delay),
    ] {
        if x < p {
            return Some(fault);
        }
        x -= p;
    }
    None
}

/// One HTTP/1.1 message: its head and the whole thing as bytes.
struct Http {
    head: String,
    raw: Vec<u8>,
}

impl Http {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn body(&self) -> &[u8] {
        &self.raw[self.head.len() + 4..]
    }
}

/// Reads one message; `None` at a clean end of the stream. Bodies need a `Content-Length`,
/// except a response's, which may run to the end of the stream.
async fn read_http(stream: &mut TcpStream, buf: &mut Vec<u8>, response: bool) -> Option<Http> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut message = Http {
        head,
        raw: Vec::new(),
    };
    let length = message
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    let total = match length {
        Some(len) => head_end + 4 + len,
        None if response => {
            while let Ok(n) = stream.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.len()
        }
        None => head_end + 4,
    };
    while buf.len() < total {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    message.raw = buf.drain(..total).collect();
    Some(message)
}

/// The code to refuse a request of `action` with, if one is due (counted down).
fn take_refusal(refusals: &Refusals, action: &str) -> Option<&'static str> {
    let mut refusals = refusals.lock().unwrap();
    let (code, left) = refusals.get_mut(action)?;
    if *left == 0 {
        return None;
    }
    *left -= 1;
    Some(*code)
}

fn error_answer(status: u16, reason: &str, code: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"__type":"com.amazonaws.sqs#{code}","message":"injected by the test proxy"}}"#
    );
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/x-amz-json-1.0\r\n\
         x-amzn-query-error: {code};Receiver\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The `MessageId`s in a `ReceiveMessage` answer's JSON.
fn message_ids(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    text.split("\"MessageId\"")
        .skip(1)
        .filter_map(|rest| {
            let value = rest.trim_start().strip_prefix(':')?.trim_start();
            value
                .strip_prefix('"')?
                .split('"')
                .next()
                .map(str::to_owned)
        })
        .collect()
}

/// An S3 request's action, from its method (S3 names no action in a header).
fn s3_action(head: &str) -> Option<&'static str> {
    match head.split(' ').next()? {
        "GET" => Some("GetObject"),
        "HEAD" => Some("HeadObject"),
        "PUT" => Some("PutObject"),
        "DELETE" => Some("DeleteObject"),
        _ => None,
    }
}

async fn forward(upstream: SocketAddr, request: &Http) -> Option<Http> {
    let mut server = TcpStream::connect(upstream).await.ok()?;
    server.write_all(&request.raw).await.ok()?;
    read_http(&mut server, &mut Vec::new(), true).await
}

/// What the connections of one proxy share.
struct Shared {
    faults: Arc<Faults>,
    rng: Arc<Mutex<u64>>,
    log: Arc<Mutex<FaultLog>>,
    /// Held while a delete is forwarded: one at a time (see the module docs).
    deletes: Arc<tokio::sync::Mutex<()>>,
    refusals: Refusals,
    outage: Outage,
}

async fn serve(mut client: TcpStream, upstream: SocketAddr, shared: Shared) {
    let Shared {
        faults,
        rng,
        log,
        deletes,
        refusals,
        outage,
    } = shared;
    let mut buf = Vec::new();
    let mut throttles = 0u64;
    while let Some(request) = read_http(&mut client, &mut buf, false).await {
        let action = request
            .header("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .or_else(|| s3_action(&request.head))
            .unwrap_or("?")
            .to_owned();
        if let Some(code) = take_refusal(&refusals, &action) {
            *log.lock()
                .unwrap()
                .requests
                .entry(action.clone())
                .or_default() += 1;
            if client
                .write_all(&error_answer(403, "Forbidden", code))
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        let mut delay_for = faults.delay_for;
        let fault = match disturbance(&outage, &action) {
            Some(Disturbance::Fail) => Some(Fault::InternalError),
            Some(Disturbance::Delay(hold)) => {
                delay_for = hold;
                Some(Fault::Delay)
            }
            None => faults
                .actions
                .contains(&action.as_str())
                .then(|| pick(&faults, &rng))
                .flatten(),
        };
        {
            let mut log = log.lock().unwrap();
            *log.requests.entry(action.clone()).or_default() += 1;
            if let Some(f) = fault {
                *log.injected.entry((f, action.clone())).or_default() += 1;
            }
        }
        match fault {
            Some(Fault::InternalError) => {
                let answer = error_answer(500, "Internal Server Error", "InternalError");
                if client.write_all(&answer).await.is_err() {
                    return;
                }
                continue;
            }
            Some(Fault::Throttle) => {
                throttles += 1;
                let code = if throttles.is_multiple_of(2) {
                    "RequestThrottled"
                } else {
                    "ThrottlingException"
                };
                if client
                    .write_all(&error_answer(400, "Bad Request", code))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            Some(Fault::ResetBefore) => {
                // Closing with unread data or at once: the client sees the connection go.
                let _ = client.set_zero_linger();
                return;
            }
            _ => {}
        }
        let one_delete = match action.as_str() {
            "DeleteMessage" | "DeleteMessageBatch" => Some(deletes.lock().await),
            _ => None,
        };
        let answer = forward(upstream, &request).await;
        drop(one_delete);
        let Some(answer) = answer else {
            return;
        };
        match fault {
            Some(Fault::DropAfter) | Some(Fault::Delay) => {
                if action == "ReceiveMessage" {
                    log.lock()
                        .unwrap()
                        .unseen_receives
                        .extend(message_ids(answer.body()));
                }
                if fault == Some(Fault::Delay) {
                    tokio::time::sleep(delay_for).await;
                    let _ = client.write_all(&answer.raw).await;
                }
                let _ = client.set_zero_linger();
                return;
            }
            _ => {
                if client.write_all(&answer.raw).await.is_err() {
                    return;
                }
                let close = answer.head.starts_with("HTTP/1.0")
                    || answer
                        .header("connection")
                        .is_some_and(|c| c.eq_ignore_ascii_case("close"));
                if close {
                    return;
                }
            }
        }
    }
}
