//! The `plumb` binary's end-to-end tests, one test binary (each binary links kube, tokio, hyper
//! and tonic again: one builds faster): the built `plumb` run exactly as a container runtime
//! runs it, against real delegates in real network namespaces and testkit's API stand-in.

mod common;
mod e2e_daemon;
mod e2e_daemon_errors;
mod e2e_devices;
mod e2e_kubernetes;
mod e2e_multus_migration;
mod e2e_operator_errors;
mod plugin_without_kubernetes;
mod plumb_cni;
mod standalone;
mod validate;
