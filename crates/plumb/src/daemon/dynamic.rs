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
use std::time::{Duration, Instant};

use cni::error::{CniError, ErrorCode};
use plumb_cluster::caches::Caches;
use plumb_cluster::caches::objects::CachedPod;
use plumb_engine::commands::{Caller, Changed, Plumb};
use plumb_engine::record::RecordStore;
use plumb_engine::routes::NetlinkRoutes;

use super::serve::Running;
use super::{Shared, say};

/// The waits before a failed change is tried again: doubled from the first to the last.
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// How long the thread waits for a change before it looks again (for the caches to come in).
const LOOK_EVERY: Duration = Duration::from_secs(30);

/// How often every pod plumb attached is looked at, changed or not: an edit made while its
/// sandbox's ADD had read the pod but not recorded it yet is handed on before there is a
/// sandbox to change, and found this way.
const LOOK_AT_ALL_EVERY: Duration = Duration::from_secs(120);

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
#[derive(Clone)]
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
        let mut all_last = Instant::now();
        let mut changed = BTreeSet::new();
        let mut said_waiting = false;
        loop {
            let now = Instant::now();
            // A failed change due, only once the caches are in (until then it cannot be made).
            let wait = match said_waiting {
                true => LOOK_EVERY,
                false => (self.failing.values())
                    .map(|f| f.due.saturating_duration_since(now))
                    .min()
                    .unwrap_or(LOOK_EVERY)
                    .min(LOOK_EVERY),
            };
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
            if now.duration_since(all_last) >= LOOK_AT_ALL_EVERY {
                all = true;
            }
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
                    for f in self.failing.values_mut() {
                        f.due = f.due.max(now + LOOK_EVERY);
                    }
                    continue;
                }
            };
            let now = Instant::now();
            let mut look: BTreeSet<PodKey> = (self.failing.values())
                .filter(|f| f.due <= now)
                .map(|f| f.pod.clone())
                .collect();
            if std::mem::take(&mut all) {
                all_last = now;
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
        // Its failed changes are kept only when it is changed now (`change` puts them back):
        // one left here for a pod not to be changed would be due again at once, for ever.
        let ids: Vec<String> = (self.failing.iter())
            .filter(|(_, f)| f.pod == *key)
            .map(|(id, _)| id.clone())
            .collect();
        let mut failed: BTreeMap<String, Failing> = (ids.into_iter())
            .filter_map(|id| Some((id.clone(), self.failing.remove(&id)?)))
            .collect();
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
        // The UID the runtime gave the sandbox: a static pod's, not its mirror's.
        let uid = pod.sandbox_uid().unwrap_or_default();
        let ids: Vec<&String> = (found.iter())
            .filter(|(_, u)| u == uid)
            .map(|(id, _)| id)
            .collect();
        if ids.is_empty() {
            return skipped("plumb attached no sandbox of it on this node");
        }
        for id in ids {
            let before = failed.remove(id);
            self.change(key, id, &pod, before);
        }
    }

    /// Changes sandbox `id` of `pod` to follow its annotation, unless a failed change of the
    /// same annotation (`before`) is not due yet.
    fn change(&mut self, key: &PodKey, id: &str, pod: &CachedPod, before: Option<Failing>) {
        let pod = pod.to_pod();
        let selection = pod.selection().to_string();
        let before = before.filter(|f| f.selection == selection);
        if let Some(f) = before.as_ref().filter(|f| f.due > Instant::now()) {
            self.failing.insert(id.to_string(), f.clone());
            return;
        }
        let before = before.as_ref();
        let reported = before.and_then(|f| f.reported.clone());
        let attempts = before.map_or(0, |f| f.attempts);
        // What was said, and of which annotation: the API server's, which the cache may not
        // have yet.
        let said_now: RefCell<Option<(&'static str, String, String)>> = RefCell::new(None);
        let report = |acted_on: &str, reason: &'static str, e: &CniError| {
            let said = format!("{reason}: {e}");
            let new = acted_on != selection || reported.as_ref() != Some(&said);
            *said_now.borrow_mut() = Some((reason, said, acted_on.to_string()));
            new
        };
        let plugin = Plumb {
            routes: &NetlinkRoutes,
            connect: &self.shared.connect,
            caller: Caller::DaemonChange,
        };
        let done = {
            let _counted = Running::start(Arc::clone(&self.shared));
            plugin.cmd_change(self.records.dir(), id, &pod, &report)
        };
        let who = format!("pod {}/{} (container {id})", pod.namespace, pod.name);
        match done {
            Ok(Changed::Nothing) => {
                self.failing.remove(id);
                self.said.remove(id);
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
                self.said.remove(id);
                self.shared.metrics.dynamic_change("applied");
                say(format_args!(
                    "dynamic: {who}: detached [{}], attached [{}]",
                    detached.join(", "),
                    attached.join(", ")
                ));
            }
            Err(e) => {
                let (reason, said, selection) = match said_now.into_inner() {
                    Some((reason, said, acted_on)) => (Some(reason), Some(said), acted_on),
                    None => (None, None, selection),
                };
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

/// Why `selector` is not a label selector the API server takes (`key`, `!key`, `key=value`,
/// `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key>1`, `key<1`, joined by
/// commas); checked at start, so that a mistyped one stops the daemon rather than failing its
/// watch for ever.
pub(super) fn selector_problem(selector: &str) -> Option<String> {
    if selector.trim_matches(go_space).is_empty() {
        return Some("it is empty: it would select every namespace".into());
    }
    let mut rest = selector;
    loop {
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
            .map(|(i, _)| i);
        let requirement = rest[..end.unwrap_or(rest.len())].trim_matches(go_space);
        if let Some(why) = requirement_problem(requirement) {
            return Some(format!("{requirement:?}: {why}"));
        }
        match end {
            Some(i) => rest = &rest[i + 1..],
            None => return None,
        }
    }
}

/// The white space the API server's selector lexer skips.
fn go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn requirement_problem(r: &str) -> Option<String> {
    if r.is_empty() {
        return Some("an empty requirement (a comma too many)".into());
    }
    if let Some(key) = r.strip_prefix('!') {
        return key_problem(key.trim_matches(go_space));
    }
    let is_key = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
    let key_end = r.find(|c: char| !is_key(c)).unwrap_or(r.len());
    let (key, rest) = (&r[..key_end], r[key_end..].trim_start_matches(go_space));
    if let Some(why) = key_problem(key) {
        return Some(why);
    }
    if key == "in" || key == "notin" {
        return Some(format!("{key:?} is an operator, not a key"));
    }
    if rest.is_empty() {
        return None;
    }
    for op in ["==", "!=", "="] {
        if let Some(value) = rest.strip_prefix(op) {
            return value_problem(value.trim_matches(go_space));
        }
    }
    for op in [">", "<"] {
        if let Some(value) = rest.strip_prefix(op) {
            let value = value.trim_matches(go_space);
            return value_problem(value).or_else(|| {
                (value.parse::<i64>().is_err())
                    .then(|| format!("{op} takes a whole number, not {value:?}"))
            });
        }
    }
    for op in ["notin", "in"] {
        let Some(values) = rest.strip_prefix(op) else {
            continue;
        };
        let values = values.trim_start_matches(go_space);
        let Some(inner) = values.strip_prefix('(').and_then(|v| v.strip_suffix(')')) else {
            return Some(format!("the values of `{op}` go in parentheses"));
        };
        return inner
            .split(',')
            .find_map(|v| value_problem(v.trim_matches(go_space)));
    }
    Some(format!(
        "{rest:?} is not an operator (=, ==, !=, in, notin, <, >)"
    ))
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
            "team in(a,b)",
            "tier>1, tier<5",
            "a=",
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
            "plumb.io/dynamic=true,",
            "a,,b",
            "a>b",
            "a ~ b",
            "tier>-1",
            "in",
            "notin=x",
            "a=\u{a0}b",
        ] {
            assert!(selector_problem(bad).is_some(), "{bad:?}");
        }
    }
}
