//! `plumb daemon` end to end: the built binary run as the runtime's plugin with a configuration
//! that names the daemon's socket (the shim), the daemon serving the calls, Debian's reference
//! plugins in real network namespaces and the API stand-in. Needs root (CI runs as root).

mod common;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, NETWORKS, pod_args};
use common::daemon::Daemon;
use common::{CniCall, err, ok};
use serde_json::json;
use testkit::kube_api::{Fault, FaultKind, KubeApiOptions};
use testkit::netns::Netns;

/// `c`'s configuration with the daemon's socket named in it.
fn through(c: &mut Cluster, socket: &Path) {
    c.config["plumbDaemonSocket"] = json!(socket);
}

fn socket_of(c: &Cluster) -> PathBuf {
    c.node.path("run/plumb.sock")
}

/// The cluster stand-in of test `n` with a daemon serving on its socket, and the plugin's
/// configuration naming that socket.
fn served(n: u8) -> (Cluster, PathBuf, Daemon) {
    let mut c = Cluster::new(n);
    let socket = socket_of(&c);
    let daemon = Daemon::start(&socket);
    through(&mut c, &socket);
    (c, socket, daemon)
}

/// `c`'s plugin configuration without the daemon's socket: calls run in the plugin itself.
fn in_thin_mode(c: &Cluster) -> serde_json::Value {
    let mut thin = c.config.clone();
    thin.as_object_mut().unwrap().remove("plumbDaemonSocket");
    thin
}

/// `n` pods `<prefix>0`, `<prefix>1`, … in namespace default, each on net-a and net-b
/// besides the cluster network: their names and UIDs.
fn pods_on_three_networks(c: &Cluster, prefix: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}{i}");
            let uid = c.pod(
                "default",
                &name,
                json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
            );
            (name, uid)
        })
        .collect()
}

/// The uid the tests run other users' processes as.
const NOBODY: u32 = 65534;

/// One HTTP/1.1 request to the daemon, as curl --unix-socket would send it: its status and
/// body.
fn http(socket: &Path, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    http_with(socket, method, path, "", body)
}

/// [`http`], with `headers` (each line ending in `\r\n`) among the request's.
fn http_with(socket: &Path, method: &str, path: &str, headers: &str, body: &[u8]) -> (u16, String) {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: plumb\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

/// The daemon's health answer.
fn healthz(socket: &Path) -> String {
    let (status, body) = http(socket, "GET", "/healthz", b"");
    assert_eq!(status, 200, "{body}");
    body
}

/// What `plumb daemon --socket socket` said on stderr when it refused to start, within 10 s.
fn refused(socket: &Path) -> String {
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["daemon", "--socket"])
        .arg(socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            daemon.kill().unwrap();
            let out = daemon.wait_with_output().unwrap();
            panic!(
                "the daemon started: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = daemon.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{said}");
    said
}

/// `path` given `mode` (to let other users in, or to open it too far).
fn open_to_others(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// The API stand-in answers the next `method` request (to `path`, when given) `by` late: the
/// daemon's call then waits there while the test acts.
fn answer_late(c: &Cluster, method: &str, path: Option<&str>, by: Duration) {
    let fault = Fault::new(FaultKind::Latency(by)).method(method).times(1);
    c.api.add_fault(match path {
        Some(p) => fault.path(p),
        None => fault,
    });
}

#[test]
fn the_daemon_keeps_its_connection_to_the_api_server_while_no_pod_comes() {
    // Pods come to a node minutes apart, not milliseconds: a connection kept only while calls
    // come close together would cost every ADD its TCP and TLS handshakes, what the daemon is
    // there to spare. (kube's read timeout, 5 s, cut idle connections.)
    let (c, _socket, _daemon) = served(243);
    for (i, name) in ["early", "late"].into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(7));
        }
        let uid = c.pod("default", name, json!({NETWORKS: "net-a"}));
        let ns = Netns::new();
        let pod = ("default", name, uid.as_str());
        let cid = format!("idle{i}");
        ok(&c.call("ADD", &ns, pod, &cid));
        ok(&c.call("DEL", &ns, pod, &cid));
        c.assert_nothing_left(&ns, &cid);
    }
    assert_eq!(c.api.connections_accepted(), 1);
}

#[test]
fn the_daemon_runs_an_exec_credential_plugin_again_only_once_its_credential_expires() {
    // A kept client's credential is used until a minute before its expirationTimestamp: one
    // expiring within that minute is fetched anew for the next call, one valid for an hour
    // serves every call. The plugin counts its runs in a file.
    for (n, lifetime_s, runs) in [(246, 30, 3), (247, 3600, 1)] {
        let (c, _socket, _daemon) = served(n);
        let counted = c.node.path("exec-runs");
        let script = format!(
            "echo run >> {counted}; printf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\
             \"kind\":\"ExecCredential\",\"status\":{{\"token\":\"%s\",\"expirationTimestamp\":\"%s\"}}}}' \
             \"$(cat {token})\" \"$(date -u -d '+{lifetime_s} seconds' +%Y-%m-%dT%H:%M:%SZ)\"",
            counted = counted.display(),
            token = c.token_file.display(),
        );
        let kubeconfig = PathBuf::from(c.config["kubeconfig"].as_str().unwrap());
        let text = fs::read_to_string(&kubeconfig).unwrap();
        let user = text.find("  user:\n    tokenFile:").unwrap();
        fs::write(
            &kubeconfig,
            format!(
                "{}  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
                 command: /bin/sh\n      args: [\"-c\", {}]\n",
                &text[..user],
                serde_json::to_string(&script).unwrap()
            ),
        )
        .unwrap();
        for i in 0..3 {
            let name = format!("exp{i}");
            let uid = c.pod("default", &name, json!({NETWORKS: "net-a"}));
            let ns = Netns::new();
            let pod = ("default", name.as_str(), uid.as_str());
            ok(&c.call("ADD", &ns, pod, &name));
            ok(&c.call("DEL", &ns, pod, &name));
            c.assert_nothing_left(&ns, &name);
        }
        let ran = fs::read_to_string(&counted).unwrap().lines().count();
        assert_eq!(ran, runs, "a credential valid for {lifetime_s} s");
    }
}

#[test]
fn pods_attach_through_the_daemon_on_one_connection_to_the_api_server() {
    let (c, socket, daemon) = served(230);
    let mode = fs::metadata(&socket).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600,
        "the socket is for root only"
    );

    for (i, name) in ["web", "db"].into_iter().enumerate() {
        let uid = c.pod(
            "default",
            name,
            json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
        );
        let ns = Netns::new();
        let pod = ("default", name, uid.as_str());
        let cid = format!("d{i}");
        let result = ok(&c.call("ADD", &ns, pod, &cid));
        assert_eq!(
            result["ips"][0]["address"],
            format!("10.230.1.{}/24", i + 2)
        );
        assert_eq!(ns.addresses("eth0"), [format!("10.230.1.{}/24", i + 2)]);
        assert_eq!(ns.addresses("net1"), [format!("10.230.2.{}/24", i + 2)]);
        assert_eq!(ns.addresses("mv1"), [format!("10.230.3.{}/24", i + 2)]);
        let status = c
            .status_of("default", name)
            .expect("network-status written");
        assert_eq!(status.len(), 3, "{status:?}");
        ok(&c.call("DEL", &ns, pod, &cid));
        c.assert_nothing_left(&ns, &cid);
    }
    // Thin mode connects (and shakes hands) once per ADD; the daemon kept its connection.
    assert_eq!(c.api.connections_accepted(), 1);

    let (status, stderr) = daemon.stop();
    assert!(status.success(), "{stderr}");
    assert!(!socket.exists(), "a stopped daemon leaves no socket");
}

#[test]
fn without_a_daemon_listening_the_plugin_runs_the_call_itself() {
    let mut c = Cluster::new(231);
    let socket = socket_of(&c);
    through(&mut c, &socket);
    let uid = c.pod("default", "alone", json!({NETWORKS: "net-a"}));
    let pod = ("default", "alone", uid.as_str());
    // ADD then DEL of the pod as sandbox `cid`; net1's addresses while it was attached.
    let attached = |cid: &str| {
        let ns = Netns::new();
        ok(&c.call("ADD", &ns, pod, cid));
        let net1 = ns.addresses("net1");
        ok(&c.call("DEL", &ns, pod, cid));
        c.assert_nothing_left(&ns, cid);
        net1
    };

    // No socket at all.
    assert_eq!(attached("n1"), ["10.231.2.2/24"]);

    // The socket a killed daemon left behind.
    let daemon = Daemon::start(&socket);
    drop(daemon);
    assert!(socket.exists());
    // host-local hands out the address after the last one it gave.
    assert_eq!(attached("n2"), ["10.231.2.3/24"]);

    // A daemon started again takes over the stale socket.
    let _daemon = Daemon::start(&socket);
    assert_eq!(attached("n3"), ["10.231.2.4/24"]);
    assert_eq!(
        c.api.connections_accepted(),
        3,
        "two calls in thin mode, one connection of the daemon's"
    );
}

#[test]
fn a_token_rotated_between_calls_is_the_one_the_daemon_sends() {
    let (c, _socket, _daemon) = served(232);
    let uid = c.pod("default", "rot", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let pod = ("default", "rot", uid.as_str());
    ok(&c.call("ADD", &ns, pod, "r1"));
    ok(&c.call("DEL", &ns, pod, "r1"));

    let new = c.rotate_token();
    c.api.clear_requests();
    ok(&c.call("ADD", &ns, pod, "r2"));
    // Not one request with the old token, not one refused: the client kept from the first
    // call was not used once its token file changed.
    c.assert_every_request_used(&new);
    ok(&c.call("DEL", &ns, pod, "r2"));
    c.assert_nothing_left(&ns, "r2");
}

#[test]
fn pods_attached_together_through_the_daemon_each_get_their_networks() {
    let (c, _socket, _daemon) = served(233);
    let pods: Vec<(String, String, Netns)> = (0..3)
        .map(|i| {
            let name = format!("p{i}");
            let uid = c.pod("default", &name, json!({NETWORKS: "net-a"}));
            (name, uid, Netns::new())
        })
        .collect();
    std::thread::scope(|s| {
        for (i, (name, uid, ns)) in pods.iter().enumerate() {
            let c = &c;
            s.spawn(move || {
                ok(&c.call("ADD", ns, ("default", name, uid), &format!("t{i}")));
            });
        }
    });
    let mut addresses: Vec<String> = pods
        .iter()
        .flat_map(|(_, _, ns)| ns.addresses("net1"))
        .collect();
    addresses.sort();
    assert_eq!(
        addresses,
        ["10.233.2.2/24", "10.233.2.3/24", "10.233.2.4/24"]
    );
    for (i, (name, uid, ns)) in pods.iter().enumerate() {
        ok(&c.call("DEL", ns, ("default", name, uid), &format!("t{i}")));
        assert_eq!(ns.links(), ["lo"]);
    }
    assert_eq!(c.node.all_allocations(), 0);
}

#[test]
fn pods_attached_and_detached_together_in_both_modes_each_get_their_networks_and_leave_nothing() {
    // Eight pods on three networks, each through three sandboxes one after the other, all at
    // once; each sandbox's calls alternately through the daemon and in thin mode, so that both
    // run side by side on the same host bridges, IPAM store, result cache and state directory.
    let (c, _socket, _daemon) = served(199);
    // The two host bridges made beforehand, each with an address of its own. A bridge the
    // bridge plugin makes takes the lowest address of its ports, so it changed as the other
    // pods' veths came and went, and the plugin's CHECK, which compares the bridge's address
    // with the one in its ADD's result, failed now and then ("Bridge interface … Mac doesn't
    // match"): the reference plugin's way with a shared bridge, not plumb's to test here.
    for (i, bridge) in c._links[..2].iter().enumerate() {
        let mac = format!("02:00:00:c1:99:0{i}");
        for args in [
            vec!["link", "add", bridge.name(), "type", "bridge"],
            vec!["link", "set", bridge.name(), "address", &mac, "up"],
        ] {
            assert!(Command::new("ip").args(&args).status().unwrap().success());
        }
    }
    let thin = in_thin_mode(&c);
    let pods: Vec<(String, String, Netns)> = pods_on_three_networks(&c, "s", 8)
        .into_iter()
        .map(|(name, uid)| (name, uid, Netns::new()))
        .collect();
    std::thread::scope(|s| {
        for (i, (name, uid, ns)) in pods.iter().enumerate() {
            let (c, thin) = (&c, &thin);
            s.spawn(move || {
                let netns = ns.path().display().to_string();
                for round in 0..3 {
                    let cid = format!("s{i}r{round}");
                    let args = pod_args(("default", name, uid), &cid);
                    let config = if (i + round) % 2 == 0 {
                        &c.config
                    } else {
                        thin
                    };
                    let call = |command| {
                        common::run(&CniCall {
                            command,
                            container_id: &cid,
                            netns: &netns,
                            ifname: "eth0",
                            args: &args,
                            config,
                        })
                    };
                    let added = ok(&call("ADD"));
                    let address = added["ips"][0]["address"].as_str().unwrap().to_string();
                    assert!(address.starts_with("10.199.1."), "{cid}: {added}");
                    let mut links = ns.links();
                    links.sort();
                    assert_eq!(links, ["eth0", "lo", "mv1", "net1"], "{cid}");
                    assert_eq!(ns.addresses("eth0"), [address], "{cid}");
                    ok(&call("CHECK"));
                    ok(&call("DEL"));
                    assert_eq!(ns.links(), ["lo"], "{cid}");
                }
            });
        }
    });
    c.assert_node_clean("after every pod's DEL");
}

#[test]
fn pods_whose_add_is_killed_at_random_points_while_others_run_leave_nothing_after_their_del() {
    // Six pods at once, each through ten sandboxes: each ADD, through the daemon or in thin
    // mode, has its plugin killed (as a runtime kills it at its deadline) at a point drawn from
    // a fixed seed, and the DEL after it must undo everything, while the other pods' calls
    // run. The points are drawn over how long a whole ADD takes under this very load (each
    // pod's first sandbox times one, unkilled), so that on a busy machine the kills still land
    // all through the ADD instead of before plumb has done anything. (A soak of 8 pods x 40
    // sandboxes found a result cache entry's temporary file left behind 1 run in 30; delegates
    // are not killed here: host-local then leaves an empty reservation file, its own store's
    // weakness, not plumb's.)
    let (c, _socket, _daemon) = served(198);
    let thin = in_thin_mode(&c);
    let pods = pods_on_three_networks(&c, "k", 6);
    std::thread::scope(|s| {
        for (i, (name, uid)) in pods.iter().enumerate() {
            let (c, thin) = (&c, &thin);
            s.spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 * 7919);
                let mut draw = move |n: u64| {
                    seed = seed
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    (seed >> 33) % n
                };
                let mut add_takes = None;
                for round in 0..11 {
                    let ns = Netns::new();
                    let netns = ns.path().display().to_string();
                    let cid = format!("k{i}r{round}");
                    let args = pod_args(("default", name, uid), &cid);
                    let through_daemon = add_takes.is_some() && draw(2) == 0;
                    let config = if through_daemon { &c.config } else { thin };
                    let call = |command| CniCall {
                        command,
                        container_id: &cid,
                        netns: &netns,
                        ifname: "eth0",
                        args: &args,
                        config,
                    };
                    let Some(add_takes) = add_takes else {
                        let start = Instant::now();
                        ok(&common::run(&call("ADD")));
                        add_takes = Some(start.elapsed());
                        ok(&common::run(&call("DEL")));
                        continue;
                    };
                    // A little past the ADD's end too: a kill once it is done is a case.
                    let after = draw((add_takes.as_millis() as u64 * 6 / 5).max(20));
                    let mut add = common::start(&call("ADD"), |_| {});
                    std::thread::sleep(Duration::from_millis(after));
                    let _ = add.kill();
                    let _ = add.wait();
                    let when = format!(
                        "{cid}, its ADD killed {after} ms in, of an ADD that takes {add_takes:?} \
                         (through the daemon: {through_daemon})"
                    );
                    let del = common::run(&call("DEL"));
                    assert!(
                        del.status.success(),
                        "{when}: {}",
                        String::from_utf8_lossy(&del.stdout)
                    );
                    assert_eq!(ns.links(), ["lo"], "{when}: interfaces left in the pod");
                }
            });
        }
    });
    c.assert_node_clean("after every pod's DEL");
}

#[test]
fn a_daemon_does_not_take_a_path_that_is_not_a_socket() {
    let node = common::Node::new();
    let file = node.path("not-a-socket");
    fs::write(&file, "keep me").unwrap();
    let dir = node.path("a-directory");
    fs::create_dir(&dir).unwrap();
    // A link to a socket a daemon serves on: still not a socket itself.
    let served = node.path("run/plumb.sock");
    let _daemon = Daemon::start(&served);
    let link = node.path("a-link");
    std::os::unix::fs::symlink(&served, &link).unwrap();
    let before: Vec<_> = fs::read_dir(node.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    for path in [&file, &dir, &link] {
        let said = refused(path);
        assert!(
            said.contains(&path.display().to_string())
                && said.contains("exists and is not a socket"),
            "{said}"
        );
    }
    assert_eq!(fs::read_to_string(&file).unwrap(), "keep me");
    assert!(fs::symlink_metadata(&dir).unwrap().is_dir());
    assert_eq!(fs::read_link(&link).unwrap(), served);
    let after: Vec<_> = fs::read_dir(node.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "nothing made beside them");
    assert!(
        healthz(&served).starts_with("ok:"),
        "the served socket is left alone"
    );
}

#[test]
fn a_daemon_killed_during_an_add_fails_it_with_code_11_and_the_del_undoes_it() {
    let (c, _socket, daemon) = served(234);
    let uid = c.pod(
        "default",
        "cut",
        json!({NETWORKS: "net-a,other-ns/net-b@mv1"}),
    );
    let pod = ("default", "cut", uid.as_str());
    let ns = Netns::new();
    // The status PATCH, after every delegate ran, answers late: the daemon dies meanwhile.
    answer_late(&c, "PATCH", None, Duration::from_secs(3));
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(daemon);
    });
    let out = c.call("ADD", &ns, pod, "k1");
    killer.join().unwrap();
    let e = err(&out);
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("may have been done in part"),
        "{e}"
    );
    assert_eq!(
        ns.links().len(),
        4,
        "the daemon attached everything before it died: {:?}",
        ns.links()
    );
    // The runtime's DEL, with no daemon left, runs in the plugin and undoes it all.
    ok(&c.call("DEL", &ns, pod, "k1"));
    c.assert_nothing_left(&ns, "k1");
}

#[test]
fn a_del_sent_while_its_add_still_runs_waits_for_it_and_undoes_it_all() {
    let (c, _socket, _daemon) = served(235);
    let uid = c.pod("default", "late", json!({NETWORKS: "net-a"}));
    let pod = ("default", "late", uid.as_str());
    let ns = Netns::new();
    // The ADD's pod GET answers a second late, before anything is attached. A DEL run beside it
    // would find nothing to undo, and the ADD would then attach the pod after its DEL: a leak.
    answer_late(
        &c,
        "GET",
        Some("/api/v1/namespaces/default/pods/late"),
        Duration::from_secs(1),
    );
    std::thread::scope(|s| {
        let add = s.spawn(|| c.call("ADD", &ns, pod, "w1"));
        std::thread::sleep(Duration::from_millis(300));
        ok(&c.call("DEL", &ns, pod, "w1"));
        ok(&add.join().unwrap());
    });
    c.assert_nothing_left(&ns, "w1");
}

#[test]
fn a_daemon_stopped_during_an_add_finishes_it_and_answers() {
    let (c, socket, daemon) = served(236);
    let uid = c.pod("default", "drain", json!({NETWORKS: "net-a"}));
    let pod = ("default", "drain", uid.as_str());
    let ns = Netns::new();
    // The status PATCH answers late; SIGTERM comes meanwhile.
    answer_late(&c, "PATCH", None, Duration::from_millis(1500));
    let stopped = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        daemon.stop()
    });
    let out = c.call("ADD", &ns, pod, "s1");
    let (status, stderr) = stopped.join().unwrap();
    let result = ok(&out);
    assert_eq!(result["ips"][0]["address"], "10.236.1.2/24");
    assert!(c.status_of("default", "drain").is_some(), "status written");
    assert!(status.success(), "{stderr}");
    assert!(!socket.exists());
    // The DEL, with the daemon gone, runs in the plugin.
    ok(&c.call("DEL", &ns, pod, "s1"));
    c.assert_nothing_left(&ns, "s1");
}

#[test]
fn a_del_run_in_the_plugin_while_the_daemon_drains_its_add_waits_for_it_and_undoes_it_all() {
    let (c, socket, daemon) = served(237);
    let uid = c.pod("default", "cross", json!({NETWORKS: "net-a"}));
    let pod = ("default", "cross", uid.as_str());
    let ns = Netns::new();
    // The daemon's ADD waits on its pod GET, before anything is attached; SIGTERM comes
    // meanwhile: the socket goes at once, the ADD is drained, and the runtime's DEL finds no
    // daemon and runs in the plugin. Run beside the ADD, it would find nothing to undo and the
    // ADD would attach the pod after its DEL: a leak.
    answer_late(
        &c,
        "GET",
        Some("/api/v1/namespaces/default/pods/cross"),
        Duration::from_millis(1500),
    );
    std::thread::scope(|s| {
        let add = s.spawn(|| c.call("ADD", &ns, pod, "x1"));
        std::thread::sleep(Duration::from_millis(300));
        let stopped = s.spawn(move || daemon.stop());
        let deadline = Instant::now() + Duration::from_secs(5);
        while socket.exists() {
            assert!(
                Instant::now() < deadline,
                "the stopping daemon kept its socket"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let del = c.call("DEL", &ns, pod, "x1");
        ok(&del);
        let said = String::from_utf8_lossy(&del.stderr);
        assert!(
            said.contains("running the call in this process"),
            "the DEL ran in the plugin: {said}"
        );
        assert!(
            said.contains("another call for it is running") && said.contains("x1.lock"),
            "the DEL waited for the ADD: {said}"
        );
        ok(&add.join().unwrap());
        let (status, stderr) = stopped.join().unwrap();
        assert!(status.success(), "{stderr}");
    });
    c.assert_nothing_left(&ns, "x1");
    assert!(
        !c.node.state_dir().join("x1.lock").exists(),
        "a DEL that undid everything removes the container's lock file"
    );
}

#[test]
fn the_plugin_does_not_send_its_call_to_a_daemon_run_by_another_user() {
    let mut c = Cluster::new(238);
    // A daemon started by an unprivileged user, on a socket in a directory it owns.
    open_to_others(c.node.dir.path(), 0o711);
    let dir = c.node.path("theirs");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    let socket = dir.join("plumb.sock");
    let _daemon = Daemon::start_as(&socket, Some(NOBODY));
    through(&mut c, &socket);
    let uid = c.pod("default", "wary", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    let e = err(&c.call("ADD", &ns, ("default", "wary", uid.as_str()), "u1"));
    assert_eq!(e["code"], 5, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains(&socket.display().to_string()) && msg.contains("runs as uid 65534"),
        "{e}"
    );
    // Refused, not run here instead: nothing attached.
    assert_eq!(ns.links(), ["lo"]);
    assert!(!c.node.record("u1").exists());
}

#[test]
fn the_daemon_answers_403_to_another_user_even_on_a_socket_opened_to_all() {
    let node = common::Node::new();
    let socket = node.path("run/plumb.sock");
    let _daemon = Daemon::start(&socket);
    // An operator's mistake: the socket and its directory opened to everyone.
    open_to_others(node.dir.path(), 0o711);
    open_to_others(&node.path("run"), 0o755);
    open_to_others(&socket, 0o666);
    let config = node.config(json!({"plumbDaemonSocket": socket}));
    // The plugin, run by an unprivileged user, as the runtime would run it.
    let shim = common::start(
        &CniCall {
            command: "ADD",
            container_id: "n403",
            netns: "/var/run/netns/none",
            ifname: "eth0",
            args: "",
            config: &config,
        },
        |c| {
            c.uid(NOBODY).gid(NOBODY);
        },
    );
    let e = err(&shim.wait_with_output().unwrap());
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("403") && msg.contains("only uid 0 or root may call plumb"),
        "{e}"
    );
    assert!(!node.record("n403").exists());
}

#[test]
fn a_request_with_a_variable_that_is_not_cni_is_refused_and_says_which() {
    let node = common::Node::new();
    let socket = node.path("run/plumb.sock");
    let _daemon = Daemon::start(&socket);
    let (status, body) = http(
        &socket,
        "POST",
        "/cni",
        b"{\"CNI_COMMAND\":\"VERSION\",\"LD_PRELOAD\":\"/tmp/x.so\"}\n{}",
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("\"LD_PRELOAD\" is not a CNI_ variable"),
        "{body}"
    );
}

#[test]
fn a_daemon_refuses_a_socket_directory_others_may_write_to() {
    let node = common::Node::new();
    for (dir, owner, mode, says) in [
        ("open", 0, 0o777, "is writable by others (mode 777)"),
        ("group", 0, 0o770, "is writable by others (mode 770)"),
        ("theirs", NOBODY, 0o700, "is owned by uid 65534"),
    ] {
        let dir = node.path(dir);
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(owner), None).unwrap();
        open_to_others(&dir, mode);
        let said = refused(&dir.join("plumb.sock"));
        assert!(said.contains(says), "{said}");
        assert!(!dir.join("plumb.sock").exists());
    }
}

#[test]
fn a_stopping_daemon_leaves_a_socket_that_is_not_its_own() {
    let node = common::Node::new();
    let socket = node.path("run/plumb.sock");
    let daemon = Daemon::start(&socket);
    // Someone removed the daemon's socket and listens on the path now.
    fs::remove_file(&socket).unwrap();
    let _theirs = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (status, stderr) = daemon.stop();
    assert!(status.success(), "{stderr}");
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        "the stopping daemon removed a socket it had not bound"
    );
}

#[test]
fn a_daemon_replaces_a_stale_socket_even_while_another_holds_the_old_lock_beside_it() {
    let node = common::Node::new();
    let socket = node.path("run/plumb.sock");
    fs::create_dir(node.path("run")).unwrap();
    // A socket left by a daemon that is gone.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let stale = fs::metadata(&socket).unwrap().ino();
    // An older plumb daemon starting: it holds the `<socket>.lock` that plumb once took. Not a
    // reason to refuse any more (the last daemon to start takes the socket).
    let lock = fs::File::create(node.path("run/plumb.sock.lock")).unwrap();
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let daemon = Daemon::start(&socket);
    let said = daemon.wait_for("serving CNI calls on");
    assert!(
        said.contains(&format!(
            "replaced the stale socket {} (nothing listened on it)",
            socket.display()
        )),
        "{said}"
    );
    assert_ne!(fs::metadata(&socket).unwrap().ino(), stale);
    assert_eq!(
        fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(healthz(&socket).starts_with("ok:"));
    // Nothing left beside the socket but the old lock file: the name it was bound under is gone.
    let mut beside: Vec<_> = fs::read_dir(node.path("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    beside.sort();
    assert_eq!(beside, ["plumb.sock", "plumb.sock.lock"]);
    let (status, stderr) = daemon.stop();
    assert!(status.success(), "{stderr}");
    assert!(!socket.exists());
}

/// Whether the plugin's call went to a daemon (it did not run the call itself).
fn forwarded(out: &std::process::Output) -> bool {
    !String::from_utf8_lossy(&out.stderr).contains("running the call in this process")
}

#[test]
fn a_daemon_started_beside_another_takes_over_its_socket_and_the_old_one_drains_on_sigterm() {
    let (c, socket, mut old) = served(240);
    let first = c.pod("default", "first", json!({NETWORKS: "net-a"}));
    let second = c.pod("default", "second", json!({NETWORKS: "net-a"}));
    let first = ("default", "first", first.as_str());
    let second = ("default", "second", second.as_str());
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let add = c.call("ADD", &ns1, first, "o1");
    ok(&add);
    assert!(forwarded(&add));
    old.wait_for("ADD of pod default/first (container o1) done");
    assert_eq!(c.api.connections_accepted(), 1);

    // The upgrade's new daemon, started while the old one serves (maxSurge).
    let new = Daemon::start(&socket);
    let said = new.wait_for("serving CNI calls on");
    assert!(
        said.contains(&format!(
            "took over {} from the daemon that served on it",
            socket.display()
        )),
        "{said}"
    );
    old.wait_for(&format!(
        "{} now belongs to another daemon; taking no new calls, finishing the 0 running, \
         then idle until stopped",
        socket.display()
    ));

    // Calls go to the new daemon: its log has them, the old one's not, and it opened a
    // connection of its own to the API server.
    let add = c.call("ADD", &ns2, second, "t2");
    ok(&add);
    assert!(forwarded(&add));
    new.wait_for("ADD of pod default/second (container t2) done");
    assert_eq!(c.api.connections_accepted(), 2);
    let del = c.call("DEL", &ns1, first, "o1");
    ok(&del);
    assert!(forwarded(&del));
    new.wait_for("DEL of pod default/first (container o1) done");
    assert_eq!(ns1.links(), ["lo"]);
    assert!(!c.node.record("o1").exists());
    assert!(old.alive(), "the old daemon waits to be stopped");

    // The new pod ready, the old one is stopped: it exits, leaving the new daemon's socket.
    let (status, said) = old.stop();
    assert!(status.success(), "{said}");
    assert!(
        !said.contains("container t2") && !said.contains("DEL of"),
        "the old daemon ran no call after the take-over: {said}"
    );
    assert!(socket.exists());
    assert!(healthz(&socket).starts_with("ok:"));
    let del = c.call("DEL", &ns2, second, "t2");
    ok(&del);
    assert!(forwarded(&del));
    new.wait_for("DEL of pod default/second (container t2) done");
    c.assert_nothing_left(&ns2, "t2");
    assert!(!c.node.record("o1").exists());

    let (status, said) = new.stop();
    assert!(status.success(), "{said}");
    assert!(!said.contains("ADD of pod default/first"), "{said}");
    assert!(!socket.exists(), "the new daemon removes its socket");
}

#[test]
fn a_call_the_old_daemon_runs_when_another_takes_over_finishes_and_answers() {
    let (c, socket, old) = served(241);
    let uid = c.pod("default", "busy", json!({NETWORKS: "net-a"}));
    let pod = ("default", "busy", uid.as_str());
    let ns = Netns::new();
    // The status PATCH answers late; the new daemon takes over meanwhile.
    answer_late(&c, "PATCH", None, Duration::from_millis(2500));
    std::thread::scope(|s| {
        let add = s.spawn(|| c.call("ADD", &ns, pod, "b1"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !healthz(&socket).starts_with("ok: 1 calls running") {
            assert!(Instant::now() < deadline, "{}", healthz(&socket));
            std::thread::sleep(Duration::from_millis(20));
        }
        let new = Daemon::start(&socket);
        old.wait_for("now belongs to another daemon; taking no new calls, finishing the 1 running");
        let add = add.join().unwrap();
        let result = ok(&add);
        assert!(forwarded(&add));
        assert_eq!(result["ips"][0]["address"], "10.241.1.2/24");
        old.wait_for("ADD of pod default/busy (container b1) done");
        assert!(c.status_of("default", "busy").is_some(), "status written");
        let (status, said) = old.stop();
        assert!(status.success(), "{said}");
        let del = c.call("DEL", &ns, pod, "b1");
        ok(&del);
        assert!(forwarded(&del));
        drop(new);
    });
    c.assert_nothing_left(&ns, "b1");
}

#[test]
fn a_call_whose_plugin_was_killed_counts_as_running_until_it_ends() {
    let (c, socket, _daemon) = served(239);
    let uid = c.pod("default", "gone", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();
    // The ADD's status PATCH answers 2 s late; the runtime kills the plugin meanwhile.
    answer_late(&c, "PATCH", None, Duration::from_secs(2));
    let args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=gone;\
         K8S_POD_INFRA_CONTAINER_ID=g1;K8S_POD_UID={uid}"
    );
    let netns = ns.path().display().to_string();
    let mut shim = common::start(
        &CniCall {
            command: "ADD",
            container_id: "g1",
            netns: &netns,
            ifname: "eth0",
            args: &args,
            config: &c.config,
        },
        common::quiet,
    );
    std::thread::sleep(Duration::from_millis(700));
    shim.kill().unwrap();
    shim.wait().unwrap();
    assert!(
        healthz(&socket).starts_with("ok: 1 calls running"),
        "{}",
        healthz(&socket)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !healthz(&socket).starts_with("ok: 0 calls running") {
        assert!(Instant::now() < deadline, "{}", healthz(&socket));
        std::thread::sleep(Duration::from_millis(50));
    }
    // The call was finished, not cut: the DEL undoes all of it.
    assert!(c.status_of("default", "gone").is_some());
    ok(&c.call("DEL", &ns, ("default", "gone", uid.as_str()), "g1"));
    c.assert_nothing_left(&ns, "g1");
}

#[test]
fn a_daemon_too_busy_to_take_the_connection_fails_the_call_with_code_11() {
    let node = common::Node::new();
    let socket = node.path("plumb.sock");
    // A listener whose backlog (0) one connection fills, and that never accepts: as a daemon
    // swamped with calls looks to the next plugin.
    let _busy = common::daemon::Busy::on(&socket);
    let config = node.config(json!({"plumbDaemonSocket": socket}));
    let out = common::run(&common::CniCall {
        command: "ADD",
        container_id: "busy1",
        netns: "/var/run/netns/none",
        ifname: "eth0",
        args: "",
        config: &config,
    });
    let e = err(&out);
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("try again later"),
        "{e}"
    );
    assert!(!node.record("busy1").exists());
}

#[test]
fn plumb_run_as_its_own_delegate_through_the_daemon_fails_at_once_instead_of_waiting_for_itself() {
    // The daemon's call holds the container's lock while the delegate, plumb again, forwards
    // its call for the same container to the daemon: that call must not wait for the lock (it
    // would wait for ever), and DEL must undo the rest.
    testkit::netns::require_root();
    let node = common::Node::new();
    let socket = node.path("run/plumb.sock");
    let _daemon = Daemon::start(&socket);
    let config = common::plumb_as_its_own_delegate(&node, json!({"plumbDaemonSocket": socket}));
    common::add_fails_at_once_and_del_undoes_it(&node, &config, "d-nested");
    common::node_wide_calls_fail_at_once(&config);
    assert!(healthz(&socket).starts_with("ok: 0 calls running"));
}

#[test]
fn an_add_the_runtime_gave_up_on_while_it_waited_for_its_turn_is_not_run() {
    // The runtime killed the plugin while the daemon's ADD waited for the container's lock
    // (held here by another process); its DEL may run before that ADD gets the lock. Run after
    // it, the ADD would attach a sandbox nobody deletes: it must not run at all.
    testkit::netns::require_root();
    let node = common::Node::new();
    let socket = node.path("run/plumb.sock");
    let _daemon = Daemon::start(&socket);
    let bridge = testkit::netns::unique_name("ga");
    let _bridge = testkit::netns::Link::adopt(&bridge);
    let config = node.config(json!({
        "delegates": [node.bridge("net-a", &bridge, 41)],
        "plumbDaemonSocket": socket,
    }));
    let ns = Netns::new();
    fs::create_dir_all(node.state_dir()).unwrap();
    let held = common::hold_lock(&node.state_dir().join("w1.lock"));
    let netns = ns.path().display().to_string();
    let mut shim = common::start(
        &CniCall {
            command: "ADD",
            container_id: "w1",
            netns: &netns,
            ifname: "eth0",
            args: "",
            config: &config,
        },
        common::quiet,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !healthz(&socket).starts_with("ok: 1 calls running") {
        assert!(Instant::now() < deadline, "{}", healthz(&socket));
        std::thread::sleep(Duration::from_millis(20));
    }
    shim.kill().unwrap();
    shim.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !healthz(&socket).starts_with("ok: 0 calls running") {
        assert!(Instant::now() < deadline, "{}", healthz(&socket));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ns.links(), ["lo"], "the abandoned ADD ran");
    assert_eq!(node.all_allocations(), 0);
    assert!(!node.record("w1").exists());
}

#[test]
fn an_add_whose_shim_was_killed_at_any_point_is_undone_by_the_del_that_follows() {
    // Through the daemon the runtime's deadline kills the shim; the daemon finishes or stops
    // the call, and the DEL (which waits for it) leaves nothing.
    let (c, _socket, _daemon) = served(250);
    c.kill_at_any_point("ADD", |_, _| {});
}

#[test]
fn a_del_whose_shim_was_killed_at_any_point_is_finished_by_the_next_one() {
    let (c, _socket, _daemon) = served(251);
    c.kill_at_any_point("DEL", |c, (ns, pod, cid)| {
        ok(&c.call("ADD", ns, pod, cid));
    });
}

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
    // DESIGN.md "Paths": plumb's CNI configuration, written by the daemon once the default
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
    // Unauthorized once it expired (multus-reference.md §5.1). The daemon, in a pod, copies
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
    assert!(
        c.api
            .requests()
            .iter()
            .all(|r| r.bearer_token.as_deref() == Some(new_token) && r.status < 400),
        "{:?}",
        c.api
            .requests()
            .iter()
            .map(|r| (&r.path, r.status))
            .collect::<Vec<_>>()
    );
    c.assert_node_clean("after both pods");
}

/// A pod's service-account token as the kubelet mounts it since Kubernetes 1.30: a JWT whose
/// claims name the service account `kube-system/plumb` and the node `node` (the stand-in does
/// not read its signature, nor does plumb).
fn pod_token(node: &str) -> String {
    let claims = json!({
        "sub": "system:serviceaccount:kube-system:plumb",
        "kubernetes.io": {"namespace": "kube-system",
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
    c.api
        .set_service_account_uid("kube-system", "plumb", "sa-uid");
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
            "kube-system",
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
            "/api/v1/namespaces/kube-system/serviceaccounts/plumb/token"
        )
    );
    assert_eq!(asked[0].bearer_token.as_deref(), Some(pod_token.as_str()));
    let rbac = plumb::objects::read_file(
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
            (&json!("plumb-node-token"), &json!("kube-system"))
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
        json!([{"kind": "ServiceAccount", "name": "plumb", "namespace": "kube-system"}])
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
            .path("/api/v1/namespaces/kube-system/serviceaccounts/plumb/token"),
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
            "node-166 (serviceaccount kube-system/plumb, used for {m} min)"
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
                "create a token of serviceaccount kube-system/plumb bound to node node-166: \
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
            .path("/api/v1/namespaces/kube-system/serviceaccounts/plumb/token"),
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
    ok(&common::run_node_wide("STATUS", &{
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
