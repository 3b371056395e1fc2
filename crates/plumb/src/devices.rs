//! Devices of device-backed networks (multus-reference.md §2.9; device-info spec 1.1.0): which
//! device each attachment gets, and the attachment's device-info file.
//!
//! - [`KubeletDevices`] answers the planner's [`Devices`] from the kubelet's PodResources API,
//!   asked once per CNI call however many networks need a device.
//! - [`device_info_path`] is an attachment's CNI device-info file (device-info spec §4.2): the
//!   device plugin's file copied there before ADD, the path given to plugins that declare
//!   `CNIDeviceInfoFile` (§5.1), read back after ADD for the network-status `device-info`
//!   (multi-net spec §5.3.7), deleted on DEL.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use cni::error::CniError;
use netattach::device_info_files::DeviceInfoDirs;

use crate::plan::{Device, Devices, Pod};
use crate::pod_resources::{PodDevices, PodResources};

/// The planner's device source, from the kubelet. One call serves one pod.
pub struct KubeletDevices<'a> {
    kubelet: &'a dyn PodResources,
    pod_devices: OnceCell<Result<PodDevices, CniError>>,
}

impl<'a> KubeletDevices<'a> {
    pub fn new(kubelet: &'a dyn PodResources) -> Self {
        KubeletDevices {
            kubelet,
            pod_devices: OnceCell::new(),
        }
    }
}

impl Devices for KubeletDevices<'_> {
    fn allocated(&self, pod: &Pod, resource: &str) -> Result<Vec<String>, CniError> {
        let all = self
            .pod_devices
            .get_or_init(|| self.kubelet.pod_devices(&pod.namespace, &pod.name))
            .as_ref()
            .map_err(Clone::clone)?;
        Ok(all.get(resource).cloned().unwrap_or_default())
    }
}

/// The CNI device-info file of the attachment `network`/`ifname` of sandbox `container_id`
/// (device-info spec §4.2), when it has a device: Multus gives `CNIDeviceInfoFile` whenever
/// there is a device ID (multus-reference.md §2.9).
pub fn device_info_path(
    dirs: &DeviceInfoDirs,
    device: Option<&Device>,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Option<PathBuf> {
    device.map(|_| dirs.cni_path(network, container_id, ifname))
}

/// Before ADD: the CNI directory is made (so a plugin given `CNIDeviceInfoFile` can simply
/// write it, although device-info spec §5.1 asks plugins to make it too), and the device
/// plugin's file of a device allocated from a resource is copied to the attachment's file
/// (§4.2.1), replacing what an earlier ADD left. An invalid device plugin file fails the
/// attachment (it would be an invalid `device-info` in the pod's status); a missing one is
/// normal (not every device plugin writes one).
pub fn prepare_device_info_file(
    dirs: &DeviceInfoDirs,
    device: &Device,
    cni_file: &Path,
) -> Result<(), CniError> {
    let dir = dirs.cni_dir();
    std::fs::create_dir_all(&dir).map_err(|e| {
        CniError::new(
            cni::ErrorCode::Io,
            format!(
                "cannot create the device-info directory {}: {e}",
                dir.display()
            ),
        )
    })?;
    let Some(resource) = &device.resource else {
        return Ok(());
    };
    dirs.copy_dp_to_cni(resource, &device.id, cni_file)
        .map(|_| ())
        .map_err(|e| {
            CniError::from(e).context(format!(
                "the device plugin's device-info file of device {} of resource {resource:?}",
                device.id
            ))
        })
}
