//! Benchmark (not a test) of `plumb daemon`'s watch caches at a node's scale: 1,000 pods bound
//! to the node, each as large as a real one (labels, a `last-applied-configuration`, managed
//! fields, two containers, a status), and 200 NADs, served by the API stand-in; the daemon lists
//! and watches them, then serves a burst of pods attached together and detached together
//! through the shim with real delegates and a shared host-local range (a call answered code 11
//! beyond `--max-calls` is retried, as a runtime retries it). Prints how long the caches took to
//! fill, the calls' p50 and p99 (retries included), and the daemon's resident set (VmRSS, and
//! VmHWM, its peak) and threads after the list, after the burst and at the end; writes them to
//! `target/bench-daemon-caches.json`.
//!
//! Needs root and Debian's containernetworking-plugins; skips (exit 0) otherwise.
//! Run: `cargo bench -p plumb --bench daemon_caches` (PODS, default 1000; NADS, default 200;
//! BURST, the pods attached at once, default 100; MAX_CALLS, the daemon's `--max-calls`, its
//! default unless set).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::kube_api::{KubeApi, KubeApiOptions, KubeconfigUser, Resource};
use testkit::netns::{Link, Netns, unique_name};

use common::{PLUGINS, PLUMB, caches, call, env_or, leftovers, quantile, status};

const NODE: &str = "bench-node";

/// A pod as the API server serves one made by a Deployment: about 5 KiB of JSON.
fn pod(i: usize, networks: &str) -> Value {
    let name = format!("app-{i:04}-7d9f8c6b5-x{i:04}");
    let applied = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
        "annotations": {"k8s.v1.cni.cncf.io/networks": networks}},
        "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1.2.3",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}});
    let field = |n: usize| {
        json!({"manager": format!("manager-{n}"), "operation": "Update", "apiVersion": "v1",
            "time": "2026-12-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}, "f:pod-template-hash": {}},
            "f:ownerReferences": {"k:{\"uid\":\"0b7c\"}": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}, "f:name": {},
            "f:resources": {"f:requests": {"f:cpu": {}, "f:memory": {}}}}}},
            "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {"f:status": {}}}}}})
    };
    let container = |n: &str| {
        json!({"name": n, "image": "registry.example.com/app:1.2.3",
            "env": [{"name": "MODE", "value": "production"}, {"name": "LOG", "value": "info"}],
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                          "limits": {"memory": "256Mi"}},
            "volumeMounts": [{"name": "kube-api-access-abcde",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]})
    };
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": format!("team-{}", i % 20), "name": name,
            "labels": {"app": format!("app-{i:04}"), "pod-template-hash": "7d9f8c6b5",
                       "team": format!("team-{}", i % 20), "tier": "backend", "version": "1.2.3"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": networks,
                "example.com/description": "x".repeat(2048),
                "kubectl.kubernetes.io/last-applied-configuration": applied.to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("app-{i:04}-7d9f8c6b5"), "uid": "0b7c", "controller": true}],
            "managedFields": [field(1), field(2), field(3)]},
        "spec": {"nodeName": NODE, "containers": [container("app"), container("sidecar")],
            "serviceAccountName": "default", "restartPolicy": "Always",
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "ContainersReady", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                "image": "registry.example.com/app:1.2.3",
                "imageID": "registry.example.com/app@sha256:0123456789abcdef",
                "containerID": "containerd://0123456789abcdef0123456789abcdef"}]}})
}

fn main() {
    if !common::can_run() {
        println!("daemon_caches: SKIP (needs root and {PLUGINS}/bridge)");
        return;
    }
    let (pods, nads, burst) = (
        env_or("PODS", 1000),
        env_or("NADS", 200),
        env_or("BURST", 100),
    );
    let dir = tempfile::tempdir().unwrap();
    let ipam = dir.path().join("ipam");
    let (b0, b1) = (unique_name("rc"), unique_name("ra"));
    let cleanup = [Link::adopt(&b0), Link::adopt(&b1)];
    let api = KubeApi::start(KubeApiOptions::default());
    api.register_node(NODE, "bench-node-uid");
    let bridge = |name: &str, br: &str, subnet: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": br,
               "isGateway": true,
               "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam}})
    };
    let put_nad = |ns: &str, name: &str, config: &Value| {
        api.put(
            Resource::NetworkAttachmentDefinitions,
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"namespace": ns, "name": name},
                   "spec": {"config": config.to_string()}}),
        );
    };
    put_nad(
        "kube-system",
        "default-net",
        &bridge("default-net", &b0, "10.251.0.0/16"),
    );
    // NADs in the pods' namespaces, all on one bridge (only the burst's pods are attached).
    for n in 0..nads {
        let name = format!("net-{n}");
        put_nad(
            &format!("team-{}", n % 20),
            &name,
            &bridge(&name, &b1, "10.252.0.0/16"),
        );
    }
    let mut uids = Vec::new();
    for i in 0..pods {
        let network = format!("net-{}", i % 20);
        let p = api.put(Resource::Pods, pod(i, &network));
        uids.push((
            p["metadata"]["namespace"].as_str().unwrap().to_string(),
            p["metadata"]["name"].as_str().unwrap().to_string(),
            p["metadata"]["uid"].as_str().unwrap().to_string(),
        ));
    }
    let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
    let socket = dir.path().join("plumb.sock");
    let started = Instant::now();
    let max_calls = std::env::var("MAX_CALLS").map(|n| vec!["--max-calls".to_string(), n]);
    let daemon = common::daemon(
        PLUMB,
        &socket,
        &kubeconfig,
        NODE,
        &max_calls.unwrap_or_default(),
    );
    let pid = daemon.0.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    let filled = loop {
        if let Some(r) = caches(&socket)
            && r["caches"]["pods"]["objects"] == pods
            && r["caches"]["nads"]["objects"] == nads + 1
        {
            break started.elapsed();
        }
        assert!(Instant::now() < deadline, "the caches did not fill");
        std::thread::sleep(Duration::from_millis(10));
    };
    let after_list = status(pid);

    let config = json!({"cniVersion": "1.0.0", "name": "plumb", "type": "plumb",
        "clusterNetwork": "default-net", "kubeconfig": kubeconfig, "binDir": PLUGINS,
        "cniDir": dir.path().join("cni"), "plumbStateDir": dir.path().join("state"),
        "logLevel": "error", "plumbDaemonSocket": socket})
    .to_string();
    let sandboxes: Vec<(Netns, &(String, String, String))> =
        uids.iter().take(burst).map(|p| (Netns::new(), p)).collect();
    let burst_started = Instant::now();
    let mut times = Vec::new();
    let mut refused = 0;
    for command in ["ADD", "DEL"] {
        let took: Vec<(Duration, usize)> = std::thread::scope(|s| {
            let calls: Vec<_> = (sandboxes.iter().enumerate())
                .map(|(i, (ns, (namespace, name, uid)))| {
                    let config = &config;
                    s.spawn(move || {
                        let args = format!(
                            "IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};\
                             K8S_POD_UID={uid}"
                        );
                        call(command, &format!("burst{i}"), ns, &args, config)
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        refused += took.iter().map(|(_, r)| r).sum::<usize>();
        let mut took: Vec<Duration> = took.into_iter().map(|(t, _)| t).collect();
        took.sort();
        times.push((command, quantile(&took, 0.5), quantile(&took, 0.99)));
    }
    let burst_took = burst_started.elapsed();
    // Nothing left: no interface in the pods, no address, record or result cache entry.
    for (ns, _) in &sandboxes {
        assert_eq!(
            ns.links(),
            ["lo"],
            "interfaces left in {}",
            ns.path().display()
        );
    }
    for sub in ["ipam", "state", "cni"] {
        let left = leftovers(&dir.path().join(sub));
        assert!(left.is_empty(), "left in {sub}: {left:?}");
    }
    let after_burst = status(pid);
    std::thread::sleep(Duration::from_secs(2));
    let at_end = status(pid);
    let hits = caches(&socket).unwrap()["caches"].clone();
    drop(daemon);
    drop(cleanup);

    println!(
        "daemon_caches: {pods} pods on the node (about {} KiB of JSON each) and {} NADs",
        api.get(Resource::Pods, &uids[0].0, &uids[0].1)
            .map(|p| p.to_string().len() / 1024)
            .unwrap_or(0),
        nads + 1
    );
    println!(
        "  caches filled {:.0} ms after the daemon started",
        filled.as_secs_f64() * 1e3
    );
    for (when, s) in [
        ("after the list", &after_list),
        ("after the burst", &after_burst),
        ("at the end", &at_end),
    ] {
        println!(
            "  {when}: VmRSS {} KiB, VmHWM (peak) {} KiB, {} threads",
            s["VmRSS"], s["VmHWM"], s["Threads"]
        );
    }
    println!(
        "  burst: {burst} pods attached together then detached together through the shim in \
         {:.0} ms, nothing left; {refused} calls answered code 11 and retried; pod lookups {} \
         hits {} misses, NAD lookups {} hits {} misses",
        burst_took.as_secs_f64() * 1e3,
        hits["pods"]["hits"],
        hits["pods"]["misses"],
        hits["nads"]["hits"],
        hits["nads"]["misses"]
    );
    for (command, p50, p99) in &times {
        println!("  {command} of the burst, retries included: p50 {p50:.0} ms, p99 {p99:.0} ms");
    }
    let calls_ms: Vec<Value> = (times.iter())
        .map(|(c, p50, p99)| json!({"command": c, "p50": p50, "p99": p99}))
        .collect();
    let report = json!({"pods": pods, "nads": nads + 1, "burst": burst, "refused": refused,
        "calls_ms": calls_ms,
        "filled_ms": filled.as_secs_f64() * 1e3, "after_list": after_list,
        "after_burst": after_burst, "at_end": at_end, "caches": hits});
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-daemon-caches.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap()).unwrap();
    println!("  written to {}", path.display());
}
