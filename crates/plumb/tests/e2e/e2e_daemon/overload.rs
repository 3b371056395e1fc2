//! The daemon under more calls than `--max-calls`: a call that finds no turn within
//! `--max-wait` gets CNI code 11 (try again later) and succeeds when the runtime retries it.

use std::time::{Duration, Instant};

use serde_json::json;
use testkit::netns::Netns;

use super::{answer_late, healthz, socket_of, through};
use crate::common::cluster::{Cluster, NETWORKS};
use crate::common::daemon::Daemon;
use crate::common::{err, ok};

/// Cluster `n` with a daemon of one turn (`--max-calls 1`) that calls wait for up to `max_wait`
/// seconds, and the UIDs of two pods on net-a: `slow`, whose GET is answered 30 s late (its
/// call holds the turn meanwhile), and `next`.
fn one_turn(n: u8, max_wait: &str) -> (Cluster, std::path::PathBuf, Daemon, String, String) {
    let mut c = Cluster::new(n);
    let socket = socket_of(&c);
    let daemon = Daemon::start_with(
        &socket,
        None,
        &[
            "--max-calls".as_ref(),
            "1".as_ref(),
            "--max-wait".as_ref(),
            max_wait.as_ref(),
        ],
        &[],
    );
    through(&mut c, &socket);
    let slow = c.pod("default", "slow", json!({NETWORKS: "net-a"}));
    let next = c.pod("default", "next", json!({NETWORKS: "net-a"}));
    answer_late(
        &c,
        "GET",
        Some("/api/v1/namespaces/default/pods/slow"),
        Duration::from_secs(30),
    );
    (c, socket, daemon, slow, next)
}

/// Waits (10 s at most) for the daemon's `/healthz` to say `what`.
fn until_healthz_says(socket: &std::path::Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !healthz(socket).contains(what) {
        assert!(Instant::now() < deadline, "/healthz never said {what:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_call_beyond_max_calls_waits_then_gets_code_11_and_its_retry_succeeds() {
    let (c, socket, daemon, slow, next) = one_turn(160, "1");
    // The first call's pod is answered late (its attempt gives up after 5 s and is retried):
    // it holds the one turn meanwhile.
    let (ns1, ns2) = (Netns::new(), Netns::new());
    std::thread::scope(|s| {
        let first = s.spawn(|| c.call("ADD", &ns1, ("default", "slow", slow.as_str()), "o1"));
        until_healthz_says(&socket, "ok: 1 calls running");
        let pod = ("default", "next", next.as_str());
        let e = err(&c.call("ADD", &ns2, pod, "o2"));
        assert_eq!(e["code"], 11, "{e}");
        let msg = e["msg"].as_str().unwrap();
        assert!(
            msg.contains("1 calls are running already (--max-calls)")
                && msg.contains("no turn within 1 s"),
            "{msg}"
        );
        daemon.wait_for("refused a call for container o2: no turn within 1 s (1 refused so far)");
        assert!(healthz(&socket).contains("1 refused for want of a turn"));
        ok(&first.join().unwrap());
        // The runtime's retry, once the turn is free.
        ok(&c.call("ADD", &ns2, pod, "o2"));
    });
    for (ns, name, uid, cid) in [(&ns1, "slow", &slow, "o1"), (&ns2, "next", &next, "o2")] {
        ok(&c.call("DEL", ns, ("default", name, uid.as_str()), cid));
    }
    c.assert_nothing_left(&ns1, "o1");
    c.assert_nothing_left(&ns2, "o2");
}

#[test]
fn calls_waiting_for_a_turn_when_the_daemon_stops_get_code_11_at_once_and_the_running_one_ends() {
    let (c, socket, daemon, slow, next) = one_turn(157, "120");
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let slow_pod = ("default", "slow", slow.as_str());
    let next_pod = ("default", "next", next.as_str());
    std::thread::scope(|s| {
        let first = s.spawn(|| c.call("ADD", &ns1, slow_pod, "w1"));
        until_healthz_says(&socket, "ok: 1 calls running");
        let second = s.spawn(|| c.call("ADD", &ns2, next_pod, "w2"));
        until_healthz_says(&socket, "1 waiting for a turn");
        // SIGTERM: the waiting call is answered now, well before its 120 s; the running one
        // is drained.
        let (status, said) = daemon.stop();
        assert!(status.success(), "{said}");
        let e = err(&second.join().unwrap());
        assert_eq!(e["code"], 11, "{e}");
        assert!(e["msg"].as_str().unwrap().contains("stopping"), "{e}");
        assert!(
            said.contains("refused a call for container w2: stopping"),
            "{said}"
        );
        ok(&first.join().unwrap());
    });
    // The daemon is gone: the DELs run in the plugin.
    ok(&c.call("DEL", &ns1, slow_pod, "w1"));
    ok(&c.call("DEL", &ns2, next_pod, "w2"));
    c.assert_nothing_left(&ns1, "w1");
    c.assert_nothing_left(&ns2, "w2");
}
