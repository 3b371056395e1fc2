//! Keeping the caches current: on a thread of its own with its own current-thread runtime, a
//! kube-rs watcher per store (list, then watch from the list's resourceVersion, resumed from the
//! last one seen after a break, listed again when the API server no longer has it), each backed
//! off while the API server fails, feeding the reflector's writer. The client is made again when
//! a file of its kubeconfig changes (a rotated token). The Node is looked up until the API
//! server says whether it exists: a wrong name leaves the pod cache empty.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::Lookup};

use super::objects::{CachedNad, CachedPod};
use super::{Caches, Kept};
use crate::Say;
use crate::kube::watch_client;

/// How often the kubeconfig's files are compared with what the client was made from.
const LOOK_EVERY: Duration = Duration::from_secs(30);

/// The waits between lookups of the Node while the API server has not said whether it exists:
/// doubled from the first to the last.
const NODE_AGAIN_FIRST: Duration = Duration::from_secs(1);
const NODE_AGAIN_MAX: Duration = Duration::from_secs(30);

/// The waits before making a client again after it could not be made (the kubeconfig missing or
/// unusable): doubled from the first to the last.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// A watch that keeps failing is said again at most this often.
const SAY_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// How long the Node's lookup may take.
const NODE_LOOKUP: Duration = Duration::from_secs(5);

/// Runs the watches for ever (the daemon ends with its process).
pub(super) fn run(
    caches: std::sync::Arc<Caches>,
    mut pods: Writer<CachedPod>,
    mut nads: Vec<(Option<String>, Writer<CachedNad>)>,
    say: Say,
) {
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
            let (client, sources) = match watch_client(&caches.source).await {
                Ok(made) => {
                    retry = RETRY_FIRST;
                    made
                }
                Err(e) => {
                    say(format_args!(
                        "caches: cannot make an API client from {}: {e}; trying again in {} s, \
                         calls read their pod and NADs with GETs meanwhile",
                        caches.source,
                        retry.as_secs()
                    ));
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            };
            watch(&caches, &client, &mut pods, &mut nads, &say, &|| {
                sources.as_ref().is_none_or(|s| s.unchanged())
            })
            .await;
            say(format_args!(
                "caches: a file of {} changed: watching again with a new client",
                caches.source
            ));
        }
    });
}

/// What a watch gave: an event for the pods' store, or for the NADs' store at an index.
enum Got {
    Pod(Event<CachedPod>),
    Nad(usize, Event<CachedNad>),
}

/// Which watch failed: the pods' (`None`) or a NAD store's.
type Failed = (Option<usize>, watcher::Error);

/// Watches with `client` until `unchanged` says the client's files changed.
async fn watch(
    caches: &Caches,
    client: &kube::Client,
    pods: &mut Writer<CachedPod>,
    nads: &mut [(Option<String>, Writer<CachedNad>)],
    say: &Say,
    unchanged: &dyn Fn() -> bool,
) {
    // `Any`: the first list is served from the API server's watch cache, not read from etcd, as
    // client-go's informers list (a thousand nodes' daemons restarted together).
    let node_pods = watcher::Config::default()
        .fields(&format!("spec.nodeName={}", caches.scope.node))
        .any_semantic();
    let pod_stream: BoxStream<'static, Result<Got, Failed>> =
        watcher::watcher(Api::<CachedPod>::all(client.clone()), node_pods)
            .default_backoff()
            .map(|r| r.map(Got::Pod).map_err(|e| (None, e)))
            .boxed();
    let nad_streams = nads.iter().enumerate().map(|(i, (ns, _))| {
        let api = match ns {
            Some(ns) => Api::<CachedNad>::namespaced(client.clone(), ns),
            None => Api::<CachedNad>::all(client.clone()),
        };
        watcher::watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .map(move |r| r.map(|e| Got::Nad(i, e)).map_err(|e| (Some(i), e)))
            .boxed()
    });
    let mut all = futures::stream::select_all(std::iter::once(pod_stream).chain(nad_streams));
    let mut look = tokio::time::interval_at(tokio::time::Instant::now() + LOOK_EVERY, LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut node_again = NODE_AGAIN_FIRST;
    let node_lookup = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(node_lookup);
    // When each watch failed and was said last: the pods' at 0, the NAD stores' after.
    let mut failing: Vec<Option<Instant>> = vec![None; nads.len() + 1];
    loop {
        tokio::select! {
            next = all.next() => match next {
                Some(Ok(Got::Pod(e))) => {
                    recovered(&mut failing[0], "pods", &caches.scope.node, say);
                    apply(&caches.pods, pods, &e, "pods", &caches.scope.node, say);
                }
                Some(Ok(Got::Nad(i, e))) => {
                    recovered(&mut failing[i + 1], "NADs", &namespaces(&nads[i].0), say);
                    apply(&caches.nads[i].1, &mut nads[i].1, &e, "NADs", &namespaces(&nads[i].0), say);
                }
                Some(Err((which, e))) => {
                    let (slot, what, scope) = match which {
                        None => (&mut failing[0], "pods", caches.scope.node.clone()),
                        Some(i) => (&mut failing[i + 1], "NADs", namespaces(&nads[i].0)),
                    };
                    if slot.is_none_or(|at| at.elapsed() >= SAY_AGAIN_AFTER) {
                        *slot = Some(Instant::now());
                        say(format_args!(
                            "caches: watching the {what} of {scope}: {e}; trying again with \
                             backoff (calls read what the cache does not hold with GETs)"
                        ));
                    }
                }
                // The watchers never end.
                None => return,
            },
            _ = look.tick() => {
                if !unchanged() {
                    return;
                }
            }
            () = &mut node_lookup, if node_unknown(caches) => {
                look_up_node(caches, client, node_again, say).await;
                node_lookup.as_mut().reset(tokio::time::Instant::now() + node_again);
                node_again = (node_again * 2).min(NODE_AGAIN_MAX);
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

/// Says that a watch that failed gives events again.
fn recovered(failing: &mut Option<Instant>, what: &str, scope: &str, say: &Say) {
    if failing.take().is_some() {
        say(format_args!("caches: watching the {what} of {scope} again"));
    }
}

/// `event` into `writer`'s store, counted; the first complete list said.
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
    kept.events
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if matches!(event, Event::InitDone)
        && !kept.synced.swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        say(format_args!(
            "caches: the {what} of {scope} are in ({} now): calls are served from the cache",
            kept.store.len()
        ));
    }
}

/// Whether the API server has not said yet whether the Node exists.
fn node_unknown(caches: &Caches) -> bool {
    caches
        .node_found
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_none()
}

/// Looks the Node up (the next time `again` later, if the API server does not say), saying
/// what it found; loudly when there is no such Node, since the pod cache then stays empty.
async fn look_up_node(caches: &Caches, client: &kube::Client, again: Duration, say: &Say) {
    let node = &caches.scope.node;
    let api = Api::<Node>::all(client.clone());
    let found = match tokio::time::timeout(NODE_LOOKUP, api.get_metadata_opt(node)).await {
        Ok(Ok(found)) => found.is_some(),
        Ok(Err(_)) | Err(_) if ![NODE_AGAIN_FIRST, NODE_AGAIN_MAX].contains(&again) => return,
        Ok(Err(e)) => {
            say(format_args!(
                "caches: cannot look up Node {node:?}: {e}; looking again in {} s",
                again.as_secs()
            ));
            return;
        }
        Err(_) => {
            say(format_args!(
                "caches: looking up Node {node:?}: no answer within {} s; looking again in {} s",
                NODE_LOOKUP.as_secs(),
                again.as_secs()
            ));
            return;
        }
    };
    *caches.node_found.lock().unwrap_or_else(|p| p.into_inner()) = Some(found);
    if found {
        say(format_args!(
            "caches: Node {node:?} found; keeping the pods bound to it"
        ));
    } else {
        say(format_args!(
            "caches: WARNING: the API server has no Node {node:?}: the pod cache stays empty \
             and every call reads its pod with a GET. Give `plumb daemon --node-name` (or \
             NODE_NAME) the name the kubelet registered this node under (`kubectl get nodes`)"
        ));
    }
}
