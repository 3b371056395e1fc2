//! testkit: test support for plumb, never shipped (a dev-dependency only). It holds the
//! stand-ins for what cannot run on the build machines; everything else the tests use is real.
//!
//! - [`kube_api`]: a Kubernetes API server stand-in, reached through kube-rs and a kubeconfig.

pub mod kube_api;
