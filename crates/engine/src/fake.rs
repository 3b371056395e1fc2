//! In-memory stand-ins for the engine's seams, for its unit tests: a cluster holding pods and
//! NADs that records every request, status write and event, and a kubelet with no devices.
//! The handlers run against them exactly as against the API server, without the binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cni::error::{CniError, ErrorCode};
use netattach::{NetworkAttachmentDefinition, NetworkRef};

use crate::cluster::{Cluster, Connect};
use crate::kubelet::{PodDevices, PodResources};
use crate::log::Log;
use crate::plan::Pod;

/// A cluster in memory. Clones share it, so a test keeps one to look at what a call did.
#[derive(Clone, Default)]
pub struct InMemoryCluster(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    pods: BTreeMap<(String, String), Pod>,
    nads: BTreeMap<(String, String), NetworkAttachmentDefinition>,
    /// Every request, as `VERB what`, in order.
    requests: Vec<String>,
    /// Every network-status written: the pod (`namespace/name`) and the annotation's value.
    status_writes: Vec<(String, String)>,
    /// Every event: the pod, its type, reason and message.
    events: Vec<(String, String, String, String)>,
    /// How many clients calls were given.
    connections: usize,
    /// Every request fails as with an API server that does not answer.
    down: bool,
}

impl InMemoryCluster {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn put_pod(&self, pod: Pod) {
        let key = (pod.namespace.clone(), pod.name.clone());
        self.state().pods.insert(key, pod);
    }

    pub fn remove_pod(&self, namespace: &str, name: &str) {
        self.state()
            .pods
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// A NAD from its JSON object (as the API serves it).
    pub fn put_nad(&self, nad: serde_json::Value) {
        let nad: NetworkAttachmentDefinition = serde_json::from_value(nad).unwrap();
        let key = (
            nad.metadata.namespace.clone().unwrap_or_default(),
            nad.metadata.name.clone().unwrap_or_default(),
        );
        self.state().nads.insert(key, nad);
    }

    /// Makes every request fail (code 11) while `down`, as an API server that does not answer.
    pub fn set_down(&self, down: bool) {
        self.state().down = down;
    }

    /// The request `what` recorded; an error while the API server is down.
    fn ask(&self, what: String) -> Result<std::sync::MutexGuard<'_, State>, CniError> {
        let mut s = self.state();
        s.requests.push(what);
        if s.down {
            return Err(CniError::new(
                ErrorCode::TryAgainLater,
                "the API server does not answer",
            ));
        }
        Ok(s)
    }

    pub fn requests(&self) -> Vec<String> {
        self.state().requests.clone()
    }

    pub fn status_writes(&self) -> Vec<(String, String)> {
        self.state().status_writes.clone()
    }

    pub fn events(&self) -> Vec<(String, String, String, String)> {
        self.state().events.clone()
    }

    pub fn connections(&self) -> usize {
        self.state().connections
    }
}

impl Cluster for InMemoryCluster {
    fn pod(&self, namespace: &str, name: &str, _wait: bool) -> Result<Option<Pod>, CniError> {
        let s = self.ask(format!("GET pod {namespace}/{name}"))?;
        Ok(s.pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        let s = self.ask(format!("GET nad {}/{}", r.namespace, r.name))?;
        Ok(s.nads.get(&(r.namespace.clone(), r.name.clone())).cloned())
    }

    fn set_network_status(&self, pod: &Pod, value: &str) -> Result<(), CniError> {
        let who = format!("{}/{}", pod.namespace, pod.name);
        let mut s = self.ask(format!("PATCH pod {who}"))?;
        let Some(p) = s.pods.get_mut(&(pod.namespace.clone(), pod.name.clone())) else {
            return Err(CniError::new(ErrorCode::UnknownContainer, "pod not found"));
        };
        p.annotations
            .insert(netattach::NETWORK_STATUS_ANNOTATION.into(), value.into());
        s.status_writes.push((who, value.to_string()));
        Ok(())
    }

    fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str) -> Result<(), CniError> {
        let who = format!("{}/{}", pod.namespace, pod.name);
        let mut s = self.ask(format!("POST event {who}"))?;
        s.events
            .push((who, kind.into(), reason.into(), message.into()));
        Ok(())
    }
}

/// A kubelet that allocated no device to any pod.
pub struct NoDevices;

impl PodResources for NoDevices {
    fn pod_devices(&self, _: &str, _: &str, _: &str) -> Result<Option<PodDevices>, CniError> {
        Ok(Some(PodDevices::new()))
    }

    fn device_resources(&self) -> Result<Option<std::collections::BTreeSet<String>>, CniError> {
        Ok(Some(Default::default()))
    }
}

/// A [`Connect`] giving every call the in-memory cluster (whatever the kubeconfig) and a
/// kubelet with no devices.
#[derive(Clone, Default)]
pub struct InMemory(pub InMemoryCluster);

impl Connect for InMemory {
    fn cluster(
        &self,
        _kubeconfig: &Path,
        _budget: Duration,
        _log: &Log,
    ) -> Result<Box<dyn Cluster>, CniError> {
        self.0.state().connections += 1;
        Ok(Box::new(self.0.clone()))
    }

    fn kubelet(&self, _socket: &Path) -> Box<dyn PodResources> {
        Box::new(NoDevices)
    }
}

/// A [`Connect`] for calls that must not reach the API server or the kubelet: asked, it fails.
pub struct Unreachable;

impl Connect for Unreachable {
    fn cluster(&self, _: &Path, _: Duration, _: &Log) -> Result<Box<dyn Cluster>, CniError> {
        Err(CniError::new(ErrorCode::Io, "no API server in this test"))
    }

    fn kubelet(&self, _socket: &Path) -> Box<dyn PodResources> {
        Box::new(NoDevices)
    }
}
