//! The daemon's watch caches end to end: pods and NADs served from them (an ADD asks the API
//! server only to write network-status), a NAD changed, a pod recreated, the watch broken and
//! resumed, the API server down at start, a wrong node name; through the stand-in's real list
//! and watch.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::kube_api::{Fault, FaultKind, KubeconfigUser, LoggedRequest, Resource};
use testkit::netns::{Link, Netns, unique_name};

use super::{http, socket_of, through};
use crate::common::cluster::{Cluster, NETWORKS, NODE, bridge_nad, is_the_caches};
use crate::common::daemon::Daemon;
use crate::common::{err, ok};

/// A daemon for `c` that watches with `kubeconfig`, for node `node`, its socket named in `c`'s
/// configuration: the socket and the daemon.
fn watching(c: &mut Cluster, kubeconfig: &Path, node: &str) -> (PathBuf, Daemon) {
    watching_with(c, kubeconfig, node, &[])
}

/// [`watching`], with `more` arguments.
pub(super) fn watching_with(
    c: &mut Cluster,
    kubeconfig: &Path,
    node: &str,
    more: &[&str],
) -> (PathBuf, Daemon) {
    let socket = socket_of(c);
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--kubeconfig".as_ref(),
        kubeconfig.as_os_str(),
        "--node-name".as_ref(),
        node.as_ref(),
    ];
    args.extend(more.iter().map(std::ffi::OsStr::new));
    let daemon = Daemon::start_with(&socket, None, &args, &[]);
    through(c, &socket);
    (socket, daemon)
}

/// Cluster `n` with a daemon that watches with a kubeconfig of its own, for node `node`.
fn cached_for(n: u8, node: &str) -> (Cluster, PathBuf, Daemon) {
    let mut c = Cluster::new(n);
    let own = c
        .api
        .write_kubeconfig(c.node.path("daemon-kubeconfig"), KubeconfigUser::Token);
    let (socket, daemon) = watching(&mut c, &own, node);
    (c, socket, daemon)
}

fn cached(n: u8) -> (Cluster, PathBuf, Daemon) {
    cached_for(n, NODE)
}

/// The daemon's `GET /caches`.
fn report(socket: &Path) -> Value {
    let (status, body) = http(socket, "GET", "/caches", b"");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits (up to 30 s) until the daemon's caches report what `until` wants; the report then.
fn wait_for(socket: &Path, what: &str, until: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = report(socket);
        if until(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {r:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pods cache synced and holding `n` pods, the NADs' synced.
pub(super) fn holding(socket: &Path, n: u64) -> Value {
    wait_for(socket, &format!("{n} pods in the cache"), |r| {
        let c = &r["caches"];
        c["pods"]["synced"] == true && c["nads"]["synced"] == true && c["pods"]["objects"] == n
    })
}

/// What the calls asked of the API server: requests other than the caches' lists, watches and
/// Node lookup, as (method, path).
fn calls_requests(requests: &[LoggedRequest]) -> Vec<(String, String)> {
    requests
        .iter()
        .filter(|r| !is_the_caches(r))
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect()
}

/// `plumb health [--ready]` against the daemon at `socket`: its exit and what it printed.
fn health(socket: &Path, ready: bool) -> (std::process::Output, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_plumb"));
    command.arg("health").arg("--socket").arg(socket);
    if ready {
        command.arg("--ready");
    }
    let out = command.output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, said)
}

fn patch_of(name: &str) -> (String, String) {
    (
        "PATCH".into(),
        format!("/api/v1/namespaces/default/pods/{name}/status"),
    )
}

#[test]
fn a_pod_the_cache_holds_is_added_asking_the_api_server_only_to_write_its_status() {
    let (c, socket, _daemon) = cached(172);
    let uid = c.pod(
        "default",
        "web",
        json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
    );
    holding(&socket, 1);
    c.api.clear_requests();
    let ns = Netns::new();
    let pod = ("default", "web", uid.as_str());
    let result = ok(&c.call("ADD", &ns, pod, "w1"));
    assert_eq!(result["ips"][0]["address"], "10.172.1.2/24");
    assert_eq!(ns.addresses("net1"), ["10.172.2.2/24"]);
    assert_eq!(ns.addresses("mv1"), ["10.172.3.2/24"]);
    assert_eq!(calls_requests(&c.api.requests()), [patch_of("web")]);
    // One connection for the watches, one for the call.
    assert_eq!(c.api.connections_accepted(), 2);
    assert_eq!(c.call_connections(), 1);
    assert_eq!(c.status_of("default", "web").unwrap().len(), 3);
    let r = report(&socket)["caches"].clone();
    assert_eq!(
        (r["pods"]["hits"].as_u64(), r["pods"]["misses"].as_u64()),
        (Some(1), Some(0))
    );
    // The default network's NAD, net-a's and net-b's.
    assert_eq!(
        (r["nads"]["hits"].as_u64(), r["nads"]["misses"].as_u64()),
        (Some(3), Some(0))
    );
    c.api.clear_requests();
    ok(&c.call("DEL", &ns, pod, "w1"));
    assert_eq!(
        calls_requests(&c.api.requests()),
        Vec::<(String, String)>::new()
    );
    c.assert_nothing_left(&ns, "w1");
}

#[test]
fn events_are_sent_after_the_answer_and_one_the_api_server_refuses_fails_no_call() {
    let (mut c, socket, daemon) = cached(171);
    c.config["plumbAttachmentEvents"] = json!(true);
    let uid = c.pod("default", "ev", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "ev", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "e1"));
    // Sent by the daemon's event thread, after the answer.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.events_for("default", "ev").len() < 2 {
        assert!(Instant::now() < deadline, "the events did not come");
        std::thread::sleep(Duration::from_millis(20));
    }
    let reasons: Vec<Value> = (c.events_for("default", "ev").iter())
        .map(|e| e["reason"].clone())
        .collect();
    assert_eq!(reasons, ["AddedInterface", "AddedInterface"]);
    ok(&c.call("DEL", &ns, pod, "e1"));

    // Every event refused: the calls succeed all the same, the daemon says so.
    c.api
        .add_fault(Fault::new(FaultKind::Status(500, "InternalError".into())).method("POST"));
    let uid = c.pod("default", "ev2", json!({NETWORKS: "net-a"}));
    holding(&socket, 2);
    let pod = ("default", "ev2", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "e2"));
    daemon.wait_for("events: could not record the AddedInterface event on pod default/ev2");
    wait_for(&socket, "the failed events counted", |r| {
        r["events"]["failed"] == 2
    });
    ok(&c.call("DEL", &ns, pod, "e2"));
    c.assert_nothing_left(&ns, "e2");
}

#[test]
fn a_nad_changed_between_two_pods_gives_the_second_the_new_configuration() {
    let (c, socket, _daemon) = cached(170);
    let first = c.pod("default", "first", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    let ns1 = Netns::new();
    ok(&c.call("ADD", &ns1, ("default", "first", first.as_str()), "n1"));
    assert_eq!(ns1.addresses("net1"), ["10.170.2.2/24"]);

    // net-a moves to another bridge and subnet.
    let before = report(&socket)["caches"]["nads"]["events"]
        .as_u64()
        .unwrap();
    let moved = unique_name("kn");
    let _moved = Link::adopt(&moved);
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        bridge_nad(
            &c.node,
            ("default", "net-a"),
            &moved,
            "10.170.4.0/24".into(),
            false,
        ),
    );
    let second = c.pod("default", "second", json!({NETWORKS: "net-a"}));
    wait_for(&socket, "the NAD's change and the second pod", |r| {
        r["caches"]["nads"]["events"].as_u64() > Some(before) && r["caches"]["pods"]["objects"] == 2
    });
    c.api.clear_requests();
    let ns2 = Netns::new();
    ok(&c.call("ADD", &ns2, ("default", "second", second.as_str()), "n2"));
    assert_eq!(ns2.addresses("net1"), ["10.170.4.2/24"]);
    assert_eq!(calls_requests(&c.api.requests()), [patch_of("second")]);
    ok(&c.call("DEL", &ns1, ("default", "first", first.as_str()), "n1"));
    ok(&c.call("DEL", &ns2, ("default", "second", second.as_str()), "n2"));
    c.assert_nothing_left(&ns1, "n1");
    c.assert_nothing_left(&ns2, "n2");
}

#[test]
fn a_pod_recreated_under_its_name_is_read_from_the_api_until_the_cache_has_it() {
    let (c, socket, _daemon) = cached(169);
    let old_uid = c.pod("default", "again", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    // The watch lags: the cache still holds the old pod when the new one's sandbox comes.
    c.api.hold_watches(true);
    c.api.delete(Resource::Pods, "default", "again");
    let new_uid = c.pod("default", "again", json!({NETWORKS: "net-a"}));
    assert_ne!(old_uid, new_uid);
    c.api.clear_requests();
    let ns = Netns::new();
    let new = ("default", "again", new_uid.as_str());
    ok(&c.call("ADD", &ns, new, "r2"));
    assert_eq!(
        calls_requests(&c.api.requests()),
        [
            ("GET".into(), "/api/v1/namespaces/default/pods/again".into()),
            patch_of("again")
        ]
    );
    let r = report(&socket)["caches"].clone();
    assert_eq!(
        (r["pods"]["hits"].as_u64(), r["pods"]["misses"].as_u64()),
        (Some(0), Some(1))
    );
    let status = c.api.get(Resource::Pods, "default", "again").unwrap();
    assert_eq!(status["metadata"]["uid"], new_uid.as_str());

    // Once the cache has the new pod, a late ADD for the old sandbox is refused: it asks the
    // API (the cache's pod is another), which has the new one.
    let held = report(&socket)["caches"]["pods"]["events"]
        .as_u64()
        .unwrap();
    c.api.hold_watches(false);
    wait_for(&socket, "the pod deleted and made again", |r| {
        r["caches"]["pods"]["events"].as_u64() >= Some(held + 2)
    });
    let stale = Netns::new();
    let e = err(&c.call("ADD", &stale, ("default", "again", old_uid.as_str()), "r1"));
    assert!(
        e["msg"].as_str().unwrap().contains("the pod was recreated"),
        "{e}"
    );
    ok(&c.call("DEL", &stale, ("default", "again", old_uid.as_str()), "r1"));
    ok(&c.call("DEL", &ns, new, "r2"));
    c.assert_nothing_left(&ns, "r2");
    c.assert_nothing_left(&stale, "r1");
}

#[test]
fn a_broken_watch_resumes_from_where_it_was_and_lists_again_when_that_is_gone() {
    let (c, socket, daemon) = cached(168);
    c.pod("default", "before", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);
    for (round, compacted) in [false, true].into_iter().enumerate() {
        c.api.clear_requests();
        c.api.set_down(true);
        if compacted {
            // Writes while the watch is gone, then compacted: its resourceVersion is no more.
            c.api.put(
                Resource::Pods,
                json!({"metadata": {"namespace": "default", "name": "unrelated"}}),
            );
            c.api.compact();
        }
        c.api.set_down(false);
        let name = if compacted {
            "after-compaction"
        } else {
            "after"
        };
        let uid = c.pod("default", name, json!({NETWORKS: "net-a"}));
        let n = if compacted { 3 } else { 2 };
        holding(&socket, n);
        let pod_requests: Vec<LoggedRequest> = (c.api.requests().into_iter())
            .filter(|r| r.path == "/api/v1/pods")
            .collect();
        let listed = pod_requests
            .iter()
            .any(|r| r.query_param("watch").is_none());
        assert_eq!(listed, compacted, "{pod_requests:?}");
        let resumed = (pod_requests.iter()).any(|r| {
            r.query_param("watch").is_some() && r.query_param("resourceVersion").is_some()
        });
        assert!(resumed, "{pod_requests:?}");
        daemon.wait_for_more("caches: watching the pods of plumb-test-node again", round);
        c.api.clear_requests();
        let ns = Netns::new();
        let pod = ("default", name, uid.as_str());
        ok(&c.call("ADD", &ns, pod, name));
        assert_eq!(calls_requests(&c.api.requests()), [patch_of(name)]);
        ok(&c.call("DEL", &ns, pod, name));
        c.assert_nothing_left(&ns, name);
    }
}

#[test]
fn a_daemon_started_while_the_api_server_is_down_serves_calls_and_fills_its_caches_later() {
    let mut c = Cluster::new(165);
    let own = c
        .api
        .write_kubeconfig(c.node.path("daemon-kubeconfig"), KubeconfigUser::Token);
    c.api.set_down(true);
    let (socket, daemon) = watching(&mut c, &own, NODE);
    daemon.wait_for("caches: watching the pods of plumb-test-node: ");
    let r = report(&socket)["caches"].clone();
    assert_eq!(
        (r["pods"]["synced"].clone(), r["node_found"].clone()),
        (json!(false), Value::Null)
    );
    // Alive, not ready: what a DaemonSet's probes ask.
    let (alive, _) = health(&socket, false);
    assert!(alive.status.success());
    let (ready, said) = health(&socket, true);
    assert_eq!(ready.status.code(), Some(1));
    assert!(
        said.contains("not ready: the caches do not serve yet"),
        "{said}"
    );
    c.api.set_down(false);
    let uid = c.pod("default", "late", json!({NETWORKS: "net-a"}));
    let r = holding(&socket, 1);
    daemon.wait_for("caches: Node \"plumb-test-node\" found");
    assert_eq!(report(&socket)["caches"]["node_found"], true, "{r}");
    let (ready, said) = health(&socket, true);
    assert!(ready.status.success(), "{said}");
    assert!(
        said.starts_with("ready: serving calls; in the caches: 1 pods"),
        "{said}"
    );
    c.api.clear_requests();
    let ns = Netns::new();
    let pod = ("default", "late", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "l1"));
    assert_eq!(calls_requests(&c.api.requests()), [patch_of("late")]);
    ok(&c.call("DEL", &ns, pod, "l1"));
    c.assert_nothing_left(&ns, "l1");
}

#[test]
fn a_wrong_node_name_is_said_loudly_and_calls_read_their_pod_from_the_api() {
    let (c, socket, daemon) = cached_for(164, "no-such-node");
    let said = daemon.wait_for("WARNING: the API server has no Node \"no-such-node\"");
    assert!(said.contains("--node-name"), "{said}");
    let uid = c.pod("default", "elsewhere", json!({NETWORKS: "net-a"}));
    holding(&socket, 0);
    c.api.clear_requests();
    let ns = Netns::new();
    let pod = ("default", "elsewhere", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "x1"));
    assert_eq!(
        calls_requests(&c.api.requests()),
        [
            (
                "GET".into(),
                "/api/v1/namespaces/default/pods/elsewhere".into()
            ),
            patch_of("elsewhere")
        ]
    );
    let r = report(&socket)["caches"].clone();
    assert_eq!(r["node_found"], false);
    assert_eq!(
        (r["pods"]["hits"].as_u64(), r["pods"]["misses"].as_u64()),
        (Some(0), Some(1))
    );
    ok(&c.call("DEL", &ns, pod, "x1"));
    c.assert_nothing_left(&ns, "x1");
}

#[test]
fn a_static_pods_mirror_made_again_is_read_from_the_api_until_the_cache_has_it() {
    // The kubelet names the static pod's UID in its mirror's `kubernetes.io/config.mirror`
    // (the runtime passes that UID); a manifest edited makes a new static pod, whose mirror
    // replaces the old one before the new sandbox comes.
    let (c, socket, _daemon) = cached(162);
    let mirror = |hash: &str, networks: &str| {
        c.api.put(
            Resource::Pods,
            json!({"metadata": {"namespace": "default", "name": "static-web",
                "annotations": {NETWORKS: networks, "kubernetes.io/config.source": "file",
                    "kubernetes.io/config.mirror": hash}},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]}}),
        )
    };
    mirror("hash-1", "net-a");
    holding(&socket, 1);
    c.api.hold_watches(true);
    c.api.delete(Resource::Pods, "default", "static-web");
    mirror("hash-2", "net-a,other-ns/net-b@mv1");
    c.api.clear_requests();
    let ns = Netns::new();
    let pod = ("default", "static-web", "hash-2");
    ok(&c.call("ADD", &ns, pod, "s2"));
    // The new manifest's networks, read from the API: the cache's mirror is the old one's.
    assert_eq!(ns.addresses("mv1"), ["10.162.3.2/24"]);
    assert_eq!(
        calls_requests(&c.api.requests()),
        [
            (
                "GET".into(),
                "/api/v1/namespaces/default/pods/static-web".into()
            ),
            patch_of("static-web")
        ]
    );
    let held = report(&socket)["caches"]["pods"]["events"]
        .as_u64()
        .unwrap();
    c.api.hold_watches(false);
    ok(&c.call("DEL", &ns, pod, "s2"));
    c.assert_nothing_left(&ns, "s2");
    // Once the cache has the new mirror, the next sandbox of that static pod is served from it.
    wait_for(&socket, "the new mirror", |r| {
        r["caches"]["pods"]["events"].as_u64() >= Some(held + 2)
    });
    c.api.clear_requests();
    ok(&c.call("ADD", &ns, pod, "s3"));
    assert_eq!(calls_requests(&c.api.requests()), [patch_of("static-web")]);
    ok(&c.call("DEL", &ns, pod, "s3"));
    c.assert_nothing_left(&ns, "s3");
}

#[test]
fn caches_whose_credentials_are_refused_serve_nothing_until_a_new_token_is_in_their_file() {
    let mut c = Cluster::new(161);
    c.api.accept_token("daemon-token-1");
    let token = c.node.path("daemon-token");
    std::fs::write(&token, "daemon-token-1").unwrap();
    let own = c.api.write_kubeconfig(
        c.node.path("daemon-kubeconfig"),
        KubeconfigUser::TokenFile(&token),
    );
    let (socket, daemon) = watching(&mut c, &own, NODE);
    let uid = c.pod("default", "web", json!({NETWORKS: "net-a"}));
    holding(&socket, 1);

    // The daemon's token revoked (the watches' connection cut, as an API server restarted
    // would): its watches are refused, and it stops serving what it holds.
    c.api.revoke_token("daemon-token-1");
    c.api.set_down(true);
    c.api.set_down(false);
    daemon.wait_for("caches: the API server refused the watches' credentials");
    wait_for(&socket, "the caches to stop serving", |r| {
        r["caches"]["pods"]["synced"] == false && r["caches"]["nads"]["synced"] == false
    });
    c.api.clear_requests();
    let ns = Netns::new();
    let pod = ("default", "web", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "t1"));
    let asked = calls_requests(&c.api.requests());
    assert_eq!(
        asked.first(),
        Some(&("GET".into(), "/api/v1/namespaces/default/pods/web".into())),
        "{asked:?}"
    );
    assert_eq!(asked.last(), Some(&patch_of("web")), "{asked:?}");
    ok(&c.call("DEL", &ns, pod, "t1"));

    // A new token in its file (as the kubelet rotates it): the watches start again with it.
    c.api.accept_token("daemon-token-2");
    std::fs::write(&token, "daemon-token-2").unwrap();
    holding(&socket, 1);
    c.api.clear_requests();
    ok(&c.call("ADD", &ns, pod, "t2"));
    assert_eq!(calls_requests(&c.api.requests()), [patch_of("web")]);
    ok(&c.call("DEL", &ns, pod, "t2"));
    c.assert_nothing_left(&ns, "t2");
}
