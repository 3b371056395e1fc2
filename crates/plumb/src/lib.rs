//! plumb: a CNI delegating plugin implementing the Network Plumbing Working Group's
//! multi-network specification. See ../../shared/DESIGN.md for the way of one ADD.
//!
//! - [`cnitool`]: `plumb cni`, an operator's tool that runs a network configuration list
//!   against a network namespace, as the reference `cnitool` does.
//! - [`config`]: plumb's configuration, Multus's keys accepted unchanged.
//! - [`record`]: the attachment records DEL works from.
//! - [`container_lock`]: one call at a time per container, across processes.
//! - [`node_call`]: STATUS and GC in progress, and plumb run as its own delegate for one.
//! - [`pod_args`]: which pod a CNI call is for (`K8S_POD_*` in `CNI_ARGS`).
//! - [`plan`]: a pod's ordered attachments, computed without side effects.
//! - [`execute`]: ADD, DEL and CHECK of those attachments, with the records.
//! - [`multus_cache`]: Multus's scratch cache, for DEL of a sandbox Multus attached.
//! - [`cluster`]: the Kubernetes API as plumb uses it (kube-rs behind a trait).
//! - [`pod_resources`]: the kubelet's PodResources API (gRPC behind a trait): a pod's devices.
//! - [`devices`]: the devices of device-backed networks and their device-info files.
//! - [`networks`]: where a node finds delegate configurations (NADs, files).
//! - [`objects`]: Kubernetes objects (NADs, pods) from YAML/JSON files, for use without a cluster.
//! - [`yaml`]: YAML from outside (object files, exec credential answers) read with bounds.
//! - [`plugin`]: plumb as the runtime's CNI plugin.
//! - [`shim`]: the plugin forwarding its calls to `plumb daemon`.
//! - [`daemon`]: `plumb daemon`, the engine serving calls with API clients kept between them.
//! - [`client_pool`]: the daemon's API clients, kept between calls.
//! - [`conf_writer`]: plumb's CNI configuration on the node, written by the daemon.
//! - [`kubeconfig_writer`]: a kubeconfig from the daemon's service account, kept current.
//! - [`files`]: files the configuration names, read without waiting or reading on.
//! - [`log`]: the log, Multus's line format.
//! - [`standalone`]: `plumb attach`, `detach`, `plan` and `status`, with or without a cluster.
//! - [`validate`]: `plumb validate`, NADs and pods checked before they reach a cluster.
//! - [`routes`]: `default-route` (spec §4.1.2.1.9) in the pod's netns, over netlink.

pub mod client_pool;
pub mod cluster;
pub mod cnitool;
pub mod conf_writer;
pub mod config;
pub mod container_lock;
pub mod daemon;
pub mod devices;
pub mod execute;
pub mod freezer;
pub mod kubeconfig_writer;
pub mod log;
pub mod multus_cache;
pub mod networks;
pub mod node_call;
pub mod node_token;
pub mod objects;
pub mod plan;
pub mod plugin;
pub mod pod_args;
pub mod pod_resources;
pub mod record;
pub mod routes;
pub mod shim;
pub mod standalone;
pub mod validate;
pub mod yaml;
