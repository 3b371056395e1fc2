//! plumb reaching Kubernetes and the kubelet: the kube-rs client built from a kubeconfig
//! ([`kube`]), the API clients the daemon keeps between calls ([`client_pool`]), the kubelet's
//! PodResources gRPC client ([`pod_resources`]), and [`connect`], which hands them to the
//! engine through its `Connect` trait. This crate owns tokio: the engine's traits block, and
//! each client runs its requests on a current-thread runtime of its own ([`runtime`]).

pub mod client_pool;
pub mod connect;
pub mod kube;
pub mod pod_resources;
pub mod runtime;
