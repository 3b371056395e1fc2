//! Dynamic attachments end to end (`plumb daemon --dynamic`): a running pod's annotation changed
//! through the stand-in's watch, the daemon detaching and attaching with the real delegates in
//! the pod's netns, network-status and events written, a change refused, racing the
//! sandbox's DEL, made while the daemon was down, and in a namespace not opted in.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::kube_api::{KubeconfigUser, Resource};
use testkit::netns::{Link, Netns, unique_name};
use testkit::pod_resources::{ContainerDevices, PodResourcesStandIn};

use super::caches::{holding, watching_with};
use super::healthz;
use super::metrics::{METRICS_HOST, get, sample};
use crate::common::cluster::{Cluster, NETWORKS, NODE, nad};
use crate::common::daemon::Daemon;
use crate::common::{ok, wait_for_file};

const OPT_IN: &str = "plumb.example/dynamic=true";

/// Namespace `name`, opted in to dynamic attachments or not.
fn namespace(c: &Cluster, name: &str, opted_in: bool) {
    let labels = match opted_in {
        true => json!({"plumb.example/dynamic": "true"}),
        false => json!({}),
    };
    c.api.put(
        Resource::Namespaces,
        json!({"metadata": {"name": name, "labels": labels}}),
    );
}

/// A daemon for `c` with `--dynamic`, watching with a kubeconfig of its own.
fn dynamic_daemon(c: &mut Cluster) -> (PathBuf, Daemon) {
    dynamic_daemon_with(c, &[])
}

/// [`dynamic_daemon`] with `more` arguments.
fn dynamic_daemon_with(c: &mut Cluster, more: &[&str]) -> (PathBuf, Daemon) {
    let own = c
        .api
        .write_kubeconfig(c.node.path("daemon-kubeconfig"), KubeconfigUser::Token);
    let state = c.node.state_dir();
    let mut args = vec![
        "--dynamic",
        "--dynamic-namespaces",
        OPT_IN,
        "--state-dir",
        state.to_str().unwrap(),
    ];
    args.extend(more);
    watching_with(c, &own, NODE, &args)
}

/// Cluster `n`, namespace default opted in, and a daemon with `--dynamic`.
fn dynamic(n: u8) -> (Cluster, PathBuf, Daemon) {
    let mut c = Cluster::new(n);
    namespace(&c, "default", true);
    let (socket, daemon) = dynamic_daemon(&mut c);
    (c, socket, daemon)
}

/// [`dynamic`], the daemon serving metrics: their address too.
fn dynamic_with_metrics(n: u8) -> (Cluster, PathBuf, Daemon, SocketAddr) {
    let mut c = Cluster::new(n);
    namespace(&c, "default", true);
    let addr = std::net::TcpListener::bind(METRICS_HOST)
        .unwrap()
        .local_addr()
        .unwrap();
    let addr_arg = addr.to_string();
    let (socket, daemon) = dynamic_daemon_with(&mut c, &["--metrics-address", &addr_arg]);
    daemon.wait_for(&format!(
        "metrics: serving /metrics, /healthz and /readyz on {addr}"
    ));
    (c, socket, daemon, addr)
}

/// The daemon's count of dynamic changes of `result`.
fn changes(addr: SocketAddr, result: &str) -> f64 {
    let (status, text) = get(addr, "/metrics");
    assert_eq!(status, 200, "{text}");
    sample(
        &text,
        &format!("plumb_dynamic_changes_total{{result=\"{result}\"}}"),
    )
    .unwrap_or(0.0)
}

/// A pod's networks annotation set to `networks`, its other annotations kept, as `kubectl
/// annotate --overwrite` does.
fn annotate(c: &Cluster, name: &str, networks: &str) {
    let mut pod = c.api.get(Resource::Pods, "default", name).unwrap();
    pod["metadata"]["annotations"][NETWORKS] = json!(networks);
    c.api.put(Resource::Pods, pod);
}

/// Waits (up to 30 s) for `until`.
fn wait_until(what: &str, until: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !until() {
        assert!(Instant::now() < deadline, "waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`wait_until`], showing what `daemon` said if it does not come.
fn wait_for_daemon(daemon: &Daemon, what: &str, until: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !until() {
        assert!(
            Instant::now() < deadline,
            "waiting for {what}; the daemon said: {}",
            daemon.said()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The interfaces network-status lists for the pod.
fn status_interfaces(c: &Cluster, name: &str) -> Vec<String> {
    (c.status_of("default", name).unwrap_or_default().iter())
        .map(|e| e["interface"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn reasons(c: &Cluster, name: &str) -> Vec<String> {
    (c.events_for("default", name).iter())
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The addresses of `ifname`, if the pod has it now (one look at every interface, so that
/// one going between two looks is no error).
fn addresses_now(ns: &Netns, ifname: &str) -> Option<Vec<String>> {
    let all = ns.ip_json(&["addr", "show"]);
    let link = all.as_array()?.iter().find(|l| l["ifname"] == ifname)?;
    Some(
        (link["addr_info"].as_array()?.iter())
            .filter(|a| a["family"] == "inet")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect(),
    )
}

fn ifindex(ns: &Netns, ifname: &str) -> u64 {
    ns.link(ifname).unwrap()["ifindex"].as_u64().unwrap()
}

/// A bridge + host-local NAD `default/net-s` on 10.<n>.4.0/24 whose delegates take the `ips`
/// capability (selection elements with `ips`); its bridge.
fn static_nad(c: &Cluster, n: u8) -> Link {
    let bridge = unique_name("kd");
    let link = Link::bridge(&bridge);
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "net-s",
            json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge,
                   "capabilities": {"ips": true},
                   "ipam": {"type": "host-local", "subnet": format!("10.{n}.4.0/24"),
                            "dataDir": c.node.ipam_dir()}}),
        ),
    );
    link
}

fn element(n: u8, host: u8) -> Value {
    json!({"name": "net-s", "ips": [format!("10.{n}.4.{host}/24")]})
}

#[test]
fn a_network_added_to_a_running_pods_annotation_is_attached_and_listed_in_its_status() {
    let (c, socket, daemon, metrics) = dynamic_with_metrics(153);
    let uid = c.pod("default", "grow", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "grow", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "g1"));
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);

    annotate(&c, "grow", "net-a,other-ns/net-b@mv1");
    wait_until("mv1 in the pod and in its status", || {
        status_interfaces(&c, "grow") == ["eth0", "net1", "mv1"]
    });
    assert_eq!(ns.addresses("mv1"), ["10.153.3.2/24"]);
    assert_eq!(ns.addresses("net1"), ["10.153.2.2/24"]);
    let status = c.status_of("default", "grow").unwrap();
    assert_eq!(status[2]["name"], "other-ns/net-b");
    assert_eq!(status[2]["ips"], json!(["10.153.3.2"]));
    assert_eq!(status[0]["ips"], json!(["10.153.1.2"]));
    wait_until("the AttachmentsChanged event", || {
        reasons(&c, "grow").contains(&"AttachmentsChanged".to_string())
    });
    daemon.wait_for("dynamic: pod default/grow (container g1): detached [], attached [mv1");

    // And taken off again: the interface and its address go, status follows.
    annotate(&c, "grow", "net-a");
    wait_until("mv1 gone", || {
        status_interfaces(&c, "grow") == ["eth0", "net1"]
    });
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);
    assert!(c.node.allocations("net-b").is_empty());
    // Counted once the change is done, after the status.
    wait_until("the second change counted", || {
        changes(metrics, "applied") == 2.0
    });

    // The same selection written otherwise: recorded, nothing detached or attached, and no
    // network-status written, as it already says what the pod has.
    c.api.clear_requests();
    let same = r#"[{"name": "net-a"}]"#;
    annotate(&c, "grow", same);
    wait_until("the new annotation recorded", || {
        let record: Value =
            serde_json::from_slice(&std::fs::read(c.node.record("g1")).unwrap()).unwrap();
        record["forChanges"]["selection"] == same
    });
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);
    let patches: Vec<String> = (c.api.requests().iter())
        .filter(|r| r.method == "PATCH")
        .map(|r| r.path.clone())
        .collect();
    assert!(patches.is_empty(), "{patches:?}");
    assert_eq!(changes(metrics, "applied"), 2.0);

    ok(&c.call("DEL", &ns, pod, "g1"));
    c.assert_nothing_left(&ns, "g1");
}

#[test]
fn removing_the_first_of_three_elements_keeps_the_others_and_a_changed_ips_reattaches_in_place() {
    let n = 152;
    let (c, socket, _daemon) = dynamic(n);
    let _bridge = static_nad(&c, n);
    let three = json!([element(n, 10), element(n, 11), element(n, 12)]).to_string();
    let uid = c.pod("default", "trio", json!({NETWORKS: three}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "trio", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "t1"));
    assert_eq!(ns.addresses("net2"), [format!("10.{n}.4.11/24")]);
    let (net2, net3) = (ifindex(&ns, "net2"), ifindex(&ns, "net3"));

    annotate(
        &c,
        "trio",
        &json!([element(n, 11), element(n, 12)]).to_string(),
    );
    wait_until("net1 detached", || {
        status_interfaces(&c, "trio") == ["eth0", "net2", "net3"]
    });
    assert_eq!(ns.links(), ["lo", "eth0", "net2", "net3"]);
    // The same interfaces, not made again.
    assert_eq!((ifindex(&ns, "net2"), ifindex(&ns, "net3")), (net2, net3));
    assert_eq!(ns.addresses("net2"), [format!("10.{n}.4.11/24")]);
    assert_eq!(ns.addresses("net3"), [format!("10.{n}.4.12/24")]);

    // A changed `ips`: detached and attached again under its name.
    annotate(
        &c,
        "trio",
        &json!([element(n, 11), element(n, 20)]).to_string(),
    );
    // (Between its detach and its attach there is no net3.)
    wait_until("net3 with its new address", || {
        addresses_now(&ns, "net3") == Some(vec![format!("10.{n}.4.20/24")])
    });
    assert_eq!(ifindex(&ns, "net2"), net2);
    wait_until("the status's new address", || {
        let s = c.status_of("default", "trio").unwrap();
        s.len() == 3 && s[2]["ips"] == json!([format!("10.{n}.4.20")])
    });
    let mut held = c.node.allocations("net-s");
    held.sort();
    assert_eq!(held, [format!("10.{n}.4.11"), format!("10.{n}.4.20")]);

    ok(&c.call("DEL", &ns, pod, "t1"));
    c.assert_nothing_left(&ns, "t1");
}

#[test]
fn an_invalid_change_or_a_device_backed_network_changes_nothing_and_is_said_once() {
    let n = 151;
    let (mut c, socket, daemon, metrics) = dynamic_with_metrics(n);
    // The kubelet: the pod was given a device of example.com/vf at admission.
    let kubelet = PodResourcesStandIn::start(&c.node.path("kubelet.sock")).unwrap();
    kubelet.set_pod(
        "default",
        "firm",
        vec![ContainerDevices::new(
            "c",
            "example.com/vf",
            &["0000:00:01.0"],
        )],
    );
    c.config["plumbPodResourcesSocket"] = json!(kubelet.socket());
    c.config["plumbDeviceInfoDir"] = json!(c.node.path("devinfo"));
    let with_resource = |name: &str, resource: &str, config: Value| {
        let mut nad = nad("default", name, config);
        nad["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/resourceName": resource});
        c.api.put(Resource::NetworkAttachmentDefinitions, nad);
    };
    with_resource(
        "sriov-net",
        "example.com/vf",
        json!({"cniVersion": "1.0.0", "type": "host-device"}),
    );
    // A resource no device plugin offers (as KubeVirt's bridge markers): no device needed.
    let bridge = Link::bridge(&unique_name("km"));
    with_resource(
        "marked",
        "bridge.network.kubevirt.io/br1",
        json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge.name(),
               "ipam": {"type": "host-local", "subnet": format!("10.{n}.4.0/24"),
                        "dataDir": c.node.ipam_dir()}}),
    );
    let uid = c.pod("default", "firm", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "firm", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "f1"));
    let status = c.status_of("default", "firm").unwrap();

    annotate(&c, "firm", "[{\"name\": ");
    wait_until("the ChangeRefused event", || {
        reasons(&c, "firm") == ["ChangeRefused"]
    });
    let event = &c.events_for("default", "firm")[0];
    let message = event["message"].as_str().unwrap();
    assert!(message.contains("k8s.v1.cni.cncf.io/networks"), "{message}");
    assert_eq!(event["type"], "Warning");
    // Tried again with backoff, and not said again.
    daemon.wait_for("change refused");
    let said = daemon.said().matches("change refused").count();
    daemon.wait_for_more("change refused", said);
    assert_eq!(reasons(&c, "firm"), ["ChangeRefused"]);
    assert!(changes(metrics, "refused") >= 2.0);
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);
    assert_eq!(c.status_of("default", "firm").unwrap(), status);

    // A network backed by a device plugin: the kubelet allocates devices at admission only.
    annotate(&c, "firm", "net-a,sriov-net");
    wait_for_daemon(&daemon, "the second ChangeRefused event", || {
        reasons(&c, "firm") == ["ChangeRefused", "ChangeRefused"]
    });
    let events = c.events_for("default", "firm");
    assert!(
        events.iter().any(|e| e["message"]
            .as_str()
            .unwrap()
            .contains("the kubelet allocates devices when it admits a pod")),
        "{events:#?}"
    );
    // The invalid annotation's refusal, tried again meanwhile, was said once.
    let invalid = (events.iter())
        .filter(|e| {
            let m = e["message"].as_str().unwrap();
            m.contains("k8s.v1.cni.cncf.io/networks") && !m.contains("kubelet allocates")
        })
        .count();
    assert_eq!(invalid, 1, "{events:#?}");
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);

    // A valid annotation again, a network with a marker resource: made at once, not after the
    // backoff.
    let edited = Instant::now();
    annotate(&c, "firm", "net-a,marked");
    wait_until("net2 in the pod's status", || {
        status_interfaces(&c, "firm") == ["eth0", "net1", "net2"]
    });
    // The refused changes' backoff is 5 s at first.
    assert!(
        edited.elapsed() < Duration::from_secs(5),
        "the change waited for the backoff: {:?}",
        edited.elapsed()
    );
    assert_eq!(ns.links(), ["lo", "eth0", "net1", "net2"]);
    assert_eq!(ns.addresses("net2"), [format!("10.{n}.4.2/24")]);
    ok(&c.call("DEL", &ns, pod, "f1"));
    c.assert_nothing_left(&ns, "f1");
}

#[test]
fn a_change_racing_the_sandboxs_del_leaks_nothing() {
    let (c, socket, daemon) = dynamic(150);
    for i in 0..6u64 {
        let name = format!("race{i}");
        let cid = format!("r{i}");
        let uid = c.pod("default", &name, json!({NETWORKS: "net-a"}));
        holding(&socket, i + 1);
        let ns = Netns::new();
        let pod = ("default", name.as_str(), uid.as_str());
        ok(&c.call("ADD", &ns, pod, &cid));
        let before = daemon.said().matches("dynamic: pod").count();
        annotate(&c, &name, "net-a,other-ns/net-b@mv1,net-a");
        // The DEL at once, or once the change has begun.
        if i % 2 == 1 {
            wait_for_daemon(&daemon, "the change to begin", || {
                ns.links().len() > 3 || daemon.said().matches("dynamic: pod").count() > before
            });
        }
        ok(&c.call("DEL", &ns, pod, &cid));
        drop(ns);
        // Whatever the change did, the DEL undid, or the change found the sandbox gone (a
        // change is counted as a call from before it reads the record). The daemon has looked
        // at the pod once it said so.
        daemon.wait_for(&format!("dynamic: pod default/{name}"));
        wait_for_daemon(&daemon, "no change running", || {
            healthz(&socket).starts_with("ok: 0 calls running")
        });
        c.assert_node_clean(&format!("race {i}"));
    }
}

#[test]
fn a_change_made_while_the_daemon_was_stopped_is_made_when_it_starts() {
    let (mut c, socket, daemon) = dynamic(149);
    let uid = c.pod("default", "later", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "later", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "l1"));
    daemon.stop();

    annotate(&c, "later", "net-a,other-ns/net-b@mv1");
    let (_socket, daemon) = dynamic_daemon(&mut c);
    wait_until("mv1 in the pod", || ns.links().contains(&"mv1".to_string()));
    wait_until("mv1 in its status", || {
        status_interfaces(&c, "later") == ["eth0", "net1", "mv1"]
    });
    daemon.wait_for("dynamic: pod default/later (container l1)");
    ok(&c.call("DEL", &ns, pod, "l1"));
    c.assert_nothing_left(&ns, "l1");
}

#[test]
fn a_pod_in_a_namespace_not_opted_in_is_left_alone_until_it_is() {
    let mut c = Cluster::new(148);
    namespace(&c, "default", false);
    // Another namespace is: being opted in is a namespace's own.
    namespace(&c, "other-ns", true);
    let (socket, daemon) = dynamic_daemon(&mut c);
    let uid = c.pod("default", "kept", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "kept", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "k1"));
    let status = c.status_of("default", "kept").unwrap();

    annotate(&c, "kept", "net-a,other-ns/net-b@mv1");
    daemon.wait_for("namespace default is not opted in to dynamic attachments");
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);
    assert_eq!(c.status_of("default", "kept").unwrap(), status);
    assert!(reasons(&c, "kept").is_empty());

    // Opted in: the namespace's watch brings it, and the change is made.
    namespace(&c, "default", true);
    wait_until("mv1 in the pod's status", || {
        status_interfaces(&c, "kept") == ["eth0", "net1", "mv1"]
    });
    assert!(ns.links().contains(&"mv1".to_string()));
    ok(&c.call("DEL", &ns, pod, "k1"));
    c.assert_nothing_left(&ns, "k1");
}

/// The record's `forChanges` keeps the ADD's request, for a later change.
#[test]
fn the_record_keeps_what_a_later_change_needs() {
    let (c, socket, _daemon) = dynamic(147);
    let uid = c.pod("default", "rec", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "rec", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "c1"));
    let record: Value =
        serde_json::from_slice(&std::fs::read(c.node.record("c1")).unwrap()).unwrap();
    let basis = &record["forChanges"];
    assert_eq!(basis["selection"], "net-a");
    assert_eq!(basis["config"]["name"], c.config["name"]);
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(Path::new(&ns.path())).unwrap().ino();
    assert_eq!(basis["netnsInode"], inode);
    ok(&c.call("DEL", &ns, pod, "c1"));
}

#[test]
fn a_host_network_pod_a_pod_plumb_did_not_attach_and_a_gone_netns_are_skipped_with_a_log_line() {
    let (c, socket, daemon) = dynamic(146);
    c.api.put(
        Resource::Pods,
        json!({"metadata": {"namespace": "default", "name": "host",
                            "annotations": {NETWORKS: "net-a"}},
               "spec": {"nodeName": NODE, "hostNetwork": true,
                        "containers": [{"name": "c", "image": "busybox"}]}}),
    );
    let uid = c.pod("default", "lost", json!({NETWORKS: "net-a"}));
    // A pod plumb attached no sandbox of (Multus did, or it is still being created).
    c.pod("default", "other", json!({NETWORKS: "net-a"}));
    holding(&socket, 3);
    annotate(&c, "host", "net-a,net-a");
    daemon.wait_for("pod default/host: its networks annotation changed, but it runs in the host's");
    annotate(&c, "other", "net-a,net-a");
    daemon.wait_for(
        "pod default/other: its networks annotation changed, but plumb attached no sandbox of it",
    );

    let ns = Netns::new();
    let netns = ns.path();
    let pod = ("default", "lost", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "x1"));
    // The runtime removed the netns and has not sent DEL yet.
    drop(ns);
    annotate(&c, "lost", "net-a,other-ns/net-b@mv1");
    daemon.wait_for(&format!(
        "dynamic: pod default/lost (container x1): not changed: its network namespace {} is gone",
        netns.display()
    ));
    assert!(c.node.allocations("net-b").is_empty());
    ok(&c.call_in("DEL", &netns.display().to_string(), pod, "x1"));
    c.assert_node_clean("after the DEL");
}

#[test]
fn a_failed_attach_is_rolled_back_and_the_status_says_what_the_pod_has_left() {
    let n = 145;
    let (c, socket, daemon) = dynamic(n);
    // A network out of addresses: its bridge is made, then its IPAM fails the ADD (and the
    // bridge plugin's DEL, which the rollback runs, works).
    let bridge = Link::bridge(&unique_name("kf"));
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "full",
            json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge.name(),
                   "ipam": {"type": "host-local", "subnet": format!("10.{n}.4.0/30"),
                            "dataDir": c.node.ipam_dir()}}),
        ),
    );
    let held = c.node.ipam_dir().join("full");
    std::fs::create_dir_all(&held).unwrap();
    std::fs::write(held.join(format!("10.{n}.4.2")), "another\neth0").unwrap();
    let uid = c.pod("default", "frail", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "frail", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "b1"));
    let record = std::fs::read(c.node.record("b1")).unwrap();

    annotate(&c, "frail", "net-a,full");
    wait_until("the ChangeFailed event", || {
        reasons(&c, "frail") == ["ChangeFailed"]
    });
    daemon.wait_for("change failed");
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);
    assert_eq!(c.node.allocations("full"), [format!("10.{n}.4.2")]);
    let after: Value =
        serde_json::from_slice(&std::fs::read(c.node.record("b1")).unwrap()).unwrap();
    let before: Value = serde_json::from_slice(&record).unwrap();
    assert_eq!(after["attachments"], before["attachments"]);

    // net-a detached, then full fails: the status lists what is left.
    annotate(&c, "frail", "full");
    wait_until("net1 detached and the status following", || {
        status_interfaces(&c, "frail") == ["eth0"]
    });
    assert_eq!(ns.links(), ["lo", "eth0"]);
    // The event comes after the status.
    wait_until("the ChangeFailed event naming what was detached", || {
        c.events_for("default", "frail").iter().any(|e| {
            let m = e["message"].as_str().unwrap_or_default();
            m.contains("detached before it: default/net-a (net1)")
        })
    });

    // Back to the annotation the pod was attached with: net-a is attached again (the record
    // follows no annotation after a failed change).
    annotate(&c, "frail", "net-a");
    wait_until("net1 again", || {
        status_interfaces(&c, "frail") == ["eth0", "net1"]
    });
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);
    ok(&c.call("DEL", &ns, pod, "b1"));
    std::fs::remove_file(held.join(format!("10.{n}.4.2"))).unwrap();
    c.assert_nothing_left(&ns, "b1");
}

/// A chained plugin that, on ADD, says it began (file `entered` beside it) and returns only
/// once the file `open` is there; every other command does nothing.
const GATE: &str = r#"#!/bin/sh
d=$(dirname "$0")
cat >/dev/null
if [ "$CNI_COMMAND" = ADD ]; then
  touch "$d/entered"
  while [ ! -e "$d/open" ]; do sleep 0.05; done
  printf '{"cniVersion": "1.0.0"}'
fi
if [ "$CNI_COMMAND" = VERSION ]; then
  printf '{"cniVersion": "1.0.0", "supportedVersions": ["0.3.1", "0.4.0", "1.0.0"]}'
fi
"#;

#[test]
fn a_daemon_killed_in_the_middle_of_a_change_leaves_the_next_one_to_finish_it() {
    use std::os::unix::fs::PermissionsExt;
    let n = 144;
    let (mut c, socket, daemon) = dynamic(n);
    // plumb's bin directory: Debian's plugins, and the gate.
    let bin = c.node.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for plugin in std::fs::read_dir(crate::common::PLUGINS).unwrap() {
        let plugin = plugin.unwrap();
        std::os::unix::fs::symlink(plugin.path(), bin.join(plugin.file_name())).unwrap();
    }
    std::fs::write(bin.join("gate"), GATE).unwrap();
    std::fs::set_permissions(bin.join("gate"), std::fs::Permissions::from_mode(0o755)).unwrap();
    c.config["binDir"] = json!(bin);
    let bridge = Link::bridge(&unique_name("kg"));
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"namespace": "default", "name": "gated"},
               "spec": {"config": json!({"cniVersion": "1.0.0", "name": "gated", "plugins": [
                   {"type": "bridge", "bridge": bridge.name(),
                    "ipam": {"type": "host-local", "subnet": format!("10.{n}.4.0/24"),
                             "dataDir": c.node.ipam_dir()}},
                   {"type": "gate"}]}).to_string()}}),
    );
    let uid = c.pod("default", "cut", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "cut", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "k1"));

    annotate(&c, "cut", "net-a,gated");
    wait_for_file(&bin.join("entered"));
    // Killed while the new attachment's ADD runs: its interface is made, its address held.
    assert!(ns.links().contains(&"net2".to_string()));
    assert_eq!(c.node.allocations("gated").len(), 1);
    drop(daemon); // SIGKILL
    let record: Value =
        serde_json::from_slice(&std::fs::read(c.node.record("k1")).unwrap()).unwrap();
    assert_eq!(record["attachments"][2]["pending"], true, "{record:#}");
    assert_eq!(record["forChanges"]["selection"], Value::Null, "{record:#}");
    std::fs::write(bin.join("open"), "").unwrap();

    // The next daemon attaches it again: detached (its address released), attached anew.
    let (_socket, daemon) = dynamic_daemon(&mut c);
    daemon.wait_for("dynamic: pod default/cut (container k1): detached [net2 (default/gated)]");
    // (The gate's result, the attachment's, is a minimal one: its status entry names the
    // network only.)
    wait_until("the status", || {
        let s = c.status_of("default", "cut").unwrap_or_default();
        s.len() == 3 && s[2]["name"] == "default/gated"
    });
    assert_eq!(ns.links(), ["lo", "eth0", "net1", "net2"]);
    assert_eq!(c.node.allocations("gated").len(), 1);
    let record: Value =
        serde_json::from_slice(&std::fs::read(c.node.record("k1")).unwrap()).unwrap();
    assert_eq!(record["attachments"][2].get("pending"), None, "{record:#}");
    assert_eq!(record["forChanges"]["selection"], "net-a,gated");
    ok(&c.call("DEL", &ns, pod, "k1"));
    c.assert_nothing_left(&ns, "k1");
}

#[test]
fn a_daemon_refuses_to_start_with_a_bad_selector_or_without_an_identity_to_watch_with() {
    let d = tempfile::tempdir().unwrap();
    let socket = d.path().join("plumb.sock");
    let said = super::refused_with(
        &socket,
        &[
            "--dynamic",
            "--dynamic-namespaces",
            "plumb.example/dynamic=true,",
        ],
    );
    assert!(said.contains("--dynamic-namespaces"), "{said}");
    assert!(said.contains("a comma too many"), "{said}");
    // No --kubeconfig, not in a pod: nothing to watch the pods and namespaces with.
    let said = super::refused_with(&socket, &["--dynamic", "--dynamic-namespaces", OPT_IN]);
    assert!(said.contains("--dynamic: the daemon watches"), "{said}");
    assert!(!socket.exists());
}
