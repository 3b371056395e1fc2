//! Injectable faults and the request log.

use std::time::Duration;

use serde_json::Value;

/// What a fault does to a request it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Wait this long, then handle the request normally (or apply the next matching fault).
    Latency(Duration),
    /// Answer with this HTTP code and `Status` reason (e.g. `500, "InternalError"`), with the
    /// message the API server gives that code.
    Status(u16, String),
    /// Answer `503 ServiceUnavailable`, as an API server that is shutting down or overloaded.
    /// Note that kube-rs retries 429/503/504 by default (up to 15 times, with backoff).
    Unavailable,
    /// Answer `429` as the API server's priority-and-fairness (and max-in-flight) filter does
    /// when its queues are full: a plain-text body and `Retry-After: <seconds>`, no `Status`.
    TooManyRequests(u32),
    /// Close the connection without answering.
    Disconnect,
    /// Answer with this HTTP code and this JSON body instead of handling the request, as a
    /// misbehaving proxy or server might (another object than the one asked for, say).
    Body(u16, String),
}

/// A fault and the requests it applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// HTTP method to match (`None`: any).
    pub method: Option<String>,
    /// Path prefix to match (`""`: every path). The query string is not part of the path.
    pub path_prefix: String,
    pub kind: FaultKind,
    /// How many matching requests it applies to (`None`: until `clear_faults`).
    pub times: Option<usize>,
}

impl Fault {
    /// A fault on every request, forever; narrow it with the builder methods.
    pub fn new(kind: FaultKind) -> Fault {
        Fault {
            method: None,
            path_prefix: String::new(),
            kind,
            times: None,
        }
    }

    pub fn method(mut self, method: &str) -> Fault {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    pub fn path(mut self, prefix: &str) -> Fault {
        self.path_prefix = prefix.to_owned();
        self
    }

    pub fn times(mut self, n: usize) -> Fault {
        self.times = Some(n);
        self
    }

    pub(crate) fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m == method) && path.starts_with(&self.path_prefix)
    }
}

/// What the matching faults decided for one request.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    pub delay: Duration,
    pub terminal: Option<FaultKind>,
}

/// Applies the faults in order: every matching latency adds up, the first matching
/// non-latency fault ends the request. Each fault that took part uses up one of its `times`.
pub(crate) fn decide(faults: &mut Vec<Fault>, method: &str, path: &str) -> Decision {
    let mut decision = Decision::default();
    for fault in faults.iter_mut() {
        if decision.terminal.is_some() || !fault.matches(method, path) || fault.times == Some(0) {
            continue;
        }
        match &fault.kind {
            FaultKind::Latency(d) => decision.delay += *d,
            other => decision.terminal = Some(other.clone()),
        }
        if let Some(n) = fault.times.as_mut() {
            *n -= 1;
        }
    }
    faults.retain(|f| f.times != Some(0));
    decision
}

/// One request as the server saw it, recorded after it was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string (`""` if none).
    pub query: String,
    pub content_type: Option<String>,
    /// The request body (lossy UTF-8).
    pub body: String,
    /// The HTTP status answered; `0` when the connection was closed without an answer.
    pub status: u16,
    /// The bearer token the request carried, if any.
    pub bearer_token: Option<String>,
    /// Whether the TLS client presented a certificate the server accepted.
    pub client_certificate: bool,
    /// Which connection carried it (numbered from 1 in accept order): requests on one
    /// keep-alive connection share it, a new client or a reconnect gets a new one.
    pub connection: u64,
}

impl LoggedRequest {
    /// A query parameter, percent-decoded.
    pub fn query_param(&self, key: &str) -> Option<String> {
        query_pairs(&self.query)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The body parsed as JSON.
    pub fn body_json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }
}

/// `a=b&c=d` → pairs, with `%XX` and `+` decoded.
pub(crate) fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_count_down_and_latencies_add_up() {
        let mut faults = vec![
            Fault::new(FaultKind::Latency(Duration::from_millis(5))).times(1),
            Fault::new(FaultKind::Latency(Duration::from_millis(7))).path("/api"),
            Fault::new(FaultKind::Unavailable)
                .method("get")
                .path("/api/v1/namespaces/a/pods")
                .times(2),
            Fault::new(FaultKind::Disconnect).path("/api/v1/namespaces/a/pods"),
        ];
        let d = decide(&mut faults, "GET", "/api/v1/namespaces/a/pods/x");
        assert_eq!(
            d,
            Decision {
                delay: Duration::from_millis(12),
                terminal: Some(FaultKind::Unavailable)
            }
        );
        assert_eq!(faults.len(), 3);
        let d = decide(&mut faults, "PATCH", "/api/v1/namespaces/a/pods/x");
        assert_eq!(d.terminal, Some(FaultKind::Disconnect));
        decide(&mut faults, "GET", "/api/v1/namespaces/a/pods/x");
        let d = decide(&mut faults, "GET", "/api/v1/namespaces/a/pods/x");
        assert_eq!(d.terminal, Some(FaultKind::Disconnect));
        assert_eq!(decide(&mut faults, "GET", "/version"), Decision::default());
    }

    #[test]
    fn query_decoding() {
        let pairs =
            query_pairs("fieldSelector=metadata.name%3Dp1&watch=true&labelSelector=a+in+(b)&x");
        assert_eq!(
            pairs[0],
            ("fieldSelector".into(), "metadata.name=p1".into())
        );
        assert_eq!(pairs[2], ("labelSelector".into(), "a in (b)".into()));
        assert_eq!(pairs[3], ("x".into(), String::new()));
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
