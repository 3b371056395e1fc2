use std::time::{Duration, Instant};

use serde_json::json;
use testkit::kube_api::{Fault, FaultKind, KubeApi, KubeApiOptions, KubeconfigUser, Resource};

use super::*;

/// The API stand-in with one pod, and a client for it with a `budget` of API time.
fn cluster(budget: Duration) -> (KubeApi, tempfile::TempDir, KubeCluster) {
    let api = KubeApi::start(KubeApiOptions::default());
    api.put(
        Resource::Pods,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "default", "name": "p"},
               "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
    let c = KubeCluster::with_budget(&kubeconfig, budget).unwrap();
    (api, dir, c)
}

/// A TCP relay to `upstream`, through which a test can make the connections already open go
/// dead ([`Relay::black_hole`]: what comes on them goes nowhere, and no reset comes back),
/// as when an API server or a load balancer in front of it fails over.
struct Relay {
    addr: std::net::SocketAddr,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    dead_below: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Relay {
    fn to(upstream: std::net::SocketAddr) -> Relay {
        use std::sync::atomic::AtomicUsize;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = Relay {
            addr: listener.local_addr().unwrap(),
            accepted: std::sync::Arc::new(AtomicUsize::new(0)),
            dead_below: std::sync::Arc::new(AtomicUsize::new(0)),
        };
        let (accepted, dead_below) = (relay.accepted.clone(), relay.dead_below.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let id = accepted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = std::net::TcpStream::connect(upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let dead_below = dead_below.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n @ 1..) = std::io::Read::read(&mut from, &mut buf) {
                            let dead = id < dead_below.load(Ordering::SeqCst);
                            if !dead && std::io::Write::write_all(&mut to, &buf[..n]).is_err() {
                                break;
                            }
                        }
                    });
                }
            }
        });
        relay
    }

    fn black_hole(&self) {
        self.dead_below
            .store(self.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

#[test]
fn a_connection_gone_dead_is_dropped_and_the_retry_gets_a_new_one() {
    // An HTTP/2 request that times out resets only its stream: without pings, the dead
    // connection stayed in the pool, and every later request of the call (and, in the
    // daemon, of every later call) went onto it and timed out too.
    let (api, dir, _) = cluster(Duration::from_secs(30));
    let relay = Relay::to(api.addr());
    let kubeconfig = dir.path().join("kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let relayed = kubeconfig.with_file_name("kc-relayed");
    std::fs::write(
        &relayed,
        text.replace(&api.addr().to_string(), &relay.addr.to_string()),
    )
    .unwrap();
    let mut c = KubeCluster::with_budget(&relayed, Duration::from_secs(30)).unwrap();
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    assert!(
        c.http2.load(Ordering::Relaxed),
        "the stand-in speaks HTTP/2"
    );
    relay.black_hole();
    for _ in 0..2 {
        c.begin_call(Duration::from_secs(30));
        let started = Instant::now();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(api.connections_accepted(), 2, "one new connection, kept");
}

/// A pod other than the `default/p` the tests ask for, as a misbehaving proxy answers.
fn someone_else() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"namespace": "default", "name": "someone-else", "uid": "u-2"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}})
}

#[test]
fn an_answer_about_another_object_is_refused() {
    // A proxy that answers with another pod or NAD than the one asked for: plumb would plan
    // from, or patch the status of, the wrong object. The call fails and names both.
    let (api, _dir, c) = cluster(Duration::from_secs(5));
    let other_pod = someone_else();
    api.add_fault(
        Fault::new(FaultKind::Body(200, other_pod.to_string()))
            .path("/api/v1/namespaces/default/pods/p")
            .times(1),
    );
    let e = c.pod("default", "p", false).unwrap_err();
    assert!(e.msg.contains("get pod default/p"), "{e}");
    assert!(e.msg.contains("default/someone-else"), "{e}");
    // Once the proxy behaves, the pod is read.
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");

    let nad = |ns: &str, name: &str| {
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"namespace": ns, "name": name},
               "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}})
    };
    api.put(Resource::NetworkAttachmentDefinitions, nad("ns-a", "net-a"));
    api.add_fault(
        Fault::new(FaultKind::Body(200, nad("ns-b", "net-a").to_string()))
            .path("/apis/k8s.cni.cncf.io/v1/namespaces/ns-a/network-attachment-definitions/net-a")
            .times(1),
    );
    let r = NetworkRef::new("ns-a", "net-a");
    let e = c.nad(&r).unwrap_err();
    assert!(e.msg.contains("ns-b/net-a"), "{e}");
    assert!(c.nad(&r).unwrap().is_some());
}

/// A NAD of `ns`/`name` as the API serves it.
fn nad_object(ns: &str, name: &str) -> serde_json::Value {
    json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
           "metadata": {"namespace": ns, "name": name},
           "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}})
}

/// The stand-in (`http2` or HTTP/1.1 only) with pod `default/p` and NADs `ns-a/one` and
/// `ns-a/two`, each NAD answer 200 ms late; `ns-a/broken` answers 403. A client for it.
fn slow_nads(http2: bool) -> (KubeApi, tempfile::TempDir, KubeCluster, Vec<NetworkRef>) {
    let api = KubeApi::start(KubeApiOptions {
        http2,
        ..KubeApiOptions::default()
    });
    api.put(
        Resource::Pods,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "default", "name": "p"},
               "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    );
    for name in ["one", "two"] {
        api.put(
            Resource::NetworkAttachmentDefinitions,
            nad_object("ns-a", name),
        );
    }
    let nads = "/apis/k8s.cni.cncf.io/v1/namespaces/ns-a/network-attachment-definitions";
    api.add_fault(
        Fault::new(FaultKind::Status(403, "Forbidden".into())).path(&format!("{nads}/broken")),
    );
    api.add_fault(Fault::new(FaultKind::Latency(Duration::from_millis(200))).path(nads));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
    let c = KubeCluster::from_kubeconfig(&kubeconfig).unwrap();
    let refs = ["one", "missing", "broken", "two"]
        .map(|n| NetworkRef::new("ns-a", n))
        .to_vec();
    (api, dir, c, refs)
}

/// What `nads` answered for `slow_nads`'s refs: each as `nad` answers it, in order.
fn assert_answers(got: &[Result<Option<NetworkAttachmentDefinition>, CniError>]) {
    let name = |i: usize| {
        got[i]
            .as_ref()
            .unwrap()
            .as_ref()
            .map(|n| n.metadata.name.clone().unwrap())
    };
    assert_eq!(got.len(), 4);
    assert_eq!(name(0).as_deref(), Some("one"));
    assert_eq!(name(1), None, "a missing NAD is Ok(None)");
    let e = got[2].as_ref().unwrap_err();
    assert!(
        e.msg
            .contains("get network-attachment-definition ns-a/broken"),
        "{e}"
    );
    assert!(e.msg.contains("403"), "{e}");
    assert_eq!(e.code, ErrorCode::Io.code(), "{e}");
    assert_eq!(name(3).as_deref(), Some("two"));
}

#[test]
fn nads_go_out_together_on_one_http2_connection() {
    let (api, _dir, c, refs) = slow_nads(true);
    // The pod's GET opens the connection and shows it is HTTP/2.
    c.pod("default", "p", false).unwrap().unwrap();
    assert_answers(&c.nads(&refs));
    assert!(api.max_in_flight() >= 2, "{}", api.max_in_flight());
    assert_eq!(api.connections_accepted(), 1);
}

#[test]
fn nads_go_one_after_the_other_over_http1_or_before_the_version_is_known() {
    // HTTP/1.1: together they would each need a connection of their own.
    let (api, _dir, c, refs) = slow_nads(false);
    c.pod("default", "p", false).unwrap().unwrap();
    assert_answers(&c.nads(&refs));
    assert_eq!(api.max_in_flight(), 1);
    assert_eq!(api.connections_accepted(), 1);
    // No answer yet, so no connection whose version is known: one after the other, and
    // the first one's connection carries the others.
    let (api, _dir, c, refs) = slow_nads(true);
    assert_answers(&c.nads(&refs));
    assert_eq!(api.max_in_flight(), 1);
    assert_eq!(api.connections_accepted(), 1);
}

#[test]
fn nads_refused_together_for_a_rotated_token_are_all_retried_with_the_new_one() {
    let (api, dir, _, refs) = slow_nads(true);
    let token = dir.path().join("token");
    let kubeconfig = api.write_kubeconfig(
        dir.path().join("rotating"),
        KubeconfigUser::TokenFile(&token),
    );
    let c = KubeCluster::from_kubeconfig(&kubeconfig).unwrap();
    c.pod("default", "p", false).unwrap().unwrap();
    // The token is replaced (and the old one revoked) after the call read it.
    let old = api.token().unwrap();
    api.accept_token("rotated");
    api.revoke_token(&old);
    std::fs::write(&token, "rotated").unwrap();
    let found = [&refs[0], &refs[3]].map(|r| r.clone());
    let got = c.nads(&found);
    assert!(got.iter().all(|g| matches!(g, Ok(Some(_)))), "{got:?}");
    let statuses: Vec<u16> = api
        .requests()
        .iter()
        .filter(|r| r.path.contains("network-attachment-definitions"))
        .map(|r| r.status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 401).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "{statuses:?}"
    );
}

#[test]
fn a_token_the_api_server_no_longer_takes_is_told_from_an_api_server_that_does_not_answer() {
    // The daemon checks the token it wrote on the node this way (`node_token`): a 401
    // only, never an API server down or failing, may make it drop the token.
    let (api, _dir, c) = cluster(Duration::from_secs(2));
    assert!(c.credentials_accepted().unwrap());
    api.add_fault(Fault::new(FaultKind::Status(500, "InternalError".into())).path("/version"));
    let e = c.credentials_accepted().unwrap_err();
    assert!(
        e.msg.contains("get /version") && e.msg.contains("500"),
        "{e}"
    );
    api.clear_faults();
    api.revoke_token(&api.token().unwrap());
    assert!(!c.credentials_accepted().unwrap());
    let asked: Vec<_> = (api.requests().into_iter())
        .map(|r| (r.method, r.path, r.status))
        .collect();
    assert_eq!(
        asked.last(),
        Some(&("GET".to_string(), "/version".to_string(), 401)),
        "{asked:?}"
    );
}

#[test]
fn time_between_requests_is_not_api_time() {
    // The delegates run between the GETs and the status PATCH; however long they take, the
    // PATCH still has its budget.
    let (_api, _dir, c) = cluster(Duration::from_millis(500));
    c.pod("default", "p", false).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let pod = c.pod("default", "p", false).unwrap().unwrap();
    c.set_network_status(&pod, "[]").unwrap();
}

#[test]
fn the_requests_of_a_call_share_one_budget() {
    let (api, _dir, c) = cluster(Duration::from_millis(900));
    api.add_fault(
        Fault::new(FaultKind::Latency(Duration::from_millis(400))).path("/api/v1/namespaces"),
    );
    c.pod("default", "p", false).unwrap().unwrap();
    c.pod("default", "p", false).unwrap().unwrap();
    // 800 ms of the 900 are spent: the third GET gets 100 ms, and no answer in them.
    let started = Instant::now();
    let e = c.pod("default", "p", false).unwrap_err();
    assert_eq!(e.code, ErrorCode::TryAgainLater.code(), "{e}");
    assert!(e.msg.contains("ran out"), "{e}");
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
}

/// A `Status` body as the API server writes it, claiming `code`.
fn status_body(code: u16, reason: &str) -> String {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("claims {code}"), "reason": reason, "code": code})
    .to_string()
}

#[test]
fn an_error_answer_is_judged_by_its_http_status() {
    let (api, _dir, c) = cluster(Duration::from_secs(10));
    let path = "/api/v1/namespaces/default/pods/p";
    // A load balancer in front of the API server answers 503 with a JSON body that is no
    // `Status` (no `code`): as transient as any 503, so retried.
    let lb = r#"{"message": "no healthy upstream"}"#;
    api.add_fault(
        Fault::new(FaultKind::Body(503, lb.into()))
            .path(path)
            .times(2),
    );
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    // When it lasts: code 11, and the message names the HTTP status.
    api.add_fault(Fault::new(FaultKind::Body(503, lb.into())).path(path));
    let e = c.pod("default", "p", false).unwrap_err();
    assert_eq!(e.code, ErrorCode::TryAgainLater.code(), "{e}");
    assert!(
        e.msg.contains("no healthy upstream") && e.msg.contains("503"),
        "{e}"
    );
    api.clear_faults();
    // A 500 whose body claims 404 is a server error, not a missing pod (which fails the
    // ADD with code 3, and makes a DEL without a record undo nothing); the same for a NAD.
    api.add_fault(
        Fault::new(FaultKind::Body(500, status_body(404, "NotFound")))
            .path(path)
            .times(1),
    );
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    api.put(
        Resource::NetworkAttachmentDefinitions,
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"namespace": "default", "name": "n"},
               "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}}),
    );
    api.add_fault(
        Fault::new(FaultKind::Body(500, status_body(404, "NotFound")))
            .path("/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/n")
            .times(1),
    );
    assert!(c.nad(&NetworkRef::new("default", "n")).unwrap().is_some());
    // And a 403 whose body claims 503 is not retried.
    api.clear_requests();
    api.add_fault(
        Fault::new(FaultKind::Body(403, status_body(503, "ServiceUnavailable")))
            .path(path)
            .times(2),
    );
    let e = c.pod("default", "p", false).unwrap_err();
    assert_eq!(e.code, ErrorCode::Io.code(), "{e}");
    assert!(e.msg.contains("403"), "{e}");
    assert_eq!(api.requests().len(), 1);
}

/// A 403 as the API server answers a request that RBAC does not allow.
fn forbidden(verb: &str) -> FaultKind {
    FaultKind::Body(
        403,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("pods \"p\" is forbidden: User \"system:serviceaccount:kube-system:multus\" \
                                   cannot {verb} resource \"pods/status\" in API group \"\" in the namespace \"default\""),
               "reason": "Forbidden", "details": {"name": "p", "kind": "pods"}, "code": 403})
        .to_string(),
    )
}

const STATUS_PATH: &str = "/api/v1/namespaces/default/pods/p/status";

/// The methods and HTTP statuses of the requests made on the status of pod `default/p`
/// and on the pod itself.
fn writes(api: &KubeApi) -> Vec<(String, u16)> {
    api.requests()
        .iter()
        .filter(|r| r.path.starts_with("/api/v1/namespaces/default/pods/p"))
        .map(|r| (r.method.clone(), r.status))
        .collect()
}

#[test]
fn with_multus_rbac_the_status_is_written_by_update() {
    // Multus's ClusterRole grants get and update on pods/status, not patch: an operator
    // who swaps Multus for plumb and keeps its service account gets every pod's
    // network-status written (a refused write undoes the pod's attachments), by GET and PUT.
    let (api, _dir, c) = cluster(Duration::from_secs(5));
    let mut p = api.get(Resource::Pods, "default", "p").unwrap();
    // A status field newer than plumb's Kubernetes types is kept.
    p["status"] = json!({"phase": "Pending", "aFieldFromTheFuture": {"x": 1}});
    api.put(Resource::Pods, p);
    api.add_fault(
        Fault::new(forbidden("patch"))
            .method("PATCH")
            .path(STATUS_PATH),
    );
    let pod = c.pod("default", "p", false).unwrap().unwrap();
    api.clear_requests();
    c.set_network_status(&pod, "[{\"name\":\"x\"}]").unwrap();
    let p = api.get(Resource::Pods, "default", "p").unwrap();
    assert_eq!(
        p["metadata"]["annotations"][netattach::NETWORK_STATUS_ANNOTATION],
        "[{\"name\":\"x\"}]"
    );
    assert_eq!(p["status"]["aFieldFromTheFuture"], json!({"x": 1}));
    assert_eq!(
        writes(&api),
        [
            ("PATCH".into(), 403),
            ("GET".into(), 200),
            ("PUT".into(), 200)
        ]
    );

    // A pod changed between the GET and the PUT (409) is read again.
    api.add_fault(
        Fault::new(FaultKind::Status(409, "Conflict".into()))
            .method("PUT")
            .path(STATUS_PATH)
            .times(1),
    );
    api.clear_requests();
    c.set_network_status(&pod, "[]").unwrap();
    assert_eq!(
        writes(&api),
        [
            ("PATCH".into(), 403),
            ("GET".into(), 200),
            ("PUT".into(), 409),
            ("GET".into(), 200),
            ("PUT".into(), 200)
        ]
    );
    let p = api.get(Resource::Pods, "default", "p").unwrap();
    assert_eq!(
        p["metadata"]["annotations"][netattach::NETWORK_STATUS_ANNOTATION],
        "[]"
    );

    // Neither allowed: the error says what was refused.
    api.add_fault(
        Fault::new(forbidden("update"))
            .method("PUT")
            .path(STATUS_PATH),
    );
    let e = c.set_network_status(&pod, "[]").unwrap_err();
    assert!(e.msg.contains("set network-status of pod default/p"), "{e}");
    assert!(e.msg.contains("cannot update"), "{e}");
}

#[test]
fn a_patch_refused_by_a_uid_precondition_says_the_pod_was_recreated() {
    // The API server's answer when a write's UID precondition fails (409, not the 422 of a
    // UID changed by a merge patch): the sandbox is not the pod's, code 3. A 409 for any
    // other reason is not taken for it.
    let (api, _dir, c) = cluster(Duration::from_secs(5));
    let pod = c.pod("default", "p", false).unwrap().unwrap();
    // The status PATCH answered with a 409 saying `message`, once; what it fails with.
    let refused_with = |message: &str| {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": "Conflict", "code": 409});
        api.add_fault(
            Fault::new(FaultKind::Body(409, status.to_string()))
                .method("PATCH")
                .path(STATUS_PATH)
                .times(1),
        );
        c.set_network_status(&pod, "[]").unwrap_err()
    };
    let e = refused_with(
        "Precondition failed: UID in precondition: the-uid-before, UID in object meta: the-new-uid",
    );
    assert_eq!(e.code, ErrorCode::UnknownContainer.code(), "{e}");
    assert!(e.msg.contains("the pod was recreated"), "{e}");
    let e =
        refused_with("Operation cannot be fulfilled on pods \"p\": the object has been modified");
    assert_ne!(e.code, ErrorCode::UnknownContainer.code(), "{e}");
    assert!(!e.msg.contains("recreated"), "{e}");
}

#[test]
fn an_update_of_the_status_of_a_recreated_pod_is_refused() {
    // As the PATCH's UID precondition: the status of this sandbox is not written onto a
    // pod recreated under the same name.
    let (api, _dir, c) = cluster(Duration::from_secs(5));
    api.add_fault(
        Fault::new(forbidden("patch"))
            .method("PATCH")
            .path(STATUS_PATH),
    );
    let mut pod = c.pod("default", "p", false).unwrap().unwrap();
    pod.uid = "the-uid-of-the-pod-before".into();
    api.clear_requests();
    let e = c.set_network_status(&pod, "[]").unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownContainer.code(), "{e}");
    assert!(e.msg.contains("recreated"), "{e}");
    assert_eq!(writes(&api), [("PATCH".into(), 403), ("GET".into(), 200)]);
    let p = api.get(Resource::Pods, "default", "p").unwrap();
    assert!(
        p["metadata"]["annotations"]
            .get(netattach::NETWORK_STATUS_ANNOTATION)
            .is_none()
    );
}

#[test]
fn a_kubeconfig_as_multus_writes_it_is_used() {
    // Multus's thin entrypoint writes the server as `https://[${KUBERNETES_SERVICE_HOST}]:…`,
    // an IPv4 address in brackets; Go reads it. An operator who keeps that kubeconfig must
    // get a working client.
    let (api, dir, _) = cluster(Duration::from_secs(5));
    let path = dir.path().join("kubeconfig");
    let text = std::fs::read_to_string(&path).unwrap();
    let url = api.url();
    let bracketed = url.replace("https://127.0.0.1:", "https://[127.0.0.1]:");
    assert_ne!(url, bracketed);
    std::fs::write(&path, text.replace(&url, &bracketed)).unwrap();
    let c = KubeCluster::with_budget(&path, Duration::from_secs(5)).unwrap();
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
}

#[test]
fn a_status_patch_answered_for_another_pod_is_refused() {
    // A proxy that answers the PATCH with another pod (and never applied it): the pod would
    // run without its network-status while plumb reported success.
    let (api, _dir, c) = cluster(Duration::from_secs(5));
    let other_pod = someone_else();
    api.add_fault(
        Fault::new(FaultKind::Body(200, other_pod.to_string()))
            .method("PATCH")
            .path("/api/v1/namespaces/default/pods/p/status")
            .times(1),
    );
    let pod = c.pod("default", "p", false).unwrap().unwrap();
    let e = c.set_network_status(&pod, "[]").unwrap_err();
    assert!(e.msg.contains("set network-status of pod default/p"), "{e}");
    assert!(e.msg.contains("default/someone-else"), "{e}");
    c.set_network_status(&pod, "[]").unwrap();
}

#[test]
fn a_status_write_answered_for_another_uid_is_refused() {
    // The answer names the pod but carries another UID (or none): not the answer to a
    // write made on the condition of this sandbox's UID, so the status may never have been
    // written. Accepted, the pod ran without its network-status while ADD succeeded. By
    // PATCH, and by update (the PATCH forbidden, as under Multus's RBAC).
    let (api, _dir, c) = cluster(Duration::from_secs(5));
    let pod = c.pod("default", "p", false).unwrap().unwrap();
    let path = "/api/v1/namespaces/default/pods/p/status";
    for (other_uid, forbidden) in [
        (json!("u-2"), false),
        (json!(null), false),
        (json!("u-2"), true),
    ] {
        let mut answer = api.get(Resource::Pods, "default", "p").unwrap();
        answer["metadata"]["uid"] = other_uid;
        if forbidden {
            api.add_fault(
                Fault::new(FaultKind::Status(403, "Forbidden".into()))
                    .method("PATCH")
                    .path(path)
                    .times(1),
            );
        }
        api.add_fault(
            Fault::new(FaultKind::Body(200, answer.to_string()))
                .method(if forbidden { "PUT" } else { "PATCH" })
                .path(path)
                .times(1),
        );
        let e = c.set_network_status(&pod, "[]").unwrap_err();
        assert_eq!(e.kind(), ErrorCode::Io, "{e}");
        assert!(
            e.msg.contains("set network-status of pod default/p")
                && e.msg.contains(&format!("not this sandbox's {}", pod.uid)),
            "{e}"
        );
    }
    c.set_network_status(&pod, "[]").unwrap();
}

#[test]
fn a_huge_answer_is_refused_and_does_not_flood_the_error() {
    // An API object is at most ~1.5 MiB (etcd's request limit); a proxy or a broken server
    // that sends far more must not make plumb hold it all in memory (the runtime would see
    // the plugin killed, with no error) nor copy it into the CNI error.
    let (api, _dir, c) = cluster(Duration::from_secs(10));
    let path = "/api/v1/namespaces/default/pods/p";
    let huge_pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": "p", "uid": "u",
                     "annotations": {"x": "y".repeat(20 << 20)}},
        "spec": {"containers": [{"name": "c", "image": "x"}]}});
    api.add_fault(
        Fault::new(FaultKind::Body(200, huge_pod.to_string()))
            .path(path)
            .times(1),
    );
    let e = c.pod("default", "p", false).unwrap_err();
    assert_eq!(e.code, ErrorCode::Io.code(), "{e}");
    assert!(
        e.msg.contains("get pod default/p") && e.msg.contains("MiB"),
        "{e}"
    );
    // A pod's JSON can be several times what etcd holds of it (protobuf): one of 6 MiB is
    // read. A NAD's cannot (etcd holds its JSON): one is refused past 4 MiB, since a call
    // holds 32 of them.
    let mut large_pod = huge_pod.clone();
    large_pod["metadata"]["annotations"]["x"] = json!("y".repeat(6 << 20));
    api.add_fault(
        Fault::new(FaultKind::Body(200, large_pod.to_string()))
            .path(path)
            .times(1),
    );
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    let nad_path = "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/n";
    let large_nad = json!({"apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"namespace": "default", "name": "n",
                     "annotations": {"x": "y".repeat(5 << 20)}},
        "spec": {"config": "{}"}});
    api.add_fault(
        Fault::new(FaultKind::Body(200, large_nad.to_string()))
            .path(nad_path)
            .times(1),
    );
    let e = c.nad(&NetworkRef::new("default", "n")).unwrap_err();
    assert!(
        e.msg
            .contains("get network-attachment-definition default/n")
            && e.msg.contains("larger than 4 MiB"),
        "{e}"
    );
    // An error page of a megabyte: the error keeps its start, not all of it.
    let page = format!("<html>{}</html>", "z".repeat(1 << 20));
    api.add_fault(Fault::new(FaultKind::Body(403, page)).path(path).times(1));
    let e = c.pod("default", "p", false).unwrap_err();
    assert!(e.msg.contains("<html>zzz") && e.msg.contains("403"), "{e}");
    assert!(e.msg.len() < 2048, "{} bytes", e.msg.len());
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
}

#[test]
fn an_answer_with_huge_names_does_not_flood_the_error() {
    // The message of an error answer was cut to 1 KiB, but not its reason, nor the names
    // of an answer about another object: a broken server or proxy made a CNI error (and
    // the kubelet's event and log lines it ends up in) of megabytes.
    let (api, _dir, c) = cluster(Duration::from_secs(10));
    let path = "/api/v1/namespaces/default/pods/p";
    let huge = "r".repeat(1 << 20);
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "forbidden", "reason": huge, "code": 403});
    api.add_fault(
        Fault::new(FaultKind::Body(403, status.to_string()))
            .path(path)
            .times(1),
    );
    let e = c.pod("default", "p", false).unwrap_err();
    assert!(
        e.msg.contains("forbidden") && e.msg.contains("403 rrr"),
        "{e}"
    );
    assert!(e.msg.len() < 4096, "{} bytes", e.msg.len());
    let other = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": huge, "uid": "u-2"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}});
    api.add_fault(
        Fault::new(FaultKind::Body(200, other.to_string()))
            .path(path)
            .times(1),
    );
    let e = c.pod("default", "p", false).unwrap_err();
    assert!(e.msg.contains("the answer is about default/rrr"), "{e}");
    assert!(e.msg.len() < 4096, "{} bytes", e.msg.len());
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
}

#[test]
fn a_huge_answer_to_an_event_is_not_read() {
    // Events are posted after the pod's networks are up: an answer read whole, however
    // large (kube's `create`), could get the plugin killed for its memory then, and the
    // runtime would see a failed ADD. It is refused after 16 MiB as other answers are.
    let (api, _dir, c) = cluster(Duration::from_secs(10));
    let pod = c.pod("default", "p", false).unwrap().unwrap();
    let huge_event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"namespace": "default", "name": "p.1"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
        "message": "m".repeat(20 << 20)});
    api.add_fault(
        Fault::new(FaultKind::Body(201, huge_event.to_string()))
            .method("POST")
            .path("/api/v1/namespaces/default/events")
            .times(1),
    );
    let e = c
        .event(&pod, "Normal", "AddedInterface", "Add net1")
        .unwrap_err();
    assert!(
        e.msg.contains("event on pod default/p") && e.msg.contains("16 MiB"),
        "{e}"
    );
    c.event(&pod, "Normal", "AddedInterface", "Add net1")
        .unwrap();
}

#[test]
fn errors_name_the_api_server() {
    // "connection refused" alone does not say which address: a kubeconfig pointing at an
    // old control-plane address is the first thing to rule out at 3 a.m.
    let (api, _dir, c) = cluster(Duration::from_secs(5));
    let server = api.url();
    api.set_down(true);
    let e = c.pod("default", "p", false).unwrap_err();
    assert!(e.msg.contains("get pod default/p"), "{e}");
    assert!(e.msg.contains(&server), "{server}: {e}");
    api.set_down(false);
    api.add_fault(Fault::new(FaultKind::Status(403, "Forbidden".into())).times(1));
    let e = c.nad(&NetworkRef::new("default", "n")).unwrap_err();
    assert!(e.msg.contains(&server), "{server}: {e}");
}

#[test]
fn a_busy_server_is_asked_again_after_the_time_it_asks_for() {
    // With its queues full, the API server's priority-and-fairness filter answers 429 with
    // `Retry-After`; client-go (so Multus) waits that long. Asking again after 50, 100,
    // 200 ms from every node of a large cluster only adds to the load it is shedding.
    let (api, _dir, c) = cluster(Duration::from_secs(10));
    let path = "/api/v1/namespaces/default/pods/p";
    api.add_fault(
        Fault::new(FaultKind::TooManyRequests(1))
            .path(path)
            .times(2),
    );
    let started = Instant::now();
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // A wait longer than what is left of the budget: code 11 at once, and the server is
    // not asked again in vain.
    api.clear_requests();
    api.add_fault(Fault::new(FaultKind::TooManyRequests(60)).path(path));
    let started = Instant::now();
    let e = c.pod("default", "p", false).unwrap_err();
    assert_eq!(e.code, ErrorCode::TryAgainLater.code(), "{e}");
    assert!(e.msg.contains("429"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(1), "{e}");
    assert_eq!(api.requests().len(), 1);
}

#[test]
fn a_server_certificate_the_kubeconfig_does_not_trust_fails_at_once() {
    // A kubeconfig whose CA is not the server's (a rotated CA, an address that now leads to
    // another cluster) will not be trusted by asking again: the call fails at once, saying
    // why, rather than after the whole budget of retries.
    let (api, dir, _) = cluster(Duration::from_secs(20));
    let other = KubeApi::start(KubeApiOptions::default());
    let kubeconfig = dir.path().join("kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    std::fs::write(&kubeconfig, text.replace(&api.url(), &other.url())).unwrap();
    let c = KubeCluster::with_budget(&kubeconfig, Duration::from_secs(20)).unwrap();
    let started = Instant::now();
    let e = c.pod("default", "p", false).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{e}");
    assert_eq!(e.kind(), ErrorCode::Io, "{e}");
    assert!(e.msg.to_lowercase().contains("certificate"), "{e}");
    assert!(e.msg.contains(&other.url()), "{e}");
}

mod kubeconfig;
