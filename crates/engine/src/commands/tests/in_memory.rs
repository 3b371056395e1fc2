//! The CNI handlers against an in-memory cluster (crate::fake): the requests each command makes
//! of the API, the network-status it writes, and what the delegates are asked, with recording
//! fake delegates and no binary, network namespace or API server.

use cni::skel::Plugin;
use serde_json::{Value, json};
use testkit::fake_plugin::FakePlugin;

use super::request;
use crate::commands::{Caller, Plumb};
use crate::fake::{InMemory, InMemoryCluster};
use crate::plan::Pod;
use crate::record::RecordStore;
use crate::routes::NetlinkRoutes;

/// A node under `dir`: plumb's configuration with a kubeconfig (the in-memory cluster answers
/// whatever it names) and the default network `cluster` of the fake plugin `fake-default`,
/// the NAD `default/net-a` of the fake plugin `fake-a` in the cluster, and the delegates'
/// recordings.
struct Node {
    config: Value,
    cluster: InMemoryCluster,
    default: FakePlugin,
    net_a: FakePlugin,
    records: RecordStore,
}

fn node(dir: &std::path::Path) -> Node {
    let bin = dir.join("bin");
    let default = FakePlugin::install(&bin, "fake-default");
    let net_a = FakePlugin::install(&bin, "fake-a");
    let config = json!({
        "cniVersion": "1.1.0", "name": "plumb-net", "type": "plumb", "binDir": bin,
        "kubeconfig": dir.join("kubeconfig"),
        "plumbStateDir": dir.join("state"), "confDir": dir.join("conf"), "cniDir": dir.join("cni"),
        "plumbDeviceInfoDir": dir.join("devinfo"), "logToStderr": false,
        "delegates": [{"cniVersion": "1.1.0", "name": "cluster", "type": "fake-default"}]
    });
    let cluster = InMemoryCluster::default();
    cluster.put_nad(json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"namespace": "default", "name": "net-a"},
        "spec": {"config": r#"{"cniVersion": "1.1.0", "name": "net-a", "type": "fake-a"}"#}
    }));
    Node {
        config,
        cluster,
        default,
        net_a,
        records: RecordStore::new(dir.join("state")),
    }
}

impl Node {
    /// Pod `default/name` (UID `uid-NAME`) selecting `net-a`.
    fn put_pod(&self, name: &str) {
        self.cluster.put_pod(Pod {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            annotations: [(netattach::NETWORKS_ANNOTATION.into(), "net-a".into())].into(),
        });
    }

    /// Runs `command` for the sandbox `container_id` of pod `default/pod`, as the runtime
    /// would (the in-memory cluster standing for the API server).
    fn call(&self, command: &str, container_id: &str, pod: &str) -> Result<Value, cni::CniError> {
        self.call_in(command, container_id, pod, "/proc/self/ns/net")
    }

    /// [`Node::call`] with `CNI_NETNS` `netns`.
    fn call_in(
        &self,
        command: &str,
        container_id: &str,
        pod: &str,
        netns: &str,
    ) -> Result<Value, cni::CniError> {
        let mut args = request(&self.config, container_id, netns);
        args.args = format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};K8S_POD_UID=uid-{pod}");
        let connect = InMemory(self.cluster.clone());
        let plumb = plumb(&connect);
        match command {
            "ADD" => plumb.add(&args).map(|r| r.to_value().unwrap()),
            "DEL" => plumb.del(&args).map(|()| Value::Null),
            "CHECK" => plumb.check(&args).map(|()| Value::Null),
            _ => panic!("{command}"),
        }
    }

    fn gc(&self, valid: &[&str]) -> Result<(), cni::CniError> {
        let mut config = self.config.clone();
        config["cni.dev/valid-attachments"] = valid
            .iter()
            .map(|id| json!({"containerID": id, "ifname": "eth0"}))
            .collect();
        plumb(&InMemory(self.cluster.clone())).gc(&request(&config, "", ""))
    }
}

/// plumb as the runtime runs it in thin mode, reaching the cluster through `connect`.
fn plumb(connect: &InMemory) -> Plumb<'_> {
    Plumb {
        routes: &NetlinkRoutes,
        connect,
        caller: Caller::ThisProcess,
    }
}

/// The interfaces the delegates of `plugin` were asked to `command`, for `container_id`.
fn ifnames(plugin: &FakePlugin, command: &str, container_id: &str) -> Vec<String> {
    plugin
        .calls_of(command)
        .iter()
        .filter(|c| c.var("CNI_CONTAINERID") == Some(container_id))
        .map(|c| c.var("CNI_IFNAME").unwrap_or_default().to_string())
        .collect()
}

#[test]
fn add_reads_the_pod_and_its_nad_then_writes_its_network_status_once() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    n.put_pod("p");
    let result = n.call("ADD", "c1", "p").unwrap();
    assert_eq!(result["cniVersion"], "1.1.0", "{result}");
    assert_eq!(ifnames(&n.default, "ADD", "c1"), ["eth0"]);
    assert_eq!(ifnames(&n.net_a, "ADD", "c1"), ["net1"]);
    assert_eq!(
        n.cluster.requests(),
        [
            "GET pod default/p",
            "GET nad default/net-a",
            "PATCH pod default/p"
        ]
    );
    let writes = n.cluster.status_writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    let status: Value = serde_json::from_str(&writes[0].1).unwrap();
    // The fake delegates' results name no interface: the entries say which network each is.
    assert_eq!(status[0]["name"], "cluster", "{status}");
    assert_eq!(status[0]["default"], true, "{status}");
    assert_eq!(status[1]["name"], "default/net-a", "{status}");
    assert_eq!(status[1]["default"], false, "{status}");
    // One client for the whole call, and what DEL needs recorded.
    assert_eq!(n.cluster.connections(), 1);
    let record = n.records.load("c1").unwrap().unwrap();
    assert_eq!(record.attachments.len(), 2);
}

#[test]
fn add_of_a_pod_the_api_server_does_not_have_attaches_nothing() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    let e = n.call("ADD", "c1", "gone").unwrap_err();
    assert_eq!(e.code, 3, "{e}");
    assert!(e.msg.contains("pod default/gone"), "{e}");
    assert!(n.default.calls_of("ADD").is_empty());
    assert!(n.cluster.status_writes().is_empty());
    // What its DEL needs: nothing is attached.
    let record = n.records.load("c1").unwrap().unwrap();
    assert!(record.attachments.is_empty(), "{record:?}");
}

#[test]
fn del_without_a_record_plans_from_the_pod_and_deletes_what_its_add_would_have_made() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    n.put_pod("p");
    n.call("DEL", "c1", "p").unwrap();
    assert_eq!(ifnames(&n.default, "DEL", "c1"), ["eth0"]);
    assert_eq!(ifnames(&n.net_a, "DEL", "c1"), ["net1"]);
    // It reads what it plans from, and writes nothing.
    assert_eq!(
        n.cluster.requests(),
        ["GET pod default/p", "GET nad default/net-a"]
    );
    // With the pod gone too there is nothing known to delete, and the DEL succeeds.
    n.cluster.remove_pod("default", "p");
    n.call("DEL", "c2", "p").unwrap();
    assert!(ifnames(&n.default, "DEL", "c2").is_empty());
}

#[test]
fn del_after_add_works_from_the_record_and_asks_the_api_server_nothing() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    n.put_pod("p");
    n.call("ADD", "c1", "p").unwrap();
    let asked = n.cluster.requests().len();
    n.cluster.remove_pod("default", "p");
    n.call("DEL", "c1", "p").unwrap();
    assert_eq!(ifnames(&n.net_a, "DEL", "c1"), ["net1"]);
    assert_eq!(ifnames(&n.default, "DEL", "c1"), ["eth0"]);
    assert_eq!(
        n.cluster.requests().len(),
        asked,
        "{:?}",
        n.cluster.requests()
    );
    assert!(n.records.load("c1").unwrap().is_none());
}

#[test]
fn gc_deletes_the_sandboxes_the_runtime_no_longer_has_and_keeps_the_others() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    n.put_pod("live");
    n.put_pod("stale");
    n.call("ADD", "c-live", "live").unwrap();
    n.call("ADD", "c-stale", "stale").unwrap();
    let asked = n.cluster.requests().len();
    n.gc(&["c-live"]).unwrap();
    // The stale sandbox deleted from its record, the live one untouched.
    assert_eq!(ifnames(&n.net_a, "DEL", "c-stale"), ["net1"]);
    assert_eq!(ifnames(&n.default, "DEL", "c-stale"), ["eth0"]);
    assert!(ifnames(&n.net_a, "DEL", "c-live").is_empty());
    assert!(n.records.load("c-stale").unwrap().is_none());
    assert!(n.records.load("c-live").unwrap().is_some());
    // Each network then gets GC with the live sandbox's attachment as its only valid one.
    for (plugin, ifname) in [(&n.default, "eth0"), (&n.net_a, "net1")] {
        let gc = plugin.calls_of("GC");
        assert_eq!(gc.len(), 1, "{}", plugin.path().display());
        assert_eq!(
            gc[0].stdin_json()["cni.dev/valid-attachments"],
            json!([{"containerID": "c-live", "ifname": ifname}])
        );
    }
    // Nothing is written to the cluster.
    let requests = n.cluster.requests();
    assert!(
        requests[asked..].iter().all(|r| r.starts_with("GET")),
        "{requests:?}"
    );
}

#[test]
fn add_of_a_pod_selecting_a_missing_nad_attaches_nothing_and_says_why_on_the_pod() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    n.cluster.put_pod(Pod {
        namespace: "default".into(),
        name: "p".into(),
        uid: "uid-p".into(),
        annotations: [(netattach::NETWORKS_ANNOTATION.into(), "net-b".into())].into(),
    });
    let e = n.call("ADD", "c1", "p").unwrap_err();
    assert!(e.msg.contains("net-b"), "{e}");
    assert!(n.default.calls_of("ADD").is_empty());
    assert!(n.cluster.status_writes().is_empty());
    let events = n.cluster.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let (pod, kind, reason, message) = &events[0];
    assert_eq!(
        (pod.as_str(), kind.as_str(), reason.as_str()),
        ("default/p", "Warning", "NoNetworkFound")
    );
    assert!(message.contains("net-b"), "{message}");
}

#[test]
fn add_and_check_refuse_a_netns_that_is_no_network_namespace_before_anything_runs() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    n.put_pod("p");
    let plain = d.path().join("plain");
    std::fs::write(&plain, "").unwrap();
    let fifo = d.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let gone = d.path().join("gone");
    for netns in [
        &plain,
        &fifo,
        &gone,
        std::path::Path::new("/proc/self/ns/uts"),
    ] {
        let netns = netns.to_str().unwrap();
        for command in ["ADD", "CHECK"] {
            let e = n.call_in(command, "c1", "p", netns).unwrap_err();
            assert_eq!(e.code, 8, "{command} {netns}: {e}");
            assert!(e.msg.contains(netns), "{e}");
            assert!(e.msg.contains("not a network namespace"), "{e}");
        }
    }
    // Nothing ran, nothing was asked of the API; the record says that nothing is attached.
    assert!(n.default.calls().is_empty());
    assert!(n.cluster.requests().is_empty());
    let record = n.records.load("c1").unwrap().unwrap();
    assert!(record.attachments.is_empty(), "{record:?}");
}

#[test]
fn del_after_an_add_the_api_server_failed_answers_at_once_without_asking_it() {
    let d = tempfile::tempdir().unwrap();
    let n = node(d.path());
    n.put_pod("p");
    n.cluster.set_down(true);
    let e = n.call("ADD", "c1", "p").unwrap_err();
    assert_eq!(e.code, 11, "{e}");
    let asked = n.cluster.requests().len();
    // The ADD leaves what its DEL needs: a record of no attachment.
    let record = n.records.load("c1").unwrap().unwrap();
    assert!(record.attachments.is_empty(), "{record:?}");
    n.call("DEL", "c1", "p").unwrap();
    assert_eq!(
        n.cluster.requests().len(),
        asked,
        "{:?}",
        n.cluster.requests()
    );
    assert!(n.default.calls_of("DEL").is_empty());
    assert!(n.records.load("c1").unwrap().is_none());
    // With no DEL, GC removes it.
    n.call("ADD", "c2", "p").unwrap_err();
    n.gc(&[]).unwrap();
    assert!(n.records.load("c2").unwrap().is_none());
    assert!(n.default.calls_of("DEL").is_empty());
    // A failed ADD never replaces the record of what an earlier ADD attached.
    n.cluster.set_down(false);
    n.call("ADD", "c3", "p").unwrap();
    n.cluster.set_down(true);
    n.call("ADD", "c3", "p").unwrap_err();
    assert_eq!(n.records.load("c3").unwrap().unwrap().attachments.len(), 2);
}

#[test]
fn huge_text_from_outside_makes_neither_a_huge_error_nor_a_huge_event_or_log_line() {
    let d = tempfile::tempdir().unwrap();
    let mut n = node(d.path());
    let log = d.path().join("plumb.log");
    n.config["logFile"] = json!(log);
    n.config["logLevel"] = json!("verbose");
    n.cluster.put_nad(json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"namespace": "default", "name": "net-big"},
        "spec": {"config": json!({"cniVersion": "1.1.0", "name": "net-big",
                                   "type": "t".repeat(200_000)}).to_string()}
    }));
    for (pod, annotation) in [
        // A 1 MiB name after a valid one: it was quoted twice in the error.
        ("a", format!("net-a,{}", "x".repeat(1 << 20))),
        // 200 KB, under the API server's 256 KiB limit for annotations.
        ("b", format!("net-a,{}", "y,".repeat(100_000))),
        // A NAD whose plugin type is 200,000 characters.
        ("c", "net-big".to_string()),
    ] {
        n.cluster.put_pod(Pod {
            namespace: "default".into(),
            name: pod.into(),
            uid: format!("uid-{pod}"),
            annotations: [(netattach::NETWORKS_ANNOTATION.into(), annotation)].into(),
        });
        let e = n.call("ADD", &format!("c-{pod}"), pod).unwrap_err();
        let answer = e.to_json();
        assert!(answer.len() < 9 << 10, "{pod}: {} bytes", answer.len());
    }
    assert!(n.default.calls_of("ADD").is_empty());
    let events = n.cluster.events();
    assert_eq!(events.len(), 3, "{events:?}");
    for (_, _, _, message) in &events {
        assert!(
            message.len() < 2 << 10,
            "an event of {} bytes",
            message.len()
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().count() >= 3, "{text}");
    for line in text.lines() {
        assert!(line.len() < 9 << 10, "a log line of {} bytes", line.len());
    }
}

/// A node (`node`) whose pod `default/p` (UID `uid-p`) selects `net-vf` twice, a NAD of the
/// fake plugin `fake-a` backed by the device resource `intel.com/sriov`; the kubelet's root
/// directory `dir/kubelet` in plumb's configuration, without its PodResources socket, and
/// plumb's verbose log in `dir/plumb.log`. The socket's and the checkpoint's paths.
fn device_node(dir: &std::path::Path) -> (Node, std::path::PathBuf, std::path::PathBuf) {
    let mut n = node(dir);
    let kubelet = dir.join("kubelet");
    let socket = kubelet.join("pod-resources/kubelet.sock");
    n.config["plumbKubeletRootDir"] = json!(kubelet);
    n.config["plumbPodResourcesSocket"] = json!(socket);
    n.config["logFile"] = json!(dir.join("plumb.log"));
    n.config["logLevel"] = json!("verbose");
    n.cluster.put_nad(json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"namespace": "default", "name": "net-vf",
                     "annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"}},
        "spec": {"config": r#"{"cniVersion": "1.1.0", "name": "net-vf", "type": "fake-a"}"#}
    }));
    n.cluster.put_pod(Pod {
        namespace: "default".into(),
        name: "p".into(),
        uid: "uid-p".into(),
        annotations: [(
            netattach::NETWORKS_ANNOTATION.into(),
            "net-vf,net-vf".into(),
        )]
        .into(),
    });
    (
        n,
        socket,
        kubelet.join("device-plugins/kubelet_internal_checkpoint"),
    )
}

/// The `deviceID` each ADD of `plugin` was given, in order.
fn device_ids(plugin: &FakePlugin) -> Vec<Value> {
    plugin
        .calls_of("ADD")
        .iter()
        .map(|c| c.stdin_json()["deviceID"].clone())
        .collect()
}

#[test]
fn without_the_pod_resources_socket_add_takes_the_devices_from_the_kubelets_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let (n, _socket, checkpoint) = device_node(d.path());
    std::fs::create_dir_all(checkpoint.parent().unwrap()).unwrap();
    // As the kubelet writes it: one entry per container and resource, by pod UID.
    std::fs::write(
        &checkpoint,
        json!({"Data": {"PodDeviceEntries": [
            {"PodUID": "uid-other", "ContainerName": "c", "ResourceName": "intel.com/sriov",
             "DeviceIDs": {"0": ["0000:03:02.0"]}, "AllocResp": "Cg=="},
            {"PodUID": "uid-p", "ContainerName": "a", "ResourceName": "intel.com/sriov",
             "DeviceIDs": {"0": ["0000:03:02.2"]}, "AllocResp": "Cg=="},
            {"PodUID": "uid-p", "ContainerName": "b", "ResourceName": "intel.com/sriov",
             "DeviceIDs": {"-1": ["0000:03:02.1"]}, "AllocResp": "Cg=="}],
          "RegisteredDevices": {"intel.com/sriov": ["0000:03:02.0", "0000:03:02.1",
                                                    "0000:03:02.2"]}},
         "Checksum": 3_141_592_653_u64})
        .to_string(),
    )
    .unwrap();
    n.call("ADD", "c1", "p").unwrap();
    assert_eq!(ifnames(&n.net_a, "ADD", "c1"), ["net1", "net2"]);
    assert_eq!(device_ids(&n.net_a), ["0000:03:02.1", "0000:03:02.2"]);
    let log = std::fs::read_to_string(d.path().join("plumb.log")).unwrap();
    assert!(
        log.contains(&format!(
            "devices of pod default/p (UID uid-p): from the kubelet's device-manager checkpoint {}",
            checkpoint.display()
        )),
        "{log}"
    );
}

#[test]
fn with_the_pod_resources_socket_the_checkpoint_is_not_read() {
    let d = tempfile::tempdir().unwrap();
    let (n, socket, checkpoint) = device_node(d.path());
    for (path, content) in [(&socket, ""), (&checkpoint, "not what the kubelet writes")] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    // The in-memory kubelet's API: no devices, and no device plugin offers the resource.
    n.call("ADD", "c1", "p").unwrap();
    assert_eq!(device_ids(&n.net_a), [Value::Null, Value::Null]);
    let log = std::fs::read_to_string(d.path().join("plumb.log")).unwrap();
    assert!(
        log.contains(&format!(
            "devices of pod default/p: from the kubelet's PodResources API on {}",
            socket.display()
        )),
        "{log}"
    );
}
