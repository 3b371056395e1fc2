//! Why a request to the API server failed, and what a CNI call is told: which failures are
//! retried (5xx, 429, a connection refused or reset, no answer in time) and which are final
//! (a TLS certificate the kubeconfig does not trust, 403, 404), each answer judged by its HTTP
//! status and read only up to a bound, and errors that name the API server and the object.

use super::*;
use std::time::Duration;

use cni::error::{CniError, ErrorCode};
use plumb_engine::plan::Pod;

/// Why a request got no answer that plumb can use.
#[derive(Debug)]
pub(super) enum Failure {
    Kube(kube::Error),
    /// No whole answer within this long.
    NoAnswer(Duration),
    /// The call's budget (this long) was spent before this request was answered.
    OutOfTime(Duration),
    /// Refused (401), and the kubeconfig, read again for a new token, could not be used: why
    /// (whose code the call's error takes: a failing exec credential plugin is code 11).
    Unauthorized(kube::Error, Box<CniError>),
}

impl Failure {
    /// Whether it may go away by itself.
    pub(super) fn transient(&self) -> bool {
        match self {
            Failure::Kube(kube::Error::Api(s)) => s.code == 429 || s.code >= 500,
            Failure::Kube(e @ (kube::Error::HyperError(_) | kube::Error::Service(_))) => {
                !tls_refused(e)
            }
            Failure::Kube(_) | Failure::OutOfTime(_) | Failure::Unauthorized(..) => false,
            Failure::NoAnswer(_) => true,
        }
    }

    /// How long the server asked to wait before asking again (`Retry-After`, or the `Status`'s
    /// `retryAfterSeconds`).
    pub(super) fn retry_after(&self) -> Duration {
        match self {
            Failure::Kube(kube::Error::Api(s)) => Duration::from_secs(
                s.details
                    .as_ref()
                    .map_or(0, |d| u64::from(d.retry_after_seconds)),
            ),
            _ => Duration::ZERO,
        }
    }

    pub(super) fn is_status(&self, code: u16) -> bool {
        matches!(self, Failure::Kube(kube::Error::Api(s)) if s.code == code)
    }

    pub(super) fn is_not_found(&self) -> bool {
        self.is_status(404)
    }

    /// Whether the API server refused a write for the UID it carried: the pod was recreated
    /// under the same name. A PATCH whose `metadata.uid` differs from the pod's is refused
    /// as an update of an immutable field (422 Invalid, the cause on `metadata.uid`); a UID
    /// precondition that fails is a 409 "Precondition failed: UID in precondition".
    pub(super) fn uid_refused(&self) -> bool {
        let Failure::Kube(kube::Error::Api(s)) = self else {
            return false;
        };
        let on_uid = s
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
            || s.message.contains("metadata.uid");
        (s.code == 422 && on_uid) || (s.code == 409 && s.message.contains("UID in precondition"))
    }
}

/// Whether `e` comes from a TLS handshake that failed on a certificate or on what the two sides
/// support: the server's certificate not trusted by the kubeconfig's CA (a rotated CA, an
/// address that now leads elsewhere), ours refused by the server, no common protocol. Asking
/// again gets the same answer, so it is not retried.
pub(super) fn tls_refused(e: &kube::Error) -> bool {
    use rustls::AlertDescription as A;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<rustls::Error>() {
            return match r {
                rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented
                | rustls::Error::PeerIncompatible(_) => true,
                rustls::Error::AlertReceived(alert) => matches!(
                    alert,
                    A::BadCertificate
                        | A::UnsupportedCertificate
                        | A::CertificateRevoked
                        | A::CertificateExpired
                        | A::CertificateUnknown
                        | A::UnknownCA
                        | A::CertificateRequired
                        | A::ProtocolVersion
                        | A::HandshakeFailure
                ),
                _ => false,
            };
        }
        // The handshake's failure comes as io::Errors wrapped in one another (tokio-rustls,
        // then the connector) around the rustls::Error, and an io::Error's `source` skips
        // what it wraps: unwrap them.
        cause = match c.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        };
    }
    false
}

/// The error of a status write refused because the pod is not this sandbox's any more: code 3
/// (the container is unknown), whichever way the write went (PATCH or update), with `why`.
pub(super) fn recreated(what: &str, pod: &Pod, why: &dyn std::fmt::Display) -> CniError {
    CniError::new(
        ErrorCode::UnknownContainer,
        format!(
            "{what}: the pod was recreated (this sandbox's UID is {}; {why}); its network-status \
             is not written",
            pod.uid
        ),
    )
}

/// A failed request as a CNI error naming what was asked, and of which API server (a
/// connection refused does not say where, and a kubeconfig with an old control-plane address
/// is the first thing to rule out): API refusals keep the server's
/// message; everything else is code 11 (try again later) when transient or out of time, else 5
/// (I/O).
pub(super) fn cni_error(server: &str, what: &str, f: &Failure) -> CniError {
    let e = match f {
        Failure::Kube(e) => e,
        Failure::Unauthorized(e, reread) => {
            return CniError::new(
                reread.kind(),
                format!(
                    "Kubernetes API {server}: {what}: {} (and the kubeconfig read again for a \
                     new token could not be used: {})",
                    kube_detail(e),
                    reread.msg
                ),
            );
        }
        Failure::NoAnswer(t) => {
            return CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "Kubernetes API {server}: {what}: no whole answer within {} s",
                    t.as_secs_f32()
                ),
            );
        }
        Failure::OutOfTime(budget) => {
            return CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "Kubernetes API {server}: {what}: no answer before the {} s this call may spend on \
                     the API ran out",
                    budget.as_secs_f32()
                ),
            );
        }
    };
    let code = if f.transient() {
        ErrorCode::TryAgainLater
    } else {
        ErrorCode::Io
    };
    CniError::new(
        code,
        format!("Kubernetes API {server}: {what}: {}", kube_detail(e)),
    )
}

/// What went wrong, as the API server said it, or down to the root cause (connection refused,
/// certificate problems…), each thing said once: the operator reads it in the pod's events.
pub(super) fn kube_detail(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason.is_empty() => format!("{} ({})", s.message, s.code),
        // The API server's 401 says "Unauthorized" as its message and its reason.
        kube::Error::Api(s) if s.message == s.reason => format!("{} {}", s.code, s.reason),
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => {
            // kube-rs's "ServiceError: " names its own wrapper, nothing the operator can act
            // on; and hyper's error prints its own text and is then its own source's, so each
            // layer is kept only when it adds words ("client error (Connect)" once, then
            // "tcp connect error: Connection refused").
            let top = other.to_string();
            let mut parts = vec![
                top.strip_prefix("ServiceError: ")
                    .unwrap_or(&top)
                    .to_string(),
            ];
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                let text = s.to_string();
                if !parts.last().is_some_and(|p| p.ends_with(&text)) {
                    parts.push(text);
                }
                source = s.source();
            }
            parts.join(": ")
        }
    }
}

/// One request through `client`, its answer judged by its HTTP status. kube-rs's own request
/// methods take any JSON object in an error answer for a `Status` and its `code` for the HTTP
/// status (0 when there is none): a load balancer's 503 `{"message": …}` was then final, and a
/// 500 whose body said 404 a missing pod. The status line is what the server (or whatever is
/// in front of it) answered; the body only explains it. `http2` is set to whether the answer
/// came over HTTP/2.
pub(super) async fn send<T: serde::de::DeserializeOwned>(
    client: &kube::Client,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    http2: &AtomicBool,
) -> Result<T, kube::Error> {
    send_within::<T>(client, request, http2, MAX_ANSWER).await
}

/// [`send`], the answer read up to `limit` bytes.
pub(super) async fn send_within<T: serde::de::DeserializeOwned>(
    client: &kube::Client,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    http2: &AtomicBool,
    limit: usize,
) -> Result<T, kube::Error> {
    let request = request.map_err(kube::Error::BuildRequest)?;
    let answer = client.send(request.map(kube::client::Body::from)).await?;
    http2.store(answer.version() == http::Version::HTTP_2, Ordering::Relaxed);
    let code = answer.status().as_u16();
    let success = (200..300).contains(&code);
    // Seconds only: the API server never sends the HTTP-date form.
    let retry_after = answer
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.trim().parse::<u32>().ok());
    let (body, whole) = read_at_most(answer.into_body(), limit).await?;
    if !success {
        let text = String::from_utf8_lossy(&body);
        let mut status = serde_json::from_str::<kube::core::Status>(&text)
            .ok()
            .filter(|s| !s.message.is_empty() || !s.reason.is_empty())
            .unwrap_or_else(|| kube::core::Status::failure(text.trim(), ""));
        status.code = code;
        status.message = cni::quote::cut(&status.message, MAX_ERROR_MESSAGE).into_owned();
        // A reason is one word (`NotFound`); an answer's can be anything.
        status.reason = cni::quote::cut(&status.reason, MAX_ERROR_MESSAGE).into_owned();
        // The priority-and-fairness filter's 429 has the wait in its header only.
        if let Some(seconds) = retry_after {
            match status.details.as_mut() {
                Some(d) if d.retry_after_seconds == 0 => d.retry_after_seconds = seconds,
                Some(_) => {}
                None => {
                    status.details = Some(kube::core::response::StatusDetails {
                        name: String::new(),
                        group: String::new(),
                        kind: String::new(),
                        uid: String::new(),
                        causes: Vec::new(),
                        retry_after_seconds: seconds,
                    })
                }
            }
        }
        return Err(kube::Error::Api(status.boxed()));
    }
    if !whole {
        return Err(kube::Error::SerdeError(serde::de::Error::custom(format!(
            "the answer is larger than {} MiB, more than any such API object; not read",
            limit >> 20
        ))));
    }
    serde_json::from_slice(&body).map_err(kube::Error::SerdeError)
}

/// The most of an answer plumb reads: an API object is at most ~1.5 MiB in etcd (its default
/// request limit), so anything past this is not the API server's object, and holding it all
/// could get the plugin killed for its memory (the runtime would get no error at all). Well
/// above 1.5 MiB: a pod is kept in etcd as protobuf, and its JSON can be several times larger
/// (the API server writes `<`, `>` and `&` as six bytes each).
pub(super) const MAX_ANSWER: usize = 16 << 20;

/// The most of a NAD's answer plumb reads. A custom resource is kept in etcd as the JSON the
/// API server sends, so it cannot pass ~1.5 MiB; and a call holds up to 32 NADs at once
/// (the engine's `MAX_PREFETCHED_NADS`): at [`MAX_ANSWER`] each, a server or proxy sending huge
/// answers made one ADD take 582 MB.
pub(super) const MAX_NAD_ANSWER: usize = 4 << 20;

/// The most of an error answer's message (and of its reason) kept in the CNI error (a proxy's
/// error page can be megabytes).
pub(super) const MAX_ERROR_MESSAGE: usize = 1024;

/// The most of a name from an answer kept in the CNI error: a Kubernetes name has at most 253
/// bytes, an answer's can have megabytes.
pub(super) const MAX_NAME: usize = 253;

/// The first `limit` bytes of `body`, and whether that is all of it.
pub(super) async fn read_at_most(
    mut body: kube::client::Body,
    limit: usize,
) -> Result<(Vec<u8>, bool), kube::Error> {
    use http_body::Body as _;
    let mut bytes = Vec::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if bytes.len() + data.len() > limit {
            bytes.extend_from_slice(&data[..limit - bytes.len()]);
            return Ok((bytes, false));
        }
        bytes.extend_from_slice(&data);
    }
    Ok((bytes, true))
}
