//! The kubelet's device-manager checkpoint, `<plumbKubeletRootDir>/device-plugins/
//! kubelet_internal_checkpoint`: where a pod's device IDs come from when the kubelet's
//! PodResources socket does not exist, as in Multus (docs/multus-behaviour.md §2.9; device-info
//! spec 1.1 §4.2.1, "query Kubelet to find the DeviceID"). [`OrCheckpoint`] is the call's
//! [`PodResources`]: the API while its socket exists, else the checkpoint, read bounded and
//! parsed by [`format`](mod@format).

pub mod format;

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cni::error::{CniError, ErrorCode};

use self::format::Checkpoint;
use crate::kubelet::{PodDevices, PodResources};
use crate::log::Log;

/// The checkpoint's place in the kubelet's root directory (`--root-dir`).
pub const CHECKPOINT: &str = "device-plugins/kubelet_internal_checkpoint";

/// The largest checkpoint read. Each container's devices of one resource are one entry of a
/// few KiB at most (its `AllocResp`: the environment, mounts and device nodes the device plugin
/// gave); a full node's checkpoint is far smaller.
pub const MAX_CHECKPOINT: u64 = 8 << 20;

/// The checkpoint of the kubelet whose root directory is `kubelet_root`.
pub fn checkpoint_path(kubelet_root: &Path) -> PathBuf {
    kubelet_root.join(CHECKPOINT)
}

/// The kubelet's devices for one call: the PodResources API `api` when its `socket` exists
/// (decided at first use, so that one call's answers come from one source), else the
/// checkpoint, read once. Says in the log which one gave the pod's devices.
pub struct OrCheckpoint {
    api: Box<dyn PodResources>,
    socket: PathBuf,
    checkpoint: PathBuf,
    log: Arc<Log>,
    without_socket: OnceCell<bool>,
    read: OnceCell<Result<Checkpoint, CniError>>,
}

impl OrCheckpoint {
    /// Nothing is looked at before the first question.
    pub fn new(
        api: Box<dyn PodResources>,
        socket: &Path,
        kubelet_root: &Path,
        log: Arc<Log>,
    ) -> Self {
        OrCheckpoint {
            api,
            socket: socket.to_path_buf(),
            checkpoint: checkpoint_path(kubelet_root),
            log,
            without_socket: OnceCell::new(),
            read: OnceCell::new(),
        }
    }

    /// Whether the socket does not exist, as Multus decides it. A socket that cannot be looked
    /// at for another reason is the API's to report.
    fn without_socket(&self) -> bool {
        *self.without_socket.get_or_init(|| {
            matches!(std::fs::metadata(&self.socket),
                Err(e) if e.kind() == io::ErrorKind::NotFound)
        })
    }

    fn checkpoint(&self) -> Result<&Checkpoint, CniError> {
        self.read
            .get_or_init(|| read(&self.checkpoint, &self.socket))
            .as_ref()
            .map_err(CniError::clone)
    }
}

impl PodResources for OrCheckpoint {
    fn pod_devices(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<PodDevices>, CniError> {
        if !self.without_socket() {
            let devices = self.api.pod_devices(namespace, name, uid)?;
            self.log.verbose(&format!(
                "devices of pod {namespace}/{name}: from the kubelet's PodResources API on {}",
                self.socket.display()
            ));
            return Ok(devices);
        }
        // The checkpoint knows pods by UID only.
        if uid.is_empty() {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!(
                    "the kubelet's PodResources socket {} does not exist, and its device-manager \
                     checkpoint {} names pods by UID, which this call does not have for pod \
                     {namespace}/{name} (no K8S_POD_UID in CNI_ARGS)",
                    self.socket.display(),
                    self.checkpoint.display()
                ),
            ));
        }
        let devices = self.checkpoint()?.pod_devices(uid);
        self.log.verbose(&format!(
            "devices of pod {namespace}/{name} (UID {uid}): from the kubelet's device-manager \
             checkpoint {}, as its PodResources socket {} does not exist",
            self.checkpoint.display(),
            self.socket.display()
        ));
        Ok(Some(devices))
    }

    fn device_resources(&self) -> Result<Option<BTreeSet<String>>, CniError> {
        if !self.without_socket() {
            return self.api.device_resources();
        }
        Ok(Some(self.checkpoint()?.registered.clone()))
    }
}

/// The checkpoint at `path`, read because the PodResources socket `socket` does not exist.
/// Neither there is code 11, as a missing socket is (the kubelet may be restarting); a file
/// that cannot be read or is not a checkpoint is an error naming it and what is wrong.
pub fn read(path: &Path, socket: &Path) -> Result<Checkpoint, CniError> {
    let file = format!(
        "the kubelet's device-manager checkpoint {} (read as its PodResources socket {} does \
         not exist)",
        path.display(),
        socket.display()
    );
    let bytes = cni::files::read_bounded(path, MAX_CHECKPOINT).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => CniError::new(
            ErrorCode::TryAgainLater,
            format!(
                "kubelet PodResources socket {} does not exist, nor the kubelet's device-manager \
                 checkpoint {}: is the kubelet running, and are plumbPodResourcesSocket and \
                 plumbKubeletRootDir right?",
                socket.display(),
                path.display()
            ),
        ),
        _ => CniError::new(ErrorCode::Io, format!("{file} cannot be read: {e}")),
    })?;
    format::parse(&bytes).map_err(|e| {
        CniError::new(
            ErrorCode::DecodingFailure,
            format!("{file} cannot be used: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    /// A PodResources API that counts its questions (clones share the count) and gives one
    /// device.
    #[derive(Clone, Default)]
    struct Api(Rc<Cell<u32>>);

    impl PodResources for Api {
        fn pod_devices(&self, _: &str, _: &str, _: &str) -> Result<Option<PodDevices>, CniError> {
            self.0.set(self.0.get() + 1);
            Ok(Some(PodDevices::from([(
                "intel.com/sriov".into(),
                vec!["from-the-api".into()],
            )])))
        }
        fn device_resources(&self) -> Result<Option<BTreeSet<String>>, CniError> {
            self.0.set(self.0.get() + 1);
            Ok(None)
        }
    }

    const CHECKPOINT_1_20: &str = r#"{"Data":{"PodDeviceEntries":[
        {"PodUID":"uid-p","ContainerName":"c","ResourceName":"intel.com/sriov",
         "DeviceIDs":{"0":["0000:03:02.2","0000:03:02.1"]},"AllocResp":"Cg=="}],
        "RegisteredDevices":{"intel.com/sriov":["0000:03:02.1","0000:03:02.2"]}},
        "Checksum":1}"#;

    /// A kubelet root under `dir` holding `checkpoint`, the socket's path in it (not made).
    fn kubelet_root(dir: &Path, checkpoint: Option<&str>) -> (PathBuf, PathBuf) {
        let root = dir.join("kubelet");
        if let Some(c) = checkpoint {
            let path = checkpoint_path(&root);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, c).unwrap();
        }
        let socket = root.join("pod-resources/kubelet.sock");
        (root, socket)
    }

    fn source(api: &Api, socket: &Path, root: &Path) -> OrCheckpoint {
        OrCheckpoint::new(Box::new(api.clone()), socket, root, Arc::new(Log::off()))
    }

    #[test]
    fn the_checkpoint_is_read_when_the_socket_does_not_exist_and_only_then() {
        let d = tempfile::tempdir().unwrap();
        let (root, socket) = kubelet_root(d.path(), Some(CHECKPOINT_1_20));
        let api = Api::default();
        let s = source(&api, &socket, &root);
        assert_eq!(
            s.pod_devices("ns", "p", "uid-p").unwrap(),
            Some(PodDevices::from([(
                "intel.com/sriov".into(),
                vec!["0000:03:02.1".into(), "0000:03:02.2".into()]
            )]))
        );
        assert_eq!(
            s.device_resources().unwrap(),
            Some(BTreeSet::from(["intel.com/sriov".into()]))
        );
        // A pod the checkpoint does not list has no devices.
        assert_eq!(
            s.pod_devices("ns", "q", "uid-q").unwrap(),
            Some(PodDevices::new())
        );
        assert_eq!(api.0.get(), 0, "the API is not asked");

        // With the socket there, the API answers as before, and the checkpoint is not read.
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        std::fs::write(&socket, "").unwrap();
        std::fs::write(checkpoint_path(&root), "not a checkpoint").unwrap();
        let s = source(&api, &socket, &root);
        assert_eq!(
            s.pod_devices("ns", "p", "uid-p").unwrap(),
            Some(PodDevices::from([(
                "intel.com/sriov".into(),
                vec!["from-the-api".into()]
            )]))
        );
        assert_eq!(s.device_resources().unwrap(), None);
        assert_eq!(api.0.get(), 2);
    }

    #[test]
    fn neither_socket_nor_checkpoint_is_an_error_to_retry_naming_both() {
        let d = tempfile::tempdir().unwrap();
        let (root, socket) = kubelet_root(d.path(), None);
        let e = source(&Api::default(), &socket, &root)
            .pod_devices("ns", "p", "uid-p")
            .unwrap_err();
        assert_eq!(e.code, 11, "{e}");
        assert!(e.msg.contains(&socket.display().to_string()), "{e}");
        assert!(
            e.msg
                .contains(&checkpoint_path(&root).display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_checkpoint_plumb_cannot_use_is_an_error_naming_it_and_what_is_wrong() {
        let d = tempfile::tempdir().unwrap();
        let (root, socket) = kubelet_root(d.path(), Some(r#"{"Data":{"PodDeviceEntries":{}}}"#));
        let path = checkpoint_path(&root).display().to_string();
        let e = source(&Api::default(), &socket, &root)
            .pod_devices("ns", "p", "uid-p")
            .unwrap_err();
        assert_eq!(e.code, 6, "{e}");
        assert!(
            e.msg.contains(&path) && e.msg.contains("Data.PodDeviceEntries is an object"),
            "{e}"
        );
        // Larger than any checkpoint: refused, not read whole.
        let big = std::fs::File::create(checkpoint_path(&root)).unwrap();
        big.set_len(MAX_CHECKPOINT + 1).unwrap();
        let e = read(&checkpoint_path(&root), &socket).unwrap_err();
        assert_eq!(e.code, 5, "{e}");
        assert!(
            e.msg.contains(&path) && e.msg.contains("larger than"),
            "{e}"
        );
        // A FIFO in its place does not hold the call.
        std::fs::remove_file(checkpoint_path(&root)).unwrap();
        nix::unistd::mkfifo(
            &checkpoint_path(&root),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let e = read(&checkpoint_path(&root), &socket).unwrap_err();
        assert!(e.msg.contains(&path) && e.msg.contains("a FIFO"), "{e}");
    }

    #[test]
    fn without_the_pods_uid_the_checkpoint_cannot_be_matched() {
        let d = tempfile::tempdir().unwrap();
        let (root, socket) = kubelet_root(d.path(), Some(CHECKPOINT_1_20));
        let e = source(&Api::default(), &socket, &root)
            .pod_devices("ns", "p", "")
            .unwrap_err();
        assert_eq!(e.code, 4, "{e}");
        assert!(e.msg.contains("K8S_POD_UID"), "{e}");
    }
}
