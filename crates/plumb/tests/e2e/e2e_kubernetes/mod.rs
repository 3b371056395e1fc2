//! plumb end to end with Kubernetes: the built binary run exactly as a runtime runs it (CNI_*
//! environment, configuration on stdin), Debian's reference plugins in real network namespaces,
//! and testkit's API stand-in reached through kube-rs from a kubeconfig, as a real cluster
//! would be. Needs root (CI runs as root).

use std::fs;
use std::process::Command;

use crate::common::cluster::{Cluster, NETWORKS, bridge_nad, nad};
use crate::common::{CniCall, err, ok, run, run_node_wide};
use serde_json::{Value, json};
use testkit::kube_api::{KubeApiOptions, Resource};
use testkit::netns::{Link, Netns, unique_name};

#[test]
fn a_pod_on_three_networks_and_back() {
    let c = Cluster::new(205);
    let uid = c.pod(
        "default",
        "web",
        json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
    );
    let ns = Netns::new();
    let pod = ("default", "web", uid.as_str());

    let result = ok(&c.call("ADD", &ns, pod, "c3"));
    assert_eq!(
        result["ips"][0]["address"], "10.205.1.2/24",
        "the default network's result"
    );
    assert_eq!(ns.addresses("eth0"), ["10.205.1.2/24"]);
    assert_eq!(ns.addresses("net1"), ["10.205.2.2/24"]);
    assert_eq!(ns.addresses("mv1"), ["10.205.3.2/24"]);
    let mv1 = ns.ip_json(&["-d", "link", "show", "dev", "mv1"]);
    assert_eq!(mv1[0]["linkinfo"]["info_kind"], "macvlan");

    // network-status (multi-net spec §5): every attachment, in order, as the spec lays it out.
    let status = c
        .status_of("default", "web")
        .expect("network-status written");
    assert_eq!(status.len(), 3, "{status:?}");
    assert_eq!(status[0]["name"], "kube-system/default-net");
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true);
    assert_eq!(status[0]["ips"], json!(["10.205.1.2"]));
    assert_eq!(status[0]["mac"].as_str(), ns.mac("eth0").as_deref());
    assert_eq!(status[1]["name"], "default/net-a");
    assert_eq!(status[1]["interface"], "net1");
    assert_eq!(status[1]["ips"], json!(["10.205.2.2"]));
    assert!(status[1].get("default").is_none() || status[1]["default"] == false);
    assert_eq!(status[2]["name"], "other-ns/net-b");
    assert_eq!(status[2]["interface"], "mv1");
    assert_eq!(status[2]["mac"].as_str(), ns.mac("mv1").as_deref());

    // What plumb asked of the API server: the pod, each NAD, one PATCH of the status.
    let log = c.api.requests();
    let calls: Vec<(String, String)> = log
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    assert!(
        calls.contains(&("GET".into(), "/api/v1/namespaces/default/pods/web".into())),
        "{calls:?}"
    );
    let patches: Vec<_> = log.iter().filter(|r| r.method == "PATCH").collect();
    assert_eq!(patches.len(), 1, "{calls:?}");
    assert_eq!(
        patches[0].path,
        "/api/v1/namespaces/default/pods/web/status"
    );
    assert!(
        log.iter().all(|r| r.bearer_token.is_some()),
        "every request authenticated"
    );

    // `plumb status --pod` reads the same annotation back from the cluster, as a table.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["status", "--pod", "default/web", "--kubeconfig"])
        .arg(c.node.path("kubeconfig"))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(
        table.contains("other-ns/net-b") && table.contains("mv1"),
        "{table}"
    );

    ok(&c.call("DEL", &ns, pod, "c3"));
    c.assert_nothing_left(&ns, "c3");
}

#[test]
fn json_annotation_with_ips_and_mac() {
    let c = Cluster::new(206);
    let bridge = unique_name("ks");
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "static-net",
            json!({"cniVersion": "1.0.0", "plugins": [
            {"type": "bridge", "bridge": bridge, "capabilities": {"ips": true},
             "ipam": {"type": "static"}},
            {"type": "tuning", "capabilities": {"mac": true}}]}),
        ),
    );
    let _bridge = Link::adopt(&bridge);
    let annotation = r#"[{"name":"static-net","ips":["10.206.9.5/24"],"mac":"02:00:00:00:09:05"}]"#;
    let uid = c.pod("default", "st", json!({NETWORKS: annotation}));
    let ns = Netns::new();
    let pod = ("default", "st", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cst"));
    assert_eq!(ns.addresses("net1"), ["10.206.9.5/24"]);
    assert_eq!(ns.mac("net1").as_deref(), Some("02:00:00:00:09:05"));
    let status = c.status_of("default", "st").unwrap();
    assert_eq!(status[1]["ips"], json!(["10.206.9.5"]));
    assert_eq!(status[1]["mac"], "02:00:00:00:09:05");
    ok(&c.call("DEL", &ns, pod, "cst"));
    c.assert_nothing_left(&ns, "cst");
}

#[test]
fn a_bandwidth_rate_without_a_burst_is_applied() {
    // The reference bandwidth plugin refuses a rate without a burst; plumb gives it the
    // kubelet's default burst (spec §4.1.2.1.8), so the pod starts with its limit in place.
    let c = Cluster::new(207);
    let bridge = unique_name("kw");
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "limited",
            json!({"cniVersion": "1.0.0", "plugins": [
            {"type": "bridge", "bridge": bridge, "capabilities": {"ips": true},
             "ipam": {"type": "static"}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}]}),
        ),
    );
    let _bridge = Link::adopt(&bridge);
    let annotation =
        r#"[{"name":"limited","ips":["10.207.9.5/24"],"bandwidth":{"ingressRate":1000000}}]"#;
    let uid = c.pod("default", "bw", json!({NETWORKS: annotation}));
    let ns = Netns::new();
    let pod = ("default", "bw", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cbw"));
    // The limit: a token bucket on the pod's veth on the host side, the bridge's port.
    let port = Command::new("ip")
        .args(["-j", "link", "show", "master", &bridge])
        .output()
        .unwrap();
    let ports: Value = serde_json::from_slice(&port.stdout).unwrap();
    let port = ports[0]["ifname"].as_str().unwrap().to_string();
    let qdisc = Command::new("tc")
        .args(["qdisc", "show", "dev", &port])
        .output()
        .unwrap();
    let qdisc = String::from_utf8_lossy(&qdisc.stdout);
    assert!(
        qdisc.contains("tbf") && qdisc.contains("rate 1Mbit"),
        "{qdisc}"
    );
    ok(&c.call("DEL", &ns, pod, "cbw"));
    c.assert_nothing_left(&ns, "cbw");
}

#[test]
fn the_same_network_twice() {
    let c = Cluster::new(253);
    let uid = c.pod("default", "twice", json!({NETWORKS: "net-a,net-a"}));
    let ns = Netns::new();
    let pod = ("default", "twice", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "ctw"));
    assert_eq!(ns.addresses("net1"), ["10.253.2.2/24"]);
    assert_eq!(ns.addresses("net2"), ["10.253.2.3/24"]);
    let status = c.status_of("default", "twice").unwrap();
    let names: Vec<&str> = status
        .iter()
        .map(|s| s["interface"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["eth0", "net1", "net2"]);
    ok(&c.call("DEL", &ns, pod, "ctw"));
    c.assert_nothing_left(&ns, "ctw");
}

#[test]
fn isolation_refusal_and_a_missing_nad_fail_before_anything_is_attached() {
    let c = Cluster::new(208).with("namespaceIsolation", json!(true));
    let uid = c.pod("tenant", "iso", json!({NETWORKS: "other-ns/net-b"}));
    let ns = Netns::new();
    let e = err(&c.call("ADD", &ns, ("tenant", "iso", &uid), "ciso"));
    assert_eq!(e["code"], 7);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("tenant/iso")
            && msg.contains("other-ns/net-b")
            && msg.contains("namespaceIsolation"),
        "{e}"
    );
    c.assert_nothing_attached(&ns, "ciso");
    // The runtime's DEL after that failed ADD succeeds: nothing ran, nothing to undo.
    ok(&c.call("DEL", &ns, ("tenant", "iso", &uid), "ciso"));
    let events = c.events_for("tenant", "iso");
    assert!(events.iter().any(|e| e["type"] == "Warning" && e["message"].as_str().unwrap().contains("namespace")), "{events:?}");

    let uid = c.pod("default", "nonad", json!({NETWORKS: "missing-net"}));
    let e = err(&c.call("ADD", &ns, ("default", "nonad", &uid), "cnonad"));
    assert!(
        e["msg"].as_str().unwrap().contains("default/missing-net"),
        "{e}"
    );
    assert!(e["msg"].as_str().unwrap().contains("not found"), "{e}");
    c.assert_nothing_attached(&ns, "cnonad");
    assert!(
        c.events_for("default", "nonad")
            .iter()
            .any(|e| e["reason"] == "NoNetworkFound")
    );
}

#[test]
fn a_delegate_failing_midway_then_del_cleans_everything() {
    let c = Cluster::new(209);
    let bridge = unique_name("kt");
    let _b = Link::adopt(&bridge);
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad("default", "bad-tuning", json!({"cniVersion": "1.0.0", "plugins": [
            {"type": "bridge", "bridge": bridge,
             "ipam": {"type": "host-local", "subnet": "10.209.7.0/24", "dataDir": c.node.ipam_dir()}},
            {"type": "tuning", "mac": "not-a-mac"}]})),
    );
    let uid = c.pod("default", "half", json!({NETWORKS: "net-a,bad-tuning"}));
    let ns = Netns::new();
    let pod = ("default", "half", uid.as_str());
    let e = err(&c.call("ADD", &ns, pod, "chalf"));
    assert!(
        e["msg"].as_str().unwrap().contains("default/bad-tuning"),
        "{e}"
    );
    assert!(
        c.status_of("default", "half").is_none(),
        "no status for a failed ADD"
    );
    // The runtime calls DEL after a failed ADD.
    ok(&c.call("DEL", &ns, pod, "chalf"));
    c.assert_nothing_left(&ns, "chalf");
}

#[test]
fn del_with_the_api_server_down_works_from_the_record() {
    let c = Cluster::new(210);
    let uid = c.pod(
        "default",
        "down",
        json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
    );
    let ns = Netns::new();
    let pod = ("default", "down", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cdown"));
    assert_eq!(c.node.all_allocations(), 3);
    c.api.set_down(true);
    ok(&c.call("DEL", &ns, pod, "cdown"));
    c.assert_nothing_left(&ns, "cdown");
    // And ADD with the API down fails clearly, attaching nothing.
    let ns2 = Netns::new();
    let e = err(&c.call("ADD", &ns2, pod, "cdown2"));
    assert!(e["msg"].as_str().unwrap().contains("Kubernetes API"), "{e}");
    c.assert_nothing_attached(&ns2, "cdown2");
}

#[test]
fn token_rotated_between_add_and_del() {
    let c = Cluster::new(211);
    let uid = c.pod("default", "rot", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let pod = ("default", "rot", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "crot"));
    let new = c.rotate_token();
    c.api.clear_requests();
    ok(&c.call("DEL", &ns, pod, "crot"));
    c.assert_nothing_left(&ns, "crot");
    // A new pod is attached with the new token.
    let uid2 = c.pod("default", "rot2", json!({NETWORKS: "net-a"}));
    let ns2 = Netns::new();
    ok(&c.call("ADD", &ns2, ("default", "rot2", &uid2), "crot2"));
    c.assert_every_request_used(&new);
    ok(&c.call("DEL", &ns2, ("default", "rot2", &uid2), "crot2"));
}

#[test]
fn a_recreated_pod_or_a_missing_one_gets_nothing() {
    let c = Cluster::new(212);
    c.pod("default", "re", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let e = err(&c.call("ADD", &ns, ("default", "re", "an-old-uid"), "cre"));
    assert!(e["msg"].as_str().unwrap().contains("recreated"), "{e}");
    c.assert_nothing_attached(&ns, "cre");
    let e = err(&c.call("ADD", &ns, ("default", "ghost", "u"), "cghost"));
    assert!(e["msg"].as_str().unwrap().contains("not found"), "{e}");
    c.assert_nothing_attached(&ns, "cghost");
}

#[test]
fn pod_annotations_from_the_runtime_spare_the_pod_get() {
    let c = Cluster::new(213);
    let c = c.with_pod_annotations(json!({NETWORKS: "net-a"}));
    let uid = c.pod("default", "rtann", json!({}));
    let ns = Netns::new();
    let pod = ("default", "rtann", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "crt"));
    assert_eq!(ns.addresses("net1"), ["10.213.2.2/24"]);
    let gets: Vec<_> = c
        .api
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.contains("/pods/"))
        .collect();
    assert!(gets.is_empty(), "{gets:?}");
    assert_eq!(c.status_of("default", "rtann").unwrap().len(), 2);
    ok(&c.call("DEL", &ns, pod, "crt"));
    c.assert_nothing_left(&ns, "crt");
}

#[test]
fn system_namespace_pods_get_their_network_status_like_any_pod() {
    // multi-net spec §5: network-status is how users and controllers learn what a pod has.
    // `systemNamespaces` only keeps `defaultNetworks` off these pods.
    let c = Cluster::new(214);
    let uid = c.pod("kube-system", "sys", json!({}));
    let ns = Netns::new();
    let pod = ("kube-system", "sys", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "csys"));
    let patches = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(patches, 1);
    let status = c
        .status_of("kube-system", "sys")
        .expect("network-status written");
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true);
    ok(&c.call("DEL", &ns, pod, "csys"));
    c.assert_nothing_left(&ns, "csys");
}

/// The pod's IPv4 default routes: (interface, gateway) each.
fn ipv4_defaults(ns: &Netns) -> Vec<(String, String)> {
    ns.routes("-4")
        .into_iter()
        .filter(|r| r["dst"] == "default")
        .map(|r| {
            (
                r["dev"].as_str().unwrap().to_string(),
                r["gateway"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn default_route_moves_to_net1() {
    // multi-net spec §4.1.2.1.9; Multus v4.2.2 leaves eth0's default in place (its
    // DeleteDefaultGW deletes nothing), so the routes are read back here.
    let c = Cluster::new(215);
    let ns0 = Netns::new();
    // Without the annotation, the cluster network has the default route.
    let uid0 = c.pod("default", "plain", json!({NETWORKS: "net-a"}));
    ok(&c.call("ADD", &ns0, ("default", "plain", &uid0), "cplain"));
    let before: Vec<Value> = ns0
        .routes("-4")
        .into_iter()
        .filter(|r| r["dst"] == "default")
        .collect();
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["dev"], "eth0");
    ok(&c.call("DEL", &ns0, ("default", "plain", &uid0), "cplain"));
    let annotation = r#"[{"name":"net-a","default-route":["10.215.2.1"]}]"#;
    let uid = c.pod("default", "gw", json!({NETWORKS: annotation}));
    let ns = Netns::new();
    let pod = ("default", "gw", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cgw"));
    assert_eq!(
        ipv4_defaults(&ns),
        [("net1".to_string(), "10.215.2.1".to_string())],
        "{:?}",
        ns.routes("-4")
    );
    let status = c.status_of("default", "gw").unwrap();
    assert_eq!(status[1]["default-route"], json!(["10.215.2.1"]));
    ok(&c.call("DEL", &ns, pod, "cgw"));
    c.assert_nothing_left(&ns, "cgw");
}

#[test]
fn an_empty_default_route_list_changes_no_route() {
    // multi-net spec §4.1.2.1.9: "This list may be empty"; it names no gateway, so the default
    // network keeps its default route and no other interface gets one.
    let c = Cluster::new(197);
    let annotation = r#"[{"name":"net-a","default-route":[]}]"#;
    let uid = c.pod("default", "nogw", json!({NETWORKS: annotation}));
    let ns = Netns::new();
    let pod = ("default", "nogw", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cnogw"));
    assert_eq!(
        ipv4_defaults(&ns),
        [("eth0".to_string(), "10.197.1.1".to_string())],
        "{:?}",
        ns.routes("-4")
    );
    ok(&c.call("DEL", &ns, pod, "cnogw"));
    c.assert_nothing_left(&ns, "cnogw");
}

#[test]
fn transient_api_errors_and_a_late_pod_are_retried() {
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(216);
    let uid = c.pod("default", "flaky", json!({NETWORKS: "net-a"}));
    c.api.add_fault(
        Fault::new(FaultKind::Status(500, "InternalError".into()))
            .method("GET")
            .path("/api/v1/namespaces/default/pods/flaky")
            .times(2),
    );
    let ns = Netns::new();
    let pod = ("default", "flaky", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cflaky"));
    let gets: Vec<u16> = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pods/flaky"))
        .map(|r| r.status)
        .collect();
    assert_eq!(gets, [500, 500, 200]);
    ok(&c.call("DEL", &ns, pod, "cflaky"));
    c.assert_nothing_left(&ns, "cflaky");

    // A pod the API server does not show yet (informer lag in real clusters) is waited for.
    let ns = Netns::new();
    let late = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            c.pod("default", "late", json!({NETWORKS: "net-a"}))
        });
        let out = c.call("ADD", &ns, ("default", "late", ""), "clate");
        (writer.join().unwrap(), out)
    });
    ok(&late.1);
    // host-local hands out the next address, not the one just released.
    let net1 = ns.addresses("net1");
    assert!(
        net1.len() == 1 && net1[0].starts_with("10.216.2."),
        "{net1:?}"
    );
    ok(&c.call("DEL", &ns, ("default", "late", &late.0), "clate"));
    c.assert_nothing_left(&ns, "clate");
}

#[test]
fn attachment_events_and_the_readiness_indicator() {
    let c = Cluster::new(217);
    let ready = c.node.path("ready");
    let c = c
        .with("plumbAttachmentEvents", json!(true))
        .with("readinessindicatorfile", json!(ready));
    let uid = c.pod("default", "ev", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let pod = ("default", "ev", uid.as_str());
    // ADD waits for the default network's readiness file.
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(400));
            fs::write(&ready, "").unwrap();
        });
        let t = std::time::Instant::now();
        let out = c.call("ADD", &ns, pod, "cev");
        (out, t.elapsed())
    });
    ok(&out.0);
    assert!(
        out.1 >= std::time::Duration::from_millis(400),
        "ADD did not wait"
    );
    let events = c.events_for("default", "ev");
    let added: Vec<&str> = events
        .iter()
        .filter(|e| e["reason"] == "AddedInterface" && e["type"] == "Normal")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    // Multus's wording: "Add <ifname> [<ips>] from <network>" (events are listed by name).
    assert_eq!(added.len(), 2, "{events:?}");
    assert!(
        added.contains(&"Add net1 [10.217.2.2/24] from default/net-a"),
        "{added:?}"
    );
    assert!(
        added.contains(&"Add eth0 [10.217.1.2/24] from kube-system/default-net"),
        "{added:?}"
    );
    ok(&c.call("DEL", &ns, pod, "cev"));
    c.assert_nothing_left(&ns, "cev");
}

#[test]
fn an_events_endpoint_that_does_not_answer_holds_the_add_once_not_per_attachment() {
    // Events are best effort: the API server not answering their POSTs (each try waits 5 s)
    // must not hold the ADD of a pod on three networks for each of its AddedInterface events
    // (15 s, the whole API budget with six networks). The first one is waited for, no other.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(194).with("plumbAttachmentEvents", json!(true));
    let uid = c.pod(
        "default",
        "quiet",
        json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
    );
    c.api.add_fault(
        Fault::new(FaultKind::Latency(std::time::Duration::from_secs(20)))
            .method("POST")
            .path("/api/v1/namespaces/default/events"),
    );
    let ns = Netns::new();
    let pod = ("default", "quiet", uid.as_str());
    let started = std::time::Instant::now();
    ok(&c.call("ADD", &ns, pod, "cquiet"));
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(9), "{took:?}");
    assert_eq!(ns.links(), ["lo", "eth0", "net1", "mv1"]);
    assert_eq!(c.status_of("default", "quiet").map(|s| s.len()), Some(3));
    ok(&c.call("DEL", &ns, pod, "cquiet"));
    c.assert_nothing_left(&ns, "cquiet");
}

#[test]
fn an_api_failing_one_request_for_good_fails_the_add_cleanly_and_its_del_needs_no_api() {
    // An API server, or a proxy in front of it, that keeps refusing one request of an ADD or
    // answering it with another object than the one asked for (another name, namespace or
    // UID) or with no object at all: whichever request it is (the pod's GET, a NAD's, the
    // status PATCH), the ADD fails with an error naming that request and leaves nothing (no
    // interface, address, record to undo or result cache entry), its CHECK says so, and the
    // runtime's DEL, sent twice, succeeds. The events endpoint failing fails no ADD.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(192).with("plumbAttachmentEvents", json!(true));
    let nad_path =
        "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/net-a";
    let pod_json = |name: &str, uid: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "default", "name": name, "uid": uid,
                            "annotations": {NETWORKS: "net-a"}},
               "spec": {"containers": [{"name": "c", "image": "x"}]}})
        .to_string()
    };
    let other_nad = nad(
        "elsewhere",
        "net-a",
        json!({"cniVersion": "1.0.0", "type": "bridge"}),
    );
    let refused = || FaultKind::Status(422, "Invalid".into());
    let garbage = || FaultKind::Body(200, "<html>not an object</html>".into());
    // (pod, method, path, fault, what the error says)
    let mut rounds: Vec<(String, &str, String, FaultKind, String)> = Vec::new();
    for i in 0..4 {
        let name = format!("failing{i}");
        let (kind_pod, kind_nad, kind_patch) = match i {
            0 => (refused(), refused(), refused()),
            1 => (
                FaultKind::Body(200, pod_json("someone-else", "u-2")),
                FaultKind::Body(200, other_nad.to_string()),
                FaultKind::Body(200, pod_json("someone-else", "u-2")),
            ),
            2 => (garbage(), garbage(), garbage()),
            // The pod's name with another UID: the pod was recreated (code 3), or the status
            // write's answer is not about this sandbox's pod. A NAD's UID is nobody's.
            _ => (
                FaultKind::Body(200, pod_json(&name, "u-2")),
                refused(),
                FaultKind::Body(200, pod_json(&format!("{name}-status"), "u-2")),
            ),
        };
        let get_pod_said = if i == 3 {
            "the pod was recreated".to_string()
        } else {
            format!("get pod default/{name}")
        };
        rounds.push((
            name.clone(),
            "GET",
            format!("/api/v1/namespaces/default/pods/{name}"),
            kind_pod,
            get_pod_said,
        ));
        rounds.push((
            format!("{name}-nad"),
            "GET",
            nad_path.to_string(),
            kind_nad,
            "get network-attachment-definition default/net-a".to_string(),
        ));
        rounds.push((
            format!("{name}-status"),
            "PATCH",
            format!("/api/v1/namespaces/default/pods/{name}-status/status"),
            kind_patch,
            format!("set network-status of pod default/{name}-status"),
        ));
    }
    for (i, (name, method, path, fault, said)) in rounds.into_iter().enumerate() {
        let cid = format!("cfail{i}");
        let when = format!("{fault:?} on {method} {path}");
        let uid = c.pod("default", &name, json!({NETWORKS: "net-a"}));
        c.api.clear_faults();
        c.api
            .add_fault(Fault::new(fault).method(method).path(&path));
        let ns = Netns::new();
        let pod = ("default", name.as_str(), uid.as_str());
        let e = err(&c.call("ADD", &ns, pod, &cid));
        let msg = e["msg"].as_str().unwrap();
        assert!(msg.contains(&said), "{when}: {e}");
        // Named once, by the call: "pod NS/NAME (container ID): …".
        assert!(
            msg.starts_with(&format!("pod default/{name} (container {cid}): ")),
            "{when}: {e}"
        );
        assert!(e["code"] == 5 || e["code"] == 3, "{when}: {e}");
        assert_eq!(ns.links(), ["lo"], "{when}");
        assert_eq!(c.node.all_allocations(), 0, "{when}");
        assert!(c.node.left_to_undo(&cid).is_empty(), "{when}");
        assert!(c.node.cache_entries().is_empty(), "{when}");
        assert_eq!(err(&c.call("CHECK", &ns, pod, &cid))["code"], 3, "{when}");
        for _ in 0..2 {
            ok(&c.call("DEL", &ns, pod, &cid));
            c.assert_nothing_left(&ns, &cid);
        }
    }
    for (i, fault) in [
        FaultKind::Status(500, "InternalError".into()),
        FaultKind::TooManyRequests(60),
        FaultKind::Disconnect,
        garbage(),
    ]
    .into_iter()
    .enumerate()
    {
        let (name, cid) = (format!("noevents{i}"), format!("cnoev{i}"));
        let when = format!("{fault:?} on POST events");
        let uid = c.pod("default", &name, json!({NETWORKS: "net-a"}));
        c.api.clear_faults();
        c.api.add_fault(
            Fault::new(fault)
                .method("POST")
                .path("/api/v1/namespaces/default/events"),
        );
        let ns = Netns::new();
        let pod = ("default", name.as_str(), uid.as_str());
        ok(&c.call("ADD", &ns, pod, &cid));
        assert_eq!(ns.links(), ["lo", "eth0", "net1"], "{when}");
        assert_eq!(
            c.status_of("default", &name).map(|s| s.len()),
            Some(2),
            "{when}"
        );
        ok(&c.call("DEL", &ns, pod, &cid));
        c.assert_nothing_left(&ns, &cid);
    }
}

#[test]
fn a_del_after_an_add_failed_on_a_nad_asks_the_api_nothing_or_once_without_a_record() {
    // The API keeps failing the GET of a NAD the pod selects: ADD fails before anything is
    // attached. Its DEL waited for the API again (up to the whole API budget when the API does
    // not answer). A DEL with no record plans from the API, making that GET's retries once,
    // not again to plan without devices.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(193);
    let uid = c.pod("default", "nonad", json!({NETWORKS: "net-a"}));
    let path = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/net-a";
    c.api.add_fault(
        Fault::new(FaultKind::Status(500, "InternalError".into()))
            .method("GET")
            .path(path),
    );
    let gets = |c: &Cluster| {
        c.api
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path)
            .count()
    };
    let ns = Netns::new();
    let pod = ("default", "nonad", uid.as_str());
    let e = err(&c.call("ADD", &ns, pod, "cnonad"));
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("get network-attachment-definition default/net-a"),
        "{e}"
    );
    let by_add = gets(&c);
    assert!(by_add > 1, "the GET was not retried: {by_add}");
    // The ADD left a record of no attachment: its DEL asks the API nothing.
    c.assert_nothing_attached(&ns, "cnonad");
    c.api.clear_requests();
    ok(&c.call("DEL", &ns, pod, "cnonad"));
    assert_eq!(c.api.requests().len(), 0, "the DEL asked the API");
    c.assert_nothing_left(&ns, "cnonad");
    // Without that record (removed by hand, or an ADD killed before it), the DEL plans from
    // the API and makes the GET's retries once.
    err(&c.call("ADD", &ns, pod, "cnonad"));
    std::fs::remove_file(c.node.record("cnonad")).unwrap();
    c.api.clear_requests();
    ok(&c.call("DEL", &ns, pod, "cnonad"));
    assert_eq!(gets(&c), by_add, "the DEL's GETs of the NAD");
    c.assert_nothing_left(&ns, "cnonad");
}

#[test]
fn del_without_a_record_plans_from_the_api() {
    let c = Cluster::new(218);
    let uid = c.pod("default", "norec", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let pod = ("default", "norec", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cnorec"));
    // The record is lost (a node restored from an old backup, a hand-made mistake): DEL plans
    // the pod's networks from the API again and undoes them.
    fs::remove_file(c.node.record("cnorec")).unwrap();
    ok(&c.call("DEL", &ns, pod, "cnorec"));
    c.assert_nothing_left(&ns, "cnorec");
}

#[test]
fn a_status_write_that_keeps_failing_undoes_the_attachments() {
    // A pod must not run without its network-status: the ADD fails, everything is undone, and
    // the runtime retries later.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(219);
    let uid = c.pod("default", "nostatus", json!({NETWORKS: "net-a"}));
    c.api.add_fault(
        Fault::new(FaultKind::Status(500, "InternalError".into()))
            .method("PATCH")
            .path("/api/v1/namespaces/default/pods/nostatus/status"),
    );
    let ns = Netns::new();
    let e = err(&c.call("ADD", &ns, ("default", "nostatus", &uid), "cnostatus"));
    assert_eq!(e["code"], 11, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("network-status"), "{e}");
    assert_eq!(ns.links(), ["lo"], "interfaces left");
    assert_eq!(c.node.all_allocations(), 0, "addresses left");
    assert!(c.node.left_to_undo("cnostatus").is_empty());
    c.api.clear_faults();
    ok(&c.call("ADD", &ns, ("default", "nostatus", &uid), "cnostatus"));
    assert_eq!(c.status_of("default", "nostatus").unwrap().len(), 2);
    ok(&c.call("DEL", &ns, ("default", "nostatus", &uid), "cnostatus"));
    c.assert_nothing_left(&ns, "cnostatus");
}

#[test]
fn a_pod_recreated_before_its_status_is_written_gets_code_3_by_patch_and_by_update() {
    // The runtime passes the pod's annotations, so no GET checks the UID: the status write
    // does. The API server refuses the PATCH's UID (422 on metadata.uid) and the update's
    // read shows another UID: either way the sandbox is not the pod's (code 3), its ADD is
    // undone, and the runtime's DEL leaves nothing.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(242);
    let c = c.with_pod_annotations(json!({NETWORKS: "net-a"}));
    c.pod("default", "rp", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let pod = ("default", "rp", "an-old-uid");
    let by_patch = err(&c.call("ADD", &ns, pod, "crp"));
    assert_eq!(ns.links(), ["lo"]);
    ok(&c.call("DEL", &ns, pod, "crp"));
    c.assert_nothing_left(&ns, "crp");
    c.api.add_fault(
        Fault::new(FaultKind::Status(403, "Forbidden".into()))
            .method("PATCH")
            .path("/api/v1/namespaces/default/pods/rp/status"),
    );
    let by_update = err(&c.call("ADD", &ns, pod, "crp"));
    assert_eq!(ns.links(), ["lo"]);
    ok(&c.call("DEL", &ns, pod, "crp"));
    c.assert_nothing_left(&ns, "crp");
    for e in [by_patch, by_update] {
        assert_eq!(e["code"], 3, "{e}");
        assert!(
            e["msg"]
                .as_str()
                .unwrap()
                .contains("the pod was recreated (this sandbox's UID is an-old-uid;"),
            "{e}"
        );
    }
}

#[test]
fn a_runtime_behind_a_proxy_does_not_send_plumb_through_it() {
    // containerd or CRI-O behind a corporate proxy has HTTPS_PROXY (for its image pulls), and
    // its plugins inherit it; NO_PROXY names the API server there. kube, without its proxy
    // feature, took the variable for a proxy to use and refused every call: plumb connects
    // directly.
    let c = Cluster::new(245);
    let uid = c.pod("default", "behind", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let proxied = [
        "env",
        "HTTPS_PROXY=http://127.0.0.1:9",
        "https_proxy=http://127.0.0.1:9",
        "NO_PROXY=127.0.0.1",
    ];
    let pod = ("default", "behind", uid.as_str());
    ok(&c.call_under("ADD", &netns, pod, "cbehind", &proxied));
    assert_eq!(c.status_of("default", "behind").unwrap().len(), 2);
    ok(&c.call_under("DEL", &netns, pod, "cbehind", &proxied));
    c.assert_nothing_left(&ns, "cbehind");
}

#[test]
fn pods_start_under_multus_rbac_which_grants_update_of_pod_status_not_patch() {
    // An operator replacing Multus keeps its service account and ClusterRole (pods/status:
    // get, list, update, watch). plumb's PATCH is refused; it writes the network-status with a
    // GET and a PUT, as Multus does, and the pod starts.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(254);
    let uid = c.pod("default", "mrbac", json!({NETWORKS: "net-a"}));
    c.api.add_fault(
        Fault::new(FaultKind::Status(403, "Forbidden".into()))
            .method("PATCH")
            .path("/api/v1/namespaces/default/pods/mrbac/status"),
    );
    let ns = Netns::new();
    let pod = ("default", "mrbac", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cmrbac"));
    let status = c.status_of("default", "mrbac").unwrap();
    assert_eq!(status.len(), 2, "{status:?}");
    assert_eq!(status[1]["interface"], "net1", "{status:?}");
    ok(&c.call("DEL", &ns, pod, "cmrbac"));
    c.assert_nothing_left(&ns, "cmrbac");
}

#[test]
fn a_static_pod_whose_annotations_come_from_the_runtime_gets_its_status() {
    // The runtime knows a static pod by the kubelet's UID (the config hash), not by its mirror
    // pod's: that UID must not become a precondition the API refuses on every retry.
    let c = Cluster::new(220);
    let annotations = json!({"kubernetes.io/config.source": "file",
                             "kubernetes.io/config.hash": "static-hash-uid",
                             "kubernetes.io/config.mirror": "static-hash-uid",
                             NETWORKS: "net-a"});
    let c = c.with_pod_annotations(annotations.clone());
    c.pod("default", "static-web", annotations);
    let ns = Netns::new();
    let pod = ("default", "static-web", "static-hash-uid");
    ok(&c.call("ADD", &ns, pod, "cstatic"));
    assert_eq!(c.status_of("default", "static-web").unwrap().len(), 2);
    ok(&c.call("DEL", &ns, pod, "cstatic"));
    c.assert_nothing_left(&ns, "cstatic");
}

#[test]
fn without_the_pods_name_plumb_writes_to_no_pod() {
    // Annotations from the runtime but no K8S_POD_* in CNI_ARGS: the attachments are made,
    // and no status or event goes to a pod plumb could only guess the name of.
    let c = Cluster::new(221);
    c.pod("default", "sandbox", json!({}));
    let mut config = c.config.clone();
    config["runtimeConfig"] = json!({"io.kubernetes.cri.pod-annotations": {NETWORKS: "net-a"}});
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let call = |command| {
        run(&CniCall {
            command,
            container_id: "cnoargs",
            netns: &netns,
            ifname: "eth0",
            args: "IgnoreUnknown=1",
            config: &config,
        })
    };
    ok(&call("ADD"));
    assert_eq!(ns.addresses("net1"), ["10.221.2.2/24"]);
    let writes: Vec<String> = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert!(c.status_of("default", "sandbox").is_none());
    ok(&call("DEL"));
    c.assert_nothing_left(&ns, "cnoargs");
}

/// ADD of a new pod `name` on net-a whose NAD GET the API answers 800 ms late, `change` run
/// (given the token the call started with) 300 ms into it: the token changes under a call.
/// Returns the ADD's output, the pod's UID and its netns.
fn add_while_the_token_changes(
    c: &Cluster,
    name: &str,
    cid: &str,
    change: impl Fn(&str) + Send + Sync,
) -> (std::process::Output, String, Netns) {
    use testkit::kube_api::{Fault, FaultKind};
    let uid = c.pod("default", name, json!({NETWORKS: "net-a"}));
    let old = fs::read_to_string(&c.token_file).unwrap();
    c.api.add_fault(
        Fault::new(FaultKind::Latency(std::time::Duration::from_millis(800)))
            .method("GET")
            .path("/apis/k8s.cni.cncf.io")
            .times(1),
    );
    let ns = Netns::new();
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            change(old.trim());
        });
        c.call("ADD", &ns, ("default", name, &uid), cid)
    });
    (out, uid, ns)
}

#[test]
fn a_token_rotated_during_the_call_is_picked_up() {
    // The token is replaced, and the old one revoked, while an ADD waits on the API: the 401
    // makes plumb read the kubeconfig's token file again, once, and go on.
    let c = Cluster::new(222);
    let new = format!("rotated-mid-{}", std::process::id());
    let (out, uid, ns) = add_while_the_token_changes(&c, "midrot", "cmidrot", |old| {
        c.api.accept_token(&new);
        fs::write(&c.token_file, &new).unwrap();
        c.api.revoke_token(old);
    });
    ok(&out);
    let statuses: Vec<u16> = c.api.requests().iter().map(|r| r.status).collect();
    assert!(
        statuses.contains(&401),
        "the old token was never refused: {statuses:?}"
    );
    assert_eq!(c.status_of("default", "midrot").unwrap().len(), 2);
    ok(&c.call("DEL", &ns, ("default", "midrot", &uid), "cmidrot"));
    c.assert_nothing_left(&ns, "cmidrot");
}

#[test]
fn a_token_revoked_during_the_call_whose_file_is_gone_says_so() {
    // As above, but the token file is removed rather than replaced: the 401 stands, and the
    // error says why no new token was taken (the file), not only that the API refused.
    let c = Cluster::new(244);
    let (out, _, ns) = add_while_the_token_changes(&c, "gonetok", "cgonetok", |old| {
        fs::remove_file(&c.token_file).unwrap();
        c.api.revoke_token(old);
    });
    let e = err(&out);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("Unauthorized")
            && msg.contains("the kubeconfig read again for a new token could not be used")
            && msg.contains(&c.token_file.display().to_string()),
        "{e}"
    );
    c.assert_nothing_attached(&ns, "cgonetok");
}

mod api_failures;
