//! The Kubernetes API as the engine uses it, behind small traits so that the engine never links
//! a Kubernetes client: [`Cluster`] (GET a pod, GET a NAD, write the pod's network-status, POST
//! an event) and [`Connect`], which hands a call its API client and its kubelet. plumb-cluster
//! implements both with kube-rs and gRPC; the engine's unit tests use in-memory fakes.
//! Multi-net spec §5 (network-status, written on the pod) and §4 (the NADs a pod selects).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cni::error::CniError;
use netattach::{NetworkAttachmentDefinition, NetworkRef};

use crate::kubelet::PodResources;
use crate::log::Log;
use crate::plan::Pod;

/// What plumb asks of the API server.
pub trait Cluster {
    /// The pod; `Ok(None)` when it does not exist (after retrying, when `wait_for_pod`).
    fn pod(&self, namespace: &str, name: &str, wait_for_pod: bool)
    -> Result<Option<Pod>, CniError>;
    /// The pod of the sandbox whose runtime gave `uid` (`K8S_POD_UID`, when it did): as
    /// [`Cluster::pod`], which the API answers; a cache answers it without asking when it holds
    /// that pod, and asks when it holds another pod of that name (recreated) or none yet.
    fn pod_of_sandbox(
        &self,
        namespace: &str,
        name: &str,
        _uid: Option<&str>,
        wait_for_pod: bool,
    ) -> Result<Option<Pod>, CniError> {
        self.pod(namespace, name, wait_for_pod)
    }
    /// The pod as the API server has it now, never from a cache: what a change of a running
    /// pod's attachments acts on, once it holds the container's lock.
    fn pod_from_api(&self, namespace: &str, name: &str) -> Result<Option<Pod>, CniError> {
        self.pod(namespace, name, false)
    }
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError>;
    /// [`Cluster::nad`] of each of `refs`, in their order; the real API asks for them at once
    /// when it can.
    fn nads(
        &self,
        refs: &[NetworkRef],
    ) -> Vec<Result<Option<NetworkAttachmentDefinition>, CniError>> {
        refs.iter().map(|r| self.nad(r)).collect()
    }
    /// Sets the pod's `k8s.v1.cni.cncf.io/network-status` annotation (one PATCH of the status
    /// subresource, as Multus writes it through `pods/status`).
    fn set_network_status(&self, pod: &Pod, value: &str) -> Result<(), CniError>;
    /// Records an event on the pod (`Normal` or `Warning`).
    fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str) -> Result<(), CniError>;
}

/// How a call reaches outside the node's files: its API client, built from plumb's kubeconfig
/// (or lent by the daemon, which keeps clients between calls), and the kubelet.
pub trait Connect: Sync {
    /// An API client for one call, which may spend `budget` of API time. Dropping it ends its
    /// use (the daemon takes it back for the next call).
    fn cluster(
        &self,
        kubeconfig: &Path,
        budget: Duration,
        log: &Log,
    ) -> Result<Box<dyn Cluster>, CniError>;

    /// The kubelet's PodResources API at `socket`, asked only when a network needs a device
    /// (no connection before that).
    fn kubelet(&self, socket: &Path) -> Box<dyn PodResources>;

    /// Told of every delegate the call runs (the daemon measures them); none by default.
    fn delegate_observer(&self) -> Option<cni::runtime::RanHook> {
        None
    }
}

/// All the time one CNI call may spend waiting on the API: every request, retry and backoff
/// added up (the delegates' time in between does not count). The kubelet gives a whole sandbox
/// creation 2 minutes (`--runtime-request-timeout`) and the delegates need their share; past this
/// the call fails with code 11 and the kubelet tries again.
pub const API_BUDGET: Duration = Duration::from_secs(30);

/// The API budget of a STATUS call (CNI 1.1), which the runtime makes every few seconds to learn
/// whether the node can start pods: an API server that does not answer within this long says
/// "not now" (code 50) and the runtime asks again, rather than holding the runtime's own status
/// report for [`API_BUDGET`]. Enough for one whole attempt of a request or a refused connection
/// retried through most of the backoff.
pub const STATUS_API_BUDGET: Duration = Duration::from_secs(5);

/// Annotations as the planner takes them.
pub fn annotations_from(
    map: &serde_json::Map<String, serde_json::Value>,
) -> BTreeMap<String, String> {
    map.iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}
