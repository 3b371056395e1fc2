//! Keeping the caches current: on a thread of its own with its own current-thread runtime, a
//! kube-rs watcher per store (list, then watch from the list's resourceVersion, resumed from the
//! last one seen after a break, listed again when the API server no longer has it), each backed
//! off while the API server fails, feeding the reflector's writer. A store whose watch fails for
//! long, or whose client the API server refuses, serves nothing until it works again. The Node
//! is looked up beside the watches: a wrong name leaves the pod cache empty. With dynamic
//! attachments, the namespaces their label selector picks are watched too, and a pod whose
//! networks annotation changed is handed on (`Caches::note`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::Lookup};

use super::Source;
use super::objects::{CachedNad, CachedPod};
use super::{Caches, Kept};
use crate::Say;
use crate::kube::{Sources, in_cluster_watch_client, watch_client};

/// How often the kubeconfig's files are compared with what the client was made from.
const LOOK_EVERY: Duration = Duration::from_secs(30);

/// The waits before making a client again after it could not be made or was refused: doubled
/// from the first to the last.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// A watch that keeps failing is said again at most this often.
const SAY_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// A store whose watch has failed this long serves nothing (calls GET) until it works again:
/// what it holds may be far behind.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// How long one lookup of the Node may take, the waits between lookups while the API server
/// has not answered (doubled from the first to the last), and between lookups of a Node it
/// said it does not have (the kubelet may register it later).
const NODE_LOOKUP: Duration = Duration::from_secs(5);
const NODE_AGAIN_FIRST: Duration = Duration::from_secs(1);
const NODE_AGAIN_MAX: Duration = Duration::from_secs(30);
const NODE_SAY_AGAIN_AFTER: Duration = Duration::from_secs(600);

/// The stores' writers.
pub(super) struct Writers {
    pub(super) pods: Writer<CachedPod>,
    pub(super) nads: Vec<(Option<String>, Writer<CachedNad>)>,
    /// The opted-in namespaces', with dynamic attachments.
    pub(super) namespaces: Option<Writer<Namespace>>,
}

/// Runs the watches for ever (the daemon ends with its process).
pub(super) fn run(caches: Arc<Caches>, mut writers: Writers, say: Say) {
    let rt = match crate::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            say(format_args!(
                "caches: cannot start: {e}; every call reads its pod and NADs with GETs"
            ));
            return;
        }
    };
    rt.block_on(async {
        let mut retry = RETRY_FIRST;
        loop {
            let (client, sources) = match client_of(&caches.source).await {
                Ok(made) => made,
                Err(e) => {
                    unsync_all(&caches);
                    say(format_args!(
                        "caches: cannot make an API client from {}: {}; trying again in {} s, \
                         calls read their pod and NADs with GETs meanwhile",
                        caches.source,
                        plumb_engine::log::one_line(&e.msg),
                        retry.as_secs()
                    ));
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            };
            // Looked up once before the watches start: that request opens the connection, which
            // the lists and watches then share (HTTP/2) rather than opening one each at once.
            let mut lookup = NodeLookup::new(&caches, &client, &say);
            let node = match lookup.once().await {
                true => None,
                false => Some(tokio::spawn(lookup.until_found())),
            };
            let ended = watch(&caches, &client, &mut writers, &say, &|| {
                sources.as_ref().is_none_or(|s| s.unchanged())
            })
            .await;
            if let Some(node) = node {
                node.abort();
            }
            match ended {
                Ended::FilesChanged => {
                    retry = RETRY_FIRST;
                    say(format_args!(
                        "caches: a file of {} changed: watching again with a new client",
                        caches.source
                    ));
                }
                Ended::Refused(why) => {
                    unsync_all(&caches);
                    say(format_args!(
                        "caches: the API server refused the watches' credentials ({why}): \
                         making the client from {} again in {} s, calls read their pod and \
                         NADs with GETs meanwhile",
                        caches.source,
                        retry.as_secs()
                    ));
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    });
}

/// A client from `source`, and the files it was made from (none in-cluster).
async fn client_of(source: &Source) -> Result<(kube::Client, Option<Sources>), cni::CniError> {
    match source {
        Source::Kubeconfig(path) => {
            let (client, sources) = watch_client(path).await?;
            Ok((client, Some(sources)))
        }
        Source::InCluster {
            server,
            service_account,
        } => Ok((
            in_cluster_watch_client(server, service_account).await?,
            None,
        )),
    }
}

/// Why the watches with one client ended.
enum Ended {
    /// A file of the kubeconfig changed (a rotated token): a new client is made at once.
    FilesChanged,
    /// The API server refused the client (401): made again after a backoff (an exec plugin's
    /// credential revoked, a token file not rotated yet).
    Refused(String),
}

/// Every store serves nothing until its watch works again.
fn unsync_all(caches: &Caches) {
    caches.pods.synced.store(false, Ordering::Release);
    for (_, k) in &caches.nads {
        k.synced.store(false, Ordering::Release);
    }
    if let Some(k) = &caches.namespaces {
        k.synced.store(false, Ordering::Release);
    }
}

/// What a watch gave: an event for the pods' store, for the NADs' store at an index, or for
/// the opted-in namespaces'.
enum Got {
    Pod(Event<CachedPod>),
    Nad(usize, Event<CachedNad>),
    Namespace(Event<Namespace>),
}

/// Which watch failed.
#[derive(Clone, Copy)]
enum Which {
    Pods,
    Nads(usize),
    Namespaces,
}

type Failed = (Which, watcher::Error);

/// The HTTP status of a watcher's error, when the API server answered one.
fn status_of(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    }
}

/// A watch that fails: since when, and when it was said last.
#[derive(Clone, Copy)]
struct Failing {
    since: Instant,
    said: Instant,
}

/// Watches with `client` until `unchanged` says the client's files changed or the API server
/// refuses the client.
async fn watch(
    caches: &Caches,
    client: &kube::Client,
    writers: &mut Writers,
    say: &Say,
    unchanged: &dyn Fn() -> bool,
) -> Ended {
    let Writers {
        pods,
        nads,
        namespaces: namespaces_writer,
    } = writers;
    // Lists as the API server answers them by default (its latest state; from its watch cache
    // since Kubernetes 1.31): a list from "any" resourceVersion, cheaper for etcd, could go back
    // in time behind a lagging API server after a 410.
    let mut streams: Vec<BoxStream<'static, Result<Got, Failed>>> = Vec::new();
    if let Some(node) = &caches.scope.node {
        let node_pods = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        streams.push(
            watcher::watcher(Api::<CachedPod>::all(client.clone()), node_pods)
                .default_backoff()
                .map(|r| r.map(Got::Pod).map_err(|e| (Which::Pods, e)))
                .boxed(),
        );
    }
    if let Some(selector) = &caches.scope.dynamic_namespaces {
        streams.push(
            watcher::watcher(
                Api::<Namespace>::all(client.clone()),
                watcher::Config::default().labels(selector),
            )
            .default_backoff()
            .map(|r| r.map(Got::Namespace).map_err(|e| (Which::Namespaces, e)))
            .boxed(),
        );
    }
    for (i, (ns, _)) in nads.iter().enumerate() {
        let api = match ns {
            Some(ns) => Api::<CachedNad>::namespaced(client.clone(), ns),
            None => Api::<CachedNad>::all(client.clone()),
        };
        streams.push(
            watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .map(move |r| r.map(|e| Got::Nad(i, e)).map_err(|e| (Which::Nads(i), e)))
                .boxed(),
        );
    }
    let mut all = futures::stream::select_all(streams);
    let mut look = tokio::time::interval_at(tokio::time::Instant::now() + LOOK_EVERY, LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Each watch's failure: the pods' at 0, the NAD stores' after, the namespaces' last.
    let mut failing: Vec<Option<Failing>> = vec![None; nads.len() + 2];
    let ns_slot = nads.len() + 1;
    let pods_of = caches.scope.node.clone().unwrap_or_default();
    let opted_in = format!(
        "label selector {:?}",
        caches
            .scope
            .dynamic_namespaces
            .as_deref()
            .unwrap_or_default()
    );
    loop {
        tokio::select! {
            next = all.next() => match next {
                Some(Ok(Got::Pod(e))) => {
                    recovered(&mut failing[0], "pods", &pods_of, say);
                    let changed = annotation_changed(caches, &e);
                    apply(&caches.pods, pods, &e, "pods", &pods_of, say);
                    // Once applied: what the change is made from is the pod in the store.
                    if let Some(key) = changed {
                        caches.note(|c| {
                            c.pods.insert(key);
                        });
                    }
                    if matches!(e, Event::InitDone) {
                        caches.note(|c| c.all = true);
                    }
                }
                Some(Ok(Got::Namespace(e))) => {
                    recovered(&mut failing[ns_slot], "namespaces", &opted_in, say);
                    if let (Some(kept), Some(writer)) = (&caches.namespaces, namespaces_writer.as_mut()) {
                        apply(kept, writer, &e, "namespaces", &opted_in, say);
                    }
                    if !matches!(e, Event::Init | Event::InitApply(_)) {
                        caches.note(|c| c.all = true);
                    }
                }
                Some(Ok(Got::Nad(i, e))) => {
                    let scope = namespaces(&nads[i].0);
                    recovered(&mut failing[i + 1], "NADs", &scope, say);
                    apply(&caches.nads[i].1, &mut nads[i].1, &e, "NADs", &scope, say);
                }
                Some(Err((which, e))) => {
                    if status_of(&e) == Some(401) {
                        return Ended::Refused(plumb_engine::log::one_line(&e.to_string()).into_owned());
                    }
                    let (slot, synced, what, scope) = match which {
                        Which::Pods => (&mut failing[0], &caches.pods.synced, "pods", pods_of.clone()),
                        Which::Nads(i) => (
                            &mut failing[i + 1],
                            &caches.nads[i].1.synced,
                            "NADs",
                            namespaces(&nads[i].0),
                        ),
                        Which::Namespaces => match &caches.namespaces {
                            Some(kept) => (
                                &mut failing[ns_slot],
                                &kept.synced,
                                "namespaces",
                                opted_in.clone(),
                            ),
                            None => continue,
                        },
                    };
                    let now = Instant::now();
                    let f = slot.get_or_insert(Failing { since: now, said: now });
                    let first = f.since == now;
                    if first || f.said.elapsed() >= SAY_AGAIN_AFTER {
                        f.said = now;
                        say(format_args!(
                            "caches: watching the {what} of {scope}: {}; trying again with \
                             backoff",
                            plumb_engine::log::one_line(&e.to_string())
                        ));
                    }
                    if f.since.elapsed() >= STALE_AFTER && synced.swap(false, Ordering::AcqRel) {
                        say(format_args!(
                            "caches: the {what} of {scope} have not been watched for {} s: \
                             calls read them with GETs until the watch works again",
                            STALE_AFTER.as_secs()
                        ));
                    }
                }
                // The watchers never end.
                None => return Ended::FilesChanged,
            },
            _ = look.tick() => {
                if !unchanged() {
                    return Ended::FilesChanged;
                }
            }
        }
    }
}

fn namespaces(ns: &Option<String>) -> String {
    match ns {
        Some(ns) => format!("namespace {ns}"),
        None => "all namespaces".to_string(),
    }
}

/// The pod (namespace, name) whose networks annotation `event` changes, when changes are
/// watched for; asked before the event is applied, while the store holds the pod as it was. A
/// pod new to the store is not one: its ADD records the annotation it is attached with.
fn annotation_changed(caches: &Caches, event: &Event<CachedPod>) -> Option<(String, String)> {
    caches.scope.dynamic_namespaces.as_ref()?;
    let Event::Apply(pod) = event else {
        return None;
    };
    let networks = |p: &CachedPod| {
        (p.metadata.annotations.as_ref())
            .and_then(|a| a.get(netattach::NETWORKS_ANNOTATION))
            .cloned()
    };
    let before = caches.pods.store.get(&ObjectRef::from_obj(pod))?;
    if networks(&before) == networks(pod) {
        return None;
    }
    Some((pod.metadata.namespace.clone()?, pod.metadata.name.clone()?))
}

/// Says that a watch that failed gives events again.
fn recovered(failing: &mut Option<Failing>, what: &str, scope: &str, say: &Say) {
    if failing.take().is_some() {
        say(format_args!("caches: watching the {what} of {scope} again"));
    }
}

/// `event` into `writer`'s store, counted. The store serves from its first complete list on,
/// and again from the first event after it stopped serving (a resumed watch misses nothing).
fn apply<K>(
    kept: &Kept<K>,
    writer: &mut Writer<K>,
    event: &Event<K>,
    what: &str,
    scope: &str,
    say: &Say,
) where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    writer.apply_watcher_event(event);
    kept.events.fetch_add(1, Ordering::Relaxed);
    let listing = matches!(event, Event::Init | Event::InitApply(_));
    if !listing && !kept.synced.swap(true, Ordering::AcqRel) {
        say(format_args!(
            "caches: the {what} of {scope} are in ({} now): calls are served from the cache",
            kept.store.len()
        ));
    }
}

/// Looking the Node up until the API server says it has it, saying what it found: loudly when
/// it has no such Node, since the pod cache then stays empty (looked up again now and then: the
/// kubelet may register it later).
struct NodeLookup {
    caches: Arc<Caches>,
    api: Api<Node>,
    say: Say,
    again: Duration,
    said: Option<Instant>,
}

impl NodeLookup {
    fn new(caches: &Arc<Caches>, client: &kube::Client, say: &Say) -> NodeLookup {
        NodeLookup {
            caches: Arc::clone(caches),
            api: Api::all(client.clone()),
            say: Arc::clone(say),
            again: NODE_AGAIN_FIRST,
            said: None,
        }
    }

    /// One lookup, unless the Node was found already (or no node is watched): whether it has
    /// been found.
    async fn once(&mut self) -> bool {
        let Some(node) = self.caches.scope.node.clone() else {
            return true;
        };
        let known = *self
            .caches
            .node_found
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if known == Some(true) {
            return true;
        }
        let say = &self.say;
        let why = match tokio::time::timeout(NODE_LOOKUP, self.api.get_metadata_opt(&node)).await {
            Ok(Ok(found)) => {
                let found = found.is_some();
                *self
                    .caches
                    .node_found
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(found);
                if found {
                    say(format_args!(
                        "caches: Node {node:?} found; keeping the pods bound to it"
                    ));
                    return true;
                }
                if known.is_none() {
                    say(format_args!(
                        "caches: WARNING: the API server has no Node {node:?}: the pod cache \
                         stays empty and every call reads its pod with a GET. Give `plumb \
                         daemon --node-name` (or NODE_NAME) the name the kubelet registered \
                         this node under (`kubectl get nodes`)"
                    ));
                }
                return false;
            }
            Ok(Err(e)) => plumb_engine::log::one_line(&e.to_string()).into_owned(),
            Err(_) => format!("no answer within {} s", NODE_LOOKUP.as_secs()),
        };
        if self
            .said
            .is_none_or(|at| at.elapsed() >= NODE_SAY_AGAIN_AFTER)
        {
            self.said = Some(Instant::now());
            say(format_args!(
                "caches: cannot look up Node {node:?}: {why}; looking again with backoff"
            ));
        }
        false
    }

    /// Lookups with backoff until the Node is found.
    async fn until_found(mut self) {
        loop {
            tokio::time::sleep(self.again).await;
            self.again = (self.again * 2).min(NODE_AGAIN_MAX);
            if self.once().await {
                return;
            }
        }
    }
}
