//! The kubelet's PodResources API as the engine uses it: which device IDs the kubelet gave a
//! pod's containers, per resource name. A NetworkAttachmentDefinition with the
//! `k8s.v1.cni.cncf.io/resourceName` annotation gets its delegate's `deviceID` from these
//! (docs/multus-behaviour.md §2.9); the device-info spec 1.1 §4.2.1 says an implementation "must
//! query Kubelet to find the DeviceID of the allocated resource". plumb-cluster implements
//! [`PodResources`] over gRPC; tests use fakes.

use std::collections::BTreeSet;

use cni::error::CniError;

/// Device IDs allocated to one pod's containers, per resource name: every container's IDs of
/// that resource, sorted and deduplicated (as Multus does, docs/multus-behaviour.md §2.9).
pub type PodDevices = std::collections::BTreeMap<String, Vec<String>>;

/// The kubelet's PodResources API as plumb uses it.
pub trait PodResources {
    /// The devices allocated to pod `namespace/name`, whose UID is `uid` (empty when the call
    /// does not know it); `None` when the kubelet does not know the pod. The API asks by name;
    /// the device manager's checkpoint (`kubelet_checkpoint`) knows pods by UID only.
    fn pod_devices(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<PodDevices>, CniError>;

    /// The resources the node's device plugins offer (`GetAllocatableResources`); `None` when
    /// the kubelet cannot say (it lacks the method). A resource a NAD names that is not among
    /// them is no device plugin's (KubeVirt's bridge and OVS markers only count capacity), so
    /// its attachments run without a device, as in Multus.
    fn device_resources(&self) -> Result<Option<BTreeSet<String>>, CniError>;
}
