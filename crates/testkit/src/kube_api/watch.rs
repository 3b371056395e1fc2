//! WATCH (`GET …?watch=true`) in the API stand-in: a chunked stream of newline-delimited
//! `{"type","object"}` events, as the API server's watch cache sends them: the initial `ADDED`
//! events, the changes after a resourceVersion (or a 410 `Expired` once it is compacted away),
//! label and field selectors, and bookmarks ([`start`]).

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::handlers::{self, Call};
use super::resources::Resource;
use super::selector::Selector;
use super::server::{Shared, lock};
use super::status::{ApiError, Cause};
use super::store::{Change, ChangeType};

/// The API server closes a watch without `timeoutSeconds` after a random 30–60 minutes
/// (`--min-request-timeout` 1800 s); the low end is used.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// A day: longer than any test, short enough for `Instant` arithmetic.
const MAX_TIMEOUT_SECS: u64 = 86_400;

/// Which events one watch wants, and how it renders them.
struct Spec {
    res: Resource,
    ns: Option<String>,
    selector: Selector,
    metadata_only: bool,
    bookmarks: bool,
}

impl Spec {
    fn render(&self, obj: &Value) -> Value {
        if self.metadata_only {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
        } else {
            obj.clone()
        }
    }

    fn event(&self, kind: &str, obj: &Value) -> Bytes {
        line(&json!({"type": kind, "object": self.render(obj)}))
    }

    /// The event a change makes for this watch, if any. The selector is applied to both sides
    /// of a change, so an object that stops matching is seen as `DELETED`.
    fn event_for(&self, change: &Change) -> Option<Bytes> {
        if change.res != self.res || self.ns.as_ref().is_some_and(|ns| *ns != change.ns) {
            return None;
        }
        let now = self.selector.matches(&change.object);
        let before = change
            .old
            .as_ref()
            .is_some_and(|o| self.selector.matches(o));
        let kind = match change.kind {
            ChangeType::Added if now => ChangeType::Added,
            ChangeType::Modified if before && now => ChangeType::Modified,
            ChangeType::Modified if now => ChangeType::Added,
            ChangeType::Modified if before => ChangeType::Deleted,
            ChangeType::Deleted if before => ChangeType::Deleted,
            _ => return None,
        };
        Some(self.event(kind.as_str(), &change.object))
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let (kind, api_version) = if self.metadata_only {
            (
                "PartialObjectMetadata".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            )
        } else {
            (self.res.kind().to_owned(), self.res.api_version())
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            &json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": metadata}}),
        )
    }
}

fn line(event: &Value) -> Bytes {
    let mut text = event.to_string();
    text.push('\n');
    Bytes::from(text)
}

fn expired(from: u64, oldest: u64) -> Bytes {
    let status = ApiError::expired(format!("too old resource version: {from} ({oldest})"));
    line(&json!({"type": "ERROR", "object": status.to_value()}))
}

fn forbidden(field: &str, message: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {message}"),
        field: field.into(),
    }
}

/// Checks the watch parameters and starts the stream; errors here are ordinary HTTP answers.
///
/// From no resourceVersion (or `0`) the stream starts with a synthetic `ADDED` for every
/// existing object; from a resourceVersion it replays the changes after it, or, if that version
/// was compacted away, sends one `ERROR` event carrying a 410 `Expired` Status and ends (HTTP
/// status 200, as the cacher answers). `allowWatchBookmarks` adds periodic `BOOKMARK`s, and
/// `sendInitialEvents` the bookmark annotated `k8s.io/initial-events-end` after the initial
/// events (streaming lists).
pub(crate) fn start(
    shared: &Arc<Shared>,
    res: Resource,
    ns: Option<String>,
    call: &Call<'_>,
) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    let selector = handlers::selector(res, call)?;
    let bookmarks = call.flag("allowWatchBookmarks");
    let send_initial = call.flag("sendInitialEvents");
    if send_initial {
        let mut causes = Vec::new();
        if call.param("resourceVersionMatch") != Some("NotOlderThan") {
            causes.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !bookmarks {
            causes.push(forbidden(
                "allowWatchBookmarks",
                "allowWatchBookmarks must be set to true when sendInitialEvents is true",
            ));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", causes));
        }
    }
    let timeout = match call.param("timeoutSeconds") {
        None | Some("") => DEFAULT_TIMEOUT,
        // Capped, so that a huge value cannot overflow the deadline.
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t:?}")))?
                .min(MAX_TIMEOUT_SECS),
        ),
    };
    let from = match call.param("resourceVersion") {
        None | Some("" | "0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
        ),
    };
    let spec = Spec {
        res,
        ns,
        selector,
        metadata_only: call.metadata_only(),
        bookmarks,
    };

    // Subscribe before reading the store, so no write falls between the two.
    let changes = shared.changes.subscribe();
    let (initial, last) = {
        let store = lock(&shared.store);
        match from {
            Some(rv) if !send_initial => match store.changes_since(rv) {
                Ok(_) => (Vec::new(), rv),
                Err(oldest) => (vec![expired(rv, oldest)], u64::MAX),
            },
            _ => {
                let mut events: Vec<Bytes> = store
                    .list(spec.res, spec.ns.as_deref())
                    .into_iter()
                    .filter(|o| spec.selector.matches(o))
                    .map(|o| spec.event(ChangeType::Added.as_str(), o))
                    .collect();
                if send_initial {
                    events.push(spec.bookmark(store.resource_version(), true));
                }
                (events, store.resource_version())
            }
        }
    };
    let (tx, rx) = mpsc::channel(64);
    let interval = shared.bookmark_interval;
    tokio::spawn(run(
        shared.clone(),
        spec,
        initial,
        last,
        timeout,
        interval,
        changes,
        tx,
    ));
    Ok(rx)
}

/// Feeds one watch until it times out, the client goes away, or the server stops. `last` is
/// the resourceVersion the client has seen everything up to (`u64::MAX`: the stream ends after
/// the initial events).
#[allow(clippy::too_many_arguments)]
async fn run(
    shared: Arc<Shared>,
    spec: Spec,
    initial: Vec<Bytes>,
    mut last: u64,
    timeout: Duration,
    bookmark_interval: Duration,
    mut changes: watch::Receiver<u64>,
    tx: mpsc::Sender<Bytes>,
) {
    for event in initial {
        if tx.send(event).await.is_err() {
            return;
        }
    }
    if last == u64::MAX {
        return;
    }
    let deadline = Instant::now() + timeout;
    let mut next_bookmark = Instant::now() + bookmark_interval;
    let mut held = shared.watches_held.subscribe();
    loop {
        while *held.borrow_and_update() {
            tokio::select! {
                changed = held.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => return,
                () = tx.closed() => return,
            }
        }
        let batch = {
            let store = lock(&shared.store);
            match store.changes_since(last) {
                Ok(changes) => {
                    let events: Vec<Bytes> =
                        changes.iter().filter_map(|c| spec.event_for(c)).collect();
                    last = store.resource_version();
                    Ok(events)
                }
                // Compacted under a watch that had fallen behind, as etcd cancels such watchers.
                Err(oldest) => Err(expired(last, oldest)),
            }
        };
        match batch {
            Ok(events) => {
                for event in events {
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
            }
            Err(event) => {
                let _ = tx.send(event).await;
                return;
            }
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(deadline) => return,
            () = tokio::time::sleep_until(next_bookmark), if spec.bookmarks => {
                if tx.send(spec.bookmark(last, false)).await.is_err() {
                    return;
                }
                next_bookmark = Instant::now() + bookmark_interval;
            }
            () = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(selector: &str) -> Spec {
        Spec {
            res: Resource::Pods,
            ns: Some("ns".into()),
            selector: Selector::parse(Some(selector), None).unwrap(),
            metadata_only: false,
            bookmarks: false,
        }
    }

    fn change(kind: ChangeType, old_app: Option<&str>, new_app: &str) -> Change {
        let pod = |app: &str| json!({"metadata": {"name": "p", "labels": {"app": app}}});
        Change {
            rv: 2,
            res: Resource::Pods,
            ns: "ns".into(),
            kind,
            object: pod(new_app),
            old: old_app.map(pod),
        }
    }

    fn kind_of(event: Option<Bytes>) -> Option<String> {
        let v: Value = serde_json::from_slice(&event?).unwrap();
        Some(v["type"].as_str().unwrap().to_owned())
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        let s = spec("app=web");
        assert_eq!(
            kind_of(s.event_for(&change(ChangeType::Added, None, "web"))).as_deref(),
            Some("ADDED")
        );
        assert_eq!(
            kind_of(s.event_for(&change(ChangeType::Added, None, "db"))),
            None
        );
        assert_eq!(
            kind_of(s.event_for(&change(ChangeType::Modified, Some("web"), "web"))).as_deref(),
            Some("MODIFIED")
        );
        assert_eq!(
            kind_of(s.event_for(&change(ChangeType::Modified, Some("db"), "web"))).as_deref(),
            Some("ADDED")
        );
        assert_eq!(
            kind_of(s.event_for(&change(ChangeType::Modified, Some("web"), "db"))).as_deref(),
            Some("DELETED")
        );
        assert_eq!(
            kind_of(s.event_for(&change(ChangeType::Modified, Some("db"), "db"))),
            None
        );
        assert_eq!(
            kind_of(s.event_for(&change(ChangeType::Deleted, Some("web"), "web"))).as_deref(),
            Some("DELETED")
        );
        let mut other_ns = change(ChangeType::Added, None, "web");
        other_ns.ns = "other".into();
        assert_eq!(kind_of(s.event_for(&other_ns)), None);
    }

    #[test]
    fn cluster_scoped_watches_see_selector_transitions_too() {
        let s = Spec {
            res: Resource::Namespaces,
            ns: None,
            selector: Selector::parse(Some("plumb.example/dynamic=true"), None).unwrap(),
            metadata_only: false,
            bookmarks: true,
        };
        let ns = |dynamic: &str| {
            let labels = json!({"plumb.example/dynamic": dynamic});
            json!({"metadata": {"name": "team-a", "labels": labels}})
        };
        let change = |kind, old: Option<&str>, new: &str| Change {
            rv: 2,
            res: Resource::Namespaces,
            ns: String::new(),
            kind,
            object: ns(new),
            old: old.map(ns),
        };
        let seen = |c: Change| kind_of(s.event_for(&c));
        assert_eq!(
            seen(change(ChangeType::Modified, Some("false"), "true")).as_deref(),
            Some("ADDED")
        );
        assert_eq!(
            seen(change(ChangeType::Modified, Some("true"), "false")).as_deref(),
            Some("DELETED")
        );
        assert_eq!(seen(change(ChangeType::Added, None, "false")), None);
        // Another resource's change in the same (empty) namespace is not this watch's.
        let mut pod = change(ChangeType::Added, None, "true");
        pod.res = Resource::Pods;
        assert_eq!(seen(pod), None);
        let bookmark: Value = serde_json::from_slice(&s.bookmark(7, false)).unwrap();
        assert_eq!(
            (
                &bookmark["object"]["kind"],
                &bookmark["object"]["apiVersion"]
            ),
            (&json!("Namespace"), &json!("v1"))
        );
    }

    #[test]
    fn expired_is_an_error_event_with_a_410_status() {
        let v: Value = serde_json::from_slice(&expired(3, 7)).unwrap();
        assert_eq!(v["type"], "ERROR");
        assert_eq!(v["object"]["code"], 410);
        assert_eq!(v["object"]["reason"], "Expired");
        assert_eq!(v["object"]["message"], "too old resource version: 3 (7)");
    }
}
