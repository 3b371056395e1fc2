//! `plumb daemon --metrics-address`: the Prometheus text after a pod's ADD and DEL (calls,
//! delegates, API requests, caches, events), `/healthz` and `/readyz` beside it, and a daemon
//! whose address is taken (another daemon during a rollout) serving calls until it is free.

use std::io::{Read, Write};
use std::net::SocketAddr;

use serde_json::json;
use testkit::kube_api::KubeconfigUser;
use testkit::netns::Netns;

use crate::common::cluster::{Cluster, NETWORKS, NODE};
use crate::common::ok;

/// Where the tests' daemons serve metrics: a loopback address of its own, so that a port taken
/// there is never one the API stand-ins (on 127.0.0.1) give up while down and bind again.
pub(super) const METRICS_HOST: &str = "127.0.0.2:0";

/// `GET path` on `addr`: the status and the body.
pub(super) fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: plumb\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    (status, answer.split_once("\r\n\r\n").unwrap().1.to_string())
}

/// The value of the sample `key` (name and labels, as written) in Prometheus text.
pub(super) fn sample(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn metrics_show_calls_delegates_api_requests_and_caches_once_the_address_is_free() {
    let mut c = Cluster::new(159);
    // Another process (the daemon of the pod being replaced) holds the address.
    let taken = std::net::TcpListener::bind(METRICS_HOST).unwrap();
    let addr = taken.local_addr().unwrap();
    let own = c
        .api
        .write_kubeconfig(c.node.path("daemon-kubeconfig"), KubeconfigUser::Token);
    let addr_arg = addr.to_string();
    let (socket, daemon) =
        super::caches::watching_with(&mut c, &own, NODE, &["--metrics-address", &addr_arg]);
    daemon.wait_for(&format!("metrics: cannot listen on {addr}"));
    let uid = c.pod("default", "web", json!({NETWORKS: "net-a"}));
    super::caches::holding(&socket, 1);
    let ns = Netns::new();
    let pod = ("default", "web", uid.as_str());
    // Calls are served while the address is taken.
    ok(&c.call("ADD", &ns, pod, "m1"));
    drop(taken);
    daemon.wait_for(&format!(
        "metrics: serving /metrics, /healthz and /readyz on {addr}"
    ));
    ok(&c.call("DEL", &ns, pod, "m1"));
    c.assert_nothing_left(&ns, "m1");

    let (status, text) = get(addr, "/metrics");
    assert_eq!(status, 200, "{text}");
    for (key, want) in [
        ("plumb_cni_calls_total{command=\"ADD\",code=\"0\"}", 1.0),
        ("plumb_cni_calls_total{command=\"DEL\",code=\"0\"}", 1.0),
        (
            "plumb_cni_call_duration_seconds_count{command=\"ADD\"}",
            1.0,
        ),
        (
            "plumb_delegate_duration_seconds_count{network=\"default-net\",command=\"ADD\"}",
            1.0,
        ),
        (
            "plumb_delegate_duration_seconds_count{network=\"net-a\",command=\"DEL\"}",
            1.0,
        ),
        ("plumb_cni_calls_in_flight", 0.0),
        ("plumb_cni_calls_refused_total", 0.0),
        (
            "plumb_api_requests_total{verb=\"patch\",status=\"200\"}",
            1.0,
        ),
        ("plumb_cache_objects{kind=\"pods\"}", 1.0),
        ("plumb_cache_synced{kind=\"nads\"}", 1.0),
        (
            "plumb_cache_lookups_total{kind=\"pods\",result=\"hit\"}",
            1.0,
        ),
        (
            "plumb_cache_lookups_total{kind=\"nads\",result=\"miss\"}",
            0.0,
        ),
        ("plumb_events_total{result=\"sent\"}", 0.0),
    ] {
        assert_eq!(sample(&text, key), Some(want), "{key} in:\n{text}");
    }
    assert!(
        sample(
            &text,
            "plumb_api_requests_total{verb=\"watch\",status=\"200\"}"
        ) >= Some(2.0),
        "the caches' watches: {text}"
    );
    assert!(
        text.contains("# TYPE plumb_cni_call_duration_seconds histogram"),
        "{text}"
    );
    assert_eq!(get(addr, "/healthz"), (200, "ok\n".to_string()));
    let (status, ready) = get(addr, "/readyz");
    assert_eq!(status, 200, "{ready}");
    assert!(ready.starts_with("ready: serving calls"), "{ready}");
}
