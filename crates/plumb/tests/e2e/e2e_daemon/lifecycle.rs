//! The daemon's life end to end: killed or stopped during a call, replaced by another that
//! takes its socket over, too busy to accept, and its socket guarded against other users.

use super::*;

#[test]
fn a_daemon_does_not_take_a_path_that_is_not_a_socket() {
    let node = crate::common::Node::new();
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
    let node = crate::common::Node::new();
    let socket = node.path("run/plumb.sock");
    let _daemon = Daemon::start(&socket);
    // An operator's mistake: the socket and its directory opened to everyone.
    open_to_others(node.dir.path(), 0o711);
    open_to_others(&node.path("run"), 0o755);
    open_to_others(&socket, 0o666);
    let config = node.config(json!({"plumbDaemonSocket": socket}));
    // The plugin, run by an unprivileged user, as the runtime would run it.
    let shim = crate::common::start(
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
    let node = crate::common::Node::new();
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
    let node = crate::common::Node::new();
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
    let node = crate::common::Node::new();
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
    let node = crate::common::Node::new();
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
    assert_eq!(c.call_connections(), 1);

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
    assert_eq!(c.call_connections(), 2);
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
    let mut shim = crate::common::start(
        &CniCall {
            command: "ADD",
            container_id: "g1",
            netns: &netns,
            ifname: "eth0",
            args: &args,
            config: &c.config,
        },
        crate::common::quiet,
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
    let node = crate::common::Node::new();
    let socket = node.path("plumb.sock");
    // A listener whose backlog (0) one connection fills, and that never accepts: as a daemon
    // swamped with calls looks to the next plugin.
    let _busy = crate::common::daemon::Busy::on(&socket);
    let config = node.config(json!({"plumbDaemonSocket": socket}));
    let out = crate::common::run(&crate::common::CniCall {
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
    let node = crate::common::Node::new();
    let socket = node.path("run/plumb.sock");
    let _daemon = Daemon::start(&socket);
    let config =
        crate::common::plumb_as_its_own_delegate(&node, json!({"plumbDaemonSocket": socket}));
    crate::common::add_fails_at_once_and_del_undoes_it(&node, &config, "d-nested");
    crate::common::node_wide_calls_fail_at_once(&config);
    assert!(healthz(&socket).starts_with("ok: 0 calls running"));
}

#[test]
fn an_add_the_runtime_gave_up_on_while_it_waited_for_its_turn_is_not_run() {
    // The runtime killed the plugin while the daemon's ADD waited for the container's lock
    // (held here by another process); its DEL may run before that ADD gets the lock. Run after
    // it, the ADD would attach a sandbox nobody deletes: it must not run at all.
    testkit::netns::require_root();
    let node = crate::common::Node::new();
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
    let held = crate::common::hold_lock(&node.state_dir().join("w1.lock"));
    let netns = ns.path().display().to_string();
    let mut shim = crate::common::start(
        &CniCall {
            command: "ADD",
            container_id: "w1",
            netns: &netns,
            ifname: "eth0",
            args: "",
            config: &config,
        },
        crate::common::quiet,
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
