//! The HTTP side of the stand-in: accepting connections (plain TCP or TLS, always with
//! TCP_NODELAY; HTTP/2 when the TLS client picks `h2` by ALPN, else HTTP/1.1), authentication,
//! injected faults, the request log, and the response body type (whole JSON documents, or the
//! streamed events of a watch).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{AUTHORIZATION, CONNECTION, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;

use super::faults::{self, Fault, FaultKind, LoggedRequest};
use super::handlers::{self, Call};
use super::status::ApiError;
use super::store::{Store, new_uid};

/// The API server's request body limit (`apiserver` `MaxRequestBodyBytes`, 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// A TLS handshake that takes longer than this is abandoned, so a stuck client cannot pin a
/// task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the connection tasks and the test-facing `KubeApi` share.
pub(crate) struct Shared {
    pub store: Mutex<Store>,
    /// The store's resourceVersion after each write: watches wait on it.
    pub changes: watch::Sender<u64>,
    /// While `true`, open watches deliver no changes (`KubeApi::hold_watches`).
    pub watches_held: watch::Sender<bool>,
    pub tokens: Mutex<Vec<String>>,
    /// The tokens issued by TokenRequest, in order.
    pub issued: Mutex<Vec<super::tokens::IssuedToken>>,
    /// The UID of each service account (namespace, name) tokens were issued for.
    pub service_account_uids: Mutex<std::collections::BTreeMap<(String, String), String>>,
    /// The UID of each Node registered ([`super::KubeApi::register_node`]).
    pub node_uids: Mutex<std::collections::BTreeMap<String, String>>,
    /// The longest lifetime a TokenRequest is granted, in seconds.
    pub max_token_expiration: Option<u64>,
    pub faults: Mutex<Vec<Fault>>,
    pub log: Mutex<Vec<LoggedRequest>>,
    /// Signalled after each log entry, for `KubeApi::wait_for_request`.
    pub logged: Condvar,
    pub allow_anonymous: bool,
    pub bookmark_interval: Duration,
    /// The address the server listens on (discovery's `serverAddressByClientCIDRs`).
    pub addr: SocketAddr,
    /// Open connections, so that `set_down` and `Drop` can cut them like a dead server would.
    pub connections: Mutex<Vec<AbortHandle>>,
    /// The number of connections accepted so far (the last one's id).
    pub accepted: AtomicU64,
    /// Requests being handled now, and the most there ever were at once.
    pub in_flight: AtomicU64,
    pub max_in_flight: AtomicU64,
}

/// Locks a mutex, ignoring poisoning: a panicking test thread must not take the server down
/// with it, and every critical section leaves the data consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Runs a write against the store, then wakes the watches.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut store = lock(&self.store);
        let out = f(&mut store);
        let rv = store.resource_version();
        drop(store);
        self.changes.send_replace(rv);
        out
    }

    fn record(&self, entry: LoggedRequest) {
        lock(&self.log).push(entry);
        self.logged.notify_all();
    }

    pub(crate) fn cut_connections(&self) {
        for conn in lock(&self.connections).drain(..) {
            conn.abort();
        }
    }
}

/// A response body: a whole document, or the events of a watch as they are produced.
pub(crate) enum RespBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            RespBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            RespBody::Stream(rx) => rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, RespBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        // An exact size makes hyper send Content-Length; a watch has none and goes chunked, as
        // the API server's watches do.
        match self {
            RespBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            RespBody::Full(None) => SizeHint::with_exact(0),
            RespBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// What a handler answers.
pub(crate) struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: RespBody,
    /// A `Retry-After` header, in seconds.
    pub retry_after: Option<u32>,
}

impl Reply {
    pub(crate) fn json(status: u16, body: String) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: RespBody::Full(Some(Bytes::from(body))),
            retry_after: None,
        }
    }

    pub(crate) fn value(status: u16, body: &serde_json::Value) -> Reply {
        Reply::json(status, body.to_string())
    }

    pub(crate) fn error(err: &ApiError) -> Reply {
        Reply::json(err.code, err.to_json())
    }

    pub(crate) fn text(status: u16, body: &'static str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: RespBody::Full(Some(Bytes::from(body))),
            retry_after: None,
        }
    }

    pub(crate) fn stream(rx: mpsc::Receiver<Bytes>) -> Reply {
        Reply {
            status: 200,
            content_type: "application/json",
            body: RespBody::Stream(rx),
            retry_after: None,
        }
    }

    fn into_response(self, close: bool) -> Response<RespBody> {
        let mut resp = Response::new(self.body);
        *resp.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = resp.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        // Headers every API server answer carries; clients log Audit-Id when a call fails.
        headers.insert(
            "cache-control",
            HeaderValue::from_static("no-cache, private"),
        );
        if let Ok(id) = HeaderValue::from_str(&new_uid()) {
            headers.insert("audit-id", id);
        }
        if let Some(seconds) = self.retry_after {
            headers.insert("retry-after", HeaderValue::from(seconds));
        }
        if close {
            // The rest of the body was never read, so the connection cannot carry another
            // request; say so, as Go's net/http does, so the client does not reuse it.
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// Returned by the service to make hyper drop the connection without answering.
#[derive(Debug)]
struct Disconnect;

impl std::fmt::Display for Disconnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection closed by an injected fault")
    }
}

impl std::error::Error for Disconnect {}

/// Accepts connections until the task is aborted (which closes the listening socket).
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    tls: Option<TlsAcceptor>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // EMFILE and friends: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        // Without this, a response written in two segments waits for the client's delayed ACK
        // (Nagle): 40 ms per request instead of tens of microseconds.
        let _ = stream.set_nodelay(true);
        let id = shared.accepted.fetch_add(1, Ordering::Relaxed) + 1;
        let task = tokio::spawn(connection(shared.clone(), stream, tls.clone(), id));
        let mut conns = lock(&shared.connections);
        conns.retain(|c| !c.is_finished());
        conns.push(task.abort_handle());
    }
}

async fn connection(shared: Arc<Shared>, stream: TcpStream, tls: Option<TlsAcceptor>, id: u64) {
    match tls {
        None => serve(shared, TokioIo::new(stream), false, false, id).await,
        Some(acceptor) => {
            let Ok(Ok(stream)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            else {
                return;
            };
            // The verifier already checked any certificate against the CA during the
            // handshake; one that is present here is one the server accepted.
            let client_cert = stream
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            serve(shared, TokioIo::new(stream), client_cert, h2, id).await;
        }
    }
}

/// Serves one connection in HTTP/2 (`h2`, its requests handled concurrently) or HTTP/1.1.
async fn serve<I>(shared: Arc<Shared>, io: I, client_cert: bool, h2: bool, connection: u64)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| handle(shared.clone(), client_cert, connection, req));
    if h2 {
        let _ = http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, svc)
            .await;
    } else {
        let _ = http1::Builder::new()
            .keep_alive(true)
            .serve_connection(io, svc)
            .await;
    }
}

/// Counts a request as in flight while it lives.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> InFlight<'a> {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn header(headers: &HeaderMap, name: hyper::header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The bearer token as the API server's `bearertoken` authenticator reads it: scheme matched
/// case-insensitively, an empty token is no token.
fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = header(headers, AUTHORIZATION)?;
    let mut parts = value.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

async fn handle(
    shared: Arc<Shared>,
    client_cert: bool,
    connection: u64,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, Disconnect> {
    // Until the answer's head is ready (a watch's stream is not counted).
    let _in_flight = InFlight::enter(&shared);
    let (parts, body) = req.into_parts();
    let method = parts.method.as_str().to_owned();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let content_type = header(&parts.headers, CONTENT_TYPE);
    let accept = header(&parts.headers, hyper::header::ACCEPT);
    let bearer = bearer_token(&parts.headers);
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(()),
        // The client went away mid-body: nobody to answer.
        Err(_) => return Err(Disconnect),
    };
    let too_large = body.is_err();
    let mut entry = LoggedRequest {
        method,
        path,
        query,
        content_type,
        body: body
            .as_ref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default(),
        status: 0,
        bearer_token: bearer,
        client_certificate: client_cert,
        connection,
    };

    let decision = faults::decide(&mut lock(&shared.faults), &entry.method, &entry.path);
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    let reply = match decision.terminal {
        Some(FaultKind::Disconnect) => {
            shared.record(entry);
            return Err(Disconnect);
        }
        Some(FaultKind::Status(code, reason)) => Reply::error(&ApiError::injected(code, &reason)),
        Some(FaultKind::Body(code, body)) => Reply::json(code, body),
        // `tooManyRequests` in apiserver's filters: `http.Error` with a fixed text.
        Some(FaultKind::TooManyRequests(seconds)) => Reply {
            retry_after: Some(seconds),
            ..Reply::text(429, "Too many requests, please try again later.\n")
        },
        Some(FaultKind::Unavailable) => {
            Reply::error(&ApiError::injected(503, "ServiceUnavailable"))
        }
        Some(FaultKind::Latency(_)) | None => match body {
            _ if !authenticated(&shared, &entry) => Reply::error(&ApiError::unauthorized()),
            Err(()) => Reply::error(&ApiError::too_large(MAX_BODY)),
            Ok(body) => {
                let call = Call::new(&entry, accept.as_deref(), &body);
                handlers::dispatch(&shared, &call)
            }
        },
    };
    entry.status = reply.status;
    shared.record(entry);
    Ok(reply.into_response(too_large))
}

/// The API server's authenticator chain: a client certificate or a known bearer token
/// authenticates; a bearer token that is not known is a 401 even where an anonymous request
/// would pass; anonymous requests pass where the server allows them (health and version are
/// public, as the default RBAC rules make them).
fn authenticated(shared: &Shared, req: &LoggedRequest) -> bool {
    if req.client_certificate {
        return true;
    }
    if let Some(token) = &req.bearer_token {
        return lock(&shared.tokens).iter().any(|t| t == token);
    }
    shared.allow_anonymous || handlers::is_public(&req.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_parse_like_the_api_server() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer abc"));
        assert_eq!(bearer_token(&h).as_deref(), Some("abc"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("bearer abc extra"));
        assert_eq!(bearer_token(&h).as_deref(), Some("abc"));
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Basic Zm9vOmJhcg=="),
        );
        assert_eq!(bearer_token(&h), None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&h), None);
    }
}
