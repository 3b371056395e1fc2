//! The objects of the Network Plumbing Working Group specifications, as a pure library on top of
//! the `cni` crate: no network I/O, no processes (device-info files are the one local file I/O).
//! Every error type converts into a [`cni::CniError`] (code 7, invalid configuration; 5 for
//! device-info file I/O) and names what is wrong: the element and key, the NAD, the file.
//!
//! - [`nad`]: the NetworkAttachmentDefinition and getting its CNI configuration (multi-net spec
//!   §3).
//! - [`ipamclaim`]: the IPAMClaim (§8).
//! - [`names`]: DNS-1123 names and `namespace/name` references (§3.3, §4.1.1).
//! - [`selection`]: the `k8s.v1.cni.cncf.io/networks` annotation, both formats, every rule (§4).
//! - [`runtime_config`]: what an element asks of its delegates: `runtimeConfig` values,
//!   capability checks, `cni-args` (§4.1.2.1.x.2).
//! - [`status`]: the `k8s.v1.cni.cncf.io/network-status` annotation (§5).
//! - [`device_info`], [`device_info_files`]: the device-info format and files (device-info spec
//!   1.1.0).

pub mod device_info;
pub mod device_info_files;
pub mod ipamclaim;
pub mod nad;
pub mod names;
pub mod runtime_config;
pub mod selection;
pub mod status;

pub use device_info::DeviceInfo;
pub use ipamclaim::IPAMClaim;
pub use nad::{NadConfig, NetworkAttachmentDefinition};
pub use names::NetworkRef;
pub use selection::{NETWORKS_ANNOTATION, NetworkSelectionElement, SelectionError};
pub use status::{NETWORK_STATUS_ANNOTATION, NetworkStatus};
