//! `plumb daemon` keeping plumb's files on the node end to end: the CNI configuration written
//! once the default network's is there (`--write-config`), and a kubeconfig from its service
//! account (`--write-kubeconfig`), its token bound to the node and checked.

use super::*;
use crate::common::cluster::is_the_caches;

/// A template for `plumb daemon --write-config` from `c`'s configuration (without what the
/// daemon fills in), `kubeconfig` in it when given: its file.
fn template_file(c: &Cluster, kubeconfig: Option<&Path>) -> PathBuf {
    let mut template = c.config.clone();
    for k in ["cniVersion", "name", "type", "clusterNetwork"] {
        template.as_object_mut().unwrap().remove(k);
    }
    if let Some(k) = kubeconfig {
        template["kubeconfig"] = json!(k);
    }
    let file = c.node.path("template.json");
    fs::write(&file, template.to_string()).unwrap();
    file
}

/// The configuration of `c`'s cluster network (its bridge and host-local), as the network
/// plugin's file would give it: named `cluster-net`.
fn cluster_network(c: &Cluster) -> serde_json::Value {
    let nad = c
        .api
        .get(
            testkit::kube_api::Resource::NetworkAttachmentDefinitions,
            "kube-system",
            "default-net",
        )
        .unwrap();
    let mut conf: serde_json::Value =
        serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
    conf["name"] = json!("cluster-net");
    conf
}

/// Cluster `n` whose node's CNI configuration directory holds its cluster network's
/// configuration (`10-cluster.conf`), with a template for `plumb daemon --write-config`.
struct Writing {
    c: Cluster,
    socket: PathBuf,
    net_d: PathBuf,
    template: PathBuf,
}

impl Writing {
    fn new(n: u8) -> Writing {
        Writing::with_api(n, KubeApiOptions::default())
    }

    /// [`Writing::new`], the API stand-in started with `opts`.
    fn with_api(n: u8, opts: KubeApiOptions) -> Writing {
        let c = Cluster::with_api(n, opts);
        let net_d = c.node.path("net.d");
        fs::create_dir_all(&net_d).unwrap();
        fs::write(
            net_d.join("10-cluster.conf"),
            cluster_network(&c).to_string(),
        )
        .unwrap();
        Writing {
            socket: socket_of(&c),
            template: template_file(&c, None),
            net_d,
            c,
        }
    }

    /// A daemon writing plumb's configuration into the directory.
    fn start(&self) -> Daemon {
        self.start_with(&[], &[])
    }

    /// [`Writing::start`], with `more` arguments and `env` in the daemon's environment.
    fn start_with(&self, more: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Daemon {
        let args = [
            "--write-config".as_ref(),
            self.template.as_os_str(),
            "--cni-conf-dir".as_ref(),
            self.net_d.as_os_str(),
        ];
        let args: Vec<&std::ffi::OsStr> = args.iter().chain(more).copied().collect();
        Daemon::start_with(&self.socket, None, &args, env)
    }
}

/// `op` (`add`, `del`) of `plumb-cni-network` for the pod in `ns` by `plumb cni`, which runs
/// a configuration list from the directory `net_d` as libcni does (cnitool), with `CNI_ARGS`
/// `args` and capability arguments `caps`: the runtime, reading only the files there.
fn from_conf_dir(
    c: &Cluster,
    net_d: &Path,
    op: &str,
    ns: &Netns,
    args: &str,
    caps: &str,
) -> std::process::Output {
    let plumb_dir = Path::new(env!("CARGO_BIN_EXE_plumb")).parent().unwrap();
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["cni", op, "plumb-cni-network"])
        .arg(ns.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("NETCONFPATH", net_d)
        .env("CNI_PATH", plumb_dir)
        .env("CNI_CACHE_DIR", c.node.path("runtime-cache"))
        .env("CAP_ARGS", caps)
        .env("CNI_ARGS", args)
        .output()
        .unwrap()
}

#[test]
fn a_daemon_writes_plumbs_configuration_once_the_default_network_is_there_and_pods_attach_through_it()
 {
    // docs/architecture.md "Paths": plumb's CNI configuration, written by the daemon once the default
    // network is ready. The runtime here is `plumb cni`, which runs a configuration list from
    // a directory as libcni does (cnitool), so the pod is attached from the written file alone.
    let w = Writing::new(191);
    // No default network yet: the daemon starts before the network plugin's file is there.
    fs::remove_file(w.net_d.join("10-cluster.conf")).unwrap();
    let (c, socket, net_d) = (&w.c, &w.socket, &w.net_d);
    let daemon = w.start();
    let written = net_d.join("00-plumb.conflist");
    daemon.wait_for("no configuration of a default network");
    assert!(
        !written.exists(),
        "written before the default network was there"
    );

    // The default network's configuration arrives, as a network plugin's DaemonSet writes it:
    // the cluster network's bridge, and portmap, whose capability plumb must then declare.
    let mut bridge = cluster_network(c);
    bridge.as_object_mut().unwrap().remove("name");
    let default_network = json!({
        "cniVersion": "1.0.0", "name": "cluster-net",
        "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": true}}],
    });
    fs::write(
        net_d.join("10-cluster.conflist"),
        default_network.to_string(),
    )
    .unwrap();
    daemon.wait_for("wrote");
    let conf: serde_json::Value = serde_json::from_slice(&fs::read(&written).unwrap()).unwrap();
    let plumb = &conf["plugins"][0];
    assert_eq!(conf["cniVersion"], "1.0.0");
    assert_eq!(plumb["type"], "plumb");
    assert_eq!(plumb["delegates"], json!([default_network]));
    assert_eq!(plumb["capabilities"], json!({"portMappings": true}));
    assert_eq!(plumb["plumbDaemonSocket"], json!(socket));

    // A pod on net-a attached by the runtime from that file, through the daemon.
    let uid = c.pod("default", "w", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let runtime = |op: &str| {
        from_conf_dir(
            c,
            net_d,
            op,
            &ns,
            &pod_args(("default", "w", &uid), "c-written"),
            r#"{"portMappings":[{"hostPort":18691,"containerPort":80,"protocol":"tcp"}]}"#,
        )
    };
    let out = runtime("add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(forwarded(&out), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ns.addresses("eth0"), ["10.191.1.2/24"]);
    assert_eq!(ns.addresses("net1"), ["10.191.2.2/24"]);
    let status = c.status_of("default", "w").unwrap();
    assert_eq!(status[0]["name"], "cluster-net");
    assert_eq!(status[1]["name"], "default/net-a");
    // The runtime's port mappings reached the default network's portmap, through plumb.
    let cached: Vec<serde_json::Value> = fs::read_dir(c.node.cache_dir().join("results"))
        .unwrap()
        .map(|e| serde_json::from_slice(&fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    let entry = cached
        .iter()
        .find(|e| e["networkName"] == "cluster-net")
        .expect("the default network's cache entry");
    assert_eq!(
        entry["capabilityArgs"]["portMappings"][0]["hostPort"], 18691,
        "{entry}"
    );
    let out = runtime("del");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ns.links(), ["lo"]);
    c.assert_node_clean("after the DEL");

    // The default network's configuration goes (its plugin uninstalled, or taking the node
    // out): so does plumb's, or the runtime would go on calling a default network that is not
    // there. It comes back with it, changed, and stays when the daemon stops: the plugin then
    // runs the calls itself.
    fs::remove_file(net_d.join("10-cluster.conflist")).unwrap();
    daemon.wait_for("removed");
    assert!(!written.exists());
    let mut changed = default_network.clone();
    changed["plugins"].as_array_mut().unwrap().pop();
    fs::write(net_d.join("10-cluster.conflist"), changed.to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon.said().matches("plumb daemon: wrote").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "not written again: {}",
            daemon.said()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _) = daemon.stop();
    assert!(status.success());
    let conf: serde_json::Value = serde_json::from_slice(&fs::read(&written).unwrap()).unwrap();
    assert_eq!(conf["plugins"][0]["delegates"], json!([changed]));
    assert!(conf["plugins"][0].get("capabilities").is_none(), "{conf}");
}

#[test]
fn a_daemon_keeps_a_kubeconfig_from_its_service_account_and_pods_attach_after_the_token_rotates() {
    // Multus's installer wrote the token into its kubeconfig once, and pods failed with
    // Unauthorized once it expired (docs/multus-behaviour.md §5.1). The daemon, in a pod, copies
    // its service account's token beside the kubeconfig it writes, again at each rotation.
    let w = Writing::new(185);
    let (c, net_d, sa) = (&w.c, &w.net_d, w.c.node.path("serviceaccount"));
    // A token that is no JWT (as the stand-in's own): no node-bound token, the copy kept.
    let old_token = fs::read_to_string(&c.token_file).unwrap();
    let (daemon, _) = keeping_a_kubeconfig(&w, old_token.trim());
    // The kubeconfig first, then plumb's configuration that names it.
    let said = daemon.wait_for("00-plumb.conflist");
    let (k, conf) = (
        said.find("plumb.kubeconfig").unwrap(),
        said.find("00-plumb.conflist").unwrap(),
    );
    assert!(k < conf, "{said}");

    let pod = |name: &str, cid: &str| {
        let uid = c.pod("default", name, json!({NETWORKS: "net-a"}));
        let ns = Netns::new();
        let args = pod_args(("default", name, &uid), cid);
        let out = from_conf_dir(c, net_d, "add", &ns, &args, "{}");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(forwarded(&out));
        assert_eq!(ns.links().len(), 3, "lo, eth0 and net1");
        let out = from_conf_dir(c, net_d, "del", &ns, &args, "{}");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    pod("before", "c-before");
    assert!(
        c.api
            .requests()
            .iter()
            .all(|r| r.bearer_token.as_deref() == Some(old_token.trim())),
        "the service account's token"
    );

    // The kubelet rotates the service account's token; the old one is revoked.
    let new_token = "rotated-token-185";
    c.api.accept_token(new_token);
    c.api.revoke_token(old_token.trim());
    fs::write(sa.join("token"), new_token).unwrap();
    daemon.wait_for("plumb.kubeconfig: token from");
    c.api.clear_requests();
    pod("after", "c-after");
    // The calls' requests: the daemon's watch caches read the rotated token within a minute, or
    // at once when the old one is refused (they make their client again).
    let calls: Vec<_> = (c.api.requests().into_iter())
        .filter(|r| !is_the_caches(r))
        .collect();
    assert!(
        calls
            .iter()
            .all(|r| r.bearer_token.as_deref() == Some(new_token) && r.status < 400),
        "{:?}",
        calls
            .iter()
            .map(|r| (&r.path, r.status))
            .collect::<Vec<_>>()
    );
    c.assert_node_clean("after both pods");
}

/// A pod's service-account token as the kubelet mounts it since Kubernetes 1.30: a JWT whose
/// claims name the service account `plumb/plumb` and the node `node` (the stand-in does
/// not read its signature, nor does plumb).
fn pod_token(node: &str) -> String {
    let claims = json!({
        "sub": "system:serviceaccount:plumb:plumb",
        "kubernetes.io": {"namespace": "plumb",
            "node": {"name": node, "uid": "node-uid"},
            "pod": {"name": "plumb-daemon-x", "uid": "pod-uid"},
            "serviceaccount": {"name": "plumb", "uid": "sa-uid"}},
    });
    // Base64url without padding, as JWTs are written.
    let payload = cni::base64::encode(claims.to_string().as_bytes())
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_");
    format!("eyJhbGciOiJSUzI1NiJ9.{payload}.c2lnbmF0dXJl")
}

/// A daemon started with `--write-kubeconfig`, its service account's token `token` (accepted by
/// the stand-in) and CA certificate in a directory of their own, as a pod mounts them; and the
/// kubeconfig's path.
fn keeping_a_kubeconfig(w: &Writing, token: &str) -> (Daemon, PathBuf) {
    keeping_a_kubeconfig_with(w, token, &[])
}

/// [`keeping_a_kubeconfig`], the daemon given `more` arguments.
fn keeping_a_kubeconfig_with(w: &Writing, token: &str, more: &[&str]) -> (Daemon, PathBuf) {
    let (c, sa) = (&w.c, w.c.node.path("serviceaccount"));
    fs::create_dir_all(&sa).unwrap();
    c.api.accept_token(token);
    // As the pod tokens of pod_token name it.
    c.api.set_service_account_uid("plumb", "plumb", "sa-uid");
    fs::write(sa.join("token"), token).unwrap();
    fs::write(sa.join("ca.crt"), c.api.ca_pem().unwrap()).unwrap();
    let kubeconfig = w.net_d.join("plumb.d/plumb.kubeconfig");
    template_file(c, Some(&kubeconfig));
    let (host, port) = (
        c.api.addr().ip().to_string(),
        c.api.addr().port().to_string(),
    );
    let mut args = vec![
        "--write-kubeconfig".as_ref(),
        kubeconfig.as_os_str(),
        "--service-account-dir".as_ref(),
        sa.as_os_str(),
    ];
    args.extend(more.iter().map(std::ffi::OsStr::new));
    let daemon = w.start_with(
        &args,
        &[
            ("KUBERNETES_SERVICE_HOST", &host),
            ("KUBERNETES_SERVICE_PORT", &port),
        ],
    );
    (daemon, kubeconfig)
}

/// The daemon stops and its pod's token (`pod_token`) is refused, as when its pod is deleted;
/// then a pod is attached and detached by the plugin itself (thin mode), every request it
/// makes carrying `on_node` (the token written on the node) and answered.
fn daemon_gone_then_a_pod_with_the_token_on_the_node(
    w: &Writing,
    daemon: Daemon,
    pod_token: &str,
    on_node: &str,
) {
    let c = &w.c;
    let (status, said) = daemon.stop();
    assert!(status.success(), "{said}");
    c.api.revoke_token(pod_token);
    c.api.clear_requests();
    let uid = c.pod("default", "meanwhile", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let args = pod_args(("default", "meanwhile", &uid), "c-meanwhile");
    for op in ["add", "del"] {
        let out = from_conf_dir(c, &w.net_d, op, &ns, &args, "{}");
        assert!(
            out.status.success(),
            "{op}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!forwarded(&out));
    }
    let requests = c.api.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.bearer_token.as_deref() == Some(on_node) && r.status < 400),
        "{:?}",
        requests
            .iter()
            .map(|r| (&r.path, r.status))
            .collect::<Vec<_>>()
    );
    c.assert_node_clean("after the pod");
}

#[test]
fn the_kubeconfigs_token_is_bound_to_the_node_and_outlives_the_daemons_pod() {
    // The copied token was the daemon pod's, which the API server refuses once that pod is
    // gone: an upgrade that deleted the old daemon's pod before the new one ran left every
    // call the plugin ran itself meanwhile failing with 401. The daemon now writes a token of
    // its service account bound to the node, which outlives the pod.
    let w = Writing::new(174);
    let c = &w.c;
    let pod_token = pod_token("node-174");
    let (daemon, kubeconfig) = keeping_a_kubeconfig(&w, &pod_token);
    daemon.wait_for("with a token bound to node node-174");
    let issued = c.api.issued_tokens();
    assert_eq!(issued.len(), 1, "{issued:?}");
    let issued = &issued[0];
    assert_eq!(
        (
            issued.namespace.as_str(),
            issued.service_account.as_str(),
            issued.bound.clone(),
            issued.expiration_seconds
        ),
        (
            "plumb",
            "plumb",
            Some(("Node".to_string(), "node-174".to_string())),
            24 * 3600
        )
    );
    let token_file = kubeconfig.parent().unwrap().join("token");
    assert_eq!(fs::read_to_string(&token_file).unwrap(), issued.token);
    // Asked for with the pod's token, as deploy/node-token.yaml's Role grants: a create of
    // serviceaccounts/token for its own service account, named.
    let token_requests = || {
        let asked: Vec<_> = (c.api.requests().into_iter())
            .filter(|r| r.path.contains("/serviceaccounts/"))
            .collect();
        assert_eq!(asked.len(), 1, "{asked:?}");
        asked
    };
    let asked = token_requests();
    assert_eq!(
        (asked[0].method.as_str(), asked[0].path.as_str()),
        (
            "POST",
            "/api/v1/namespaces/plumb/serviceaccounts/plumb/token"
        )
    );
    assert_eq!(asked[0].bearer_token.as_deref(), Some(pod_token.as_str()));
    let rbac = plumb_engine::objects::read_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/node-token.yaml"),
    )
    .unwrap();
    let of = |kind: &str| {
        let o = rbac.iter().find(|o| o.kind() == kind).expect(kind);
        assert_eq!(
            (
                &o.value["metadata"]["name"],
                &o.value["metadata"]["namespace"]
            ),
            (&json!("plumb-node-token"), &json!("plumb"))
        );
        o.value.clone()
    };
    assert_eq!(
        of("Role")["rules"],
        json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                "resourceNames": ["plumb"], "verbs": ["create"]}])
    );
    assert_eq!(
        of("RoleBinding")["subjects"],
        json!([{"kind": "ServiceAccount", "name": "plumb", "namespace": "plumb"}])
    );
    // Its admission policy allows what was asked: a Node, for a day at most.
    let policy = rbac
        .iter()
        .find(|o| o.kind() == "ValidatingAdmissionPolicy")
        .unwrap();
    let rules = policy.value["spec"]["validations"].to_string();
    assert!(
        rules.contains("object.spec.boundObjectRef.kind == 'Node'")
            && rules.contains("object.spec.expirationSeconds <= 86400"),
        "{rules}"
    );

    // The upgrade: the daemon stops, its pod is deleted, and the pod's token is refused. A
    // pod started meanwhile: the plugin runs its calls itself, with the node's token.
    daemon_gone_then_a_pod_with_the_token_on_the_node(&w, daemon, &pod_token, &issued.token);

    // The new daemon's pod cannot get a token (its manifest lost the Role, say): the one on
    // the node is kept, not overwritten by the new pod's copy, which would not outlive it.
    c.api.add_fault(
        Fault::new(FaultKind::Status(403, "Forbidden".into()))
            .method("POST")
            .path("/api/v1/namespaces/plumb/serviceaccounts/plumb/token"),
    );
    c.api.clear_requests();
    let new_pod_token = self::pod_token("node-174").replace("c2lnbmF0dXJl", "bmV3");
    let (daemon, _) = keeping_a_kubeconfig(&w, &new_pod_token);
    let said = daemon.wait_for("no new token bound to the node");
    assert!(
        said.contains("the one written stays in use for 14"),
        "{said}"
    );
    assert_eq!(fs::read_to_string(&token_file).unwrap(), issued.token);
    assert_eq!(
        token_requests()[0].bearer_token.as_deref(),
        Some(new_pod_token.as_str())
    );
}

#[test]
fn a_token_bound_to_the_node_that_the_api_server_stops_taking_is_replaced_at_once() {
    // The token on the node is used by the plugin's own calls, while no daemon runs; the
    // daemon uses its pod's. One the API server stopped taking before it expired (its Node or
    // service account made again, the signing key replaced) stayed until its renewal, hours
    // on, and every call the plugin ran itself meanwhile failed with 401. The daemon now shows
    // it to the API server (`--node-token-check`, every 5 minutes by default) and replaces a
    // refused one at once.
    let w = Writing::new(167);
    let c = &w.c;
    let pod_token = pod_token("node-167");
    let (daemon, kubeconfig) =
        keeping_a_kubeconfig_with(&w, &pod_token, &["--node-token-check", "1"]);
    daemon.wait_for("with a token bound to node node-167");
    let token_file = kubeconfig.parent().unwrap().join("token");
    let first = c.api.issued_tokens()[0].token.clone();
    assert_eq!(fs::read_to_string(&token_file).unwrap(), first);

    c.api.revoke_token(&first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        let issued = c.api.issued_tokens();
        let on_node = fs::read_to_string(&token_file).unwrap();
        if issued.len() == 2 && on_node == issued[1].token {
            break on_node;
        }
        assert!(
            Instant::now() < deadline,
            "not replaced: {} issued; {}",
            issued.len(),
            daemon.said()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_ne!(second, first);
    // Refused once, it was kept while a new one was asked for (the API server answers 401
    // too when it cannot look the Node up); the new one came at once.
    let said = daemon.wait_for("refuses the token in use");
    assert!(
        said.contains(&format!(
            "{}: the API server refuses the token in use, bound to node node-167 (401 \
             Unauthorized to GET /version: ",
            kubeconfig.display()
        )) && said.contains("; asked for a new one; it stays in use unless refused again in 1 s"),
        "{said}"
    );
    // Shown with the token on the node itself, asking nothing that needs a permission.
    let shown: Vec<_> = (c.api.requests().into_iter())
        .filter(|r| r.bearer_token.as_deref() == Some(first.as_str()))
        .map(|r| (r.method, r.path, r.status))
        .collect();
    assert!(!shown.is_empty());
    assert!(
        shown.iter().all(|(m, p, _)| m == "GET" && p == "/version"),
        "{shown:?}"
    );
    assert!(
        shown.iter().any(|(_, _, status)| *status == 401),
        "{shown:?}"
    );

    // The daemon goes away (an upgrade): the plugin's own calls work, with the new token.
    daemon_gone_then_a_pod_with_the_token_on_the_node(&w, daemon, &pod_token, &second);
}

#[test]
fn a_node_registered_again_takes_the_token_bound_to_the_one_before_off_the_node() {
    // The Node deleted and registered again (a cloud's node replaced under the same name): the
    // API server no longer takes tokens bound to the one before, and refuses to bind one to
    // it by its old UID (409), which the daemon's pod token names until the kubelet renews
    // it. The refused token is taken off the node for the pod's copy, which works while the
    // daemon's pod does, and why is said. The API server caps lifetimes at two hours here:
    // the token is used for what it granted, not for the day asked.
    let w = Writing::with_api(
        166,
        KubeApiOptions {
            max_token_expiration: Some(7200),
            ..KubeApiOptions::default()
        },
    );
    let c = &w.c;
    c.api.register_node("node-166", "node-uid");
    let pod_token = pod_token("node-166");
    let (daemon, kubeconfig) =
        keeping_a_kubeconfig_with(&w, &pod_token, &["--node-token-check", "1"]);
    let said = daemon.wait_for("with a token bound to node node-166");
    // Two hours less the five minutes kept back, whole minutes, by the node's clock.
    assert!(
        ["114", "115"].iter().any(|m| said.contains(&format!(
            "node-166 (serviceaccount plumb/plumb, used for {m} min)"
        ))),
        "{said}"
    );
    let token_file = kubeconfig.parent().unwrap().join("token");
    let first = c.api.issued_tokens()[0].token.clone();
    assert_eq!(fs::read_to_string(&token_file).unwrap(), first);

    c.api.register_node("node-166", "node-uid-2");
    // Refused once: kept while a new one is asked for, which the API server refuses (409);
    // refused again at the next check: the pod's copy goes back.
    let said = daemon.wait_for("GET /version, twice");
    assert!(
        said.contains("the API server refuses the token in use, bound to node node-166 (401")
            && said.contains("no new token bound to the node: Kubernetes API https://127.0.0.1:")
            && said.contains(
                "create a token of serviceaccount plumb/plumb bound to node node-166: \
                 Operation cannot be fulfilled on Node \"node-166\": the UID in the bound \
                 object reference (node-uid) does not match the UID in record"
            )
            && said.contains("(409 Conflict)")
            // Not "stays in use for 114 min more": the next check may drop it.
            && said.contains(
                "the one written, which the API server refused once, stays in use unless \
                 refused again at its next check, then a copy of the pod's"
            )
            && said.contains(
                "no token bound to the node: the API server refuses the token in use, bound to \
                 node node-166 (401 Unauthorized to GET /version, twice"
            ),
        "{said}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs::read_to_string(&token_file).unwrap() != pod_token {
        assert!(Instant::now() < deadline, "{}", daemon.said());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.api.issued_tokens().len(), 1);
}

#[test]
fn without_a_token_bound_to_the_node_the_pods_token_is_copied_and_the_reason_said() {
    // RBAC without serviceaccounts/token create (a manifest from before), or a cluster that
    // cannot bind a token to a Node: the pod's token is copied as before, and the daemon says
    // why once, naming what it costs.
    let w = Writing::new(173);
    let c = &w.c;
    c.api.add_fault(
        Fault::new(FaultKind::Status(403, "Forbidden".into()))
            .method("POST")
            .path("/api/v1/namespaces/plumb/serviceaccounts/plumb/token"),
    );
    let pod_token = pod_token("node-173");
    let (daemon, kubeconfig) = keeping_a_kubeconfig(&w, &pod_token);
    let said = daemon.wait_for("no token bound to the node");
    assert!(
        said.contains(&format!(
            "{}: no token bound to the node: Kubernetes API",
            kubeconfig.display()
        )) && said.contains("403")
            && said.contains(
                "the token written is a copy of the pod's, which the API server refuses once \
                 this pod is gone (docs/daemon.md; deploy/node-token.yaml grants the request)"
            ),
        "{said}"
    );
    let token_file = kubeconfig.parent().unwrap().join("token");
    assert_eq!(fs::read_to_string(&token_file).unwrap(), pod_token);
    assert!(c.api.issued_tokens().is_empty());
}

#[test]
fn a_daemon_whose_socket_was_removed_goes_on_keeping_plumbs_configuration() {
    // A socket removed by hand (or replaced by a file) leaves no other daemon to keep the
    // files: the daemon stopped keeping them, and plumb's configuration no longer followed the
    // default network (nor, with --write-kubeconfig, was the token renewed). Only a daemon
    // that took the socket over takes them.
    let w = Writing::new(178);
    let (socket, net_d) = (&w.socket, &w.net_d);
    let daemon = w.start();
    daemon.wait_for("wrote");
    let written = net_d.join("00-plumb.conflist");
    assert!(written.exists());
    fs::remove_file(socket).unwrap();
    daemon.wait_for("was removed");
    fs::remove_file(net_d.join("10-cluster.conf")).unwrap();
    let said = daemon.wait_for(&format!("removed {}", written.display()));
    assert!(!said.contains("no longer keeping"), "{said}");
    assert!(!written.exists());
    // A daemon started on the path since keeps them from then on, not both in turn.
    let _new = w.start();
    daemon.wait_for(&format!("no longer keeping {}", written.display()));
}

#[test]
fn a_call_from_a_plugin_of_another_version_is_said_once_in_the_daemons_log() {
    // Mid-upgrade, the node's /opt/cni/bin/plumb and the daemon's image differ, and when the
    // two behave differently the operator must be able to tell: the daemon says its version,
    // and each other version that forwards it calls, once.
    let (c, socket, daemon) = served(177);
    let said = daemon.wait_for("serving CNI calls on");
    assert!(
        said.contains(&format!("(plumb {})", env!("CARGO_PKG_VERSION"))),
        "{said}"
    );
    let version_call = br#"{"CNI_COMMAND":"VERSION"}
{"cniVersion":"1.0.0"}"#;
    for _ in 0..2 {
        let (status, body) = http_with(
            &socket,
            "POST",
            "/cni",
            "plumb-version: 0.0.1\r\n",
            version_call,
        );
        assert_eq!(status, 200, "{body}");
    }
    daemon.wait_for("calls come from a plumb plugin of version 0.0.1");
    // The plugin of this build: nothing said.
    ok(&crate::common::run_node_wide("STATUS", &{
        let mut conf = c.config.clone();
        conf["cniVersion"] = json!("1.1.0");
        conf
    }));
    let said = daemon.said();
    assert_eq!(
        said.matches("calls come from a plumb plugin").count(),
        1,
        "{said}"
    );
}

#[test]
fn a_daemon_that_takes_the_socket_over_takes_over_plumbs_configuration_too() {
    // An upgrade with maxSurge: the new daemon takes the socket, and with it the keeping of
    // plumb's configuration; the old one, draining, stops writing it, or two templates would
    // rewrite the file in turn.
    let w = Writing::new(176);
    let old = w.start();
    old.wait_for("wrote");
    let new = w.start();
    let written = w.net_d.join("00-plumb.conflist");
    old.wait_for(&format!("no longer keeping {}", written.display()));
    // The default network changes: the new daemon follows it, the old one does not.
    let mut changed = cluster_network(&w.c);
    changed["name"] = json!("cluster-net-2");
    fs::write(w.net_d.join("10-cluster.conf"), changed.to_string()).unwrap();
    new.wait_for("(cluster-net-2), changed");
    let conf: serde_json::Value = serde_json::from_slice(&fs::read(&written).unwrap()).unwrap();
    assert_eq!(conf["plugins"][0]["delegates"][0]["name"], "cluster-net-2");
    assert_eq!(
        old.said().matches("plumb daemon: wrote").count(),
        1,
        "{}",
        old.said()
    );
}

#[test]
fn a_files_only_daemon_writes_a_configuration_naming_no_socket_and_leaves_every_call_to_the_plugin()
{
    // deploy/thin/: the daemon keeps plumb's configuration, the plugin runs the calls.
    let w = Writing::new(154);
    let (c, socket, net_d) = (&w.c, &w.socket, &w.net_d);
    let daemon = w.start_with(&["--files-only".as_ref()], &[]);
    daemon.wait_for("wrote");
    let written: serde_json::Value =
        serde_json::from_slice(&fs::read(net_d.join("00-plumb.conflist")).unwrap()).unwrap();
    assert!(
        written["plugins"][0].get("plumbDaemonSocket").is_none(),
        "{written}"
    );
    let ready = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["health", "--ready", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert!(ready.status.success());
    assert!(String::from_utf8_lossy(&ready.stdout).contains("--files-only"));
    // A runtime using the written file: the plugin runs the calls.
    let uid = c.pod("default", "t", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let args = pod_args(("default", "t", &uid), "c-thin");
    for op in ["add", "del"] {
        let out = from_conf_dir(c, net_d, op, &ns, &args, "{}");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    c.assert_node_clean("after the runtime's DEL");
    // A plugin whose configuration names the socket all the same: refused there (503), it runs
    // each call itself.
    let mut named = c.config.clone();
    named["plumbDaemonSocket"] = json!(socket);
    let netns = ns.path().display().to_string();
    for command in ["ADD", "DEL"] {
        let out = crate::common::run(&CniCall {
            command,
            container_id: "c-thin",
            netns: &netns,
            ifname: "eth0",
            args: &args,
            config: &named,
        });
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}: {said}");
        assert!(!forwarded(&out), "{command}: {said}");
        assert!(
            said.contains("serves no calls (--files-only)"),
            "{command}: {said}"
        );
        if command == "ADD" {
            assert_eq!(ns.links().len(), 3, "lo, eth0 and net1");
        }
    }
    assert_eq!(ns.links(), ["lo"]);
    c.assert_node_clean("after the plugin's DEL");
    drop(daemon);
    // A template that names a socket contradicts --files-only: the daemon does not start.
    let template = c.node.path("with-socket.json");
    fs::write(
        &template,
        json!({"plumbDaemonSocket": "/run/plumb/plumb.sock"}).to_string(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["daemon", "--files-only", "--socket"])
        .arg(c.node.path("other.sock"))
        .arg("--write-config")
        .arg(&template)
        .arg("--cni-conf-dir")
        .arg(net_d)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("plumbDaemonSocket"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
