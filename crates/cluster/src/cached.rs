//! The engine's `Connect` for the daemon with watch caches ([`Cached`]): a call's pod and NADs
//! come from the caches when they hold them (multi-net spec §4.1: the pod's selection; §4.1.2.1.4:
//! its NADs), and from one GET each when they do not (not synced yet, a pod the watch has not
//! delivered, another pod of that name, a NAD not there); the network-status write (§5) goes to
//! the API inside the call, and the call's events are queued to be sent after it ([`events`]).
//!
//! [`events`]: crate::events

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cni::error::CniError;
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use plumb_engine::cluster::{Cluster, Connect};
use plumb_engine::kubelet::PodResources;
use plumb_engine::log::Log;
use plumb_engine::plan::Pod;

use crate::Say;
use crate::caches::{Caches, Scope, Source};
use crate::connect::Pooled;
use crate::events::{EventQueue, Queued};

/// Which caches serve a call.
pub enum CachesFor {
    /// Caches from the daemon's own identity (`--kubeconfig`, in-cluster): every call with a
    /// kubeconfig (one node, one cluster: a call whose kubeconfig names another cluster's API
    /// server would be served this one's objects).
    Every(Arc<Caches>),
    /// Caches from the kubeconfig the first call's configuration names, started then: the calls
    /// that name the same one (another may be another cluster's). For good: a daemon whose
    /// calls name another kubeconfig later is to be given `--kubeconfig`.
    FirstKubeconfig {
        scope: Scope,
        say: Say,
        started: OnceLock<Option<(PathBuf, Arc<Caches>)>>,
    },
}

/// Calls served from the caches, with the daemon's kept clients, its event queue, and what
/// times the calls' delegates.
pub struct Cached {
    pub pooled: Pooled,
    pub caches: CachesFor,
    pub events: Arc<EventQueue>,
    pub delegates: Option<cni::runtime::RanHook>,
}

impl Cached {
    /// The caches serving calls that name `kubeconfig`, started now from it if they come from
    /// the first call's.
    fn caches_for(&self, kubeconfig: &Path) -> Option<Arc<Caches>> {
        match &self.caches {
            CachesFor::Every(c) => Some(Arc::clone(c)),
            CachesFor::FirstKubeconfig {
                scope,
                say,
                started,
            } => {
                let (path, caches) = started
                    .get_or_init(|| {
                        let source = Source::Kubeconfig(kubeconfig.to_path_buf());
                        say(format_args!(
                            "caches: no --kubeconfig and not in a pod: watching with the \
                             kubeconfig of the first call, {}",
                            kubeconfig.display()
                        ));
                        match Caches::start(source, scope.clone(), Arc::clone(say)) {
                            Ok(c) => Some((kubeconfig.to_path_buf(), c)),
                            Err(e) => {
                                say(format_args!(
                                    "caches: cannot start with {}: {e}; calls read their pod \
                                     and NADs with GETs",
                                    kubeconfig.display()
                                ));
                                None
                            }
                        }
                    })
                    .as_ref()?;
                (path == kubeconfig).then(|| Arc::clone(caches))
            }
        }
    }

    /// The caches, once there are any.
    pub fn caches(&self) -> Option<Arc<Caches>> {
        match &self.caches {
            CachesFor::Every(c) => Some(Arc::clone(c)),
            CachesFor::FirstKubeconfig { started, .. } => {
                started.get()?.as_ref().map(|(_, c)| Arc::clone(c))
            }
        }
    }
}

impl Connect for Cached {
    fn cluster(
        &self,
        kubeconfig: &Path,
        budget: Duration,
        log: &Log,
    ) -> Result<Box<dyn Cluster>, CniError> {
        let api = self.pooled.cluster(kubeconfig, budget, log)?;
        Ok(Box::new(Served {
            api: Some(api),
            caches: self.caches_for(kubeconfig),
            events: Arc::clone(&self.events),
            kubeconfig: kubeconfig.to_path_buf(),
            events_of_call: Mutex::new(Vec::new()),
        }))
    }

    fn kubelet(&self, socket: &Path) -> Box<dyn PodResources> {
        self.pooled.kubelet(socket)
    }

    fn delegate_observer(&self) -> Option<cni::runtime::RanHook> {
        self.delegates.clone()
    }
}

/// One call's view of the cluster: reads from the caches first, writes to the API.
struct Served {
    /// Always `Some` until dropped.
    api: Option<Box<dyn Cluster>>,
    caches: Option<Arc<Caches>>,
    events: Arc<EventQueue>,
    kubeconfig: PathBuf,
    /// Queued when the call ends.
    events_of_call: Mutex<Vec<Queued>>,
}

impl Served {
    fn api(&self) -> &dyn Cluster {
        self.api.as_deref().expect("held until dropped")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // The client back to the pool for the next call before anything else.
        drop(self.api.take());
        let events = std::mem::take(
            self.events_of_call
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for e in events {
            self.events.push(e);
        }
    }
}

impl Cluster for Served {
    fn pod(&self, namespace: &str, name: &str, wait: bool) -> Result<Option<Pod>, CniError> {
        self.pod_of_sandbox(namespace, name, None, wait)
    }

    fn pod_of_sandbox(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        wait: bool,
    ) -> Result<Option<Pod>, CniError> {
        if let Some(pod) = (self.caches.as_ref()).and_then(|c| c.pod(namespace, name, uid)) {
            return Ok(Some(pod));
        }
        // The watch can be behind the kubelet, or the cache not synced yet: asked once, as
        // without a cache.
        self.api().pod(namespace, name, wait)
    }

    fn pod_from_api(&self, namespace: &str, name: &str) -> Result<Option<Pod>, CniError> {
        self.api().pod(namespace, name, false)
    }

    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        match self.caches.as_ref().and_then(|c| c.nad(r)) {
            Some(nad) => Ok(Some(nad)),
            None => self.api().nad(r),
        }
    }

    /// Those the caches hold from them, the others asked for together, in `refs`' order.
    fn nads(
        &self,
        refs: &[NetworkRef],
    ) -> Vec<Result<Option<NetworkAttachmentDefinition>, CniError>> {
        let cached: Vec<Option<NetworkAttachmentDefinition>> = refs
            .iter()
            .map(|r| self.caches.as_ref().and_then(|c| c.nad(r)))
            .collect();
        let missing: Vec<NetworkRef> = (refs.iter().zip(&cached))
            .filter(|(_, c)| c.is_none())
            .map(|(r, _)| r.clone())
            .collect();
        let mut fetched = if missing.is_empty() {
            Vec::new()
        } else {
            self.api().nads(&missing)
        }
        .into_iter();
        cached
            .into_iter()
            .zip(refs)
            .map(|(c, r)| match c {
                Some(nad) => Ok(Some(nad)),
                None => fetched.next().unwrap_or_else(|| {
                    Err(CniError::new(
                        cni::error::ErrorCode::Internal,
                        format!("network-attachment-definition {r}: no answer among the API's"),
                    ))
                }),
            })
            .collect()
    }

    fn set_network_status(&self, pod: &Pod, value: &str) -> Result<(), CniError> {
        self.api().set_network_status(pod, value)
    }

    /// Queued, sent after the call.
    fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str) -> Result<(), CniError> {
        let pod = Pod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            annotations: Default::default(),
        };
        (self
            .events_of_call
            .lock()
            .unwrap_or_else(|p| p.into_inner()))
        .push(Queued {
            kubeconfig: self.kubeconfig.clone(),
            pod,
            kind: kind.into(),
            reason: reason.into(),
            message: message.into(),
        });
        Ok(())
    }
}
