//! The requests this process sent to the Kubernetes API server, counted by verb and HTTP status
//! as their answers come (0: no answer), by every client plumb builds (`kube::transport`); the
//! daemon's metrics show them.

use std::collections::BTreeMap;
use std::sync::Mutex;

static COUNTS: Mutex<BTreeMap<(&'static str, u16), u64>> = Mutex::new(BTreeMap::new());

/// The verb of a request as the API server authorizes it, from its method and query (`get`
/// covers lists too: the path would tell them apart).
pub fn verb(method: &http::Method, query: Option<&str>) -> &'static str {
    let watch = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1"))
    });
    match method.as_str() {
        "GET" if watch => "watch",
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "other",
    }
}

/// One answer (or none: `status` 0).
pub fn record(verb: &'static str, status: u16) {
    *COUNTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry((verb, status))
        .or_default() += 1;
}

/// Every (verb, status) seen so far, with its count.
pub fn counts() -> Vec<(&'static str, u16, u64)> {
    let counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    counts.iter().map(|((v, s), n)| (*v, *s, *n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_the_api_servers() {
        let get = http::Method::GET;
        assert_eq!(verb(&get, Some("watch=true&resourceVersion=1")), "watch");
        assert_eq!(verb(&get, Some("labelSelector=watch%3Dtrue")), "get");
        assert_eq!(verb(&get, None), "get");
        assert_eq!(verb(&http::Method::PATCH, None), "patch");
        record("delete", 404);
        assert!(counts().contains(&("delete", 404, 1)));
    }
}
