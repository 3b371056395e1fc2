//! plumb's kubelet PodResources client against testkit's stand-in kubelet, over a real unix
//! socket: which devices a pod gets, `Get` and its `List` fallback on older or gated kubelets,
//! and the errors an operator reads when the kubelet is not there.

use std::path::{Path, PathBuf};

use cni::error::{CniError, ErrorCode};
use plumb_cluster::pod_resources::KubeletPodResources;
use plumb_engine::kubelet::{PodDevices, PodResources};
use testkit::pod_resources::{ContainerDevices, GetMode, PodResourcesStandIn};

const SRIOV: &str = "intel.com/sriov_netdevice";
const RDMA: &str = "mellanox.com/rdma";

struct Kubelet {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    stand_in: PodResourcesStandIn,
}

/// A stand-in kubelet with pod default/pod-a (two containers, two resources, IDs out of order)
/// and a pod of the same name in another namespace, which must never be mixed up with it.
fn kubelet() -> Kubelet {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let stand_in = PodResourcesStandIn::start(&socket).unwrap();
    stand_in.set_pod(
        "default",
        "pod-a",
        vec![
            ContainerDevices::new("app", SRIOV, &["0000:03:00.4", "0000:03:00.2"]),
            ContainerDevices::new("app", RDMA, &["mlx5_3"]),
            ContainerDevices::new("sidecar", SRIOV, &["0000:03:00.3"]),
            ContainerDevices::new("sidecar", RDMA, &["mlx5_1"]),
        ],
    );
    stand_in.set_pod(
        "other",
        "pod-a",
        vec![ContainerDevices::new("app", SRIOV, &["0000:81:00.1"])],
    );
    Kubelet {
        _dir: dir,
        socket,
        stand_in,
    }
}

fn pod_a_devices() -> PodDevices {
    PodDevices::from([
        (
            RDMA.to_owned(),
            vec!["mlx5_1".to_owned(), "mlx5_3".to_owned()],
        ),
        (
            SRIOV.to_owned(),
            vec![
                "0000:03:00.2".to_owned(),
                "0000:03:00.3".to_owned(),
                "0000:03:00.4".to_owned(),
            ],
        ),
    ])
}

fn error(result: Result<Option<PodDevices>, CniError>) -> CniError {
    match result {
        Ok(devices) => panic!("expected an error, got {devices:?}"),
        Err(e) => e,
    }
}

fn assert_names_socket(e: &CniError, socket: &Path) {
    assert!(
        e.msg.contains(&socket.display().to_string()),
        "the error should name the socket {}: {e}",
        socket.display()
    );
}

#[test]
fn get_gives_every_containers_devices_per_resource_sorted() {
    let k = kubelet();
    let client = KubeletPodResources::new(&k.socket);
    assert_eq!(
        client.pod_devices("default", "pod-a", "").unwrap(),
        Some(pod_a_devices())
    );
    assert_eq!(k.stand_in.requests(), ["Get default/pod-a"]);

    // The same pod name in another namespace is another pod.
    assert_eq!(
        client.pod_devices("other", "pod-a", "").unwrap(),
        Some(PodDevices::from([(
            SRIOV.to_owned(),
            vec!["0000:81:00.1".to_owned()]
        )]))
    );
}

#[test]
fn list_is_asked_when_the_kubelet_has_no_get() {
    let k = kubelet();
    k.stand_in.set_get_mode(GetMode::Unimplemented);
    let client = KubeletPodResources::new(&k.socket);
    assert_eq!(
        client.pod_devices("default", "pod-a", "").unwrap(),
        Some(pod_a_devices())
    );
    assert_eq!(k.stand_in.requests(), ["Get default/pod-a", "List"]);
}

#[test]
fn list_is_asked_when_get_is_disabled_by_the_feature_gate() {
    let k = kubelet();
    k.stand_in.set_get_mode(GetMode::Disabled);
    let client = KubeletPodResources::new(&k.socket);
    assert_eq!(
        client.pod_devices("default", "pod-a", "").unwrap(),
        Some(pod_a_devices())
    );
    assert_eq!(k.stand_in.requests(), ["Get default/pod-a", "List"]);

    // A pod List does not show is unknown.
    assert_eq!(client.pod_devices("default", "ghost", "").unwrap(), None);
}

#[test]
fn a_pod_the_kubelet_does_not_know_is_none() {
    let k = kubelet();
    let client = KubeletPodResources::new(&k.socket);
    assert_eq!(client.pod_devices("default", "ghost", "").unwrap(), None);
    // Get's "not found" is the answer: List is not asked as well.
    assert_eq!(k.stand_in.requests(), ["Get default/ghost"]);

    k.stand_in.remove_pod("default", "pod-a");
    assert_eq!(client.pod_devices("default", "pod-a", "").unwrap(), None);
}

#[test]
fn a_pod_without_devices_has_an_empty_map() {
    let k = kubelet();
    k.stand_in.set_pod("default", "plain", vec![]);
    let client = KubeletPodResources::new(&k.socket);
    assert_eq!(
        client.pod_devices("default", "plain", "").unwrap(),
        Some(PodDevices::new())
    );
}

#[test]
fn replies_beyond_grpcs_default_4_mib_are_read_up_to_16_mib() {
    let k = kubelet();
    let ids = |prefix: &str, count: usize| -> Vec<String> {
        (0..count).map(|i| format!("{prefix}-{i:0>90}")).collect()
    };
    // About 5 MiB: more than tonic's default limit, less than Multus's 16 MiB.
    let big = ids("dev", 50_000);
    let refs: Vec<&str> = big.iter().map(String::as_str).collect();
    k.stand_in.set_pod(
        "default",
        "big",
        vec![ContainerDevices::new("c", SRIOV, &refs)],
    );
    let client = KubeletPodResources::new(&k.socket);
    let devices = client.pod_devices("default", "big", "").unwrap().unwrap();
    assert_eq!(devices[SRIOV].len(), 50_000);

    // About 18.5 MiB: refused with a clear error, not read.
    let huge = ids("dev", 200_000);
    let refs: Vec<&str> = huge.iter().map(String::as_str).collect();
    k.stand_in.set_pod(
        "default",
        "huge",
        vec![ContainerDevices::new("c", SRIOV, &refs)],
    );
    let e = error(client.pod_devices("default", "huge", ""));
    assert_names_socket(&e, &k.socket);
    assert!(e.msg.contains("Get pod default/huge failed"), "{e}");
    assert!(e.msg.contains("message length too large"), "{e}");
}

#[test]
fn a_missing_socket_is_named_with_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let e = error(KubeletPodResources::new(&socket).pod_devices("default", "pod-a", ""));
    assert_eq!(
        e.msg,
        format!(
            "kubelet PodResources socket {} does not exist: is the kubelet running, and is the \
             path right (plumbPodResourcesSocket)?",
            socket.display()
        )
    );
    // The kubelet recreates its socket when it restarts: worth trying again.
    assert_eq!(e.kind(), ErrorCode::TryAgainLater);
}

#[test]
fn a_socket_nobody_listens_on_is_connection_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A socket file left by a kubelet that has died.
    let socket = dir.path().join("kubelet.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let e = error(KubeletPodResources::new(&socket).pod_devices("default", "pod-a", ""));
    assert_names_socket(&e, &socket);
    assert!(e.msg.contains("connection refused"), "{e}");
    assert_eq!(e.kind(), ErrorCode::TryAgainLater);
}

#[test]
fn a_kubelet_whose_connection_backlog_is_full_is_worth_trying_again() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    // A kubelet too busy to accept: its listen backlog (0 here, so one waiting connection
    // fills it) is full, and a non-blocking connect(2) fails with EAGAIN.
    let rt = plumb_cluster::runtime::current_thread().unwrap();
    let _in_rt = rt.enter();
    let listener = tokio::net::UnixSocket::new_stream().unwrap();
    listener.bind(&socket).unwrap();
    let _listener = listener.listen(0).unwrap();
    let _waiting = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let e = error(KubeletPodResources::new(&socket).pod_devices("default", "pod-a", ""));
    assert_names_socket(&e, &socket);
    assert!(e.msg.contains("backlog is full"), "{e}");
    // The kubelet catches up: the runtime's retry of the sandbox is the right answer.
    assert_eq!(e.kind(), ErrorCode::TryAgainLater, "{e}");
}

#[test]
fn a_plain_file_where_the_socket_should_be_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubelet.sock");
    std::fs::write(&file, "").unwrap();
    let e = error(KubeletPodResources::new(&file).pod_devices("default", "pod-a", ""));
    assert_eq!(
        e.msg,
        format!(
            "kubelet PodResources socket {}: it is not a socket: is the path right \
             (plumbPodResourcesSocket)?",
            file.display()
        )
    );
    // Waiting will not turn a file into a socket.
    assert_eq!(e.kind(), ErrorCode::Io);
}

#[test]
fn a_kubelet_that_stops_between_calls_gives_an_error_then_works_again() {
    let k = kubelet();
    let client = KubeletPodResources::new(&k.socket);
    assert_eq!(
        client.pod_devices("default", "pod-a", "").unwrap(),
        Some(pod_a_devices())
    );

    let Kubelet {
        _dir,
        socket,
        stand_in,
    } = k;
    stand_in.stop();
    let e = error(client.pod_devices("default", "pod-a", ""));
    assert_names_socket(&e, &socket);
    assert_eq!(e.kind(), ErrorCode::TryAgainLater);

    // The kubelet is back (with its pods): the same client reaches it, nothing to reset.
    let back = PodResourcesStandIn::start(&socket).unwrap();
    back.set_pod(
        "default",
        "pod-a",
        vec![ContainerDevices::new("app", SRIOV, &["0000:03:00.2"])],
    );
    assert_eq!(
        client.pod_devices("default", "pod-a", "").unwrap(),
        Some(PodDevices::from([(
            SRIOV.to_owned(),
            vec!["0000:03:00.2".to_owned()]
        )]))
    );
}

#[test]
fn a_kubelet_that_hangs_up_mid_call_gives_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // Accepts each connection, reads what the client sends first, and closes it without a word
    // of HTTP/2, as a kubelet dying under the call would.
    let server = std::thread::spawn(move || {
        use std::io::Read;
        for _ in 0..2 {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            let mut buf = [0u8; 64];
            let _ = conn.read(&mut buf);
        }
    });
    let e = error(KubeletPodResources::new(&socket).pod_devices("default", "pod-a", ""));
    assert_names_socket(&e, &socket);
    assert_eq!(e.kind(), ErrorCode::TryAgainLater, "{e}");
    // Unblock the server thread if the client connected only once.
    let _ = std::os::unix::net::UnixStream::connect(&socket);
    let _ = std::os::unix::net::UnixStream::connect(&socket);
    server.join().unwrap();
}

#[test]
fn a_kubelet_that_never_answers_gives_a_timeout_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    // Listening, but never accepting: connecting works (the kernel queues the connection) and
    // then nothing answers, as with a kubelet stuck under load.
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let e = error(KubeletPodResources::new(&socket).pod_devices("default", "pod-a", ""));
    assert_names_socket(&e, &socket);
    assert!(
        e.msg
            .ends_with("Get pod default/pod-a: no answer within 5 s"),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorCode::TryAgainLater);
}

#[test]
fn device_resources_are_what_the_nodes_device_plugins_offer() {
    let k = kubelet();
    k.stand_in.set_free("example.com/fpga", &["fpga-0"]);
    let client = KubeletPodResources::new(&k.socket);
    let resources = client.device_resources().unwrap().unwrap();
    assert!(resources.contains(SRIOV), "{resources:?}");
    assert!(resources.contains("example.com/fpga"), "{resources:?}");
    // A marker resource (KubeVirt's bridge marker only counts capacity) is not a device one.
    assert!(!resources.contains("bridge.network.kubevirt.io/br0"));
    assert_eq!(k.stand_in.requests(), ["GetAllocatableResources"]);

    // A kubelet without the method cannot say.
    k.stand_in.set_allocatable_unimplemented(true);
    assert_eq!(client.device_resources().unwrap(), None);
}
