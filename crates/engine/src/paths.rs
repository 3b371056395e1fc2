//! Every path plumb uses unless told otherwise, in one place (docs/architecture.md, "Paths").
//! Each is a key of plumb's configuration or a flag; the defaults are Multus's where Multus has
//! the same file, so a Multus configuration keeps meaning the same files.

/// Multus's default `confDir`: where NADs with an empty `spec.config` are looked up as files.
pub const CONF_DIR: &str = "/etc/cni/multus/net.d";
/// libcni's result cache base (`cniDir`).
pub const CNI_DIR: &str = "/var/lib/cni";
/// Multus's default `cniDir`: its scratch cache and result cache (docs/multus-behaviour.md §2.13).
pub const MULTUS_CNI_DIR: &str = "/var/lib/cni/multus";
/// Where delegate plugins are looked for first (`binDir`), and where plumb is installed.
pub const BIN_DIR: &str = "/opt/cni/bin";
/// Where plumb keeps its attachment records (`plumbStateDir`).
pub const STATE_DIR: &str = "/var/lib/plumb";
/// Where the kubelet serves the PodResources API (`plumbPodResourcesSocket`):
/// `pod-resources/kubelet.sock` in its `--root-dir`, which is `/var/lib/kubelet` unless changed.
pub const POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// The kubelet's `--root-dir` (`plumbKubeletRootDir`), where its device manager keeps its
/// checkpoint, read when the PodResources socket does not exist.
pub const KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";
/// Where `plumb daemon` listens (`plumbDaemonSocket`, `--socket`).
pub const DAEMON_SOCKET: &str = "/run/plumb/plumb.sock";
/// plumb's configuration as `plumb attach`, `detach`, `plan` and `status` read it by default.
pub const CONFIG: &str = "/etc/cni/net.d/00-plumb.conf";
/// What `plumb daemon --write-config` writes, read when [`CONFIG`] is not there.
pub const CONFLIST: &str = "/etc/cni/net.d/00-plumb.conflist";
/// A pod's service account, as the kubelet mounts it (`--service-account-dir`).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
