//! Device-backed networks end to end (docs/multus-behaviour.md §2.9, device-info spec 1.1.0): the
//! built binary as a runtime runs it, the API stand-in with NADs annotated
//! `k8s.v1.cni.cncf.io/resourceName`, testkit's kubelet PodResources stand-in on a unix socket,
//! recording fake SR-IOV-style delegates, and a real bridge for the cluster network. Needs root.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::{CniCall, Node, err, ok, run};
use serde_json::{Value, json};
use testkit::fake_plugin::FakePlugin;
use testkit::kube_api::{KubeApi, KubeApiOptions, KubeconfigUser, Resource};
use testkit::netns::{Link, Netns, unique_name};
use testkit::pod_resources::{ContainerDevices, PodResourcesStandIn};

const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const RESOURCE: &str = "intel.com/sriov";

/// What a device plugin writes for a VF (device-info spec §4.1).
const DP_INFO: &str = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:02.2","pf-pci-address":"0000:18:00.0"}}"#;
/// What the second delegate writes itself (device-info spec §5.1.2).
const PLUGIN_INFO: &str = r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:02.3","rdma-device":"mlx5_3"}}"#;

/// One node with a kubelet: the cluster network on a real bridge, `default/sriov-a` and
/// `default/sriov-b` both backed by `intel.com/sriov` and run by the fake delegates `sriov-a`
/// and `sriov-b` (both declare `deviceID` and `CNIDeviceInfoFile`; `sriov-b` writes device
/// info on ADD).
struct DeviceNode {
    api: KubeApi,
    node: Node,
    kubelet: Option<PodResourcesStandIn>,
    socket: PathBuf,
    config: Value,
    sriov_a: FakePlugin,
    sriov_b: FakePlugin,
    _bridge: Link,
}

fn nad(name: &str, resource: Option<&str>, config: Value) -> Value {
    let mut v = json!({"apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"namespace": "default", "name": name},
        "spec": {"config": config.to_string()}});
    if let Some(r) = resource {
        v["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/resourceName": r});
    }
    v
}

/// A fake delegate's ADD answer: one sandbox interface.
fn fake_result(ifname: &str) -> String {
    json!({"cniVersion": "1.0.0",
           "interfaces": [{"name": ifname, "sandbox": "/proc/self/ns/net"}]})
    .to_string()
}

impl DeviceNode {
    /// The kubelet says pod `default/<pod>`'s container "app" holds `ids` of [`RESOURCE`].
    fn give_devices(&self, pod: &str, ids: &[&str]) {
        self.kubelet().set_pod(
            "default",
            pod,
            vec![ContainerDevices::new("app", RESOURCE, ids)],
        );
    }

    fn new(net: u8) -> DeviceNode {
        testkit::netns::require_root();
        let api = KubeApi::start(KubeApiOptions::default());
        let node = Node::new();
        let bridge = unique_name("kd");
        let bridge_link = Link::bridge(&bridge);
        api.put(
            Resource::NetworkAttachmentDefinitions,
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"namespace": "kube-system", "name": "default-net"},
                   "spec": {"config": json!({"cniVersion": "1.0.0", "type": "bridge",
                       "bridge": bridge, "isGateway": true,
                       "ipam": {"type": "host-local", "subnet": format!("10.{net}.1.0/24"),
                                "dataDir": node.ipam_dir()}}).to_string()}}),
        );
        let plugins = node.path("plugins");
        let sriov_a = FakePlugin::install(&plugins, "sriov-a");
        let sriov_b = FakePlugin::install(&plugins, "sriov-b");
        for (name, fake, ifname) in [("sriov-a", &sriov_a, "net1"), ("sriov-b", &sriov_b, "net2")] {
            fake.respond("ADD", &fake_result(ifname), "", 0);
            api.put(
                Resource::NetworkAttachmentDefinitions,
                nad(
                    name,
                    Some(RESOURCE),
                    json!({"cniVersion": "1.0.0", "type": name, "vlan": 7,
                           "capabilities": {"deviceID": true, "CNIDeviceInfoFile": true}}),
                ),
            );
        }
        sriov_b.write_device_info_on_add(PLUGIN_INFO);
        let socket = node.path("kubelet/pod-resources/kubelet.sock");
        fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let kubelet = PodResourcesStandIn::start(&socket).unwrap();
        let kubeconfig = api.write_kubeconfig(node.path("kubeconfig"), KubeconfigUser::Token);
        let config = node.config(json!({
            "clusterNetwork": "default-net", "kubeconfig": kubeconfig,
            // The fake delegates first, then the reference plugins (CNI_PATH).
            "binDir": plugins,
            "plumbPodResourcesSocket": socket,
            "plumbKubeletRootDir": node.path("kubelet"),
            "plumbDeviceInfoDir": node.path("devinfo"),
        }));
        DeviceNode {
            api,
            node,
            kubelet: Some(kubelet),
            socket,
            config,
            sriov_a,
            sriov_b,
            _bridge: bridge_link,
        }
    }

    fn kubelet(&self) -> &PodResourcesStandIn {
        self.kubelet.as_ref().unwrap()
    }

    fn pod(&self, name: &str, networks: &str) -> String {
        let pod = self.api.put(
            Resource::Pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"namespace": "default", "name": name,
                                "annotations": {NETWORKS: networks}},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        );
        pod["metadata"]["uid"].as_str().unwrap().to_string()
    }

    fn call(&self, command: &str, ns: &Netns, pod: &str, cid: &str) -> std::process::Output {
        let netns = ns.path().display().to_string();
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};\
             K8S_POD_INFRA_CONTAINER_ID={cid}"
        );
        run(&CniCall {
            command,
            container_id: cid,
            netns: &netns,
            ifname: "eth0",
            args: &args,
            config: &self.config,
        })
    }

    fn devinfo(&self, sub: &str) -> PathBuf {
        self.node.path("devinfo").join(sub)
    }

    /// The device plugin's file for a device (device-info spec §4.1).
    fn write_dp_file(&self, device: &str, content: &str) {
        let dir = self.devinfo("dp");
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join(format!(
                "{}-{device}-device.json",
                RESOURCE.replace('/', "-")
            )),
            content,
        )
        .unwrap();
    }

    fn cni_files(&self) -> Vec<String> {
        fs::read_dir(self.devinfo("cni"))
            .map(|rd| {
                let mut v: Vec<String> = rd
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect();
                v.sort();
                v
            })
            .unwrap_or_default()
    }

    fn status_of(&self, name: &str) -> Vec<Value> {
        let pod = self.api.get(Resource::Pods, "default", name).unwrap();
        let text = pod["metadata"]["annotations"][NETWORK_STATUS]
            .as_str()
            .unwrap()
            .to_string();
        serde_json::from_str(&text).unwrap()
    }

    /// What a failed ADD leaves: nothing attached, at most a record that says so.
    fn assert_nothing_attached(&self, ns: &Netns, cid: &str) {
        self.node.assert_nothing_attached(ns, cid);
        assert_eq!(
            self.cni_files(),
            Vec::<String>::new(),
            "device-info files left"
        );
    }

    /// Nothing of the pod is left on the node.
    fn assert_nothing_left(&self, ns: &Netns, cid: &str) {
        assert_eq!(ns.links(), ["lo"], "interfaces left");
        assert_eq!(self.node.all_allocations(), 0, "addresses left");
        assert!(!self.node.record(cid).exists(), "record left");
        assert_eq!(
            self.cni_files(),
            Vec::<String>::new(),
            "device-info files left"
        );
    }
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

#[test]
fn two_networks_of_one_resource_get_two_devices_and_their_device_info() {
    let mut n = DeviceNode::new(211);
    n.pod("vf-pod", "sriov-a,sriov-b");
    // Two containers hold one VF each; a device of another resource is not ours to use.
    n.kubelet().set_pod(
        "default",
        "vf-pod",
        vec![
            ContainerDevices::new("app", RESOURCE, &["0000:18:02.3"]),
            ContainerDevices::new("sidecar", RESOURCE, &["0000:18:02.2"]),
            ContainerDevices::new("sidecar", "nvidia.com/gpu", &["GPU-1"]),
        ],
    );
    n.write_dp_file("0000:18:02.2", DP_INFO);
    let ns = Netns::new();
    let out = n.call("ADD", &ns, "vf-pod", "cd1");
    ok(&out);

    // Sorted as Multus sorts them: sriov-a takes .2, sriov-b .3, each in every form.
    let file_a = n.devinfo("cni/default-sriov-a-cd1_net1");
    let file_b = n.devinfo("cni/default-sriov-b-cd1_net2");
    for (fake, id, file) in [
        (&n.sriov_a, "0000:18:02.2", &file_a),
        (&n.sriov_b, "0000:18:02.3", &file_b),
    ] {
        let calls = fake.calls_of("ADD");
        assert_eq!(calls.len(), 1);
        let stdin = calls[0].stdin_json();
        assert_eq!(stdin["deviceID"], id, "{stdin}");
        assert_eq!(stdin["pciBusID"], id, "{stdin}");
        assert_eq!(stdin["vlan"], 7, "the NAD's own keys stay");
        assert_eq!(stdin["runtimeConfig"]["deviceID"], id, "{stdin}");
        assert_eq!(
            stdin["runtimeConfig"]["CNIDeviceInfoFile"],
            file.display().to_string(),
            "{stdin}"
        );
    }
    // The kubelet was asked once, for this pod.
    assert_eq!(n.kubelet().requests(), ["Get default/vf-pod"]);

    // The device plugin's file was copied for sriov-a; sriov-b wrote its own.
    assert_eq!(
        read_json(&file_a),
        serde_json::from_str::<Value>(DP_INFO).unwrap()
    );
    assert_eq!(
        read_json(&file_b),
        serde_json::from_str::<Value>(PLUGIN_INFO).unwrap()
    );
    let status = n.status_of("vf-pod");
    assert_eq!(status.len(), 3, "{status:?}");
    assert_eq!(status[1]["name"], "default/sriov-a");
    assert_eq!(status[1]["interface"], "net1");
    assert_eq!(
        status[1]["device-info"],
        serde_json::from_str::<Value>(DP_INFO).unwrap()
    );
    assert_eq!(status[2]["name"], "default/sriov-b");
    assert_eq!(
        status[2]["device-info"],
        serde_json::from_str::<Value>(PLUGIN_INFO).unwrap()
    );
    assert!(status[0].get("device-info").is_none(), "{:?}", status[0]);

    // DEL from the record works with the kubelet gone, and removes every device-info file.
    n.kubelet = None;
    assert!(!n.socket.exists());
    ok(&n.call("DEL", &ns, "vf-pod", "cd1"));
    for fake in [&n.sriov_a, &n.sriov_b] {
        let del = fake.calls_of("DEL");
        assert_eq!(del.len(), 1);
        assert!(
            del[0].stdin_json()["runtimeConfig"]["CNIDeviceInfoFile"].is_string(),
            "DEL gets the same runtimeConfig as ADD"
        );
    }
    n.assert_nothing_left(&ns, "cd1");
    // The device plugin's own file is the device plugin's: it stays.
    assert!(n.devinfo("dp").read_dir().unwrap().count() == 1);
}

#[test]
fn a_missing_kubelet_socket_fails_clearly_and_leaves_nothing() {
    let mut n = DeviceNode::new(212);
    n.pod("vf-pod", "sriov-a");
    n.kubelet = None;
    let ns = Netns::new();
    let e = err(&n.call("ADD", &ns, "vf-pod", "cd2"));
    assert_eq!(
        e["code"], 11,
        "the kubelet may be restarting: try again later"
    );
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains(&n.socket.display().to_string()) && msg.contains("intel.com/sriov"),
        "{e}"
    );
    assert!(n.sriov_a.calls_of("ADD").is_empty());
    n.assert_nothing_attached(&ns, "cd2");
    // The runtime's DEL after the failed ADD succeeds without the kubelet: the ADD recorded
    // that nothing is attached.
    ok(&n.call("DEL", &ns, "vf-pod", "cd2"));
    assert!(n.sriov_a.calls_of("DEL").is_empty());
    n.assert_nothing_left(&ns, "cd2");
    // Without that record (removed by hand, or an ADD killed before it), it plans from the
    // API, without devices, and DEL of what never ran is harmless.
    err(&n.call("ADD", &ns, "vf-pod", "cd2"));
    std::fs::remove_file(n.node.record("cd2")).unwrap();
    ok(&n.call("DEL", &ns, "vf-pod", "cd2"));
    let del = n.sriov_a.calls_of("DEL");
    assert_eq!(del.len(), 1);
    assert!(del[0].stdin_json().get("deviceID").is_none());
    n.assert_nothing_left(&ns, "cd2");
}

#[test]
fn too_few_devices_for_the_pod_fail_clearly_and_leave_nothing() {
    let n = DeviceNode::new(213);
    n.pod("vf-pod", "sriov-a,sriov-b");
    n.give_devices("vf-pod", &["0000:18:02.2"]);
    let ns = Netns::new();
    let e = err(&n.call("ADD", &ns, "vf-pod", "cd3"));
    assert_eq!(e["code"], 7, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains(
            "pod default/vf-pod has 2 attachment(s) of device resource \"intel.com/sriov\""
        ) && msg.contains("allocated 1 device(s)"),
        "{e}"
    );
    assert!(n.sriov_a.calls().is_empty() && n.sriov_b.calls().is_empty());
    n.assert_nothing_attached(&ns, "cd3");

    // A pod the kubelet gave no device of the resource at all, which the node's device plugin
    // does offer.
    n.kubelet().set_pod("default", "vf-pod", vec![]);
    n.kubelet().set_free(RESOURCE, &["0000:18:02.7"]);
    let e = err(&n.call("ADD", &ns, "vf-pod", "cd3"));
    assert!(
        e["msg"].as_str().unwrap().contains("allocated 0 device(s)"),
        "{e}"
    );
    n.assert_nothing_attached(&ns, "cd3");
}

#[test]
fn a_malformed_device_plugin_file_fails_clearly_and_leaves_nothing() {
    let n = DeviceNode::new(214);
    n.pod("vf-pod", "sriov-a");
    n.give_devices("vf-pod", &["0000:18:02.2"]);
    // "pci" without its map (device-info spec §3.1.3 makes it required).
    n.write_dp_file("0000:18:02.2", r#"{"type":"pci","version":"1.1.0"}"#);
    let ns = Netns::new();
    let e = err(&n.call("ADD", &ns, "vf-pod", "cd4"));
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("intel.com-sriov-0000:18:02.2-device.json")
            && msg.contains("device 0000:18:02.2 of resource \"intel.com/sriov\"")
            && msg.contains("default/sriov-a"),
        "{e}"
    );
    // The cluster network, added before, was rolled back; the fake never ran.
    assert!(n.sriov_a.calls_of("ADD").is_empty());
    assert!(n.node.left_to_undo("cd4").is_empty());
    ok(&n.call("DEL", &ns, "vf-pod", "cd4"));
    assert!(
        n.sriov_a.calls_of("DEL").is_empty(),
        "the runtime's DEL redid the rollback"
    );
    n.assert_nothing_left(&ns, "cd4");
}

#[test]
fn device_info_a_delegate_leaves_unreadable_is_logged_and_left_out_of_the_status() {
    let n = DeviceNode::new(215);
    n.pod("vf-pod", "sriov-b");
    n.give_devices("vf-pod", &["0000:18:02.3"]);
    n.sriov_b.write_device_info_on_add("{not device info");
    let ns = Netns::new();
    let out = n.call("ADD", &ns, "vf-pod", "cd5");
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("network default/sriov-b")
            && stderr.contains("device-info left out of the network-status")
            && stderr.contains("default-sriov-b-cd5_net1"),
        "{stderr}"
    );
    let status = n.status_of("vf-pod");
    assert_eq!(status[1]["name"], "default/sriov-b");
    assert!(status[1].get("device-info").is_none(), "{:?}", status[1]);
    ok(&n.call("DEL", &ns, "vf-pod", "cd5"));
    n.assert_nothing_left(&ns, "cd5");
}

#[test]
fn a_marker_resource_no_device_plugin_offers_attaches_without_a_device() {
    let n = DeviceNode::new(216);
    // KubeVirt's bridge marker: the NAD names a resource that only counts node capacity.
    n.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "sriov-a",
            Some("bridge.network.kubevirt.io/br0"),
            json!({"cniVersion": "1.0.0", "type": "sriov-a"}),
        ),
    );
    n.pod("vm-pod", "sriov-a");
    n.kubelet().set_pod("default", "vm-pod", vec![]);
    let ns = Netns::new();
    ok(&n.call("ADD", &ns, "vm-pod", "cd6"));
    let stdin = n.sriov_a.calls_of("ADD")[0].stdin_json();
    assert!(stdin.get("deviceID").is_none(), "{stdin}");
    ok(&n.call("DEL", &ns, "vm-pod", "cd6"));
    n.assert_nothing_left(&ns, "cd6");
}

#[test]
fn del_without_a_record_asks_the_kubelet_and_tolerates_its_absence() {
    let mut n = DeviceNode::new(217);
    n.pod("vf-pod", "sriov-a");
    n.give_devices("vf-pod", &["0000:18:02.2"]);
    n.write_dp_file("0000:18:02.2", DP_INFO);
    let ns = Netns::new();
    ok(&n.call("ADD", &ns, "vf-pod", "cd7"));
    let file = n.devinfo("cni/default-sriov-a-cd7_net1");
    assert!(file.exists());

    // The record is lost (a pod added by Multus before the migration looks the same): DEL
    // plans from the API, gets the device from the kubelet again, and removes the file.
    fs::remove_file(n.node.record("cd7")).unwrap();
    ok(&n.call("DEL", &ns, "vf-pod", "cd7"));
    let del = n.sriov_a.calls_of("DEL");
    assert_eq!(del.len(), 1);
    assert_eq!(del[0].stdin_json()["deviceID"], "0000:18:02.2");
    assert_eq!(
        del[0].stdin_json()["runtimeConfig"]["CNIDeviceInfoFile"],
        file.display().to_string()
    );
    n.assert_nothing_left(&ns, "cd7");

    // Again with the kubelet gone and a delegate that cannot DEL without its device (as
    // host-device cannot): the DEL succeeds, and the failure is logged for the operator.
    ok(&n.call("ADD", &ns, "vf-pod", "cd8"));
    fs::remove_file(n.node.record("cd8")).unwrap();
    n.kubelet = None;
    n.sriov_a.fail(
        "DEL",
        7,
        "specify either \"device\", \"hwaddr\", \"kernelpath\" or \"pciBusID\"",
    );
    let out = n.call("DEL", &ns, "vf-pod", "cd8");
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DEL without its device failed, and is not retried")
            && stderr.contains("pciBusID"),
        "{stderr}"
    );
    n.assert_nothing_left(&ns, "cd8");
}

#[test]
fn a_plugin_declaring_cni_device_info_file_gets_one_without_a_device() {
    let n = DeviceNode::new(218);
    // No resource (a vhost-user network, say): device-info spec §5.1.1 still gives the file.
    n.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "sriov-b",
            None,
            json!({"cniVersion": "1.0.0", "type": "sriov-b",
                   "capabilities": {"CNIDeviceInfoFile": true}}),
        ),
    );
    n.pod("vhost-pod", "sriov-b,sriov-a");
    n.give_devices("vhost-pod", &["0000:18:02.4"]);
    // A file an earlier, undeleted ADD left for sriov-a (no device plugin file this time): it
    // must not pass for this attachment's.
    let stale = n.devinfo("cni/default-sriov-a-cd9_net2");
    fs::create_dir_all(stale.parent().unwrap()).unwrap();
    fs::write(&stale, DP_INFO).unwrap();
    let ns = Netns::new();
    ok(&n.call("ADD", &ns, "vhost-pod", "cd9"));
    let file_b = n.devinfo("cni/default-sriov-b-cd9_net1");
    let stdin = n.sriov_b.calls_of("ADD")[0].stdin_json();
    assert_eq!(
        stdin["runtimeConfig"]["CNIDeviceInfoFile"],
        file_b.display().to_string(),
        "{stdin}"
    );
    assert!(stdin.get("deviceID").is_none(), "{stdin}");
    let status = n.status_of("vhost-pod");
    assert_eq!(
        status[1]["device-info"],
        serde_json::from_str::<Value>(PLUGIN_INFO).unwrap()
    );
    assert!(!stale.exists(), "the stale file was removed before ADD");
    assert!(status[2].get("device-info").is_none(), "{:?}", status[2]);
    ok(&n.call("DEL", &ns, "vhost-pod", "cd9"));
    n.assert_nothing_left(&ns, "cd9");
}

#[test]
fn del_never_deletes_a_file_a_damaged_record_names() {
    let n = DeviceNode::new(219);
    n.pod("vf-pod", "sriov-a");
    n.give_devices("vf-pod", &["0000:18:02.2"]);
    let ns = Netns::new();
    ok(&n.call("ADD", &ns, "vf-pod", "cd10"));
    let victim = n.node.path("precious.json");
    fs::write(&victim, "{}").unwrap();
    let record_path = n.node.record("cd10");
    let mut record = read_json(&record_path);
    record["attachments"][1]["deviceInfoFile"] = json!(victim);
    fs::write(&record_path, record.to_string()).unwrap();

    let e = err(&n.call("DEL", &ns, "vf-pod", "cd10"));
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("names device-info file") && msg.contains("precious.json"),
        "{e}"
    );
    assert!(victim.exists());
    // The record stays for the operator, who can fix it and DEL again.
    assert!(record_path.exists());
    record["attachments"][1]["deviceInfoFile"] = json!(n.devinfo("cni/default-sriov-a-cd10_net1"));
    fs::write(&record_path, record.to_string()).unwrap();
    ok(&n.call("DEL", &ns, "vf-pod", "cd10"));
    n.assert_nothing_left(&ns, "cd10");
}

#[test]
fn a_later_delegate_failing_rolls_back_the_device_info_files_too() {
    let n = DeviceNode::new(220);
    n.pod("vf-pod", "sriov-a,sriov-b");
    n.kubelet().set_pod(
        "default",
        "vf-pod",
        vec![ContainerDevices::new(
            "app",
            RESOURCE,
            &["0000:18:02.2", "0000:18:02.3"],
        )],
    );
    n.write_dp_file("0000:18:02.2", DP_INFO);
    n.sriov_b.fail("ADD", 11, "VF 0000:18:02.3 is busy");
    let ns = Netns::new();
    let e = err(&n.call("ADD", &ns, "vf-pod", "cd11"));
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("VF 0000:18:02.3 is busy"),
        "{e}"
    );
    // sriov-a ran and got its file; the rollback DELeted it and removed the file.
    assert_eq!(n.sriov_a.calls_of("DEL").len(), 1);
    assert!(n.node.left_to_undo("cd11").is_empty());
    ok(&n.call("DEL", &ns, "vf-pod", "cd11"));
    assert_eq!(
        n.sriov_a.calls_of("DEL").len(),
        1,
        "the runtime's DEL redid the rollback"
    );
    n.assert_nothing_left(&ns, "cd11");
}
