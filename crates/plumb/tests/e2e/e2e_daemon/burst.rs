//! A burst through the daemon: 100 pods attached together, then detached together, with a
//! shared host-local range and `--max-calls` far below 100: every call succeeds, or gets code
//! 11 and succeeds when retried as a runtime retries it; nothing is left; `/metrics` counts it
//! all.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use testkit::kube_api::KubeconfigUser;
use testkit::netns::Netns;

use super::caches::holding;
use super::metrics::{METRICS_HOST, get, sample};
use crate::common::cluster::{Cluster, NETWORKS, NODE};

const PODS: usize = 100;

#[test]
fn a_burst_of_pods_beyond_max_calls_all_attach_and_detach_retrying_code_11() {
    let mut c = Cluster::new(158);
    let own = c
        .api
        .write_kubeconfig(c.node.path("daemon-kubeconfig"), KubeconfigUser::Token);
    let addr: SocketAddr = {
        let free = std::net::TcpListener::bind(METRICS_HOST).unwrap();
        free.local_addr().unwrap()
    };
    let addr_arg = addr.to_string();
    let (socket, daemon) = super::caches::watching_with(
        &mut c,
        &own,
        NODE,
        &[
            "--max-calls",
            "4",
            "--max-wait",
            "1",
            "--metrics-address",
            &addr_arg,
        ],
    );
    let pods: Vec<(String, String, Netns)> = (0..PODS)
        .map(|i| {
            let name = format!("b{i}");
            let uid = c.pod("default", &name, json!({NETWORKS: "net-a"}));
            (name, uid, Netns::new())
        })
        .collect();
    holding(&socket, PODS as u64);
    daemon.wait_for(&format!(
        "metrics: serving /metrics, /healthz and /readyz on {addr}"
    ));

    // Each call as a runtime makes it: retried while it gets code 11 (try again later).
    let call = |command: &str, (name, uid, ns): &(String, String, Netns)| -> usize {
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut refused = 0;
        loop {
            let out = c.call(command, ns, ("default", name, uid), name);
            if out.status.success() {
                return refused;
            }
            let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(e["code"], 11, "{command} {name}: {e}");
            assert!(Instant::now() < deadline, "{command} {name} still refused");
            refused += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut refused = 0;
    for command in ["ADD", "DEL"] {
        refused += std::thread::scope(|s| {
            let calls: Vec<_> = (pods.iter())
                .map(|p| s.spawn(move || call(command, p)))
                .collect();
            calls.into_iter().map(|t| t.join().unwrap()).sum::<usize>()
        });
        if command == "ADD" {
            let mut addresses: Vec<String> = (pods.iter())
                .flat_map(|(_, _, ns)| ns.addresses("net1"))
                .collect();
            addresses.sort();
            addresses.dedup();
            assert_eq!(addresses.len(), PODS, "one address of net-a each");
        }
    }
    eprintln!("burst: {refused} calls answered code 11 and retried");
    for (name, _, ns) in &pods {
        assert_eq!(ns.links(), ["lo"], "{name}: interfaces left");
    }
    c.assert_node_clean("after the burst");

    let (status, text) = get(addr, "/metrics");
    assert_eq!(status, 200, "{text}");
    let n = PODS as f64;
    for (key, want) in [
        ("plumb_cni_calls_total{command=\"ADD\",code=\"0\"}", n),
        ("plumb_cni_calls_total{command=\"DEL\",code=\"0\"}", n),
        (
            "plumb_cni_call_duration_seconds_count{command=\"ADD\"}",
            n + count_11(&text, "ADD"),
        ),
        (
            "plumb_delegate_duration_seconds_count{network=\"net-a\",command=\"ADD\"}",
            n,
        ),
        ("plumb_cni_calls_in_flight", 0.0),
        ("plumb_cache_lookups_total{kind=\"pods\",result=\"hit\"}", n),
    ] {
        assert_eq!(sample(&text, key), Some(want), "{key} in:\n{text}");
    }
    // The daemon's refusals, each a call answered code 11, are among those the clients saw
    // (a shim may answer code 11 itself, its connection lost).
    let refused_total = sample(&text, "plumb_cni_calls_refused_total").unwrap();
    assert_eq!(
        refused_total,
        count_11(&text, "ADD") + count_11(&text, "DEL"),
        "{text}"
    );
    assert!(
        refused_total <= refused as f64,
        "{refused_total} > {refused}"
    );
}

/// The calls of `command` answered code 11.
fn count_11(text: &str, command: &str) -> f64 {
    sample(
        text,
        &format!("plumb_cni_calls_total{{command=\"{command}\",code=\"11\"}}"),
    )
    .unwrap_or(0.0)
}
