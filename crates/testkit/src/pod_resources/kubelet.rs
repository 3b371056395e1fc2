//! The stand-in's answers: kubelet's `PodResourcesLister` v1 service over the pods a test set,
//! with the kubelet's own error statuses (pkg/kubelet/apis/podresources/server_v1.go).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tonic::{Request, Response, Status};

use super::v1::{self, pod_resources_lister_server::PodResourcesLister};
use super::{ContainerDevices, GetMode};

/// What the test set, and what the clients asked.
#[derive(Default)]
pub(crate) struct State {
    /// (namespace, name) → the pod's devices, in the order the test gave them.
    pub pods: BTreeMap<(String, String), Vec<ContainerDevices>>,
    pub get_mode: GetMode,
    /// Devices the node's device plugins offer that no pod holds, per resource.
    pub free: BTreeMap<String, Vec<String>>,
    /// `GetAllocatableResources` answers UNIMPLEMENTED (kubelets before the feature).
    pub allocatable_unimplemented: bool,
    pub requests: Vec<String>,
}

/// Locks the state, ignoring poisoning: a test that panicked while holding it must not take the
/// server down with it, and every critical section leaves the state consistent.
pub(crate) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) struct Kubelet {
    pub state: Arc<Mutex<State>>,
}

impl Kubelet {
    /// Logs a request and returns the state, still locked.
    fn log(&self, request: String) -> MutexGuard<'_, State> {
        let mut state = lock(&self.state);
        state.requests.push(request);
        state
    }
}

/// A pod as the kubelet reports it: one entry per container, in the order the containers first
/// appear, each with its devices.
fn pod_resources(namespace: &str, name: &str, devices: &[ContainerDevices]) -> v1::PodResources {
    let mut containers: Vec<v1::ContainerResources> = Vec::new();
    for d in devices {
        let device = v1::ContainerDevices {
            resource_name: d.resource.clone(),
            device_ids: d.device_ids.clone(),
            topology: None,
        };
        match containers.iter_mut().find(|c| c.name == d.container) {
            Some(c) => c.devices.push(device),
            None => containers.push(v1::ContainerResources {
                name: d.container.clone(),
                devices: vec![device],
                ..v1::ContainerResources::default()
            }),
        }
    }
    v1::PodResources {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        containers,
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Kubelet {
    async fn list(
        &self,
        _: Request<v1::ListPodResourcesRequest>,
    ) -> Result<Response<v1::ListPodResourcesResponse>, Status> {
        let state = self.log("List".to_owned());
        let pod_resources = state
            .pods
            .iter()
            .map(|((ns, name), devices)| pod_resources(ns, name, devices))
            .collect();
        Ok(Response::new(v1::ListPodResourcesResponse {
            pod_resources,
        }))
    }

    /// Every device the stand-in knows, one entry per resource: those pods hold and those the
    /// test said are free.
    async fn get_allocatable_resources(
        &self,
        _: Request<v1::AllocatableResourcesRequest>,
    ) -> Result<Response<v1::AllocatableResourcesResponse>, Status> {
        let state = self.log("GetAllocatableResources".to_owned());
        if state.allocatable_unimplemented {
            return Err(Status::unimplemented(
                "unknown method GetAllocatableResources for service v1.PodResourcesLister",
            ));
        }
        let mut by_resource: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (resource, ids) in &state.free {
            by_resource
                .entry(resource)
                .or_default()
                .extend(ids.iter().cloned());
        }
        for d in state.pods.values().flatten() {
            by_resource
                .entry(&d.resource)
                .or_default()
                .extend(d.device_ids.iter().cloned());
        }
        let devices = by_resource
            .into_iter()
            .map(|(resource, mut ids)| {
                ids.sort();
                ids.dedup();
                v1::ContainerDevices {
                    resource_name: resource.to_owned(),
                    device_ids: ids,
                    topology: None,
                }
            })
            .collect();
        Ok(Response::new(v1::AllocatableResourcesResponse {
            devices,
            ..v1::AllocatableResourcesResponse::default()
        }))
    }

    async fn get(
        &self,
        request: Request<v1::GetPodResourcesRequest>,
    ) -> Result<Response<v1::GetPodResourcesResponse>, Status> {
        let req = request.into_inner();
        let (ns, name) = (req.pod_namespace, req.pod_name);
        let state = self.log(format!("Get {ns}/{name}"));
        match state.get_mode {
            // What grpc-go answers for a method the server does not have (kubelet < 1.27).
            GetMode::Unimplemented => Err(Status::unimplemented(
                "unknown method Get for service v1.PodResourcesLister",
            )),
            // The kubelet returns plain Go errors (fmt.Errorf), which gRPC sends as UNKNOWN.
            GetMode::Disabled => Err(Status::unknown("PodResources API Get method disabled")),
            GetMode::Supported => match state.pods.get(&(ns.clone(), name.clone())) {
                Some(devices) => Ok(Response::new(v1::GetPodResourcesResponse {
                    pod_resources: Some(pod_resources(&ns, &name, devices)),
                })),
                None => Err(Status::unknown(format!(
                    "pod {name} in namespace {ns} not found"
                ))),
            },
        }
    }
}
