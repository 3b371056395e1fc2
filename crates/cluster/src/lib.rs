//! plumb reaching Kubernetes and the kubelet: the kube-rs client built from a kubeconfig
//! ([`kube`]), the API clients the daemon keeps between calls ([`client_pool`]), its watch
//! caches of pods and NADs ([`caches`]) and the events it sends after the call ([`events`]), the
//! kubelet's PodResources gRPC client ([`pod_resources`]), and [`connect`] and [`cached`], which
//! hand them to the engine through its `Connect` trait. This crate owns tokio: the engine's traits block, and
//! each client runs its requests on a current-thread runtime of its own ([`runtime`]).

pub mod api_requests;
pub mod cached;
pub mod caches;
pub mod client_pool;
pub mod connect;
pub mod events;
pub mod kube;
pub mod pod_resources;
pub mod runtime;

/// Where the daemon's own lines go (its stderr), from the threads of its caches and events.
pub type Say = std::sync::Arc<dyn Fn(std::fmt::Arguments<'_>) + Send + Sync>;
