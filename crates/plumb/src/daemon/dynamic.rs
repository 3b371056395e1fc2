//! Dynamic attachments (`plumb daemon --dynamic`): in the namespaces `--dynamic-namespaces`
//! selects, a running pod's attachments follow its `k8s.v1.cni.cncf.io/networks` annotation
//! (the multi-net spec leaves how they change to implementations, its open question 2;
//! docs/dynamic-attachments.md). A thread of its own takes what the watch caches saw change,
//! finds each pod's sandbox among plumb's records and has the engine change it
//! (`Plumb::cmd_change`, under the container's lock). Nothing is done before the pods and the
//! namespaces are in the caches; then every pod is looked at once, so that changes made while
//! the daemon was down are made. A change that fails is tried again with backoff and said on
//! the pod once.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cni::error::{CniError, ErrorCode};
use plumb_cluster::caches::Caches;
use plumb_cluster::caches::objects::CachedPod;
use plumb_engine::commands::{Caller, Changed, Plumb};
use plumb_engine::record::RecordStore;
use plumb_engine::routes::NetlinkRoutes;

use super::{Shared, say};

/// The waits before a failed change is tried again: doubled from the first to the last.
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// How long the thread waits for a change before it looks again (for the caches to come in).
const LOOK_EVERY: Duration = Duration::from_secs(30);

/// A pod's namespace and name.
type PodKey = (String, String);

/// Starts the thread (`plumb-dynamic`) that changes the pods' attachments.
pub(super) fn start(shared: Arc<Shared>, state_dir: PathBuf) -> Result<(), CniError> {
    let Some(caches) = shared.connect.caches() else {
        return Err(CniError::new(
            ErrorCode::Internal,
            "--dynamic: the daemon's watch caches did not start",
        ));
    };
    let dynamic = Dynamic {
        shared,
        caches,
        records: RecordStore::new(state_dir),
        failing: BTreeMap::new(),
        said: BTreeMap::new(),
    };
    std::thread::Builder::new()
        .name("plumb-dynamic".into())
        .spawn(move || dynamic.run())
        .map(drop)
        .map_err(|e| CniError::new(ErrorCode::Internal, format!("starting --dynamic: {e}")))
}

struct Dynamic {
    shared: Arc<Shared>,
    caches: Arc<Caches>,
    records: RecordStore,
    /// The changes that failed, by container ID.
    failing: BTreeMap<String, Failing>,
    /// What was said last of a sandbox not changed, by container ID: said again only when
    /// it differs.
    said: BTreeMap<String, String>,
}

/// A change that failed: tried again at `due`, unless the annotation changes first.
struct Failing {
    pod: PodKey,
    /// The annotation it failed for.
    selection: String,
    attempts: u32,
    due: Instant,
    /// The event said on the pod for it (`reason: message`).
    reported: Option<String>,
}

impl Dynamic {
    fn run(mut self) {
        let mut all = true;
        let mut changed = BTreeSet::new();
        let mut said_waiting = false;
        loop {
            let now = Instant::now();
            let wait = (self.failing.values())
                .map(|f| f.due.saturating_duration_since(now))
                .min()
                .unwrap_or(LOOK_EVERY)
                .min(LOOK_EVERY);
            let c = self.caches.wait_for_changes(wait);
            all |= c.all;
            changed.extend(c.pods);
            if self.shared.turns.is_closed() {
                return;
            }
            if !self.caches.dynamic_synced() {
                if !std::mem::replace(&mut said_waiting, true) {
                    say(format_args!(
                        "dynamic: waiting for the pods and the opted-in namespaces to be in \
                         the caches"
                    ));
                }
                continue;
            }
            said_waiting = false;
            let now = Instant::now();
            let due = self.failing.values().any(|f| f.due <= now);
            if !all && changed.is_empty() && !due {
                continue;
            }
            let sandboxes = match self.sandboxes() {
                Ok(s) => s,
                Err(e) => {
                    say(format_args!(
                        "dynamic: {e}; looking again in {} s",
                        LOOK_EVERY.as_secs()
                    ));
                    continue;
                }
            };
            let now = Instant::now();
            let mut look: BTreeSet<PodKey> = (self.failing.values())
                .filter(|f| f.due <= now)
                .map(|f| f.pod.clone())
                .collect();
            if std::mem::take(&mut all) {
                look.extend(sandboxes.keys().cloned());
            }
            let changed = std::mem::take(&mut changed);
            look.extend(changed.iter().cloned());
            for key in look {
                if self.shared.turns.is_closed() {
                    return;
                }
                let found = sandboxes.get(&key).map(Vec::as_slice).unwrap_or_default();
                self.look_at(&key, found, changed.contains(&key));
            }
            self.failing
                .retain(|id, _| sandboxes.values().flatten().any(|(i, _)| i == id));
            self.said
                .retain(|id, _| sandboxes.values().flatten().any(|(i, _)| i == id));
        }
    }

    /// The sandboxes plumb recorded, as (container ID, pod UID) by pod. Records that cannot be
    /// read are left to DEL, which says why.
    fn sandboxes(&self) -> Result<BTreeMap<PodKey, Vec<(String, String)>>, CniError> {
        let mut by_pod: BTreeMap<PodKey, Vec<(String, String)>> = BTreeMap::new();
        for id in self.records.list()? {
            let Ok(Some(r)) = self.records.load(&id) else {
                continue;
            };
            if r.standalone || r.pod_name.is_empty() {
                continue;
            }
            (by_pod.entry((r.pod_namespace, r.pod_name)).or_default()).push((id, r.pod_uid));
        }
        Ok(by_pod)
    }

    /// The pod `key`, whose sandboxes on this node are `found`: changed when its namespace is
    /// opted in. Why it is not is said only for a pod whose annotation just `changed`.
    fn look_at(&mut self, key: &PodKey, found: &[(String, String)], changed: bool) {
        let (namespace, name) = key;
        // Gone from the cache: deleted, and its sandbox's DEL undoes the rest.
        let Some(pod) = self.caches.cached_pod(namespace, name) else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        let skipped = |why: &str| {
            if changed {
                say(format_args!(
                    "dynamic: pod {namespace}/{name}: its networks annotation changed, but {why}: \
                     nothing done"
                ));
            }
        };
        if self.caches.opted_in(namespace) != Some(true) {
            return skipped(&format!(
                "namespace {namespace} is not opted in to dynamic attachments \
                 (--dynamic-namespaces)"
            ));
        }
        if pod.host_network {
            return skipped("it runs in the host's network namespace");
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let ids: Vec<&String> = (found.iter())
            .filter(|(_, u)| u == uid)
            .map(|(id, _)| id)
            .collect();
        if ids.is_empty() {
            return skipped("plumb attached no sandbox of it on this node");
        }
        for id in ids {
            self.change(key, id, &pod);
        }
    }

    /// Changes sandbox `id` of `pod` to follow its annotation, unless a failed change of the
    /// same annotation is not due yet.
    fn change(&mut self, key: &PodKey, id: &str, pod: &CachedPod) {
        let pod = pod.to_pod();
        let selection = (pod.annotations.get(netattach::NETWORKS_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let before = self.failing.get(id).filter(|f| f.selection == selection);
        if before.is_some_and(|f| f.due > Instant::now()) {
            return;
        }
        let reported = before.and_then(|f| f.reported.clone());
        let attempts = before.map_or(0, |f| f.attempts);
        let said_now: RefCell<Option<(&'static str, String)>> = RefCell::new(None);
        let report = |reason: &'static str, e: &CniError| {
            let said = format!("{reason}: {e}");
            let new = reported.as_ref() != Some(&said);
            *said_now.borrow_mut() = Some((reason, said));
            new
        };
        let plugin = Plumb {
            routes: &NetlinkRoutes,
            connect: &self.shared.connect,
            caller: Caller::Forwarded {
                pid: None,
                connection: None,
                abandoned: Arc::new(AtomicBool::new(false)),
            },
        };
        let done = {
            let _counted = Counted::new(&self.shared.running);
            plugin.cmd_change(self.records.dir(), id, &pod, &report)
        };
        let who = format!("pod {}/{} (container {id})", pod.namespace, pod.name);
        match done {
            Ok(Changed::Nothing) => {
                self.failing.remove(id);
            }
            Ok(Changed::Skipped(why)) => {
                self.failing.remove(id);
                if self.said.get(id) != Some(&why) {
                    say(format_args!("dynamic: {who}: not changed: {why}"));
                    self.said.insert(id.to_string(), why);
                }
            }
            Ok(Changed::Applied { detached, attached }) => {
                self.failing.remove(id);
                self.shared.metrics.dynamic_change("applied");
                say(format_args!(
                    "dynamic: {who}: detached [{}], attached [{}]",
                    detached.join(", "),
                    attached.join(", ")
                ));
            }
            Err(e) => {
                let (reason, said) = said_now.into_inner().unzip();
                let result = match reason {
                    Some("ChangeRefused") => "refused",
                    _ => "failed",
                };
                self.shared.metrics.dynamic_change(result);
                let wait = RETRY_FIRST
                    .saturating_mul(1 << attempts.min(16))
                    .min(RETRY_MAX);
                say(format_args!(
                    "dynamic: {who}: change {result}: {}; trying again in {} s",
                    plumb_engine::log::one_line(&e.to_string()),
                    wait.as_secs()
                ));
                self.failing.insert(
                    id.to_string(),
                    Failing {
                        pod: key.clone(),
                        selection,
                        attempts: attempts + 1,
                        due: Instant::now() + wait,
                        reported: said.or(reported),
                    },
                );
            }
        }
    }
}

/// A change counted among the daemon's calls while this lives, so that a stopping daemon waits
/// for it.
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(running: &'a AtomicUsize) -> Counted<'a> {
        running.fetch_add(1, Ordering::SeqCst);
        Counted(running)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why `selector` is not a label selector the API server takes (`key`, `!key`, `key=value`,
/// `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, joined by commas); checked at
/// start, so that a mistyped one stops the daemon rather than failing its watch for ever.
pub(super) fn selector_problem(selector: &str) -> Option<String> {
    let mut rest = selector.trim();
    if rest.is_empty() {
        return Some("it is empty: it would select every namespace".into());
    }
    while !rest.is_empty() {
        // One requirement: up to a comma outside parentheses.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let requirement = rest[..end].trim();
        rest = rest.get(end + 1..).unwrap_or("").trim_start();
        if let Some(why) = requirement_problem(requirement) {
            return Some(format!("{requirement:?}: {why}"));
        }
    }
    None
}

fn requirement_problem(r: &str) -> Option<String> {
    if let Some(key) = r.strip_prefix('!') {
        return key_problem(key.trim());
    }
    for op in ["==", "!=", "="] {
        if let Some((key, value)) = r.split_once(op) {
            return key_problem(key.trim()).or_else(|| value_problem(value.trim()));
        }
    }
    for op in [" notin ", " in "] {
        if let Some((key, values)) = r.split_once(op) {
            let values = values.trim();
            let Some(inner) = values.strip_prefix('(').and_then(|v| v.strip_suffix(')')) else {
                return Some("the values of `in` and `notin` go in parentheses".into());
            };
            return key_problem(key.trim())
                .or_else(|| inner.split(',').find_map(|v| value_problem(v.trim())));
        }
    }
    key_problem(r)
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of up to 63 characters.
fn key_problem(key: &str) -> Option<String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if let Some(why) = netattach::names::dns1123_subdomain_problem(prefix) {
                return Some(format!("the key's prefix {prefix:?} {why}"));
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Some("a label key is missing".into());
    }
    value_problem(name).map(|why| format!("the key {key:?}: {why}"))
}

/// A label value: up to 63 of `A-Za-z0-9-_.`, beginning and ending with a letter or digit.
fn value_problem(value: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if value.len() > 63 {
        return Some(format!("{value:?} is longer than 63 characters"));
    }
    let ends = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    if !value.chars().all(ok) || !ends(value.chars().next()) || !ends(value.chars().last()) {
        return Some(format!(
            "{value:?} is not a label value (letters, digits, '-', '_', '.'; a letter or digit \
             at each end)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::selector_problem;

    #[test]
    fn label_selectors_are_checked_as_the_api_server_would() {
        for good in [
            "plumb.io/dynamic=true",
            "dynamic",
            "!frozen",
            "team in (a, b),plumb.io/dynamic==yes",
            "env notin (prod)",
            "a!=b",
        ] {
            assert_eq!(selector_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "plumb.io/dynamic=tr ue",
            "team in a,b",
            "=x",
            "Bad_Prefix/x=y",
            "a=-x",
        ] {
            assert!(selector_problem(bad).is_some(), "{bad:?}");
        }
    }
}
