//! The daemon's watch caches: kube-rs reflectors of the pods bound to its node and of the
//! NetworkAttachmentDefinitions, so that an ADD finds its pod (multi-net spec §4.1) and the NADs
//! it selects (§4.1.2.1.4) without asking the API server. [`Caches`] is what calls read, with
//! hits and misses counted; `watch` keeps the stores current on a thread of its own; `objects`
//! is what a cached object keeps. A cache not synced yet answers nothing: calls then GET.
//! With dynamic attachments the namespaces opted in are watched too, and what changed of the
//! pods' networks annotations is handed to the daemon's changes ([`Caches::wait_for_changes`]).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;

use kube::runtime::reflector::{ObjectRef, Store, store};
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use serde::Serialize;

use plumb_engine::plan::Pod;

use crate::Say;

pub mod objects;
mod watch;

use objects::{CachedNad, CachedPod};

/// Where the caches' API client comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A kubeconfig: the daemon's `--kubeconfig`, or the one the first call's configuration
    /// names. Read again, and the watches started again, when a file of it changes (a rotated
    /// token).
    Kubeconfig(PathBuf),
    /// The pod's service account: the API server at `server` (from `KUBERNETES_SERVICE_HOST`),
    /// the `ca.crt` and `token` in the directory `service_account` (the token kube-rs reads
    /// again as the kubelet rotates it).
    InCluster {
        server: String,
        service_account: PathBuf,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Kubeconfig(path) => write!(f, "kubeconfig {}", path.display()),
            Source::InCluster { server, .. } => {
                write!(f, "the pod's service account (in-cluster, {server})")
            }
        }
    }
}

/// What the caches watch.
#[derive(Clone, Debug)]
pub struct Scope {
    /// The node whose pods are kept (field selector `spec.nodeName`); `None`: no pods are kept
    /// (the daemon could not tell its node's name).
    pub node: Option<String>,
    /// The namespaces whose NADs are kept; empty: all.
    pub nad_namespaces: Vec<String>,
    /// The label selector of the namespaces whose pods' attachments follow their annotation
    /// (dynamic attachments); `None`: no namespace is watched, no change is handed on.
    pub dynamic_namespaces: Option<String>,
}

/// What changed that the daemon's dynamic attachments look at.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Every pod is to be looked at: a store was (re)listed, or a namespace's labels changed.
    pub all: bool,
    /// The pods (`namespace`, `name`) whose networks annotation changed.
    pub pods: BTreeSet<(String, String)>,
}

/// The pods and NADs, as the watches last saw them.
pub struct Caches {
    source: Source,
    scope: Scope,
    pods: Kept<CachedPod>,
    /// One per namespace watched, or one for all (`None`).
    nads: Vec<(Option<String>, Kept<CachedNad>)>,
    /// Whether the Node named by `scope.node` exists: `None` until the API server said.
    node_found: Mutex<Option<bool>>,
    /// The namespaces `scope.dynamic_namespaces` selects, when it is given.
    namespaces: Option<Kept<Namespace>>,
    /// What changed since the daemon last took it, and its wake-up.
    changes: (Mutex<Changes>, Condvar),
}

/// One store and what is counted of it.
struct Kept<K: kube::runtime::reflector::Lookup<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    /// Set once the first list is in the store; it stays set while a broken watch resumes (the
    /// store is then behind until it has, as an informer's is), unless that takes long.
    synced: AtomicBool,
    events: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl<K: kube::runtime::reflector::Lookup<DynamicType = ()> + Clone + 'static> Kept<K> {
    fn new(store: Store<K>) -> Kept<K> {
        Kept {
            store,
            synced: AtomicBool::new(false),
            events: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The object `namespace/name`, when synced.
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        if !self.synced.load(Ordering::Acquire) {
            return None;
        }
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    fn count(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn report(&self) -> KeptReport {
        KeptReport {
            synced: self.synced.load(Ordering::Acquire),
            objects: self.store.len(),
            events: self.events.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}

/// The state of the caches, as the daemon shows it (`GET /caches` on its socket) and the
/// metrics will.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Report {
    pub source: String,
    pub node: Option<String>,
    /// Whether the API server has that Node: `None` until it answered.
    pub node_found: Option<bool>,
    pub pods: KeptReport,
    /// The NADs' stores added up; `nad_namespaces` empty: all namespaces.
    pub nads: KeptReport,
    pub nad_namespaces: Vec<String>,
    /// The namespaces opted in to dynamic attachments, when they are watched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_namespaces: Option<KeptReport>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct KeptReport {
    /// Calls are served from it: its first list is in, and its watch has not failed for long.
    pub synced: bool,
    pub objects: usize,
    /// Watch events applied (added, modified, deleted, listed).
    pub events: u64,
    /// Lookups the cache answered, and those it could not (a GET followed).
    pub hits: u64,
    pub misses: u64,
}

impl Caches {
    /// Caches of `scope` from `source`, kept current from now on by a thread of their own
    /// (`plumb-caches`), which says on `say` what it does and what fails.
    pub fn start(source: Source, scope: Scope, say: Say) -> std::io::Result<Arc<Caches>> {
        let (pods, pods_writer) = store::<CachedPod>();
        let namespaces: Vec<Option<String>> = if scope.nad_namespaces.is_empty() {
            vec![None]
        } else {
            scope.nad_namespaces.iter().cloned().map(Some).collect()
        };
        let mut nads = Vec::new();
        let mut nad_writers = Vec::new();
        for ns in namespaces {
            let (reader, writer) = store::<CachedNad>();
            nads.push((ns.clone(), Kept::new(reader)));
            nad_writers.push((ns, writer));
        }
        let (namespaces, namespaces_writer) = match scope.dynamic_namespaces {
            Some(_) => {
                let (reader, writer) = store::<Namespace>();
                (Some(Kept::new(reader)), Some(writer))
            }
            None => (None, None),
        };
        let caches = Arc::new(Caches {
            source,
            scope,
            pods: Kept::new(pods),
            nads,
            node_found: Mutex::new(None),
            namespaces,
            changes: Default::default(),
        });
        let watched = Arc::clone(&caches);
        let writers = watch::Writers {
            pods: pods_writer,
            nads: nad_writers,
            namespaces: namespaces_writer,
        };
        std::thread::Builder::new()
            .name("plumb-caches".into())
            .spawn(move || watch::run(watched, writers, say))?;
        Ok(caches)
    }

    /// The pod `namespace/name` as the cache holds it, when synced (for dynamic attachments:
    /// not counted as a call's lookup).
    pub fn cached_pod(&self, namespace: &str, name: &str) -> Option<Arc<CachedPod>> {
        self.pods.get(namespace, name)
    }

    /// Whether `namespace` is opted in to dynamic attachments; `None` while the namespaces
    /// are not known (not synced, or not watched).
    pub fn opted_in(&self, namespace: &str) -> Option<bool> {
        let kept = self.namespaces.as_ref()?;
        if !kept.synced.load(Ordering::Acquire) {
            return None;
        }
        Some(kept.store.get(&ObjectRef::new(namespace)).is_some())
    }

    /// Whether both the pods and the opted-in namespaces are in: before that, a pod missing
    /// from the cache means nothing.
    pub fn dynamic_synced(&self) -> bool {
        self.pods.synced.load(Ordering::Acquire)
            && (self.namespaces.as_ref()).is_some_and(|k| k.synced.load(Ordering::Acquire))
    }

    /// What changed since the last call, waiting up to `timeout` for something to.
    pub fn wait_for_changes(&self, timeout: Duration) -> Changes {
        let (lock, woken) = &self.changes;
        let mut changes = lock.lock().unwrap_or_else(|p| p.into_inner());
        if !changes.all && changes.pods.is_empty() {
            changes = woken
                .wait_timeout(changes, timeout)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        std::mem::take(&mut *changes)
    }

    /// Hands a change on to [`Caches::wait_for_changes`], when changes are watched for.
    fn note(&self, change: impl FnOnce(&mut Changes)) {
        if self.scope.dynamic_namespaces.is_none() {
            return;
        }
        let (lock, woken) = &self.changes;
        change(&mut lock.lock().unwrap_or_else(|p| p.into_inner()));
        woken.notify_all();
    }

    /// The pod `namespace/name` of the sandbox whose runtime gave `uid`, when the cache holds
    /// it: not another pod of that name (recreated: its UID differs; a static pod's mirror
    /// names the UID of the static pod it mirrors). Without a UID to check, not a pod being
    /// deleted (a pod of that name may be made again: the API is asked).
    pub fn pod(&self, namespace: &str, name: &str, uid: Option<&str>) -> Option<Pod> {
        let found = self.pods.get(namespace, name).filter(|p| match uid {
            Some(uid) => p.sandbox_uid() == Some(uid),
            None => p.metadata.deletion_timestamp.is_none(),
        });
        let found = found.map(|p| p.to_pod());
        self.pods.count(found.is_some());
        found
    }

    /// The NAD `r`, when a cache that watches its namespace holds it.
    pub fn nad(&self, r: &NetworkRef) -> Option<NetworkAttachmentDefinition> {
        let kept = self
            .nads
            .iter()
            .find(|(ns, _)| ns.as_deref().is_none_or(|ns| ns == r.namespace))
            .map(|(_, kept)| kept);
        let found = kept.and_then(|k| k.get(&r.namespace, &r.name)?.to_nad());
        // Counted where the NAD could have been: a namespace not watched is no miss of a cache.
        if let Some(k) = kept {
            k.count(found.is_some());
        }
        found
    }

    pub fn report(&self) -> Report {
        let mut nads = KeptReport {
            synced: true,
            ..KeptReport::default()
        };
        for (_, k) in &self.nads {
            let r = k.report();
            nads.synced &= r.synced;
            nads.objects += r.objects;
            nads.events += r.events;
            nads.hits += r.hits;
            nads.misses += r.misses;
        }
        Report {
            source: self.source.to_string(),
            node: self.scope.node.clone(),
            node_found: *self.node_found.lock().unwrap_or_else(|p| p.into_inner()),
            pods: self.pods.report(),
            nads,
            nad_namespaces: self.scope.nad_namespaces.clone(),
            dynamic_namespaces: self.namespaces.as_ref().map(Kept::report),
        }
    }
}
