//! Devices of device-backed networks (docs/multus-behaviour.md §2.9; device-info spec 1.1.0):
//! which device each attachment gets ([`KubeletDevices`], the kubelet asked once per CNI call),
//! and the attachment's device-info file (device-info spec §4.2, [`device_info_path`]): the
//! device plugin's file copied there before ADD, the path given to plugins that declare
//! `CNIDeviceInfoFile` (§5.1), read back after ADD for the network-status `device-info`
//! (multi-net spec §5.3.7), deleted on DEL.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cni::error::CniError;
use netattach::device_info_files::{self, DeviceInfoDirs};
use netattach::runtime_config::{capability, list_has_capability};

use crate::kubelet::{PodDevices, PodResources};
use crate::plan::{Attachment, Device, Devices, Pod};

/// The planner's device source, from the kubelet: the pod's devices are asked once, and the
/// node's device resources only when the pod has none of a resource. One call serves one pod.
pub struct KubeletDevices<'a> {
    kubelet: &'a dyn PodResources,
    pod_devices: OnceCell<Result<Option<PodDevices>, CniError>>,
    device_resources: OnceCell<Result<Option<BTreeSet<String>>, CniError>>,
}

impl<'a> KubeletDevices<'a> {
    pub fn new(kubelet: &'a dyn PodResources) -> Self {
        KubeletDevices {
            kubelet,
            pod_devices: OnceCell::new(),
            device_resources: OnceCell::new(),
        }
    }
}

impl Devices for KubeletDevices<'_> {
    fn allocated(&self, pod: &Pod, resource: &str) -> Result<Option<Vec<String>>, CniError> {
        let all = self
            .pod_devices
            .get_or_init(|| {
                self.kubelet
                    .pod_devices(&pod.namespace, &pod.name, &pod.uid)
            })
            .clone()?
            .ok_or_else(|| {
                // The kubelet admits a pod before it asks for the pod's sandbox, so not
                // knowing the pod is a passing state (or the pod is already gone): code 11.
                CniError::new(
                    cni::ErrorCode::TryAgainLater,
                    format!(
                        "the kubelet's PodResources API does not know pod {}/{}",
                        pod.namespace, pod.name
                    ),
                )
            })?;
        if let Some(ids) = all.get(resource) {
            return Ok(Some(ids.clone()));
        }
        // None of the resource: a device resource the pod did not get, or no device plugin's
        // resource at all (a marker that only counts capacity), which needs no device.
        let offered = self
            .device_resources
            .get_or_init(|| self.kubelet.device_resources())
            .clone()?;
        Ok(match offered {
            Some(resources) if resources.contains(resource) => Some(Vec::new()),
            _ => None,
        })
    }
}

/// The CNI device-info file of attachment `a` of sandbox `container_id` (device-info spec
/// §4.2), when it has one: when it has a device or its NAD a resource (Multus gives
/// `CNIDeviceInfoFile` whenever there is a device ID, docs/multus-behaviour.md §2.9), and whenever
/// a plugin of its list declares the `CNIDeviceInfoFile` capability (§5.1.1 makes that a
/// must, device or not: vhost-user and memif plugins write their own).
pub fn device_info_path(
    dirs: &DeviceInfoDirs,
    a: &Attachment,
    container_id: &str,
) -> Option<PathBuf> {
    let wanted = a.device.is_some()
        || a.resource.is_some()
        || list_has_capability(&a.list, capability::CNI_DEVICE_INFO_FILE);
    wanted.then(|| dirs.cni_path(&a.network, container_id, &a.ifname))
}

/// Before ADD: the CNI directory is made (so a plugin given `CNIDeviceInfoFile` can simply
/// write it, although device-info spec §5.1 asks plugins to make it too), and the file is set
/// to what this attachment starts with: the device plugin's file of a device allocated from a
/// resource (§4.2.1), else nothing (a file an earlier ADD left is removed, so it cannot pass
/// for this attachment's). An invalid device plugin file fails the attachment (it would be an
/// invalid `device-info` in the pod's status); a missing one is normal (not every device
/// plugin writes one).
pub fn prepare_device_info_file(
    dirs: &DeviceInfoDirs,
    device: Option<&Device>,
    cni_file: &Path,
) -> Result<(), CniError> {
    let dir = dirs.cni_dir();
    // Not world-writable, whatever the runtime's umask (device_info_files::DIR_MODE).
    device_info_files::create_dir(&dir).map_err(|e| {
        CniError::new(
            cni::ErrorCode::Io,
            format!(
                "cannot create the device-info directory {}: {e}",
                dir.display()
            ),
        )
    })?;
    let copied = match device {
        Some(Device {
            id,
            resource: Some(resource),
        }) => dirs.copy_dp_to_cni(resource, id, cni_file).map_err(|e| {
            CniError::from(e).context(format!(
                "the device plugin's device-info file of device {id} of resource {resource:?}"
            ))
        })?,
        _ => false,
    };
    if !copied {
        device_info_files::delete(cni_file)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    struct Kubelet {
        pod: Option<PodDevices>,
        offered: Option<BTreeSet<String>>,
        calls: Cell<(u32, u32)>,
    }

    impl PodResources for Kubelet {
        fn pod_devices(&self, _: &str, _: &str, _: &str) -> Result<Option<PodDevices>, CniError> {
            let (p, d) = self.calls.get();
            self.calls.set((p + 1, d));
            Ok(self.pod.clone())
        }
        fn device_resources(&self) -> Result<Option<BTreeSet<String>>, CniError> {
            let (p, d) = self.calls.get();
            self.calls.set((p, d + 1));
            Ok(self.offered.clone())
        }
    }

    fn pod() -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "p".into(),
            ..Pod::default()
        }
    }

    #[test]
    fn device_resources_tell_a_pod_without_devices_from_a_marker_resource() {
        let k = Kubelet {
            pod: Some(PodDevices::from([("r/vf".into(), vec!["1".into()])])),
            offered: Some(BTreeSet::from(["r/vf".into(), "r/other".into()])),
            calls: Cell::new((0, 0)),
        };
        let d = KubeletDevices::new(&k);
        assert_eq!(d.allocated(&pod(), "r/vf").unwrap(), Some(vec!["1".into()]));
        // Offered by a device plugin, none for this pod: the planner says too few.
        assert_eq!(d.allocated(&pod(), "r/other").unwrap(), Some(vec![]));
        // Offered by none (a marker): no device needed.
        assert_eq!(
            d.allocated(&pod(), "bridge.network.kubevirt.io/br0")
                .unwrap(),
            None
        );
        // One question of each kind, however many resources.
        assert_eq!(k.calls.get(), (1, 1));

        let old = Kubelet { offered: None, ..k };
        assert_eq!(
            KubeletDevices::new(&old)
                .allocated(&pod(), "r/other")
                .unwrap(),
            None
        );
    }

    #[test]
    fn the_device_info_directory_is_not_world_writable_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        // The umask is per process: run this test again in a child started with umask 000,
        // the way a runtime with that umask would start plumb.
        const CHILD: &str = "PLUMB_TEST_UMASK_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new("sh")
                .args(["-c", "umask 000 && exec \"$0\" \"$@\""])
                .arg(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "devices::tests::the_device_info_directory_is_not_world_writable_whatever_the_umask",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "{text}");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dirs = DeviceInfoDirs::new(tmp.path().join("devinfo"));
        let file = dirs.cni_path("ns/n", "c", "net1");
        prepare_device_info_file(&dirs, None, &file).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dirs.cni_dir()), 0o755);
        assert_eq!(mode(&dirs.base), 0o755);
    }

    #[test]
    fn a_pod_the_kubelet_does_not_know_is_an_error_to_retry() {
        let k = Kubelet {
            pod: None,
            offered: None,
            calls: Cell::new((0, 0)),
        };
        let e = KubeletDevices::new(&k)
            .allocated(&pod(), "r/vf")
            .unwrap_err();
        assert_eq!(e.code, 11);
        assert!(e.msg.contains("does not know pod ns/p"), "{e}");
    }
}
