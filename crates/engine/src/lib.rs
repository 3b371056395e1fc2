//! plumb's engine: the CNI delegating plugin of the NPWG multi-network specification, whatever
//! reaches Kubernetes. It is synchronous and links no Kubernetes client: the cluster and the
//! kubelet are traits ([`cluster`], [`kubelet`]) that plumb-cluster implements and the tests
//! fake. docs/architecture.md follows one ADD and one DEL through these modules.
//!
//! - [`commands`]: plumb as the runtime's CNI plugin: ADD, DEL, CHECK, GC and STATUS.
//! - [`config`]: plumb's configuration, Multus's keys accepted unchanged.
//! - [`plan`]: a pod's ordered attachments, computed without side effects.
//! - [`execute`]: ADD, DEL and CHECK of those attachments, with the records.
//! - [`record`]: the attachment records DEL works from.
//! - [`container_lock`]: one call at a time per container, across processes.
//! - [`pod_args`]: which pod a CNI call is for (`K8S_POD_*` in `CNI_ARGS`).
//! - [`multus_cache`]: Multus's scratch cache, for DEL of a sandbox Multus attached.
//! - [`netns`]: `CNI_NETNS` checked to be a network namespace before anything runs.
//! - [`networks`]: where a node finds delegate configurations (NADs, files).
//! - [`devices`]: the devices of device-backed networks and their device-info files.
//! - [`routes`]: `default-route` (multi-net spec §4.1.2.1.9) in the pod's netns, over netlink.
//! - [`cluster`], [`kubelet`]: the seams to the Kubernetes API and the kubelet.
//! - [`kubelet_checkpoint`]: the kubelet's device-manager checkpoint, read for the pod's devices
//!   when the PodResources socket does not exist.
//! - [`objects`]: Kubernetes objects (NADs, pods) from YAML/JSON files, for use without a cluster.
//! - [`yaml`]: YAML from outside (object files, exec credential answers) read with bounds.
//! - [`log`]: the log, Multus's line format.
//! - [`paths`]: every default path.

pub mod change;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod container_lock;
pub mod devices;
pub mod execute;
pub mod kubelet;
pub mod kubelet_checkpoint;
pub mod log;
pub mod multus_cache;
pub mod netns;
pub mod networks;
pub mod objects;
pub mod paths;
pub mod plan;
pub mod pod_args;
pub mod record;
pub mod routes;
pub mod yaml;

#[cfg(test)]
mod fake;
