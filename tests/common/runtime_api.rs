//! A local Lambda Runtime API, as `lambda_runtime` expects it on `AWS_LAMBDA_RUNTIME_API`:
//! it serves the invocations a test queues (`GET /2018-06-01/runtime/invocation/next`) and
//! collects the function's answers (`POST .../invocation/{id}/response` or `.../error`, and
//! `POST .../init/error`). HTTP/1.1 with keep-alive, on 127.0.0.1 only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};

/// What the function answered to an invocation.
#[derive(Debug)]
pub enum Answer {
    /// `POST .../response`: the function's result.
    Response(serde_json::Value),
    /// `POST .../error`, or `POST /init/error` before any invocation: the error's body.
    Error(String),
}

/// The API, serving until dropped.
pub struct RuntimeApi {
    address: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    queued: Mutex<VecDeque<Invocation>>,
    queued_changed: Notify,
    waiting: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    init_error: Mutex<Option<String>>,
    next_id: Mutex<u64>,
}

struct Invocation {
    id: String,
    deadline_ms: u128,
    event: String,
}

impl RuntimeApi {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("an address").to_string();
        let shared = Arc::new(Shared::default());
        let server = {
            let shared = shared.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, shared.clone()));
                }
            })
        };
        Self {
            address,
            shared,
            server,
        }
    }

    /// `host:port`, for `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Queues an invocation with `event`, its function's deadline `timeout` from now, and
    /// waits for its answer (at most `timeout` and 30 s more: a function that never answers
    /// fails the test).
    pub async fn invoke(&self, event: &impl serde::Serialize, timeout: Duration) -> Answer {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut next = self.shared.next_id.lock().unwrap();
            *next += 1;
            format!("invocation-{next}")
        };
        let deadline = SystemTime::now() + timeout;
        let deadline_ms = deadline
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        self.shared.waiting.lock().unwrap().insert(id.clone(), tx);
        self.shared.queued.lock().unwrap().push_back(Invocation {
            id,
            deadline_ms,
            event: serde_json::to_string(event).unwrap(),
        });
        self.shared.queued_changed.notify_waiters();
        match tokio::time::timeout(timeout + Duration::from_secs(30), rx).await {
            Ok(Ok(answer)) => answer,
            _ => panic!(
                "no answer from the function (init error: {:?})",
                self.shared.init_error.lock().unwrap()
            ),
        }
    }

    /// The error the function reported at its start, if any.
    pub fn init_error(&self) -> Option<String> {
        self.shared.init_error.lock().unwrap().clone()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// One connection: requests one after another until it closes.
async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let mut stream = BufReader::new(stream);
    while let Some((method, path, body)) = read_request(&mut stream).await {
        let reply = match (method.as_str(), path.as_str()) {
            ("GET", "/2018-06-01/runtime/invocation/next") => next_invocation(&shared).await,
            ("POST", "/2018-06-01/runtime/init/error") => {
                *shared.init_error.lock().unwrap() = Some(body);
                accepted()
            }
            ("POST", path) if path.starts_with("/2018-06-01/runtime/invocation/") => {
                answered(&shared, path, body)
            }
            _ => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned(),
        };
        if stream.get_mut().write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// The next queued invocation, once there is one.
async fn next_invocation(shared: &Shared) -> String {
    let invocation = loop {
        let changed = shared.queued_changed.notified();
        if let Some(invocation) = shared.queued.lock().unwrap().pop_front() {
            break invocation;
        }
        changed.await;
    };
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
         lambda-runtime-aws-request-id: {}\r\nlambda-runtime-deadline-ms: {}\r\n\
         lambda-runtime-invoked-function-arn: arn:aws:lambda:us-east-1:000000000000:function:test\r\n\
         lambda-runtime-trace-id: Root=1-00000000-000000000000000000000000\r\n\
         content-length: {}\r\n\r\n{}",
        invocation.id,
        invocation.deadline_ms,
        invocation.event.len(),
        invocation.event
    )
}

/// `POST .../invocation/{id}/response` or `.../error`.
fn answered(shared: &Shared, path: &str, body: String) -> String {
    let rest = path.trim_start_matches("/2018-06-01/runtime/invocation/");
    let Some((id, kind)) = rest.split_once('/') else {
        return "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n".to_owned();
    };
    let answer = match kind {
        "response" => Answer::Response(serde_json::from_str(&body).unwrap_or_default()),
        _ => Answer::Error(body),
    };
    if let Some(tx) = shared.waiting.lock().unwrap().remove(id) {
        let _ = tx.send(answer);
    }
    accepted()
}

fn accepted() -> String {
    "HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        .to_owned()
}

/// A request's method, path and body (sized or chunked); `None` once the connection closed.
async fn read_request(stream: &mut BufReader<TcpStream>) -> Option<(String, String, String)> {
    let mut line = String::new();
    if stream.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let mut header = String::new();
        stream.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(stream).await?
    } else {
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.ok()?;
        body
    };
    Some((method, path, String::from_utf8_lossy(&body).into_owned()))
}

async fn read_chunked(stream: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        stream.read_line(&mut size).await.ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        let mut chunk = vec![0; size + 2];
        stream.read_exact(&mut chunk).await.ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}
