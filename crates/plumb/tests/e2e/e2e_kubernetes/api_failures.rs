//! plumb with an API server that fails: silent, slow, refusing one request, or killed at any
//! point of an ADD or DEL; STATUS asking it as little as it can; the NADs of a pod fetched
//! together; and the RBAC in deploy/ granting exactly the requests plumb makes.

use super::*;

#[test]
fn an_api_server_that_does_not_answer_fails_the_call_in_bounded_time() {
    // Each attempt gives up after 5 s, and all of a call's API work after 30 s: the runtime
    // gets plumb's error (code 11, try again) well within its own 2 minutes.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(223);
    let uid = c.pod("default", "mute", json!({NETWORKS: "net-a"}));
    c.api.add_fault(
        Fault::new(FaultKind::Latency(std::time::Duration::from_secs(600)))
            .method("GET")
            .path("/api/v1/namespaces/default/pods/mute"),
    );
    let ns = Netns::new();
    let started = std::time::Instant::now();
    let e = err(&c.call("ADD", &ns, ("default", "mute", &uid), "cmute"));
    let took = started.elapsed();
    assert_eq!(e["code"], 11, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("get pod default/mute") && msg.contains("30 s"),
        "{e}"
    );
    // Retried until the budget ran out, and no longer (7 attempts of 5 s would take 38 s).
    assert!(
        took >= std::time::Duration::from_secs(25) && took < std::time::Duration::from_secs(35),
        "{took:?}"
    );
    c.assert_nothing_attached(&ns, "cmute");
}

#[test]
fn a_resolver_that_does_not_answer_does_not_hold_the_call_past_its_budget() {
    // The kubeconfig names the API server by a host name and the node's DNS server has stopped
    // answering. Each connection attempt gives up after 2 s, but the lookup (getaddrinfo, on a
    // thread of its own) goes on for the resolver's own timeout; the call must not wait for
    // those lookups before answering the runtime.
    let c = Cluster::new(224);
    let uid = c.pod("default", "nodns", json!({NETWORKS: "net-a"}));
    // A DNS server that never answers, and plumb's own /etc/resolv.conf naming it.
    let _silent_dns = std::net::UdpSocket::bind("127.0.0.77:53").unwrap();
    let resolv = c.node.path("resolv.conf");
    fs::write(
        &resolv,
        "nameserver 127.0.0.77\noptions timeout:30 attempts:1\n",
    )
    .unwrap();
    let kubeconfig = c.node.path("kubeconfig-by-name");
    let text = fs::read_to_string(c.config["kubeconfig"].as_str().unwrap()).unwrap();
    let port = c.api.addr().port();
    let text = text.replace(
        &c.api.url(),
        &format!("https://kube-api.plumb-test.example:{port}"),
    );
    assert!(text.contains("kube-api.plumb-test.example"), "{text}");
    fs::write(&kubeconfig, text).unwrap();
    let mut config = c.config.clone();
    config["kubeconfig"] = json!(kubeconfig);
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let args =
        format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=nodns;K8S_POD_UID={uid}");
    let call = CniCall {
        command: "ADD",
        container_id: "cnodns",
        netns: &netns,
        ifname: "eth0",
        args: &args,
        config: &config,
    };
    let mount_resolv = format!(
        "mount --bind {} /etc/resolv.conf && exec \"$0\"",
        resolv.display()
    );
    let started = std::time::Instant::now();
    let out = crate::common::run_under(&call, &["unshare", "-m", "sh", "-c", &mount_resolv], &[]);
    let took = started.elapsed();
    let e = err(&out);
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("get pod default/nodns"),
        "{e}"
    );
    // About 17 s of attempts and backoff; the last lookup alone would run 30 s more.
    assert!(took < std::time::Duration::from_secs(25), "{took:?}");
    c.assert_nothing_attached(&ns, "cnodns");
}

#[test]
fn status_of_a_node_with_pods_asks_the_api_server_nothing() {
    // The runtime asks STATUS every few seconds on every node. The cluster network here is a
    // NAD: once a pod's record says how it resolved, STATUS reads it from there, so an API
    // server that is down or refuses does not mark the node's network not ready.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(225);
    let mut config = c.config.clone();
    config["cniVersion"] = json!("1.1.0");
    let status = || run_node_wide("STATUS", &config);
    // No pod yet: only the API server can tell what the NAD is, and it refuses.
    c.api
        .add_fault(Fault::new(FaultKind::Status(403, "Forbidden".into())).times(1));
    let e = err(&status());
    assert_eq!(e["code"], 50, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("kube-system/default-net"),
        "{e}"
    );
    ok(&status());

    let uid = c.pod("default", "st", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let pod = ("default", "st", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cst"));
    c.api.clear_requests();
    ok(&status());
    assert_eq!(c.api.requests().len(), 0, "{:?}", c.api.requests());
    c.api.set_down(true);
    ok(&status());

    // The pod gone, the node has nothing to say: the API server is asked again.
    ok(&c.call("DEL", &ns, pod, "cst"));
    c.api.set_down(false);
    c.api.clear_requests();
    ok(&status());
    assert_eq!(c.api.requests().len(), 1, "{:?}", c.api.requests());
}

#[test]
fn status_with_the_api_server_silent_says_not_available_within_seconds() {
    // The runtime asks STATUS every few seconds to report whether the node can start pods.
    // With no pod on the node only the API server can tell what the cluster network is; when
    // it does not answer, STATUS says so (code 50) after a few seconds, as the runtime will ask
    // again, instead of holding the runtime's status report for an ADD's whole 30 s budget.
    use std::time::{Duration, Instant};
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(255);
    let mut config = c.config.clone();
    config["cniVersion"] = json!("1.1.0");
    c.api
        .add_fault(Fault::new(FaultKind::Latency(Duration::from_secs(120))));
    let started = Instant::now();
    let e = err(&run_node_wide("STATUS", &config));
    let took = started.elapsed();
    assert_eq!(e["code"], 50, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("default-net"),
        "the error names the network: {e}"
    );
    assert!(took < Duration::from_secs(15), "STATUS took {took:?}");
}

#[test]
fn status_of_a_cluster_network_from_a_file_asks_the_api_server_nothing_either() {
    // The usual Multus configuration: `clusterNetwork` names the primary plugin's file, which
    // ADD finds after the API server says there is no such NAD. Once a pod's record says so,
    // STATUS does not ask again.
    let mut c = Cluster::new(226);
    let conf = c.node.path("conf");
    fs::create_dir_all(&conf).unwrap();
    let bridge = unique_name("kf");
    let _adopted = Link::adopt(&bridge);
    let mut file = c.node.bridge("file-net", &bridge, 226);
    file["cniVersion"] = json!("1.0.0");
    fs::write(conf.join("10-file.conf"), file.to_string()).unwrap();
    c.config["clusterNetwork"] = json!("file-net");
    let mut config = c.config.clone();
    config["cniVersion"] = json!("1.1.0");
    let uid = c.pod("default", "fst", json!({}));
    let ns = Netns::new();
    let pod = ("default", "fst", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "cfst"));
    assert_eq!(ns.addresses("eth0").len(), 1);
    c.api.clear_requests();
    ok(&run_node_wide("STATUS", &config));
    assert_eq!(c.api.requests().len(), 0, "{:?}", c.api.requests());
    ok(&c.call("DEL", &ns, pod, "cfst"));
}

/// What the stand-in saw of one ADD: connections accepted, most requests in flight at once.
#[derive(Debug, PartialEq)]
struct AddSeen {
    connections: u64,
    max_in_flight: u64,
}

/// ADD (then DEL) of a pod selecting three NADs, each NAD answer 200 ms late so that GETs sent
/// together certainly overlap, against a stand-in that offers HTTP/2 (`http2`) or not.
fn add_with_three_slow_nads(net: u8, http2: bool) -> AddSeen {
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::with_api(
        net,
        KubeApiOptions {
            http2,
            ..KubeApiOptions::default()
        },
    );
    let bridge = unique_name("kh");
    let _b = Link::adopt(&bridge);
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        bridge_nad(
            &c.node,
            ("default", "net-c"),
            &bridge,
            format!("10.{net}.4.0/24"),
            false,
        ),
    );
    let uid = c.pod(
        "default",
        "telco",
        json!({NETWORKS: "net-a,other-ns/net-b@mv1,net-c"}),
    );
    c.api.add_fault(
        Fault::new(FaultKind::Latency(std::time::Duration::from_millis(200)))
            .method("GET")
            .path("/apis/k8s.cni.cncf.io/v1/namespaces/"),
    );
    let ns = Netns::new();
    let pod = ("default", "telco", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "ctelco"));
    let seen = AddSeen {
        connections: c.api.connections_accepted(),
        max_in_flight: c.api.max_in_flight(),
    };
    assert_eq!(ns.addresses("net1"), [format!("10.{net}.2.2/24")]);
    assert_eq!(ns.addresses("mv1"), [format!("10.{net}.3.2/24")]);
    assert_eq!(ns.addresses("net3"), [format!("10.{net}.4.2/24")]);
    let nad_gets = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("network-attachment-definitions"))
        .count();
    // The cluster network's, and the three the pod selects, each once.
    assert_eq!(nad_gets, 4);
    ok(&c.call("DEL", &ns, pod, "ctelco"));
    c.assert_nothing_left(&ns, "ctelco");
    seen
}

#[test]
fn the_nads_of_a_pod_are_fetched_together_over_one_http2_connection() {
    let seen = add_with_three_slow_nads(227, true);
    assert_eq!(seen.connections, 1, "{seen:?}");
    assert!(seen.max_in_flight >= 2, "{seen:?}");
}

#[test]
fn over_http1_the_nads_are_fetched_one_after_the_other_on_one_connection() {
    let seen = add_with_three_slow_nads(228, false);
    assert_eq!(
        seen,
        AddSeen {
            connections: 1,
            max_in_flight: 1
        }
    );
}

#[test]
fn a_fetched_nad_the_planner_never_uses_fails_nothing() {
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(229).with("namespaceIsolation", json!(true));
    let forbidden = |ns: &str, name: &str| {
        Fault::new(FaultKind::Status(403, "Forbidden".into())).path(&format!(
            "/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}"
        ))
    };
    c.api.add_fault(forbidden("default", "net-a"));
    c.api.add_fault(forbidden("other-ns", "net-b"));
    let ns = Netns::new();

    // A missing NAD is reported as it always was, not the refusal of the NAD after it, which
    // was fetched with it but is never used.
    let uid = c.pod("default", "gone", json!({NETWORKS: "missing-net,net-a"}));
    let e = err(&c.call("ADD", &ns, ("default", "gone", &uid), "cgone"));
    assert_eq!(e["code"], 7, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("default/missing-net") && msg.contains("not found"),
        "{e}"
    );
    assert!(!msg.contains("403"), "{e}");
    let net_a = c
        .api
        .requests()
        .iter()
        .filter(|r| {
            r.path
                .ends_with("/default/network-attachment-definitions/net-a")
        })
        .map(|r| r.status)
        .collect::<Vec<_>>();
    assert_eq!(net_a, [403], "net-a was fetched with missing-net");
    c.assert_nothing_attached(&ns, "cgone");

    // A NAD namespace isolation refuses is refused as always, and not even asked for.
    let uid = c.pod("default", "iso", json!({NETWORKS: "other-ns/net-b"}));
    let e = err(&c.call("ADD", &ns, ("default", "iso", &uid), "ciso"));
    assert_eq!(e["code"], 7, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("namespaceIsolation"),
        "{e}"
    );
    assert!(
        !c.api
            .requests()
            .iter()
            .any(|r| r.path.contains("other-ns/network-attachment-definitions")),
        "a NAD the pod may not use was asked for"
    );
    c.assert_nothing_attached(&ns, "ciso");

    // A NAD the planner does use still fails the call with its GET's error.
    let uid = c.pod("default", "denied", json!({NETWORKS: "net-a"}));
    let e = err(&c.call("ADD", &ns, ("default", "denied", &uid), "cdenied"));
    assert_eq!(e["code"], 5, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("get network-attachment-definition default/net-a"),
        "{e}"
    );
    c.assert_nothing_attached(&ns, "cdenied");
}

#[test]
fn an_add_killed_at_any_point_is_undone_by_the_del_that_follows() {
    // The runtime kills a plugin whose deadline passed, wherever it is, and sends DEL. Killed
    // at points spread over the whole ADD (before its record, during each delegate, during the
    // status PATCH), plumb alone (its delegates run on) or with every process it started (the
    // runtime's cgroup killed), the DEL that follows succeeds and leaves nothing.
    Cluster::new(248).kill_at_any_point("ADD", |_, _| {});
}

#[test]
fn a_del_killed_at_any_point_is_finished_by_the_next_one() {
    // The same for a DEL the runtime gave up on: the DEL it sends again finishes the work.
    Cluster::new(249).kill_at_any_point("DEL", |c, (ns, pod, cid)| {
        ok(&c.call("ADD", ns, pod, cid));
    });
}

#[test]
fn one_transient_api_failure_at_any_request_of_an_add_is_ridden_out() {
    // An API server failing over, restarting or shedding load answers one request of an ADD
    // with a 500, a 503, a 429 or a closed connection: whichever request it is (the pod's GET,
    // a NAD's, the status PATCH), the ADD succeeds with every network and its status, and the
    // DEL leaves nothing.
    use testkit::kube_api::{Fault, FaultKind};
    let c = Cluster::new(252);
    let nads = "/apis/k8s.cni.cncf.io/v1/namespaces";
    let mut i = 0;
    for (method, path) in [
        ("GET", "/api/v1/namespaces/default/pods/"),
        (
            "GET",
            &*format!("{nads}/kube-system/network-attachment-definitions/default-net"),
        ),
        (
            "GET",
            &*format!("{nads}/default/network-attachment-definitions/net-a"),
        ),
        (
            "GET",
            &*format!("{nads}/other-ns/network-attachment-definitions/net-b"),
        ),
        ("PATCH", "/api/v1/namespaces/default/pods/"),
    ] {
        for (fault, answered) in [
            (FaultKind::Status(500, "InternalError".into()), 500),
            (FaultKind::Unavailable, 503),
            (FaultKind::TooManyRequests(1), 429),
            // Closed without an answer.
            (FaultKind::Disconnect, 0),
        ] {
            i += 1;
            let (name, cid) = (format!("flaky{i}"), format!("cf{i}"));
            let uid = c.pod(
                "default",
                &name,
                json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
            );
            let when = format!("{fault:?} on {method} {path}");
            c.api
                .add_fault(Fault::new(fault).method(method).path(path).times(1));
            let ns = Netns::new();
            let pod = ("default", name.as_str(), uid.as_str());
            c.api.clear_requests();
            let out = c.call("ADD", &ns, pod, &cid);
            assert!(
                c.api.requests().iter().any(|r| r.method == method
                    && r.path.starts_with(path)
                    && r.status == answered),
                "{when}: the fault was not met"
            );
            assert!(
                out.status.success(),
                "{when}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert_eq!(ns.links(), ["lo", "eth0", "net1", "mv1"], "{when}");
            let status = c.status_of("default", &name);
            assert_eq!(status.map(|s| s.len()), Some(3), "{when}");
            ok(&c.call("DEL", &ns, pod, &cid));
            c.assert_nothing_left(&ns, &cid);
            c.api.clear_faults();
        }
    }
}

/// What an RBAC rule of deploy/common/rbac.yaml must grant for `request`: its API group, its
/// resource (`pods/status` for a subresource) and its verb, as the API server authorizes it.
fn authorized_as(request: &testkit::kube_api::LoggedRequest) -> (String, String, String) {
    let parts: Vec<&str> = request.path.trim_matches('/').split('/').collect();
    // /api/v1/namespaces/NS/RESOURCE[/NAME[/SUB]] or /apis/GROUP/VERSION/namespaces/NS/…, or
    // the same without the namespace (all namespaces, or a cluster-wide resource).
    let (group, rest) = match parts.as_slice() {
        ["api", _, "namespaces", _, rest @ ..] => ("", rest),
        ["apis", group, _, "namespaces", _, rest @ ..] => (*group, rest),
        ["api", _, rest @ ..] => ("", rest),
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => panic!("a request outside the API: {}", request.path),
    };
    let resource = match rest {
        [resource, _, sub] => format!("{resource}/{sub}"),
        [resource, ..] => resource.to_string(),
        [] => panic!("no resource: {}", request.path),
    };
    let verb = match (request.method.as_str(), rest.len()) {
        ("GET", 1) if request.query.contains("watch=") => "watch",
        ("GET", 1) => "list",
        ("GET", _) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        (m, _) => panic!("method {m}: {}", request.path),
    };
    (group.into(), resource, verb.into())
}

/// What the ClusterRole `name` of deploy/common/rbac.yaml grants: (group, resource, verb).
fn granted_by(name: &str) -> std::collections::BTreeSet<(String, String, String)> {
    let rbac = plumb_engine::objects::read_file(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/common/rbac.yaml"),
    )
    .unwrap();
    let role = rbac
        .iter()
        .find(|o| o.kind() == "ClusterRole" && o.value["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("a ClusterRole {name}"));
    let mut granted = std::collections::BTreeSet::new();
    for rule in role.value["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    granted.insert((
                        group.as_str().unwrap().to_string(),
                        resource.as_str().unwrap().to_string(),
                        verb.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    granted
}

#[test]
fn deploy_rbac_yaml_grants_the_daemons_caches_every_request_they_make_and_nothing_else() {
    // The daemon watching with its own identity: what its caches ask (the node's pods, the
    // NADs, its Node, with --dynamic the opted-in namespaces) is `plumb-daemon`'s; its calls'
    // requests (and its dynamic changes', made as calls are) are those of the test below.
    let c = Cluster::new(163);
    let state = c.node.state_dir();
    let socket = c.node.path("run/plumb.sock");
    let own = c.api.write_kubeconfig(
        c.node.path("daemon-kubeconfig"),
        testkit::kube_api::KubeconfigUser::Token,
    );
    let daemon = crate::common::daemon::Daemon::start_with(
        &socket,
        None,
        &[
            "--kubeconfig".as_ref(),
            own.as_os_str(),
            "--node-name".as_ref(),
            crate::common::cluster::NODE.as_ref(),
            "--dynamic".as_ref(),
            "--dynamic-namespaces".as_ref(),
            "plumb.example/dynamic".as_ref(),
            "--state-dir".as_ref(),
            state.as_os_str(),
        ],
        &[],
    );
    daemon.wait_for("caches: Node \"plumb-test-node\" found");
    daemon.wait_for("caches: the pods of plumb-test-node are in");
    daemon.wait_for("caches: the NADs of all namespaces are in");
    daemon.wait_for("caches: the namespaces of label selector");
    // Their watches are logged once their streams start, after the lists.
    for what in ["/pods", "/network-attachment-definitions", "/namespaces"] {
        c.api
            .wait_for_request(std::time::Duration::from_secs(10), |r| {
                r.query_param("watch").is_some() && r.path.ends_with(what)
            })
            .unwrap_or_else(|| panic!("the watch of {what}"));
    }
    // No call was made: every request is the caches'.
    let used: std::collections::BTreeSet<_> = c.api.requests().iter().map(authorized_as).collect();
    let granted = granted_by("plumb-daemon");
    let not_granted: Vec<_> = used.difference(&granted).collect();
    assert!(not_granted.is_empty(), "not granted: {not_granted:?}");
    let not_used: Vec<_> = granted.difference(&used).collect();
    assert!(not_used.is_empty(), "granted, never used: {not_used:?}");
}

#[test]
fn deploy_rbac_yaml_grants_every_request_plumb_makes_and_nothing_else() {
    // An operator binds deploy/common/rbac.yaml to plumb's identity: a request it does not grant
    // fails pods on a real cluster (403), which the stand-in, granting everything, would not
    // show; a grant no request uses is privilege a node's credentials need not carry.
    let granted = granted_by("plumb");

    // Everything plumb does with the API: a pod on three networks with attachment events, its
    // DEL, a pod whose NAD is missing (a warning event) and its DEL without a record.
    let c = Cluster::new(190).with("plumbAttachmentEvents", json!(true));
    let uid = c.pod(
        "default",
        "web",
        json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
    );
    let ns = Netns::new();
    ok(&c.call("ADD", &ns, ("default", "web", &uid), "crbac"));
    ok(&c.call("DEL", &ns, ("default", "web", &uid), "crbac"));
    let uid = c.pod("default", "nonad", json!({NETWORKS: "missing-net"}));
    err(&c.call("ADD", &ns, ("default", "nonad", &uid), "crbac2"));
    ok(&c.call("DEL", &ns, ("default", "nonad", &uid), "crbac2"));
    c.assert_nothing_left(&ns, "crbac2");

    let used: std::collections::BTreeSet<_> = c.api.requests().iter().map(authorized_as).collect();
    let not_granted: Vec<_> = used.difference(&granted).collect();
    assert!(not_granted.is_empty(), "not granted: {not_granted:?}");
    let not_used: Vec<_> = granted.difference(&used).collect();
    assert!(not_used.is_empty(), "granted, never used: {not_used:?}");
}
