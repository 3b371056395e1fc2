use super::*;

/// A directory for the daemon's socket `plumb.sock`, the name `plumb.sock.<pid>.new` a
/// daemon of this PID binds beside it, and a runtime entered (listen needs one).
fn beside_a_socket() -> (tempfile::TempDir, PathBuf, PathBuf, tokio::runtime::Runtime) {
    let d = tempfile::tempdir().unwrap();
    let socket = d.path().join("plumb.sock");
    let pid_new = d
        .path()
        .join(format!("plumb.sock.{}.new", std::process::id()));
    let rt = plumb_cluster::runtime::current_thread().unwrap();
    (d, socket, pid_new, rt)
}

/// Dates the file `path` two minutes back, past [`LEFTOVER_AGE`].
fn made_two_minutes_ago(path: &Path) {
    let aged = std::process::Command::new("touch")
        .args(["-h", "-d", "2 minutes ago"])
        .arg(path)
        .status()
        .unwrap();
    assert!(aged.success());
}

/// The names in `dir`.
fn names_in(dir: &Path) -> Vec<std::ffi::OsString> {
    (std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().file_name())
        .collect()
}

#[test]
fn a_daemon_starting_beside_another_of_the_same_pid_leaves_its_socket_alone() {
    // Two daemons of a DaemonSet's surge, each PID 1 of its container, start at once: the
    // other one has bound `<socket>.<pid>.new` and is about to rename it onto the path.
    // Removing that name made its rename take this daemon's socket, which this daemon then
    // did not find at its own name (its start failed), and the other one served a socket
    // nobody could reach.
    let (d, socket, others, rt) = beside_a_socket();
    let _guard = rt.enter();
    let _other = std::os::unix::net::UnixListener::bind(&others).unwrap();
    let (listener, ours, replaced) = listen(&socket, nix::unistd::geteuid().as_raw()).unwrap();
    assert!(matches!(replaced, Replaced::Nothing));
    assert!(others.exists(), "the other daemon's socket was removed");
    assert!(is_ours(&socket, ours));
    // The socket at the path is this daemon's listener: a call reaches it.
    let _call = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let accepted = rt.block_on(listener.accept());
    assert!(accepted.is_ok());
    // Nothing of this daemon is left beside the path; the other's rename still works (and
    // then this daemon sees that it lost the path).
    let beside = names_in(d.path());
    assert_eq!(beside.len(), 2, "{beside:?}");
    std::fs::rename(&others, &socket).unwrap();
    assert!(!is_ours(&socket, ours));
}

#[test]
fn a_daemon_whose_queue_is_full_is_found_live_without_waiting() {
    // A wedged daemon accepts nothing, and its socket's queue fills with the shims'
    // connections: a blocking connect to it waited for ever, so the daemon started to
    // replace it never bound its socket.
    let (d, socket, _, _rt) = beside_a_socket();
    let _wedged = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // The queue filled with connections that stay open (without waiting, as `knock`).
    let mut queued = Vec::new();
    loop {
        match connect_without_waiting(&socket) {
            Ok(s) => queued.push(s),
            Err(e) if e.raw_os_error() == Some(nix::Error::EAGAIN as i32) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(queued.len() < 100_000, "the queue never filled");
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let left = d.path().join("plumb.sock.1.new");
    std::fs::hard_link(&socket, &left).unwrap();
    made_two_minutes_ago(&left);
    std::thread::spawn(move || {
        let _ = tx.send((knock(&socket), is_leftover(&left)));
    });
    let (knocked, leftover) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("waited on the full queue");
    assert_eq!(knocked, Err(nix::Error::EAGAIN));
    assert!(
        !leftover,
        "a socket a daemon listens on was taken for a leftover"
    );
}

#[test]
fn a_socket_a_killed_daemon_left_beside_the_path_is_taken_once_a_minute_old() {
    // A daemon that is PID 1 killed between its bind and its rename left
    // `<socket>.1.new`, which nothing listens on: the next PID-1 daemon takes that name
    // again rather than leaving it there for good. One just made is a daemon starting.
    let (d, socket, left, rt) = beside_a_socket();
    drop(std::os::unix::net::UnixListener::bind(&left).unwrap());
    let _guard = rt.enter();
    let uid = nix::unistd::geteuid().as_raw();
    let (listener, _, _) = listen(&socket, uid).unwrap();
    assert!(
        left.exists(),
        "a socket made just now was taken for a leftover"
    );
    drop(listener);
    std::fs::remove_file(&socket).unwrap();
    made_two_minutes_ago(&left);
    let (_listener, ours, _) = listen(&socket, uid).unwrap();
    assert!(is_ours(&socket, ours));
    assert_eq!(names_in(d.path()), [std::ffi::OsString::from("plumb.sock")]);
}

#[test]
fn plumbs_configuration_waits_for_the_kubeconfig_however_long_that_takes() {
    // The service account's token not there yet (the kubelet has not mounted it): plumb's
    // configuration, which names the kubeconfig, must not be written, or every ADD fails
    // on a missing file, not at the first look only but at every look after it.
    let d = tempfile::tempdir().unwrap();
    let (sa, conf_dir) = (d.path().join("sa"), d.path().join("net.d"));
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::create_dir_all(&conf_dir).unwrap();
    let kubeconfig = conf_dir.join("plumb.d/plumb.kubeconfig");
    let template = d.path().join("template.json");
    std::fs::write(
        &template,
        serde_json::json!({"kubeconfig": kubeconfig}).to_string(),
    )
    .unwrap();
    std::fs::write(
        conf_dir.join("10-bridge.conf"),
        r#"{"cniVersion": "1.0.0", "name": "cbr0", "type": "bridge"}"#,
    )
    .unwrap();
    let env = |v: &str| match v {
        "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
        _ => None,
    };
    let conf = ConfWriter::new(&template, conf_dir.clone(), None, Some(Path::new("/s"))).unwrap();
    let written = conf.output();
    let mut files = NodeFiles {
        kubeconfig: Some(KubeconfigWriter::new(kubeconfig.clone(), sa.clone(), env).unwrap()),
        conf: Some(conf),
        uninstall: None,
        told_of_other: false,
        kubeconfig_ready: false,
    };
    for _ in 0..3 {
        files.step();
        assert!(!kubeconfig.exists());
        assert!(!written.exists(), "written before the kubeconfig");
    }
    std::fs::write(sa.join("token"), "t").unwrap();
    std::fs::write(sa.join("ca.crt"), "CA").unwrap();
    files.step();
    assert!(kubeconfig.exists() && written.exists());
}

#[test]
fn leftovers_of_killed_writers_of_the_node_files_are_swept_once_an_hour_old() {
    // A daemon killed while it wrote the token copy left `.token.tmpN`; no GC sweeps the
    // configuration directory, so it stayed for ever, a copy of a token on the host.
    let d = tempfile::tempdir().unwrap();
    let (sa, conf_dir) = (d.path().join("sa"), d.path().join("net.d"));
    let plumb_d = conf_dir.join("plumb.d");
    std::fs::create_dir_all(&plumb_d).unwrap();
    let template = d.path().join("template.json");
    std::fs::write(&template, "{}").unwrap();
    let env = |v: &str| match v {
        "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
        _ => None,
    };
    let files = NodeFiles {
        kubeconfig: Some(KubeconfigWriter::new(plumb_d.join("plumb.kubeconfig"), sa, env).unwrap()),
        conf: Some(
            ConfWriter::new(&template, conf_dir.clone(), None, Some(Path::new("/s"))).unwrap(),
        ),
        uninstall: None,
        told_of_other: false,
        kubeconfig_ready: false,
    };
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    let put = |path: PathBuf, aged: bool| {
        let f = std::fs::File::create(&path).unwrap();
        if aged {
            f.set_modified(old).unwrap();
        }
        path
    };
    let swept = [
        put(plumb_d.join(".token.tmp1"), true),
        put(plumb_d.join(".ca.crt.tmp4242"), true),
        put(plumb_d.join(".plumb.kubeconfig.tmp1"), true),
        put(conf_dir.join(".00-plumb.conflist.tmp3735928559"), true),
    ];
    let kept = [
        // A live writer's, and files of other names.
        put(plumb_d.join(".token.tmp7"), false),
        put(plumb_d.join(".other.tmp1"), true),
        put(conf_dir.join(".10-flannel.conflist.tmp1"), true),
        put(plumb_d.join("token.tmp1"), true),
    ];
    files.sweep_leftovers();
    for f in swept {
        assert!(!f.exists(), "{} left", f.display());
    }
    for f in kept {
        assert!(f.exists(), "{} removed", f.display());
    }
}

#[test]
fn uninstalling_removes_the_configuration_first_and_the_rest_once_no_record_is_left() {
    let d = tempfile::tempdir().unwrap();
    let (sa, conf_dir, bin, state) = (
        d.path().join("sa"),
        d.path().join("net.d"),
        d.path().join("bin"),
        d.path().join("state"),
    );
    for dir in [&sa, &conf_dir, &bin, &state] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(sa.join("token"), "t").unwrap();
    std::fs::write(sa.join("ca.crt"), "CA").unwrap();
    let env = |v: &str| match v {
        "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
        _ => None,
    };
    // plumb's configuration as a daemon wrote it, the default network's, an operator's own.
    let ours = conf_dir.join("00-plumb.conflist");
    std::fs::write(
        &ours,
        r#"{"cniVersion": "1.0.0", "name": "plumb-cni-network", "plugins": [{"type": "plumb"}]}"#,
    )
    .unwrap();
    let default = conf_dir.join("10-flannel.conflist");
    std::fs::write(&default, "{}").unwrap();
    std::fs::write(bin.join("plumb"), "binary").unwrap();
    std::fs::write(bin.join("bridge"), "another plugin").unwrap();
    let record = state.join("c1.json");
    std::fs::write(&record, "{}").unwrap();
    let kubeconfig = conf_dir.join("plumb.d/plumb.kubeconfig");
    let uninstall = Uninstall::new(conf_dir.clone(), &bin, state.clone());
    let done = Arc::clone(&uninstall.done);
    let mut files = NodeFiles {
        kubeconfig: Some(KubeconfigWriter::new(kubeconfig.clone(), sa, env).unwrap()),
        conf: None,
        uninstall: Some(uninstall),
        told_of_other: false,
        kubeconfig_ready: false,
    };
    files.step();
    assert!(!ours.exists(), "the configuration goes first");
    assert!(default.exists());
    // A pod attached by plumb is left: its DEL needs the binary, the kubeconfig, the record.
    for _ in 0..3 {
        files.step();
        assert!(kubeconfig.exists() && bin.join("plumb").exists() && record.exists());
        assert!(!done.load(Ordering::SeqCst));
    }
    // Written back meanwhile (a daemon of plumb's DaemonSet not deleted yet): removed again.
    std::fs::write(
        &ours,
        r#"{"cniVersion": "1.0.0", "name": "plumb-cni-network", "plugins": [{"type": "plumb"}]}"#,
    )
    .unwrap();
    files.step();
    assert!(!ours.exists());
    // Its DEL ran.
    std::fs::remove_file(&record).unwrap();
    files.step();
    assert!(done.load(Ordering::SeqCst));
    assert!(!bin.join("plumb").exists() && bin.join("bridge").exists());
    assert!(!state.exists() && !kubeconfig.exists() && !conf_dir.join("plumb.d").exists());
    assert!(default.exists());
    // Not written again.
    files.step();
    assert!(!kubeconfig.exists());
}

#[test]
fn uninstalling_waits_for_a_state_directory_it_does_not_own_or_a_hand_written_configuration() {
    let d = tempfile::tempdir().unwrap();
    let (conf_dir, bin, state) = (
        d.path().join("net.d"),
        d.path().join("bin"),
        d.path().join("state"),
    );
    for dir in [&conf_dir, &bin, &state] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let ours = conf_dir.join("00-plumb.conflist");
    let written = |state_dir: &Path| {
        let list = serde_json::json!({"cniVersion": "1.0.0", "name": "plumb-cni-network",
            "plugins": [{"type": "plumb", "plumbStateDir": state_dir,
                         "plumbDaemonSocket": "/run/plumb/plumb.sock"}]});
        std::fs::write(&ours, list.to_string()).unwrap();
    };
    // The configuration keeps its records elsewhere: nothing is removed, and the flag named.
    written(Path::new("/elsewhere"));
    let mut u = Uninstall::new(conf_dir.clone(), &bin, state.clone());
    let Step::Waiting(why) = u.step(&[]) else {
        panic!("not waiting")
    };
    assert!(why.contains("--state-dir /elsewhere"), "{why}");
    assert!(ours.exists());
    // The right one: kept without the socket (the DELs run here go to the plugin), removed.
    written(&state);
    assert!(matches!(u.step(&[]), Step::Removed(_)));
    let kept = std::fs::read_to_string(state.join(".uninstall.conf")).unwrap();
    assert!(!kept.contains("plumbDaemonSocket"), "{kept}");
    // A configuration no daemon wrote still names plumb: the binary stays.
    std::fs::write(bin.join("plumb"), "binary").unwrap();
    let by_hand = conf_dir.join("05-mine.conf");
    std::fs::write(
        &by_hand,
        r#"{"cniVersion": "1.0.0", "name": "x", "type": "plumb"}"#,
    )
    .unwrap();
    let Step::Waiting(why) = u.step(&[]) else {
        panic!("not waiting")
    };
    assert!(why.contains("05-mine.conf"), "{why}");
    assert!(bin.join("plumb").exists());
    std::fs::remove_file(&by_hand).unwrap();
    // Only plumb's own files go from the state directory; another's stays, and says so.
    std::fs::write(state.join("c1.lock"), "").unwrap();
    std::fs::write(state.join("not-plumbs.txt"), "").unwrap();
    let Step::Waiting(why) = u.step(&[]) else {
        panic!("not waiting")
    };
    assert!(why.contains("files that are not plumb's"), "{why}");
    assert!(!state.join("c1.lock").exists() && state.join("not-plumbs.txt").exists());
    assert!(!bin.join("plumb").exists());
}

#[test]
fn a_sandbox_is_gone_only_where_its_network_namespace_could_be_seen() {
    let d = tempfile::tempdir().unwrap();
    let (conf_dir, state) = (d.path().join("net.d"), d.path().join("state"));
    let netns_dir = d.path().join("netns");
    for dir in [&conf_dir, &state, &netns_dir] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(state.join(".uninstall.conf"), "{}").unwrap();
    let record = |id: &str, netns: &Path| {
        let r = serde_json::json!({"version": 1, "containerId": id, "netns": netns,
                                   "attachments": []});
        std::fs::write(state.join(format!("{id}.json")), r.to_string()).unwrap();
    };
    // Its directory is not there (a daemon that does not see the node's paths): alive.
    record("c1", &d.path().join("unseen/ns1"));
    let mut u = Uninstall::new(conf_dir, d.path(), state.clone());
    let mut said = Vec::new();
    for _ in 0..3 {
        if let Step::Waiting(why) = u.step(&[]) {
            said.push(why);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        state.join("c1.json").exists(),
        "a live pod's record is kept"
    );
    assert!(
        !said.is_empty() && !said.iter().any(|w| w.contains("DEL of")),
        "{said:?}"
    );
    // Its directory is there and it is not: gone, and a DEL runs for it (here the binary is
    // missing, so it fails and is said).
    std::fs::remove_file(state.join("c1.json")).unwrap();
    record("c2", &netns_dir.join("ns2"));
    let mut said = String::new();
    for _ in 0..50 {
        if let Step::Waiting(why) = u.step(&[]) {
            said = why;
        }
        if said.contains("the DEL of container c2 failed") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(said.contains("the DEL of container c2 failed"), "{said}");
}
