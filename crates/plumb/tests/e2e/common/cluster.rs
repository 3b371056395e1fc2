//! A cluster of one node for plumb's end-to-end tests with Kubernetes: testkit's API stand-in
//! serving the cluster network and two more NADs, a kubeconfig with a token file, the node's
//! directories, and the host bridges the NADs use.

use std::fs;
use std::process::Command;

use serde_json::{Value, json};
use testkit::kube_api::{KubeApi, KubeApiOptions, KubeconfigUser, Resource};
use testkit::netns::{Link, Netns, unique_name};

use super::{CniCall, Node, descendants, run_under, start};

pub const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
pub const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

/// A cluster of one node: the API stand-in with the cluster network and three NADs, a kubeconfig
/// with a token file, the node's directories, and the host bridges the NADs use.
/// The node the tests' pods are bound to (`spec.nodeName`), registered with the stand-in.
pub const NODE: &str = "plumb-test-node";

pub struct Cluster {
    pub api: KubeApi,
    pub node: Node,
    pub config: Value,
    pub token_file: std::path::PathBuf,
    pub _links: Vec<Link>,
}

/// A bridge + host-local NAD; `default_route` makes the pod's default route point at it, as a
/// cluster network does.
pub fn bridge_nad(
    node: &Node,
    (ns, name): (&str, &str),
    bridge: &str,
    subnet: String,
    default_route: bool,
) -> Value {
    let mut ipam = json!({"type": "host-local", "subnet": subnet, "dataDir": node.ipam_dir()});
    if default_route {
        ipam["routes"] = json!([{"dst": "0.0.0.0/0"}]);
    }
    nad(
        ns,
        name,
        json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge, "isGateway": true,
               "ipam": ipam}),
    )
}

pub fn nad(ns: &str, name: &str, config: Value) -> Value {
    json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
           "metadata": {"namespace": ns, "name": name},
           "spec": {"config": config.to_string()}})
}

/// Whether `r` is one of the daemon's watch caches' requests (their lists, watches and Node
/// lookup), not a call's.
pub fn is_the_caches(r: &testkit::kube_api::LoggedRequest) -> bool {
    r.method == "GET"
        && (r.path.ends_with("/pods")
            || r.path.ends_with("/network-attachment-definitions")
            || r.path == "/api/v1/namespaces"
            || r.path.starts_with("/api/v1/nodes/"))
}

/// The `CNI_ARGS` a runtime gives plumb for sandbox `cid` of pod (namespace, name, UID).
pub fn pod_args((ns, name, uid): (&str, &str, &str), cid: &str) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name};\
         K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID={uid}"
    )
}

impl Cluster {
    /// This cluster with plumb's configuration key `key` set to `value`.
    pub fn with(mut self, key: &str, value: Value) -> Cluster {
        self.config[key] = value;
        self
    }

    /// `net` picks this test's subnets (10.<net>.1-3.0/24), so tests run in parallel: unique
    /// across every test file (all of 198-255 are taken; a new test takes the next number
    /// down).
    pub fn new(net: u8) -> Cluster {
        Cluster::with_api(net, KubeApiOptions::default())
    }

    /// [`Cluster::new`], the stand-in started with `opts`.
    pub fn with_api(net: u8, opts: KubeApiOptions) -> Cluster {
        testkit::netns::require_root();
        let api = KubeApi::start(opts);
        let node = Node::new();
        let (b0, b1, parent) = (unique_name("kc"), unique_name("ka"), unique_name("kp"));
        let parent_link = Link::bridge(&parent);
        api.put(
            Resource::NetworkAttachmentDefinitions,
            bridge_nad(
                &node,
                ("kube-system", "default-net"),
                &b0,
                format!("10.{net}.1.0/24"),
                true,
            ),
        );
        api.put(
            Resource::NetworkAttachmentDefinitions,
            bridge_nad(
                &node,
                ("default", "net-a"),
                &b1,
                format!("10.{net}.2.0/24"),
                false,
            ),
        );
        api.put(
            Resource::NetworkAttachmentDefinitions,
            nad(
                "other-ns",
                "net-b",
                json!({"cniVersion": "1.0.0", "type": "macvlan", "master": parent, "mode": "bridge",
                       "ipam": {"type": "host-local", "subnet": format!("10.{net}.3.0/24"),
                                "dataDir": node.ipam_dir()}}),
            ),
        );
        api.register_node(NODE, "node-uid-1");
        let token_file = node.path("token");
        let kubeconfig = api.write_kubeconfig(
            node.path("kubeconfig"),
            KubeconfigUser::TokenFile(&token_file),
        );
        let config =
            node.config(json!({"clusterNetwork": "default-net", "kubeconfig": kubeconfig}));
        Cluster {
            api,
            node,
            config,
            token_file,
            _links: vec![Link::adopt(&b0), Link::adopt(&b1), parent_link],
        }
    }

    /// How many connections to the API server carried the calls' requests: the daemon's
    /// watches (its caches' lists, watches and Node lookup) have one of their own.
    pub fn call_connections(&self) -> usize {
        let mut calls: Vec<u64> = (self.api.requests().iter())
            .filter(|r| !is_the_caches(r))
            .map(|r| r.connection)
            .collect();
        calls.sort();
        calls.dedup();
        calls.len()
    }

    /// A pod in `ns` with these annotations; returns its UID.
    pub fn pod(&self, ns: &str, name: &str, annotations: Value) -> String {
        let pod = self.api.put(
            Resource::Pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"namespace": ns, "name": name, "annotations": annotations},
                   "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]}}),
        );
        pod["metadata"]["uid"].as_str().unwrap().to_string()
    }

    pub fn call(
        &self,
        command: &str,
        ns: &Netns,
        pod: (&str, &str, &str),
        cid: &str,
    ) -> std::process::Output {
        let netns = ns.path().display().to_string();
        self.call_in(command, &netns, pod, cid)
    }

    /// This cluster, its runtime passing `annotations` as the pod's
    /// (`io.kubernetes.cri.pod-annotations`), so that plumb does not GET the pod.
    pub fn with_pod_annotations(self, annotations: Value) -> Cluster {
        self.with(
            "runtimeConfig",
            json!({"io.kubernetes.cri.pod-annotations": annotations}),
        )
    }

    pub fn call_in(
        &self,
        command: &str,
        netns: &str,
        pod: (&str, &str, &str),
        cid: &str,
    ) -> std::process::Output {
        self.call_under(command, netns, pod, cid, &[])
    }

    /// [`Cluster::call_in`], plumb started by the command `wrapper` ([`run_under`]), e.g.
    /// `env VAR=value` to add to its environment.
    pub fn call_under(
        &self,
        command: &str,
        netns: &str,
        pod: (&str, &str, &str),
        cid: &str,
        wrapper: &[&str],
    ) -> std::process::Output {
        let args = pod_args(pod, cid);
        run_under(&self.call_for(command, netns, &args, cid), wrapper, &[])
    }

    /// plumb started for a call as [`Cluster::call_in`] runs it, not waited for (its output
    /// piped): for a test that kills it on the way.
    pub fn start(
        &self,
        command: &str,
        netns: &str,
        pod: (&str, &str, &str),
        cid: &str,
    ) -> std::process::Child {
        let args = pod_args(pod, cid);
        start(&self.call_for(command, netns, &args, cid), |_| {})
    }

    fn call_for<'a>(
        &'a self,
        command: &'a str,
        netns: &'a str,
        args: &'a str,
        cid: &'a str,
    ) -> CniCall<'a> {
        CniCall {
            command,
            container_id: cid,
            netns,
            ifname: "eth0",
            args,
            config: &self.config,
        }
    }

    /// The service-account token rotates: a new one accepted and written to the token file, the
    /// old one revoked. The new token.
    pub fn rotate_token(&self) -> String {
        let old = std::fs::read_to_string(&self.token_file).unwrap();
        static ROTATIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = ROTATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let new = format!("rotated-{}-{n}", std::process::id());
        self.api.accept_token(&new);
        self.api.revoke_token(old.trim());
        std::fs::write(&self.token_file, &new).unwrap();
        new
    }

    /// Every request logged since the log was cleared (at least one) was made with `token` and
    /// was not refused.
    pub fn assert_every_request_used(&self, token: &str) {
        let log = self.api.requests();
        assert!(!log.is_empty());
        assert!(
            log.iter()
                .all(|r| r.bearer_token.as_deref() == Some(token) && r.status < 400),
            "{log:?}"
        );
    }

    pub fn status_of(&self, ns: &str, name: &str) -> Option<Vec<Value>> {
        let pod = self.api.get(Resource::Pods, ns, name)?;
        let text = pod["metadata"]["annotations"][NETWORK_STATUS]
            .as_str()?
            .to_string();
        Some(serde_json::from_str(&text).unwrap())
    }

    pub fn events_for(&self, ns: &str, name: &str) -> Vec<Value> {
        self.api
            .list(Resource::Events, Some(ns))
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == name)
            .collect()
    }

    pub fn assert_nothing_left(&self, ns: &Netns, cid: &str) {
        assert_eq!(ns.links(), ["lo"], "interfaces left");
        assert_eq!(self.node.all_allocations(), 0, "addresses left");
        assert!(!self.node.record(cid).exists(), "record left");
        assert!(
            self.node.cache_entries().is_empty(),
            "cache entries left: {:?}",
            self.node.cache_entries()
        );
    }

    /// What a failed ADD leaves: nothing attached, at most a record that says so (for its DEL,
    /// which then needs no API server).
    pub fn assert_nothing_attached(&self, ns: &Netns, cid: &str) {
        self.node.assert_nothing_attached(ns, cid);
        assert!(
            self.node.cache_entries().is_empty(),
            "cache entries left: {:?}",
            self.node.cache_entries()
        );
    }

    /// Nothing of any sandbox is left on the node: no address, result cache entry (or
    /// temporary file of one), record, lock or temporary file in the state directory.
    pub fn assert_node_clean(&self, when: &str) {
        assert_eq!(self.node.all_allocations(), 0, "{when}: addresses left");
        assert!(
            self.node.cache_entries().is_empty(),
            "{when}: cache entries left: {:?}",
            self.node.cache_entries()
        );
        let state: Vec<_> = fs::read_dir(self.node.state_dir())
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(
            state.is_empty(),
            "{when}: left in the state directory: {state:?}"
        );
    }

    /// `command` of a pod on three networks started, then plumb (the shim, through the daemon)
    /// killed after each of a series of delays, alone, then with every process it started, and
    /// a DEL run after it: each DEL succeeds and leaves no address, record, lock, cache entry
    /// or temporary file, and once the sandbox's netns is deleted (as the runtime deletes it
    /// after DEL), no port on the host's bridges. With plumb killed alone its delegates finish,
    /// and the DEL leaves no interface in the pod either; a delegate killed halfway may leave
    /// one under a temporary name there (the bridge plugin's veth before its rename), which
    /// goes with the netns. `before` prepares each sandbox.
    pub fn kill_at_any_point(
        &self,
        command: &str,
        before: impl Fn(&Cluster, (&Netns, (&str, &str, &str), &str)),
    ) {
        let c = self;
        let uid = c.pod(
            "default",
            "killed",
            json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
        );
        let pod = ("default", "killed", uid.as_str());
        let bridges: Vec<String> = c._links.iter().map(|l| l.name().to_string()).collect();
        let mut i = 0;
        for with_what_it_started in [false, true] {
            for after_ms in [0, 1, 2, 4, 6, 9, 13, 18, 25, 35, 50, 70, 100, 140] {
                i += 1;
                let cid = format!("ck{i}");
                let ns = Netns::new();
                let netns = ns.path().display().to_string();
                before(c, (&ns, pod, &cid));
                let mut call = c.start(command, &netns, pod, &cid);
                std::thread::sleep(std::time::Duration::from_millis(after_ms));
                let started = if with_what_it_started {
                    descendants(call.id())
                } else {
                    Vec::new()
                };
                call.kill().unwrap();
                for pid in started {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
                call.wait().unwrap();
                let when = format!(
                    "killed {after_ms} ms into its {command} (with what it started: {with_what_it_started})"
                );
                let out = c.call("DEL", &ns, pod, &cid);
                assert!(
                    out.status.success(),
                    "{when}: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                if !with_what_it_started {
                    assert_eq!(ns.links(), ["lo"], "{when}: interfaces left in the pod");
                }
                c.assert_node_clean(&when);
                drop(ns);
                // The kernel destroys a deleted netns's interfaces (and their veth peers) a
                // little later. The bridge plugin makes its bridge on its first ADD.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                for bridge in bridges
                    .iter()
                    .filter(|b| testkit::netns::host_link_exists(b))
                {
                    let ports = loop {
                        let ports = testkit::netns::ip_json(&["link", "show", "master", bridge]);
                        if ports == json!([]) || std::time::Instant::now() > deadline {
                            break ports;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    };
                    assert_eq!(ports, json!([]), "{when}: ports left on {bridge}");
                }
            }
        }
    }
}
