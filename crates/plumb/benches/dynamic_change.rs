//! Benchmark (not a test) of a dynamic attachment change (`plumb daemon --dynamic`): how long
//! from the moment a running pod's networks annotation is changed in the API server until its
//! network-status lists the change, against the baseline measured in the same run, a new pod's
//! ADD with the changed selection through the same daemon (the time the runtime would take to
//! give a pod those networks by recreating it). Each iteration: a pod attached to `net-a` gets
//! `net-b` added (a bridge and host-local in its netns), then removed again; and the baseline
//! pod is attached with `net-a,net-b`. The API server is the stand-in, in this process; the
//! delegates are Debian's, in real network namespaces. Prints the medians, p99s and the median
//! of the per-iteration ratios; writes them to `target/bench-dynamic-change.json`.
//!
//! Needs root and Debian's containernetworking-plugins; skips (exit 0) otherwise.
//! Run: `cargo bench -p plumb --bench dynamic_change` (ITERATIONS, default 30).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use netattach::selection::NETWORKS_ANNOTATION as NETWORKS;
use netattach::status::NETWORK_STATUS_ANNOTATION as NETWORK_STATUS;
use serde_json::{Value, json};
use testkit::kube_api::{KubeApi, KubeApiOptions, KubeconfigUser, Resource};
use testkit::netns::{Link, Netns, unique_name};

use common::{PLUGINS, PLUMB, caches, call, env_or, leftovers, quantile};

const NODE: &str = "bench-node";

/// The interfaces the pod's network-status lists.
fn listed(api: &KubeApi, name: &str) -> Vec<String> {
    let Some(pod) = api.get(Resource::Pods, "default", name) else {
        return Vec::new();
    };
    let Some(text) = pod["metadata"]["annotations"][NETWORK_STATUS].as_str() else {
        return Vec::new();
    };
    let status: Vec<Value> = serde_json::from_str(text).unwrap_or_default();
    (status.iter())
        .filter_map(|e| e["interface"].as_str().map(str::to_string))
        .collect()
}

/// How many `AttachmentsChanged` events the pod has: one more once a change is done (the
/// event is the change's last write to the API server).
fn changes_done(api: &KubeApi, name: &str) -> usize {
    (api.list(Resource::Events, Some("default")).iter())
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == "AttachmentsChanged")
        .count()
}

/// Sets the pod's networks annotation (as `kubectl annotate --overwrite`), and waits until its
/// network-status says `done`: how long that took. Then waits for the change's event, so that
/// the next change starts on a finished one.
fn change(api: &KubeApi, name: &str, networks: &str, done: impl Fn(&[String]) -> bool) -> Duration {
    let events = changes_done(api, name);
    let mut pod = api.get(Resource::Pods, "default", name).unwrap();
    pod["metadata"]["annotations"][NETWORKS] = json!(networks);
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = Instant::now();
    api.put(Resource::Pods, pod);
    while !done(&listed(api, name)) {
        assert!(
            Instant::now() < deadline,
            "{name}: the change to {networks:?} did not come"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = started.elapsed();
    while changes_done(api, name) == events {
        assert!(Instant::now() < deadline, "{name}: no event for the change");
        std::thread::sleep(Duration::from_millis(1));
    }
    took
}

fn main() {
    if !common::can_run() {
        println!("dynamic_change: SKIP (needs root and {PLUGINS}/bridge)");
        return;
    }
    let iterations = env_or("ITERATIONS", 30).max(1);
    let dir = tempfile::tempdir().unwrap();
    let ipam = dir.path().join("ipam");
    let state = dir.path().join("state");
    let bridges = [unique_name("dd"), unique_name("da"), unique_name("db")];
    let cleanup: Vec<Link> = bridges.iter().map(|b| Link::adopt(b)).collect();
    let api = KubeApi::start(KubeApiOptions::default());
    api.register_node(NODE, "bench-node-uid");
    api.put(
        Resource::Namespaces,
        json!({"metadata": {"name": "default", "labels": {"plumb.io/dynamic": "true"}}}),
    );
    for ((ns, name), (bridge, subnet)) in [
        ("kube-system", "default-net"),
        ("default", "net-a"),
        ("default", "net-b"),
    ]
    .into_iter()
    .zip(
        bridges
            .iter()
            .zip(["10.247.0.0/16", "10.248.0.0/16", "10.249.0.0/16"]),
    ) {
        let config = json!({"cniVersion": "1.0.0", "name": name, "type": "bridge",
            "bridge": bridge, "isGateway": true,
            "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam}});
        api.put(
            Resource::NetworkAttachmentDefinitions,
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"namespace": ns, "name": name},
                   "spec": {"config": config.to_string()}}),
        );
    }
    // Iteration i: pod `changed-i` (net-a, then net-b added and removed) and pod `baseline-i`
    // (net-a,net-b from its ADD).
    let mut pods = Vec::new();
    for i in 0..iterations {
        for (name, networks) in [
            (format!("changed-{i}"), "net-a"),
            (format!("baseline-{i}"), "net-a,net-b"),
        ] {
            let p = api.put(
                Resource::Pods,
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"namespace": "default", "name": name,
                                 "annotations": {NETWORKS: networks}},
                    "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "app"}]}}),
            );
            let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
            pods.push((name, uid, Netns::new()));
        }
    }
    let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
    let socket = dir.path().join("plumb.sock");
    let more = [
        "--dynamic",
        "--dynamic-namespaces",
        "plumb.io/dynamic=true",
        "--state-dir",
    ];
    let mut more: Vec<String> = more.iter().map(|a| a.to_string()).collect();
    more.push(state.display().to_string());
    let daemon = common::daemon(PLUMB, &socket, &kubeconfig, NODE, &more);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !caches(&socket).is_some_and(|r| {
        r["caches"]["pods"]["synced"] == true
            && r["caches"]["nads"]["synced"] == true
            && r["caches"]["dynamic_namespaces"]["synced"] == true
    }) {
        assert!(
            Instant::now() < deadline,
            "the daemon's caches did not sync"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let config = json!({"cniVersion": "1.0.0", "name": "plumb", "type": "plumb",
        "clusterNetwork": "default-net", "kubeconfig": kubeconfig, "binDir": PLUGINS,
        "cniDir": dir.path().join("cni"), "plumbStateDir": state,
        "logLevel": "error", "plumbDaemonSocket": socket})
    .to_string();
    let cni_args = |name: &str, uid: &str| {
        format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_UID={uid}")
    };
    let (mut added, mut removed, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
    let mut ratios = Vec::new();
    for pair in pods.chunks(2) {
        let [
            (changed, changed_uid, changed_ns),
            (base, base_uid, base_ns),
        ] = pair
        else {
            unreachable!()
        };
        call(
            "ADD",
            changed,
            changed_ns,
            &cni_args(changed, changed_uid),
            &config,
        );
        let add = change(&api, changed, "net-a,net-b", |l| l.len() == 3);
        let (base_add, _) = call("ADD", base, base_ns, &cni_args(base, base_uid), &config);
        assert_eq!(listed(&api, base).len(), 3, "{base}: network-status");
        let remove = change(&api, changed, "net-a", |l| l.len() == 2);
        assert_eq!(
            changed_ns.links().len(),
            3,
            "{changed}: lo, eth0 and net1 once net-b went"
        );
        ratios.push(add.as_secs_f64() / base_add.as_secs_f64());
        added.push(add);
        removed.push(remove);
        baseline.push(base_add);
    }
    for (name, uid, ns) in &pods {
        call("DEL", name, ns, &cni_args(name, uid), &config);
        assert_eq!(ns.links(), ["lo"], "{name}: interfaces left");
    }
    let memory = common::status(daemon.0.id());
    drop(daemon);
    for sub in ["ipam", "state", "cni"] {
        let left = leftovers(&dir.path().join(sub));
        assert!(left.is_empty(), "left in {sub}: {left:?}");
    }
    drop(cleanup);

    for v in [&mut added, &mut removed, &mut baseline] {
        v.sort();
    }
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    let figure = |v: &[Duration]| json!({"p50": quantile(v, 0.5), "p99": quantile(v, 0.99)});
    println!("dynamic_change: {iterations} iterations through plumb daemon --dynamic");
    for (what, v) in [
        (
            "net-b added to a running pod (annotation to network-status)",
            &added,
        ),
        ("net-b removed again", &removed),
        ("baseline: a new pod's ADD with net-a,net-b", &baseline),
    ] {
        println!(
            "  {what}: p50 {:.1} ms, p99 {:.1} ms",
            quantile(v, 0.5),
            quantile(v, 0.99)
        );
    }
    println!(
        "  headline: a network added to a running pod takes {ratio:.2}x a new pod's ADD with \
         it (median of the iterations' ratios; min {:.2}, max {:.2})",
        ratios[0],
        ratios[ratios.len() - 1],
    );
    println!(
        "  the daemon at the end: VmRSS {} KiB, VmHWM (peak) {} KiB, {} threads",
        memory["VmRSS"], memory["VmHWM"], memory["Threads"]
    );
    let report = json!({"iterations": iterations, "added_ms": figure(&added),
        "removed_ms": figure(&removed), "baseline_add_ms": figure(&baseline),
        "ratio_added_to_baseline": ratio, "daemon_at_end": memory});
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-dynamic-change.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap()).unwrap();
    println!("  written to {}", path.display());
}
