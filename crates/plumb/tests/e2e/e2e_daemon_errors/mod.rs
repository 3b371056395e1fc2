//! What an operator sees when a call fails through `plumb daemon`, beside what thin mode's
//! audit (e2e_operator_errors.rs) shows for the same failure: the same CNI error on the
//! runtime's stdout, the same events on the pod, the log line in the daemon's log (its stderr,
//! with `logToStderr`) and not the runtime's, and nothing left on the node after the runtime's
//! DEL. Then failures of the daemon itself: killed, its socket gone, its stderr closed. The
//! built binary, the reference plugins in real network namespaces and the API stand-in. Needs
//! root.

use std::fs;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::cluster::{Cluster, NETWORKS, bridge_nad, nad, pod_args};
use crate::common::daemon::Daemon;
use crate::common::{CniCall, err, ok, wait_for_file};
use serde_json::{Value, json};
use testkit::kube_api::{Fault, FaultKind, Resource};
use testkit::netns::Netns;

/// A cluster whose plumb logs failures only (`logLevel: error`, to stderr), as an operator
/// would first set it, a daemon serving its socket, and the configuration naming it.
fn served(net: u8) -> (Cluster, PathBuf, Daemon) {
    let c = Cluster::new(net).with("logLevel", json!("error"));
    let socket = c.node.path("run/plumb.sock");
    let daemon = Daemon::start(&socket);
    let c = c.with("plumbDaemonSocket", json!(socket));
    (c, socket, daemon)
}

/// `config` without the daemon's socket: the call runs in the plugin (thin mode).
fn thin(config: &Value) -> Value {
    let mut thin = config.clone();
    thin.as_object_mut().unwrap().remove("plumbDaemonSocket");
    thin
}

/// The lines of `log` at `[error]`, without their time.
fn error_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split_once(" [error] ").map(|(_, m)| m.to_string()))
        .collect()
}

/// One call of the runtime with `config`.
fn call(config: &Value, command: &str, ns: &Netns, pod: (&str, &str, &str), cid: &str) -> Output {
    let netns = ns.path().display().to_string();
    let args = pod_args(pod, cid);
    crate::common::run(&CniCall {
        command,
        container_id: cid,
        netns: &netns,
        ifname: "eth0",
        args: &args,
        config,
    })
}

/// What the operator sees of one failing call, in one mode.
#[derive(Debug, PartialEq)]
struct Seen {
    /// The CNI error on the runtime's stdout.
    error: Value,
    /// plumb's `[error]` lines, wherever they went.
    log: Vec<String>,
    /// The (reason, message) of the events the call posted.
    events: Vec<(String, String)>,
}

/// `s` with what differs between two sandboxes of one test by design blanked: the netns path
/// and the address host-local gave (`10.<net>.<n>.<host>`, host blanked).
fn same_but_sandbox(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("/var/run/netns/") {
        out.push_str(&rest[..i]);
        out.push_str("NETNS");
        rest = &rest[i..];
        let end = rest.find([' ', ':', ')', '"']).unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    // Addresses: a dotted quad's last number.
    let mut blanked = String::new();
    for word in out.split_inclusive([' ', '(', ')']) {
        let (addr, tail) = word.split_at(word.find(['/', ' ', ')']).unwrap_or(word.len()));
        if addr.split('.').count() == 4 && addr.split('.').all(|p| p.parse::<u8>().is_ok()) {
            let (net, _) = addr.rsplit_once('.').unwrap();
            blanked.push_str(&format!("{net}.HOST{tail}"));
        } else {
            blanked.push_str(word);
        }
    }
    blanked
}

impl Seen {
    fn comparable(&self) -> String {
        same_but_sandbox(&format!(
            "{:?} {:?} {:?}",
            self.error, self.log, self.events
        ))
    }
}

/// ADD of sandbox `cid` of `pod` with `config`, in thin mode, then through the daemon `d`
/// (each followed by the runtime's DEL, in the same mode): asserts that the operator sees the
/// same error, log line and events each time, that through the daemon the line is in the
/// daemon's log and not on the runtime's stderr, that each DEL succeeds and leaves nothing on
/// the node; returns what was seen.
fn same_both_ways(
    c: &Cluster,
    d: &Daemon,
    config: &Value,
    pod: (&str, &str, &str),
    cid: &str,
) -> Seen {
    let mut seen: Vec<Seen> = Vec::new();
    for config in [thin(config), config.clone()] {
        let through = config.get("plumbDaemonSocket").is_some();
        let ns = Netns::new();
        let events_before = c.events_for(pod.0, pod.1).len();
        let logged_before = d.said().len();
        let out = call(&config, "ADD", &ns, pod, cid);
        let error = err(&out);
        let runtime_log = String::from_utf8_lossy(&out.stderr).into_owned();
        let log = if through {
            assert_eq!(
                error_lines(&runtime_log),
                Vec::<String>::new(),
                "{cid}: through the daemon, the call's lines are the daemon's"
            );
            // Written before the answer; read from the daemon's pipe a moment later.
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                let lines = error_lines(&d.said()[logged_before..]);
                if !lines.is_empty() || Instant::now() > deadline {
                    break lines;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            error_lines(&runtime_log)
        };
        // Through the daemon, events are sent after the answer: as many as thin mode's, which
        // ran first, are waited for.
        if let [thin] = &seen[..] {
            let want = events_before + thin.events.len();
            let deadline = Instant::now() + Duration::from_secs(10);
            while c.events_for(pod.0, pod.1).len() < want && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let events = c.events_for(pod.0, pod.1)[events_before..]
            .iter()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap().to_string(),
                    e["message"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        ok(&call(&config, "DEL", &ns, pod, cid));
        assert_eq!(ns.links(), ["lo"], "{cid} (through the daemon: {through})");
        c.assert_node_clean(&format!("{cid}: after DEL (through the daemon: {through})"));
        seen.push(Seen { error, log, events });
    }
    let (daemon, thin) = (seen.pop().unwrap(), seen.pop().unwrap());
    assert_eq!(thin.comparable(), daemon.comparable(), "{cid}");
    // One line, holding the message the runtime got.
    let msg = thin.error["msg"].as_str().unwrap();
    assert_eq!(thin.log.len(), 1, "{cid}: {:?}", thin.log);
    assert!(
        thin.log[0].starts_with(&format!("ADD: {msg}")),
        "{cid}: {:?}",
        thin.log
    );
    thin
}

#[test]
fn a_call_refused_before_any_delegate_runs_reads_the_same_through_the_daemon() {
    // No delegate runs here (every plugin is looked up before any runs): 196 is shared with
    // the test below, whose delegates use its subnets (the bridges' gateway addresses).
    let (c, _socket, mut d) = served(196);
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "noplugin",
            json!({"cniVersion": "1.0.0", "type": "nosuchplugin"}),
        ),
    );
    let mut bad = nad("default", "badjson", json!({}));
    bad["spec"]["config"] = json!("{\"cniVersion\": ");
    c.api.put(Resource::NetworkAttachmentDefinitions, bad);
    let isolated = {
        let mut config = c.config.clone();
        config["namespaceIsolation"] = json!(true);
        config["globalNamespaces"] = json!("kube-system");
        config
    };
    for (name, annotation, config, code, reason) in [
        ("nonad", "missing-nad", &c.config, 7, Some("NoNetworkFound")),
        (
            "isolated",
            "other-ns/net-b",
            &isolated,
            7,
            Some("NoNetworkFound"),
        ),
        (
            "badann",
            "[{\"name\": \"net-a\", \"mac\": \"zz\"}]",
            &c.config,
            7,
            Some("NoNetworkFound"),
        ),
        ("badnad", "badjson", &c.config, 7, Some("NoNetworkFound")),
        ("noplugin", "noplugin", &c.config, 7, Some("AttachFailed")),
    ] {
        let uid = c.pod("default", name, json!({NETWORKS: annotation}));
        let seen = same_both_ways(&c, &d, config, ("default", name, &uid), &format!("c{name}"));
        assert_eq!(seen.error["code"], code, "{name}: {:?}", seen.error);
        assert_eq!(
            seen.events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            Vec::from_iter(reason),
            "{name}"
        );
    }

    let uid = c.pod("default", "api", json!({NETWORKS: "net-a"}));
    // The API server refusing the token, refusing by RBAC.
    let pod = ("default", "api", uid.as_str());
    let token = fs::read_to_string(&c.token_file).unwrap();
    fs::write(&c.token_file, "not-a-token").unwrap();
    let seen = same_both_ways(&c, &d, &c.config, pod, "capi");
    assert_eq!(seen.error["code"], 5);
    fs::write(&c.token_file, token).unwrap();
    c.api
        .add_fault(Fault::new(FaultKind::Status(403, "Forbidden".into())).method("GET"));
    let seen = same_both_ways(&c, &d, &c.config, pod, "capi");
    assert_eq!(seen.error["code"], 5);
    assert!(d.alive());
}

#[test]
fn a_call_failing_part_way_or_for_its_pod_reads_the_same_through_the_daemon() {
    let (c, _socket, _d) = served(184);
    // net-a attached, then the third network's bridge cannot be made: net-a is rolled back.
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "badbridge",
            json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": "a-name-too-long-for-a-link",
                   "ipam": {"type": "host-local", "subnet": "10.184.9.0/24",
                            "dataDir": c.node.ipam_dir()}}),
        ),
    );
    let uid = c.pod("default", "midway", json!({NETWORKS: "net-a,badbridge"}));
    let seen = same_both_ways(&c, &_d, &c.config, ("default", "midway", &uid), "cmid");
    assert_eq!(seen.error["code"], 999, "{:?}", seen.error);
    assert!(
        seen.error["msg"]
            .as_str()
            .unwrap()
            .contains("attachment 3 of 3 (network default/badbridge, interface net2)"),
        "{:?}",
        seen.error
    );
    assert_eq!(seen.events.len(), 1);
    assert_eq!(seen.events[0].0, "AttachFailed");

    // Every delegate succeeds, the default-route change fails: rolled back too.
    let uid = c.pod(
        "default",
        "gw6",
        json!({NETWORKS: json!([{"name": "net-a", "default-route": ["fd00::1"]}]).to_string()}),
    );
    let seen = same_both_ways(&c, &_d, &c.config, ("default", "gw6", &uid), "cgw6");
    assert_eq!(seen.error["code"], 7, "{:?}", seen.error);
    assert!(
        seen.log[0].contains("is an IPv6 gateway, and network default/net-a gave net1 no IPv6"),
        "{:?}",
        seen.log
    );

    // The pod: missing, recreated (another UID). No event: plumb has no pod to post it to.
    for pod in [("default", "ghost", "u1"), ("default", "gw6", "old-uid")] {
        let seen = same_both_ways(&c, &_d, &c.config, pod, "cpod");
        assert_eq!(seen.error["code"], 3, "{:?}", seen.error);
        assert_eq!(seen.events, []);
    }
}

#[test]
fn an_api_server_down_reads_the_same_through_the_daemon() {
    // As above, no delegate runs. Each ADD, and its DEL (no record: it would plan from the
    // API), retries for a few seconds.
    let (c, _socket, _d) = served(183);
    let uid = c.pod("default", "down", json!({NETWORKS: "net-a"}));
    c.api.set_down(true);
    let seen = same_both_ways(&c, &_d, &c.config, ("default", "down", &uid), "cdown");
    assert_eq!(seen.error["code"], 11);
    assert!(seen.log[0].contains("Connection refused"), "{:?}", seen.log);
}

/// A bin directory holding `slowbridge`: the reference bridge plugin, started `secs` late on
/// `command` (delegates are looked up in plumb's `binDir` first, then in the runtime's
/// CNI_PATH, where the reference plugins are). On `command` it makes the file
/// [`SLOW_STARTED`] in that directory before its wait, and [`SLOW_ENDED`] once bridge is done,
/// so that a test acts while it runs, and knows when it has ended, whatever the machine's load.
fn slow_bridge(c: &Cluster, command: &str, secs: f32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = c.node.path("bin");
    fs::create_dir_all(&bin).unwrap();
    let script = bin.join("slowbridge");
    let (started, ended) = (bin.join(SLOW_STARTED), bin.join(SLOW_ENDED));
    fs::write(
        &script,
        format!(
            "#!/bin/sh\n[ \"$CNI_COMMAND\" = {command} ] || exec {plugins}/bridge\n\
             touch '{started}'\nsleep {secs}\n{plugins}/bridge\nrc=$?\ntouch '{ended}'\n\
             exit $rc\n",
            plugins = crate::common::PLUGINS,
            started = started.display(),
            ended = ended.display(),
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Made by [`slow_bridge`] in its directory when its slow command begins, and when it ends.
const SLOW_STARTED: &str = "slowbridge.started";
const SLOW_ENDED: &str = "slowbridge.ended";

/// `c` with the NAD `default/<name>` of [`slow_bridge`] on `command` (on net-a's bridge, its
/// addresses from `subnet`), plumb's `binDir` holding it.
fn with_slow_bridge(c: Cluster, name: &str, command: &str, secs: f32, subnet: &str) -> Cluster {
    let bin = slow_bridge(&c, command, secs);
    let c = c.with("binDir", json!(bin));
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            name,
            json!({"cniVersion": "1.0.0", "type": "slowbridge", "bridge": c._links[1].name(),
                   "ipam": {"type": "host-local", "subnet": subnet,
                            "dataDir": c.node.ipam_dir()}}),
        ),
    );
    c
}

/// The error of a call the daemon was killed during: code 11, named for its pod and container
/// like every error of a call, then the socket; the runtime's stderr (where the plugin logs,
/// the daemon being gone) has it as one error line. Its message.
fn cut(out: &Output, command: &str, pod: &str, cid: &str, socket: &std::path::Path) -> String {
    let e = err(out);
    assert_eq!(e["code"], 11, "{e}");
    let msg = e["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(&format!(
            "pod {pod} (container {cid}): plumb daemon at {}: ",
            socket.display()
        )) && msg.contains("the call may have been done in part"),
        "{msg}"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        error_lines(&said),
        [format!("{command}: {msg}")],
        "the plugin logs what the daemon could not: {said}"
    );
    msg
}

#[test]
fn a_daemon_killed_during_a_call_fails_it_naming_the_pod_and_the_runtimes_retry_finishes_it() {
    let (c, socket, d) = served(195);
    let c = with_slow_bridge(c, "slowdel", "DEL", 1.5, "10.195.9.0/24");
    let uid = c.pod("default", "cut", json!({NETWORKS: "slowdel"}));
    let pod = ("default", "cut", uid.as_str());

    // Killed during the ADD's status PATCH, which answers late: every delegate has run.
    let ns = Netns::new();
    c.api.add_fault(
        Fault::new(FaultKind::Latency(Duration::from_secs(3)))
            .method("PATCH")
            .times(1),
    );
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        drop(d);
    });
    let out = call(&c.config, "ADD", &ns, pod, "k1");
    killer.join().unwrap();
    cut(&out, "ADD", "default/cut", "k1", &socket);
    // The runtime's DEL, no daemon listening: run in the plugin, it undoes it all.
    ok(&call(&c.config, "DEL", &ns, pod, "k1"));
    assert_eq!(ns.links(), ["lo"]);
    c.assert_node_clean("after the DEL of an ADD the daemon was killed during");

    // Killed during a DEL, once its slow delegate has begun (1.5 s); the runtime retries it
    // through a daemon started again.
    let d = Daemon::start(&socket);
    ok(&call(&c.config, "ADD", &ns, pod, "k2"));
    let started = c.node.path("bin").join(SLOW_STARTED);
    fs::remove_file(&started).unwrap(); // made by the DEL of k1
    let killer = std::thread::spawn(move || {
        wait_for_file(&started);
        drop(d);
    });
    let out = call(&c.config, "DEL", &ns, pod, "k2");
    killer.join().unwrap();
    cut(&out, "DEL", "default/cut", "k2", &socket);
    let _d = Daemon::start(&socket);
    ok(&call(&c.config, "DEL", &ns, pod, "k2"));
    assert_eq!(ns.links(), ["lo"]);
    c.assert_node_clean("after the DEL retried");
}

#[test]
fn a_daemon_killed_while_a_delegate_runs_leaves_the_del_to_wait_for_that_delegate_and_undo_it() {
    // The daemon alone killed (SIGKILL, the OOM killer) while a delegate's ADD runs: that
    // delegate goes on. The runtime's DEL, run at once in the plugin, used to find the lock free,
    // undo what the record named and remove it; the delegate then made its interface and took
    // its address, left to nobody (reproduced by the daemon audit). The delegate now holds its
    // call's lock: the DEL waits for it to end, then undoes it too.
    let (c, socket, d) = served(181);
    let c = with_slow_bridge(c, "slowadd", "ADD", 2.0, "10.181.9.0/24");
    let uid = c.pod("default", "orphan", json!({NETWORKS: "slowadd"}));
    let pod = ("default", "orphan", uid.as_str());
    let ns = Netns::new();
    // Killed once the slow delegate has begun its 2 s (the cluster network's ADD comes first).
    let bin = c.node.path("bin");
    let started = bin.join(SLOW_STARTED);
    let killer = std::thread::spawn(move || {
        wait_for_file(&started);
        drop(d);
    });
    let out = call(&c.config, "ADD", &ns, pod, "o1");
    killer.join().unwrap();
    cut(&out, "ADD", "default/orphan", "o1", &socket);
    let del = call(&c.config, "DEL", &ns, pod, "o1");
    ok(&del);
    // Nothing comes later: the delegate has ended (the DEL waited for it, or, were it not held
    // back, it ends now), and what it made is looked for after that.
    wait_for_file(&bin.join(SLOW_ENDED));
    assert_eq!(
        ns.links(),
        ["lo"],
        "the orphaned delegate's interface is left"
    );
    c.assert_node_clean("after the DEL of an ADD whose daemon was killed mid-delegate");
}

#[test]
fn a_call_still_running_in_the_daemon_after_10_s_is_not_said_to_be_a_stuck_daemon() {
    // A delegate that takes its time (a DHCP server slow to answer, an IPAM with a remote
    // store), or a call waiting for its container's turn behind such a one: the daemon runs
    // it and answers in the end. The line said the daemon was 'alive but not answering: stuck,
    // or too busy', and troubleshooting.md said to restart it, which cuts the call.
    let (c, socket, d) = served(179);
    let c = with_slow_bridge(c, "slowadd", "ADD", 11.0, "10.179.9.0/24");
    let uid = c.pod("default", "slow", json!({NETWORKS: "slowadd"}));
    let pod = ("default", "slow", uid.as_str());
    let ns = Netns::new();
    let out = call(&c.config, "ADD", &ns, pod, "s1");
    ok(&out);
    let pid = d.pid();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        error_lines(&said),
        [format!(
            "ADD: pod default/slow (container s1): plumb daemon at {} (process {pid}, running: \
             the call may be slow (a delegate, the API server, or its container's turn behind \
             another call), or the daemon stuck) has not answered the call in 10 s; still \
             waiting",
            socket.display()
        )],
        "{said}"
    );
    ok(&call(&c.config, "DEL", &ns, pod, "s1"));
    c.assert_node_clean("after the DEL");
}

/// `plumb daemon` on `socket` whose stderr is a pipe nobody reads any more (a log collector
/// that went away), once it listens. Killed when dropped if still running.
struct Deaf(std::process::Child);

impl Deaf {
    fn start(socket: &std::path::Path) -> Deaf {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_plumb"))
            .args(["daemon", "--socket"])
            .arg(socket)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(Instant::now() < deadline, "plumb daemon did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(child.stderr.take());
        Deaf(child)
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }

    /// SIGTERM; its exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.0.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        self.0.wait().unwrap()
    }
}

impl Drop for Deaf {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_daemon_whose_stderr_is_gone_still_drains_its_calls_and_waits_when_taken_over() {
    let node = crate::common::Node::new();
    let socket = node.path("run/plumb.sock");
    // A delegate that takes a second, so that SIGTERM comes while the daemon runs its call;
    // it writes who started it to `started` first.
    let bin = node.path("bin");
    fs::create_dir_all(&bin).unwrap();
    let started = bin.join("started");
    fs::write(
        bin.join("slow"),
        format!(
            "#!/bin/sh\ncat >/dev/null\necho $PPID > '{}.tmp' && mv '{0}.tmp' '{0}'\nsleep 1\n\
             [ \"$CNI_COMMAND\" = ADD ] && echo '{{\"cniVersion\":\"1.0.0\",\"ips\":[]}}'\n\
             exit 0\n",
            started.display()
        ),
    )
    .unwrap();
    fs::set_permissions(
        bin.join("slow"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = node.config(json!({
        "binDir": bin, "plumbDaemonSocket": socket,
        "delegates": [{"cniVersion": "1.0.0", "name": "slow", "type": "slow"}],
    }));
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let add = CniCall {
        command: "ADD",
        container_id: "deaf1",
        netns: &netns,
        ifname: "eth0",
        args: "",
        config: &config,
    };

    // Stopped while it runs a call: it answers it, exits 0 and removes its socket.
    let daemon = Deaf::start(&socket);
    let shim = crate::common::start(&add, |_| {});
    wait_for_file(&started);
    assert_eq!(
        fs::read_to_string(&started).unwrap().trim(),
        daemon.0.id().to_string(),
        "the call was not run by the daemon"
    );
    let status = daemon.stop();
    let out = shim.wait_with_output().unwrap();
    ok(&out);
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the stopped daemon left its socket");

    // Taken over: it waits, idle, for SIGTERM (exited, its restart would take the socket back).
    let mut old = Deaf::start(&socket);
    let _new = Daemon::start(&socket);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(old.alive(), "the daemon taken over exited");
    assert!(old.stop().success());
    ok(&crate::common::run(&CniCall {
        command: "DEL",
        ..add
    }));
}

#[test]
fn a_daemon_whose_socket_was_replaced_by_a_file_says_so_and_calls_run_in_the_plugin() {
    let node = crate::common::Node::new();
    let socket = node.path("run/plumb.sock");
    let daemon = Daemon::start(&socket);
    // An operator's (or a tool's) mistake: a file where the socket was.
    fs::remove_file(&socket).unwrap();
    fs::write(&socket, "").unwrap();
    let said = daemon.wait_for("taking no new calls");
    assert!(
        said.contains(&format!(
            "{} was replaced by a file, not a socket: calls run in the plugin itself, and a \
             daemon started refuses the path until it is removed; taking no new calls",
            socket.display()
        )) && !said.contains("another daemon"),
        "{said}"
    );
    // A call runs in the plugin (it says so at verbose), and fails there: its one network's
    // plugin is not installed.
    let config = node.config(json!({
        "plumbDaemonSocket": socket, "logLevel": "verbose",
        "delegates": [{"cniVersion": "1.0.0", "name": "x", "type": "nosuchplugin"}],
    }));
    let ns = Netns::new();
    let out = crate::common::run(&CniCall {
        command: "ADD",
        container_id: "file1",
        netns: &ns.path().display().to_string(),
        ifname: "eth0",
        args: "",
        config: &config,
    });
    assert!(err(&out)["msg"].as_str().unwrap().contains("nosuchplugin"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("running the call in this process"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, said) = daemon.stop();
    assert!(status.success(), "{said}");
    assert!(
        fs::symlink_metadata(&socket).unwrap().is_file(),
        "the file is left"
    );
}

#[test]
fn a_del_that_fails_reads_the_same_through_the_daemon_and_the_documented_remedy_finishes_it() {
    // troubleshooting.md, "A delegate's DEL fails": macvlan's master missing fails its ADD and
    // its DEL ("Link not found"); an interface of that name made for a moment lets the next
    // DEL succeed. Through the daemon as in thin mode.
    let (c, _socket, d) = served(182);
    // Subnets of 195 of their own (7, 8): the test above runs its delegates beside this one.
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        bridge_nad(
            &c.node,
            ("kube-system", "default-net"),
            c._links[0].name(),
            "10.182.7.0/24".into(),
            true,
        ),
    );
    let master = testkit::netns::unique_name("dm");
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "nomaster",
            json!({"cniVersion": "1.0.0", "type": "macvlan", "master": master, "mode": "bridge",
                   "ipam": {"type": "host-local", "subnet": "10.182.8.0/24",
                            "dataDir": c.node.ipam_dir()}}),
        ),
    );
    let uid = c.pod("default", "mv", json!({NETWORKS: "nomaster"}));
    let pod = ("default", "mv", uid.as_str());
    let mut seen = Vec::new();
    for config in [thin(&c.config), c.config.clone()] {
        let through = config.get("plumbDaemonSocket").is_some();
        let ns = Netns::new();
        let mut one = Vec::new();
        for command in ["ADD", "DEL"] {
            let logged_before = d.said().len();
            let out = call(&config, command, &ns, pod, "cmv");
            let e = err(&out);
            let runtime = error_lines(&String::from_utf8_lossy(&out.stderr));
            let log = if through {
                assert_eq!(runtime, Vec::<String>::new(), "{command}");
                let deadline = Instant::now() + Duration::from_secs(2);
                loop {
                    let lines = error_lines(&d.said()[logged_before..]);
                    if !lines.is_empty() || Instant::now() > deadline {
                        break lines;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            } else {
                runtime
            };
            assert!(
                e["msg"].as_str().unwrap().ends_with("Link not found"),
                "{command} (through the daemon: {through}): {e}"
            );
            one.push(same_but_sandbox(&format!("{e} {log:?}")));
        }
        // The record and the lock file stay for the next DEL.
        assert_eq!(c.node.left_to_undo("cmv"), ["default/nomaster"]);
        assert!(c.node.state_dir().join("cmv.lock").exists());
        let _master = testkit::netns::Link::bridge(&master);
        ok(&call(&config, "DEL", &ns, pod, "cmv"));
        assert_eq!(ns.links(), ["lo"]);
        c.assert_node_clean(&format!(
            "after the DEL retried (through the daemon: {through})"
        ));
        seen.push(one);
    }
    assert_eq!(seen[0], seen[1]);
}

#[test]
fn a_status_the_daemon_cannot_answer_fails_with_code_50() {
    // Every STATUS failure is 50 (CNI spec 1.1 §STATUS; troubleshooting.md, "Node NotReady"),
    // the daemon too busy to take it (code 11 for an ADD) included. A listener whose backlog
    // (0) one connection fills, and that never accepts, is such a daemon.
    let node = crate::common::Node::new();
    let socket = node.path("plumb.sock");
    let _busy = crate::common::daemon::Busy::on(&socket);
    let config = node.config(json!({
        "cniVersion": "1.1.0", "plumbDaemonSocket": socket, "logLevel": "error",
        "delegates": [{"cniVersion": "1.1.0", "name": "x", "type": "bridge"}],
    }));
    let out = crate::common::run_node_wide("STATUS", &config);
    let e = err(&out);
    assert_eq!(e["code"], 50, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("plumb daemon at {}: too busy", socket.display())),
        "{msg}"
    );
    // Not logged, as in thin mode: STATUS comes every few seconds.
    assert_eq!(
        error_lines(&String::from_utf8_lossy(&out.stderr)),
        Vec::<String>::new()
    );
}

mod unacknowledged;
