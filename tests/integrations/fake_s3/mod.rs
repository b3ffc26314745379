//! An S3 in the test's own memory, behind the real SDK: an HTTP client that answers the
//! requests the payload path makes (`GetObject`, `DeleteObject`, and `HeadObject` for the
//! tests) from a map of buckets, as S3 answers them, so that a plain `cargo test` runs the
//! whole payload path with no server. It counts requests by action, and can fail every
//! request of some actions with `500 InternalError` or hold their answers, as the fault
//! proxy does in front of a server; and serve an object as a stream without its length, as
//! an S3-compatible server may.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use futures::StreamExt;

/// What the fake does to every request of some actions.
#[derive(Debug, Clone, Copy)]
pub enum Disturb {
    /// Answers `500 InternalError`.
    Fail,
    /// Answers this late.
    Hold(Duration),
}

#[derive(Debug, Default)]
struct State {
    /// Bucket, then key, then the object's bytes.
    buckets: HashMap<String, HashMap<String, Vec<u8>>>,
    requests: HashMap<&'static str, usize>,
    disturbed: Vec<(&'static str, Disturb)>,
    /// Bucket and key of the objects served without a length, in chunks.
    streamed: HashSet<(String, String)>,
    /// The chunks of those objects taken by the client so far.
    chunks_taken: Arc<AtomicUsize>,
}

/// The fake S3; clones share it.
#[derive(Debug, Clone, Default)]
pub struct FakeS3(Arc<Mutex<State>>);

impl FakeS3 {
    /// An SDK client of this S3.
    pub fn client(&self) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "test", "test", None, None, "tests",
            ))
            .endpoint_url("http://fake-s3.local")
            .force_path_style(true)
            .http_client(self.clone())
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    pub fn create_bucket(&self, bucket: &str) {
        self.state().buckets.entry(bucket.to_owned()).or_default();
    }

    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let mut state = self.state();
        let objects = state.buckets.entry(bucket.to_owned()).or_default();
        objects.insert(key.to_owned(), body.to_vec());
    }

    pub fn exists(&self, bucket: &str, key: &str) -> bool {
        self.state()
            .buckets
            .get(bucket)
            .is_some_and(|objects| objects.contains_key(key))
    }

    /// Disturbs every later request of `actions`.
    pub fn disturb(&self, actions: &[&'static str], disturb: Disturb) {
        let mut state = self.state();
        state
            .disturbed
            .extend(actions.iter().map(|a| (*a, disturb)));
    }

    /// Serves the object at `bucket`/`key` without a `Content-Length`, in chunks of
    /// [`CHUNK`] bytes made as the client takes them.
    pub fn serve_unsized(&self, bucket: &str, key: &str) {
        let object = (bucket.to_owned(), key.to_owned());
        self.state().streamed.insert(object);
    }

    /// The chunks of objects served without a length that the client took.
    pub fn chunks_taken(&self) -> usize {
        self.state().chunks_taken.load(Ordering::SeqCst)
    }

    /// Requests of `action` so far.
    pub fn requests(&self, action: &str) -> usize {
        self.state().requests.get(action).copied().unwrap_or(0)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// The answer to one request, and how late to give it.
    fn answer(&self, request: &HttpRequest) -> (Option<Duration>, HttpResponse) {
        let (bucket, key) = bucket_and_key(request.uri());
        let action = match (request.method(), key.is_empty()) {
            ("GET", false) => "GetObject",
            ("HEAD", false) => "HeadObject",
            ("DELETE", false) => "DeleteObject",
            ("PUT", true) => "CreateBucket",
            _ => "Unsupported",
        };
        let mut state = self.state();
        *state.requests.entry(action).or_default() += 1;
        let disturb = state
            .disturbed
            .iter()
            .find(|(a, _)| *a == action)
            .map(|(_, d)| *d);
        let hold = match disturb {
            Some(Disturb::Fail) => return (None, error(500, "InternalError", "")),
            Some(Disturb::Hold(hold)) => Some(hold),
            None => None,
        };
        let response = match action {
            "CreateBucket" => {
                state.buckets.entry(bucket).or_default();
                response(200, Vec::new())
            }
            "DeleteObject" => {
                if let Some(objects) = state.buckets.get_mut(&bucket) {
                    objects.remove(&key);
                }
                response(204, Vec::new())
            }
            "GetObject" | "HeadObject" => match state.buckets.get(&bucket) {
                None => error(404, "NoSuchBucket", &key),
                Some(objects) => match objects.get(&key) {
                    None => error(404, "NoSuchKey", &key),
                    Some(body) if action == "GetObject" => {
                        if state.streamed.contains(&(bucket.clone(), key.clone())) {
                            unsized_response(body.clone(), state.chunks_taken.clone())
                        } else {
                            response(200, body.clone())
                        }
                    }
                    Some(body) => {
                        let mut head = response(200, Vec::new());
                        let length = body.len().to_string();
                        head.headers_mut().insert("content-length", length);
                        head
                    }
                },
            },
            _ => error(400, "NotImplemented", &key),
        };
        (hold, response)
    }
}

impl HttpConnector for FakeS3 {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (hold, response) = self.answer(&request);
        HttpConnectorFuture::new(async move {
            if let Some(hold) = hold {
                tokio::time::sleep(hold).await;
            }
            Ok(response)
        })
    }
}

impl HttpClient for FakeS3 {
    fn http_connector(
        &self,
        _: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

/// The bucket and key of a path-style URI (`http://host/bucket/key?query`), the key
/// percent-decoded.
fn bucket_and_key(uri: &str) -> (String, String) {
    let path = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let path = path.split_once('/').map_or("", |(_, path)| path);
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    (bucket.to_owned(), percent_decoded(key))
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn response(status: u16, body: Vec<u8>) -> HttpResponse {
    let length = body.len().to_string();
    let mut response = HttpResponse::new(
        StatusCode::try_from(status).expect("a valid status"),
        SdkBody::from(body),
    );
    response.headers_mut().insert("content-length", length);
    response
}

/// The size of the chunks of an object served without a length.
pub const CHUNK: usize = 1024;

/// A `200` whose body comes in chunks, each counted in `taken` as the client takes it, with
/// no `Content-Length`.
fn unsized_response(body: Vec<u8>, taken: Arc<AtomicUsize>) -> HttpResponse {
    let chunks: Vec<bytes::Bytes> = body
        .chunks(CHUNK)
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let frames = futures::stream::iter(chunks).map(move |chunk| {
        taken.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(chunk))
    });
    let body = SdkBody::from_body_1_x(http_body_util::StreamBody::new(frames));
    HttpResponse::new(StatusCode::try_from(200).expect("a valid status"), body)
}

/// S3's error document.
fn error(status: u16, code: &str, key: &str) -> HttpResponse {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{code} \
         (fake S3)</Message><Key>{key}</Key><RequestId>fake</RequestId></Error>"
    );
    let mut response = response(status, body.into_bytes());
    response
        .headers_mut()
        .insert("content-type", "application/xml");
    response
}
