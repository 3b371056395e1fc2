//! Test support for plumb's crates (a dev-dependency only, never shipped). It holds stand-ins
//! for the two servers that cannot run on the build machines, the Kubernetes API server and the
//! kubelet (docs/architecture.md, "Layers"); everything else the tests use is real.
//!
//! - [`kube_api`]: a Kubernetes API server stand-in, reached through kube-rs and a kubeconfig.
//! - [`fake_plugin`]: a recording fake CNI plugin, a real executable that a runtime finds in
//!   `CNI_PATH`, which keeps the exact stdin and environment of every call.
//! - [`pod_resources`]: the kubelet's PodResources gRPC API on a unix socket, with pods and
//!   device IDs a test sets.
//! - [`netns`]: real network namespaces, links and `ip -j` read-backs for tests that run the
//!   reference plugins (they need root; CI runs as root).

pub mod fake_plugin;
pub mod kube_api;
pub mod netns;
pub mod pod_resources;
