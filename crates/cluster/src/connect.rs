//! The engine's [`Connect`]: how a CNI call gets its API client and its kubelet. [`PerCall`]
//! builds a client from the kubeconfig for each call (thin mode); [`Pooled`] lends one the
//! daemon kept from an earlier call, and takes it back when the call drops it, so no call
//! parses the kubeconfig or makes a TLS handshake again.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni::error::CniError;
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use plumb_engine::cluster::{Cluster, Connect};
use plumb_engine::kubelet::PodResources;
use plumb_engine::log::Log;
use plumb_engine::plan::Pod;

use crate::client_pool::ClientPool;
use crate::kube::KubeCluster;
use crate::pod_resources::KubeletPodResources;

/// A client built from the kubeconfig for each call.
#[derive(Clone, Copy, Debug, Default)]
pub struct PerCall;

impl Connect for PerCall {
    fn cluster(
        &self,
        kubeconfig: &Path,
        budget: Duration,
        log: &Log,
    ) -> Result<Box<dyn Cluster>, CniError> {
        Ok(Box::new(built(kubeconfig, budget, log)?))
    }

    fn kubelet(&self, socket: &Path) -> Box<dyn PodResources> {
        Box::new(KubeletPodResources::new(socket))
    }
}

/// A client from the kubeconfig, timed in the debug log.
fn built(kubeconfig: &Path, budget: Duration, log: &Log) -> Result<KubeCluster, CniError> {
    let start = Instant::now();
    let cluster = KubeCluster::with_budget(kubeconfig, budget)?;
    if log.debug_enabled() {
        log.debug(&format!(
            "API client from the kubeconfig in {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        ));
    }
    Ok(cluster)
}

/// Clients kept between calls (the daemon's).
#[derive(Clone, Default)]
pub struct Pooled(pub Arc<ClientPool>);

impl Connect for Pooled {
    fn cluster(
        &self,
        kubeconfig: &Path,
        budget: Duration,
        log: &Log,
    ) -> Result<Box<dyn Cluster>, CniError> {
        let cluster = match self.0.take(kubeconfig, budget) {
            Some(kept) => {
                log.debug("API client kept from an earlier call");
                kept
            }
            None => built(kubeconfig, budget, log)?,
        };
        Ok(Box::new(Lent {
            cluster: Some(cluster),
            pool: Arc::clone(&self.0),
        }))
    }

    fn kubelet(&self, socket: &Path) -> Box<dyn PodResources> {
        PerCall.kubelet(socket)
    }
}

/// A client lent to one call, given back to the pool when the call drops it.
struct Lent {
    /// Always `Some` until dropped.
    cluster: Option<KubeCluster>,
    pool: Arc<ClientPool>,
}

impl Lent {
    fn get(&self) -> &KubeCluster {
        self.cluster
            .as_ref()
            .expect("a lent client is held until dropped")
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(cluster) = self.cluster.take() {
            self.pool.give(cluster);
        }
    }
}

impl Cluster for Lent {
    fn pod(&self, namespace: &str, name: &str, wait: bool) -> Result<Option<Pod>, CniError> {
        self.get().pod(namespace, name, wait)
    }
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        self.get().nad(r)
    }
    fn nads(
        &self,
        refs: &[NetworkRef],
    ) -> Vec<Result<Option<NetworkAttachmentDefinition>, CniError>> {
        self.get().nads(refs)
    }
    fn set_network_status(&self, pod: &Pod, value: &str) -> Result<(), CniError> {
        self.get().set_network_status(pod, value)
    }
    fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str) -> Result<(), CniError> {
        self.get().event(pod, kind, reason, message)
    }
}
