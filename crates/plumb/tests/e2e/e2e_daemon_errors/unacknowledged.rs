//! A daemon that does not acknowledge a call (stopped, its container paused, wedged) never
//! holds the node: after `ACK_WAIT` the plugin runs the call itself, saying why in plumb's log
//! with the daemon's state, and the daemon, once resumed, never runs it. A call it did
//! acknowledge stays its own; and the plugin's wait for a container that daemon holds is bounded.

use std::path::Path;

use crate::common::daemon::forwarded;

use super::*;

/// An ADD of `pod` (container `cid`) in `ns`, with the daemon not acknowledging it: it runs in
/// the plugin, and succeeds. What the plugin says at `[error]`.
fn run_instead(c: &Cluster, ns: &Netns, pod: (&str, &str, &str), cid: &str) -> Vec<String> {
    let out = call(&c.config, "ADD", ns, pod, cid);
    ok(&out);
    error_lines(&String::from_utf8_lossy(&out.stderr))
}

/// The line the plugin says when the daemon at `socket` (`state` its process's description)
/// did not acknowledge the ADD of `pod`'s container `cid`.
fn not_acknowledged(pod: &str, cid: &str, socket: &Path, state: &str) -> String {
    format!(
        "ADD: pod {pod} (container {cid}): plumb daemon at {} ({state}) did not acknowledge the \
         call within 5 s (stopped, frozen or wedged): running the call in this process",
        socket.display()
    )
}

/// Sends `sig` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_call_a_stopped_daemon_does_not_acknowledge_runs_in_the_plugin_once() {
    // A daemon stopped (SIGSTOP, a debugger) or stuck took every call into its socket's queue
    // and never answered: every pod of the node waited until the runtime gave up.
    let (c, socket, d) = served(180);
    let uid = c.pod("default", "held", json!({NETWORKS: "net-a"}));
    let pod = ("default", "held", uid.as_str());
    let ns = Netns::new();
    let pid = d.pid();
    signal(pid, "-STOP");
    let said = run_instead(&c, &ns, pod, "h1");
    assert_eq!(
        said,
        [not_acknowledged(
            "default/held",
            "h1",
            &socket,
            &format!(
                "process {pid}, stopped: by SIGSTOP or a debugger; `kill -CONT {pid}` resumes it"
            )
        )],
    );
    assert_eq!(ns.links().len(), 3, "{:?}", ns.links());
    // Resumed, the daemon reads the call it never acknowledged in time and does not run it:
    // the DEL it now serves undoes the one ADD, and nothing is left.
    signal(pid, "-CONT");
    let del = call(&c.config, "DEL", &ns, pod, "h1");
    ok(&del);
    assert!(forwarded(&del), "the DEL ran in the plugin");
    c.assert_node_clean("after the DEL");
    assert_eq!(ns.links(), ["lo"]);
}

#[test]
fn a_call_acknowledged_before_the_bound_runs_in_the_daemon_only() {
    // A recording fake delegate must run exactly once whichever side of the bound the daemon
    // wakes up on: here before it, so the daemon runs the call, and the plugin does not.
    let node = crate::common::Node::new();
    let bin = node.path("bin");
    let fake = testkit::fake_plugin::FakePlugin::install(&bin, "fake-once");
    let socket = node.path("plumb.sock");
    let d = crate::common::daemon::Daemon::start(&socket);
    let config = node.config(json!({
        "plumbDaemonSocket": socket, "binDir": bin, "logLevel": "verbose",
        "delegates": [{"cniVersion": "1.0.0", "name": "net-a", "type": "fake-once"}],
    }));
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    signal(d.pid(), "-STOP");
    let plugin = crate::common::start(
        &CniCall {
            command: "ADD",
            container_id: "w1",
            netns: &netns,
            ifname: "eth0",
            args: "",
            config: &config,
        },
        |_| {},
    );
    // The plugin's connection waits in the stopped daemon's queue (ss: its listener's Recv-Q).
    let deadline = Instant::now() + Duration::from_secs(4);
    while queued(&socket) == 0 {
        assert!(Instant::now() < deadline, "the plugin never connected");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(d.pid(), "-CONT");
    let out = plugin.wait_with_output().unwrap();
    ok(&out);
    assert!(forwarded(&out), "the ADD ran in the plugin");
    assert_eq!(fake.calls_of("ADD").len(), 1);
}

/// How many connections wait in the queue of the listener at `socket` (`ss -xl`'s Recv-Q). The
/// daemon's listener is bound to a name beside `socket` (`<socket>.<pid>.new`) and renamed onto
/// it, and `ss` shows the name it was bound to.
fn queued(socket: &Path) -> u32 {
    let out = std::process::Command::new("ss")
        .args(["-xlHn"])
        .output()
        .unwrap();
    let bound = socket.display().to_string();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.get(4).is_some_and(|name| name.starts_with(&bound)))
        .filter_map(|f| f.get(2)?.parse::<u32>().ok())
        .sum()
}

#[test]
fn a_call_run_instead_of_a_stopped_daemon_waits_for_the_container_a_bounded_time() {
    // The daemon was running an ADD for the container (its delegate still running, holding the
    // container's turn) when it was stopped: the DEL the plugin runs instead waits for the turn
    // 15 s, then says why, code 11; the kubelet tries again.
    let (c, _socket, d) = served(181);
    let c = with_slow_bridge(c, "slowadd", "ADD", 40.0, "10.181.9.0/24");
    let uid = c.pod("default", "slow", json!({NETWORKS: "slowadd"}));
    let pod = ("default", "slow", uid.as_str());
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let args = pod_args(pod, "b1");
    let add = crate::common::start(
        &CniCall {
            command: "ADD",
            container_id: "b1",
            netns: &netns,
            ifname: "eth0",
            args: &args,
            config: &c.config,
        },
        |_| {},
    );
    wait_for_file(&c.node.path("bin").join(SLOW_STARTED));
    signal(d.pid(), "-STOP");
    let started = Instant::now();
    let del = call(&c.config, "DEL", &ns, pod, "b1");
    let e = err(&del);
    assert_eq!(e["code"], 11, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("another call for it has been running for over 15 s")
            && msg.contains("a plumb daemon that did not take this call may be running it"),
        "{msg}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    signal(d.pid(), "-CONT");
    ok(&add.wait_with_output().unwrap());
    ok(&call(&c.config, "DEL", &ns, pod, "b1"));
    c.assert_node_clean("after the DEL");
}

/// A cgroup of cgroup v2 holding process `pid`, made for a test at the unified hierarchy's
/// root; when dropped, thawed, every process in it moved back to the cgroup `pid` came from,
/// and removed.
struct OwnCgroup {
    /// The cgroup `pid` was in.
    home: PathBuf,
    dir: PathBuf,
}

impl OwnCgroup {
    fn holding(pid: u32) -> OwnCgroup {
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let root = mounts
            .lines()
            .find_map(|l| {
                let (before, after) = l.split_once(" - ")?;
                let mountpoint = before.split(' ').nth(4)?;
                after
                    .starts_with("cgroup2 ")
                    .then(|| PathBuf::from(mountpoint))
            })
            .expect("cgroup v2 is mounted");
        let own = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let home = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(|p| root.join(p.trim_start_matches('/')))
            .expect("a cgroup v2 line");
        let dir = root.join(format!("plumb-e2e-{}-{pid}", std::process::id()));
        fs::create_dir(&dir).unwrap();
        // The guard first: a failure below still removes the cgroup.
        let cgroup = OwnCgroup { home, dir };
        fs::write(cgroup.dir.join("cgroup.procs"), pid.to_string()).unwrap();
        cgroup
    }

    /// Freezes (`1`) or thaws (`0`) the cgroup and waits until the kernel says it is done.
    fn freeze(&self, value: &str) {
        fs::write(self.dir.join("cgroup.freeze"), value).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let done = format!("frozen {value}");
        while !fs::read_to_string(self.dir.join("cgroup.events"))
            .unwrap()
            .lines()
            .any(|l| l == done)
        {
            assert!(Instant::now() < deadline, "never {done}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("cgroup.freeze"), "0");
        // The daemon, and any delegate it has running.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = fs::write(self.home.join("cgroup.procs"), pid);
            }
            if fs::remove_dir(&self.dir).is_ok() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_call_a_frozen_daemon_does_not_acknowledge_names_the_freezer_that_holds_it() {
    // A daemon whose container is paused (`ctr task pause`: its cgroup's freezer) sleeps, to
    // /proc: the line names the freezer's file and how to thaw it, not a stuck daemon.
    let (c, socket, d) = served(175);
    let uid = c.pod("default", "held", json!({NETWORKS: "net-a"}));
    let pod = ("default", "held", uid.as_str());
    let ns = Netns::new();
    let cgroup = OwnCgroup::holding(d.pid());
    cgroup.freeze("1");
    let said = run_instead(&c, &ns, pod, "f1");
    let pid = d.pid();
    assert_eq!(
        said,
        [not_acknowledged(
            "default/held",
            "f1",
            &socket,
            &format!(
                "process {pid}, frozen: its cgroup's freezer holds it (a paused container, say); \
                 thaw it with `echo 0 > {}`, or resume its container",
                cgroup.dir.join("cgroup.freeze").display()
            )
        )],
    );
    cgroup.freeze("0");
    ok(&call(&c.config, "DEL", &ns, pod, "f1"));
    c.assert_node_clean("after the DEL");
}
