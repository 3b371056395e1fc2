//! The PodResources stand-in answers as the kubelet does, checked through a plain tonic client
//! (testkit's own generated one, not plumb's): the pods and devices a test set, the kubelet's
//! error statuses for `Get`, the request log, and the socket's life.

use std::path::Path;
use std::sync::{Arc, Mutex};

use testkit::pod_resources::v1::pod_resources_lister_client::PodResourcesListerClient;
use testkit::pod_resources::v1::{
    AllocatableResourcesRequest, GetPodResourcesRequest, ListPodResourcesRequest,
};
use testkit::pod_resources::{ContainerDevices, GetMode, PodResourcesStandIn};
use tonic::Code;
use tonic::transport::{Channel, Endpoint, Uri};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn client(socket: &Path) -> PodResourcesListerClient<Channel> {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let slot = Arc::new(Mutex::new(Some(stream)));
    let connector = tower::service_fn(move |_: Uri| {
        let stream = slot.lock().unwrap().take();
        async move {
            stream
                .map(hyper_util::rt::TokioIo::new)
                .ok_or_else(|| std::io::Error::other("connected once already"))
        }
    });
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(connector)
        .await
        .unwrap();
    PodResourcesListerClient::new(channel)
}

fn get(pod_namespace: &str, pod_name: &str) -> GetPodResourcesRequest {
    GetPodResourcesRequest {
        pod_name: pod_name.to_owned(),
        pod_namespace: pod_namespace.to_owned(),
    }
}

#[test]
fn list_get_and_allocatable_show_the_pods_set() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = PodResourcesStandIn::start(&dir.path().join("kubelet.sock")).unwrap();
    kubelet.set_pod(
        "default",
        "a",
        vec![
            ContainerDevices::new("c1", "r/x", &["2", "1"]),
            ContainerDevices::new("c2", "r/x", &["3"]),
            ContainerDevices::new("c1", "r/y", &["y0"]),
        ],
    );
    kubelet.set_pod("kube-system", "b", vec![]);
    runtime().block_on(async {
        let mut c = client(kubelet.socket()).await;

        let list = c
            .list(ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        let pods: Vec<_> = list
            .pod_resources
            .iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        assert_eq!(pods, ["default/a", "kube-system/b"]);

        let a = c.get(get("default", "a")).await.unwrap().into_inner();
        let a = a.pod_resources.unwrap();
        // One entry per container, devices grouped under it, IDs as given.
        let containers: Vec<_> = a
            .containers
            .iter()
            .map(|c| {
                let devices: Vec<_> = c
                    .devices
                    .iter()
                    .map(|d| format!("{}={}", d.resource_name, d.device_ids.join(",")))
                    .collect();
                format!("{}: {}", c.name, devices.join(" "))
            })
            .collect();
        assert_eq!(containers, ["c1: r/x=2,1 r/y=y0", "c2: r/x=3"]);

        let all = c
            .get_allocatable_resources(AllocatableResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        let devices: Vec<_> = all
            .devices
            .iter()
            .map(|d| format!("{}={}", d.resource_name, d.device_ids.join(",")))
            .collect();
        assert_eq!(devices, ["r/x=1,2,3", "r/y=y0"]);
    });
    assert_eq!(
        kubelet.requests(),
        ["List", "Get default/a", "GetAllocatableResources"]
    );
}

#[test]
fn get_fails_as_the_kubelet_does() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = PodResourcesStandIn::start(&dir.path().join("kubelet.sock")).unwrap();
    kubelet.set_pod("default", "a", vec![]);
    runtime().block_on(async {
        let mut c = client(kubelet.socket()).await;

        let e = c.get(get("default", "ghost")).await.unwrap_err();
        assert_eq!(e.code(), Code::Unknown);
        assert_eq!(e.message(), "pod ghost in namespace default not found");

        kubelet.remove_pod("default", "a");
        let e = c.get(get("default", "a")).await.unwrap_err();
        assert_eq!(e.message(), "pod a in namespace default not found");

        kubelet.set_get_mode(GetMode::Disabled);
        let e = c.get(get("default", "a")).await.unwrap_err();
        assert_eq!(e.code(), Code::Unknown);
        assert_eq!(e.message(), "PodResources API Get method disabled");

        kubelet.set_get_mode(GetMode::Unimplemented);
        let e = c.get(get("default", "a")).await.unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented);

        // List is there whatever Get does.
        c.list(ListPodResourcesRequest {}).await.unwrap();
    });
    kubelet.clear_requests();
    assert!(kubelet.requests().is_empty());
}

#[test]
fn the_socket_lives_as_long_as_the_stand_in() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    // A stale socket from an earlier run is replaced, as the kubelet replaces its own.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let kubelet = PodResourcesStandIn::start(&socket).unwrap();
    runtime().block_on(async {
        let mut c = client(&socket).await;
        c.list(ListPodResourcesRequest {}).await.unwrap();
    });
    kubelet.stop();
    assert!(!socket.exists(), "the socket is removed on stop");

    // Anything else at the path is left alone.
    std::fs::write(&socket, "not a socket").unwrap();
    assert!(PodResourcesStandIn::start(&socket).is_err());
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
}
