//! PLACEHOLDER until the podresources branch merges (the kubelet PodResources v1 client).

use std::collections::BTreeMap;

/// Device IDs allocated to one pod's containers, per resource name.
pub type PodDevices = BTreeMap<String, Vec<String>>;

/// The kubelet's PodResources API as plumb uses it.
pub trait PodResources {
    /// The devices allocated to pod `namespace/name`. A pod the kubelet does not know gives an
    /// empty map.
    fn pod_devices(&self, namespace: &str, name: &str) -> Result<PodDevices, cni::error::CniError>;
}

/// PLACEHOLDER.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// PLACEHOLDER.
pub struct KubeletPodResources {
    socket: std::path::PathBuf,
}

impl KubeletPodResources {
    pub fn new(socket: impl Into<std::path::PathBuf>) -> Self {
        KubeletPodResources {
            socket: socket.into(),
        }
    }
}

impl PodResources for KubeletPodResources {
    fn pod_devices(&self, _: &str, _: &str) -> Result<PodDevices, cni::error::CniError> {
        Err(cni::error::CniError::new(
            cni::ErrorCode::Internal,
            format!("placeholder {}", self.socket.display()),
        ))
    }
}
