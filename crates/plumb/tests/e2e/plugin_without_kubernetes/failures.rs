//! plumb without Kubernetes when things go wrong: a delegate that cannot start, a rollback or a
//! DEL that fails part-way, a killed plumb, a full state directory, a call kept waiting. What
//! is left is always what a later DEL needs, and nothing else.

use super::*;

#[test]
fn a_first_delegate_that_cannot_start_leaves_nothing_to_undo() {
    // Nothing ran (every attachment's plugins are looked for before anything runs), so there is
    // nothing to undo and no record: a rollback DEL of a plugin that cannot be found would
    // fail, and keep it, and fail every later DEL of the pod.
    use testkit::fake_plugin::{FakePlugin, sequence};
    let node = Node::new();
    let bin = node.path("bin");
    let b = FakePlugin::install(&bin, "fake-b");
    let config = node.config(json!({"binDir": bin, "delegates": [
        {"cniVersion": "1.0.0", "name": "net-a", "type": "no-such-plugin"},
        {"cniVersion": "1.0.0", "name": "net-b", "type": "fake-b"}]}));
    let call = |command| fake_call(&config, command, "c-nostart");
    let e = err(&call("ADD"));
    assert!(
        e["msg"].as_str().unwrap().contains("no-such-plugin"),
        "the missing plugin is named: {e}"
    );
    assert!(b.calls().is_empty(), "{:?}", sequence(&bin));
    assert!(node.left_to_undo("c-nostart").is_empty());
    assert_eq!(
        state_files(&node),
        ["c-nostart.json", "c-nostart.lock"],
        "a record of no attachment (nothing was begun, for the DEL), and the container's lock"
    );
    // Its DEL runs nothing and leaves nothing.
    ok(&call("DEL"));
    assert!(b.calls_of("DEL").is_empty());
    assert!(state_files(&node).is_empty(), "{:?}", state_files(&node));
    // Without a record (removed by hand, or an ADD killed before it), DEL plans the same
    // networks: the one that cannot run is skipped, with a log line, rather than failing the
    // sandbox's removal forever.
    err(&call("ADD"));
    std::fs::remove_file(node.record("c-nostart")).unwrap();
    let del = call("DEL");
    let stderr = String::from_utf8_lossy(&del.stderr).to_string();
    ok(&del);
    assert!(
        stderr.contains("DEL of network net-a (interface eth0) skipped")
            && stderr.contains("no-such-plugin"),
        "{stderr}"
    );
    assert_eq!(
        b.calls_of("DEL").len(),
        1,
        "the network that can run is deleted"
    );
}

/// Installs in `dir` a plugin `name` that is found (a file with its execute bit) but cannot be
/// started: a script whose interpreter is missing, so its exec fails (ENOENT), as a binary for
/// another architecture (ENOEXEC) or one on a `noexec` mount (EACCES) does. Replaces any plugin
/// of that name in one rename.
fn install_unstartable(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir_all(dir).unwrap();
    let tmp = dir.join(format!(".{name}.unstartable"));
    fs::write(&tmp, "#!/nonexistent/interp\n").unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join(name);
    fs::rename(&tmp, &path).unwrap();
    path
}

/// Asserts that `e` is the runtime's error for the plugin at `path` that could not be started.
fn cannot_start(e: &Value, path: &std::path::Path) {
    assert_eq!(e["code"], 5, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains(&format!("cannot execute plugin {}: ", path.display())),
        "{e}"
    );
}

#[test]
fn a_second_network_whose_plugin_cannot_start_is_rolled_back_and_del_succeeds() {
    // net-b's plugin never ran: the rollback undoes net-a and leaves net-b out, rather than
    // failing on its DEL (which cannot start either) and keeping it for every later DEL.
    let mut p = pod(|node| {
        let a = unique_name("pa");
        (
            vec![
                node.bridge("net-a", &a, 21),
                json!({"cniVersion": "1.0.0", "name": "net-b", "type": "unstartable"}),
            ],
            vec![a],
        )
    });
    let bin = p.node.path("bin");
    let broken = install_unstartable(&bin, "unstartable");
    p.config["binDir"] = json!(bin);
    let e = err(&p.call("ADD", "c-unstartable-2nd"));
    cannot_start(&e, &broken);
    assert!(
        e["msg"].as_str().unwrap().contains("attachment 2 of 2"),
        "{e}"
    );
    wholly_rolled_back(&p, "c-unstartable-2nd", &e);
}

/// After an ADD of `id` that failed with `e`: its rollback undid everything (nothing in the
/// pod, no address, nothing left to undo in the record, no result-cache entry), and the
/// runtime's DEL then succeeds and removes the record.
fn wholly_rolled_back(p: &Pod, id: &str, e: &Value) {
    assert!(
        !e.to_string().contains("rolling back failed"),
        "the rollback succeeded: {e}"
    );
    assert_eq!(p.ns.links(), ["lo"]);
    assert_eq!(p.node.all_allocations(), 0);
    assert!(p.node.left_to_undo(id).is_empty(), "{e}");
    assert!(
        p.node.cache_entries().is_empty(),
        "{:?}",
        p.node.cache_entries()
    );
    ok(&p.call("DEL", id));
    assert!(!p.node.record(id).exists());
}

#[test]
fn a_first_plugin_that_cannot_start_leaves_nothing_recorded() {
    use testkit::fake_plugin::FakePlugin;
    let node = Node::new();
    let bin = node.path("bin");
    let broken = install_unstartable(&bin, "unstartable");
    // A plugin after it, which must never be reached.
    let after = FakePlugin::install(&bin, "fake-after");
    let config = node.config(json!({"binDir": bin, "delegates": [
        {"cniVersion": "1.0.0", "name": "net-a",
         "plugins": [{"type": "unstartable"}, {"type": "fake-after"}]}]}));
    let call = |command| fake_call(&config, command, "c-unstartable-1st");
    let e = err(&call("ADD"));
    cannot_start(&e, &broken);
    assert!(after.calls().is_empty());
    assert!(node.left_to_undo("c-unstartable-1st").is_empty(), "{e}");
    assert!(
        node.cache_entries().is_empty(),
        "{:?}",
        node.cache_entries()
    );
    ok(&call("DEL"));
    assert!(!node.record("c-unstartable-1st").exists());
    assert!(
        after.calls().is_empty(),
        "nothing of the list ran, so nothing is deleted"
    );
}

#[test]
fn a_list_whose_second_plugin_cannot_start_rolls_back_only_the_first() {
    use testkit::fake_plugin::FakePlugin;
    // bridge (with host-local) ran, the next plugin could not start, the one after it was
    // never reached: the rollback is bridge's DEL alone.
    let mut p = pod(|node| {
        let a = unique_name("pa");
        let mut first = node.bridge("net-a", &a, 22);
        first.as_object_mut().unwrap().remove("cniVersion");
        first.as_object_mut().unwrap().remove("name");
        (
            vec![json!({"cniVersion": "1.0.0", "name": "net-a",
                        "plugins": [first, {"type": "unstartable"}, {"type": "fake-after"}]})],
            vec![a],
        )
    });
    let bin = p.node.path("bin");
    let broken = install_unstartable(&bin, "unstartable");
    let after = FakePlugin::install(&bin, "fake-after");
    p.config["binDir"] = json!(bin);
    let e = err(&p.call("ADD", "c-unstartable-mid"));
    cannot_start(&e, &broken);
    assert!(after.calls().is_empty(), "the plugin after it never runs");
    // bridge's DEL ran: its interface and address are gone.
    wholly_rolled_back(&p, "c-unstartable-mid", &e);
    assert!(after.calls().is_empty());
}

#[test]
fn a_failed_rollback_of_a_list_cut_short_keeps_only_the_plugins_that_ran() {
    // fake-a ran, the next plugin could not start; fake-a's rollback DEL fails once. The record
    // keeps net-a with fake-a alone (and the network's whole list for GC and STATUS), so the
    // runtime's DEL runs fake-a's DEL, not the plugin that never ran.
    use testkit::fake_plugin::{FakePlugin, sequence};
    let node = Node::new();
    let bin = node.path("bin");
    let a = FakePlugin::install(&bin, "fake-a");
    install_unstartable(&bin, "unstartable");
    a.fail("DEL", 11, "transient DEL failure");
    let config = node.config(json!({"binDir": bin, "delegates": [
        {"cniVersion": "1.0.0", "name": "net-a",
         "plugins": [{"type": "fake-a"}, {"type": "unstartable"}]}]}));
    let call = |command| fake_call(&config, command, "c-cut");
    let e = err(&call("ADD"));
    assert!(
        e["details"]
            .as_str()
            .unwrap_or_default()
            .contains("transient DEL failure"),
        "{e}"
    );
    // The plugin error numbers the plugins of the cut list ("1 of 1"); the attachment says
    // why, so that it does not contradict the network's configuration.
    assert!(
        e["details"].as_str().unwrap_or_default().contains(
            "its ADD had started only the first 1 of the network's 2 plugins, so only those \
             are undone): network \"net-a\": plugin \"fake-a\" (1 of 1) failed (DEL)"
        ),
        "{e}"
    );
    let record: Value = serde_json::from_slice(&fs::read(node.record("c-cut")).unwrap()).unwrap();
    let kept = &record["attachments"][0];
    assert_eq!(
        kept["config"]["plugins"],
        json!([{"type": "fake-a"}]),
        "{record}"
    );
    assert_eq!(
        kept["networkConfig"]["plugins"],
        json!([{"type": "fake-a"}, {"type": "unstartable"}]),
        "{record}"
    );
    a.respond("DEL", "", "", 0);
    ok(&call("DEL"));
    assert!(!node.record("c-cut").exists());
    assert_eq!(
        sequence(&bin),
        [
            ("fake-a".to_string(), "ADD".to_string()),
            ("fake-a".to_string(), "DEL".to_string()),
            ("fake-a".to_string(), "DEL".to_string())
        ]
    );
}

#[test]
fn a_plugin_that_ran_but_cannot_start_at_del_fails_del_and_keeps_the_record() {
    // It may have attached something that only it can undo: DEL must not pass over it.
    let node = Node::new();
    let (a, _b, config) = two_fakes(&node);
    let call = |command| fake_call(&config, command, "c-replaced");
    ok(&call("ADD"));
    let broken = install_unstartable(&node.path("bin"), "fake-b");
    let e = err(&call("DEL"));
    cannot_start(&e, &broken);
    assert!(e["msg"].as_str().unwrap().contains("net-b"), "{e}");
    assert_eq!(node.left_to_undo("c-replaced"), ["net-b"]);
    assert_eq!(a.calls_of("DEL").len(), 1);
    // Still failing, and still kept, until the plugin can run again.
    err(&call("DEL"));
    assert_eq!(node.left_to_undo("c-replaced"), ["net-b"]);
}

#[test]
fn a_failed_rollback_keeps_only_what_is_left_to_undo() {
    // net-b fails ADD, and its rollback DEL fails once; net-c was never reached. The record
    // keeps net-b alone: the runtime's DEL neither runs net-c, which never ran, nor repeats
    // net-a's DEL.
    use testkit::fake_plugin::{FakePlugin, sequence};
    let node = Node::new();
    let bin = node.path("bin");
    let a = FakePlugin::install(&bin, "fake-a");
    let b = FakePlugin::install(&bin, "fake-b");
    let c = FakePlugin::install(&bin, "fake-c");
    b.fail("ADD", 11, "try later");
    b.fail("DEL", 11, "transient DEL failure");
    let config = node.config(json!({"binDir": bin, "delegates": [
        {"cniVersion": "1.0.0", "name": "net-a", "type": "fake-a"},
        {"cniVersion": "1.0.0", "name": "net-b", "type": "fake-b"},
        {"cniVersion": "1.0.0", "name": "net-c", "type": "fake-c"}]}));
    let call = |command| fake_call(&config, command, "c-kept");
    let e = err(&call("ADD"));
    // The delegate's own message and the rollback's both reach the runtime.
    let details = e["details"].as_str().unwrap_or_default();
    assert!(
        e["msg"].as_str().unwrap().contains("try later")
            && details.contains("transient DEL failure"),
        "{e}"
    );
    let record: Value = serde_json::from_slice(&fs::read(node.record("c-kept")).unwrap()).unwrap();
    let kept: Vec<&str> = record["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["network"].as_str().unwrap())
        .collect();
    assert_eq!(kept, ["net-b"]);

    b.respond("DEL", "", "", 0);
    ok(&call("DEL"));
    assert!(!node.record("c-kept").exists());
    assert_eq!(a.calls_of("DEL").len(), 1, "net-a was deleted again");
    assert_eq!(
        sequence(&bin),
        [
            ("fake-a".into(), "ADD".into()),
            ("fake-b".into(), "ADD".into()),
            ("fake-b".into(), "DEL".into()),
            ("fake-a".into(), "DEL".into()),
            ("fake-b".into(), "DEL".into()),
        ]
    );
    assert!(c.calls().is_empty(), "net-c was never reached");
}

#[test]
fn a_failed_del_of_one_attachment_does_not_stop_the_others_and_fails_the_del() {
    // multi-net spec §7.2: "the failure of one shall not prevent teardown of subsequent
    // attachments. However, if any detachment failed, a final error shall be delivered".
    // DEL runs in reverse: net-b first, whose failure must not keep net-a from its DEL.
    use testkit::fake_plugin::sequence;
    let node = Node::new();
    let (a, b, config) = two_fakes(&node);
    let call = |command| fake_call(&config, command, "c-teardown");
    ok(&call("ADD"));
    b.fail("DEL", 11, "net-b cannot be torn down now");
    let e = err(&call("DEL"));
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("net-b cannot be torn down now"),
        "{e}"
    );
    assert_eq!(a.calls_of("DEL").len(), 1, "net-a was not torn down");
    let bin = node.path("bin");
    let order: Vec<String> = sequence(&bin)
        .into_iter()
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    assert_eq!(
        order,
        ["fake-a ADD", "fake-b ADD", "fake-b DEL", "fake-a DEL"]
    );
}

#[test]
fn a_retried_del_repeats_no_del_that_succeeded() {
    // A plugin whose second DEL fails (host-device, once its device has left the netns) must
    // not keep the sandbox forever because another attachment's DEL failed once.
    let node = Node::new();
    let (a, b, config) = two_fakes(&node);
    let call = |command| fake_call(&config, command, "c-retry");
    ok(&call("ADD"));
    a.fail("DEL", 11, "transient");
    let e = err(&call("DEL"));
    assert!(e["msg"].as_str().unwrap().contains("net-a"), "{e}");
    assert!(node.record("c-retry").exists());
    // net-b's second DEL would fail now.
    b.fail("DEL", 999, "failed to find \"net1\": Link not found");
    a.respond("DEL", "", "", 0);
    ok(&call("DEL"));
    assert!(!node.record("c-retry").exists());
    assert_eq!(b.calls_of("DEL").len(), 1);
    assert_eq!(a.calls_of("DEL").len(), 2);
}

#[test]
fn one_unreadable_record_spoils_neither_status_nor_gc() {
    // A damaged record, or one a newer plumb wrote, says nothing about whether pods can be
    // attached: STATUS stays fine; GC does its work and reports the record.
    use testkit::fake_plugin::FakePlugin;
    let node = Node::new();
    let bin = node.path("bin");
    let a = FakePlugin::install(&bin, "fake-a");
    let mut config = node.config(json!({"cniVersion": "1.1.0", "binDir": bin, "delegates": [
        {"cniVersion": "1.1.0", "name": "net-a", "type": "fake-a"}]}));
    let call = |command: &str, cid: &str, config: &Value| fake_call(config, command, cid);
    ok(&call("ADD", "c-live", &config));
    ok(&call("ADD", "c-gone", &config));
    fs::write(node.record("c-other"), r#"{"version":99,"attachments":[]}"#).unwrap();
    ok(&call("STATUS", "", &config));
    assert_eq!(a.calls_of("STATUS").len(), 1);

    // The live sandbox's cache entry is lost (it is not written durably): its record still
    // keeps its attachment valid.
    for f in fs::read_dir(node.cache_dir().join("results")).unwrap() {
        let f = f.unwrap().path();
        if f.to_string_lossy().contains("c-live") {
            fs::remove_file(f).unwrap();
        }
    }
    config["cni.dev/valid-attachments"] = json!([{"containerID": "c-live", "ifname": "eth0"}]);
    let e = err(&call("GC", "", &config));
    assert!(e["msg"].as_str().unwrap().contains("c-other"), "{e}");
    assert!(
        !node.record("c-gone").exists(),
        "the stale sandbox was not deleted"
    );
    let gc = a.calls_of("GC");
    assert_eq!(gc.len(), 1);
    assert_eq!(
        gc[0].stdin_json()["cni.dev/valid-attachments"],
        json!([{"containerID": "c-live", "ifname": "eth0"}])
    );

    // A live sandbox whose record cannot be read: which of its attachments are valid cannot be
    // told, so no network gets GC (it could release the sandbox's address), and GC says why.
    fs::write(node.record("c-live"), "{\"version\":1,\"attach").unwrap();
    let e = err(&call("GC", "", &config));
    assert!(e["msg"].as_str().unwrap().contains("live sandbox"), "{e}");
    assert_eq!(a.calls_of("GC").len(), 1, "a network got GC");
}

#[test]
fn a_del_without_a_record_that_fails_leaves_a_record_of_what_is_left() {
    // DEL planned from the configuration (no record: lost, or a pod added before plumb) that
    // fails part-way: the retry works from what is left, and repeats no DEL that succeeded.
    let node = Node::new();
    let (a, b, config) = two_fakes(&node);
    let call = |command| fake_call(&config, command, "c-norecord");
    b.fail("DEL", 11, "transient");
    err(&call("DEL"));
    assert_eq!(node.left_to_undo("c-norecord"), ["net-b"]);
    b.respond("DEL", "", "", 0);
    ok(&call("DEL"));
    assert!(!node.record("c-norecord").exists());
    assert_eq!(a.calls_of("DEL").len(), 1);
    assert_eq!(b.calls_of("DEL").len(), 2);
}

#[test]
fn a_variable_that_is_not_utf8_is_shown_not_called_missing() {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::process::{Command, Stdio};
    let node = Node::new();
    let config = node.config(json!({"delegates": [node.bridge("net-a", "unused0", 19)]}));
    let mut child = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .env_clear()
        .env("CNI_COMMAND", "DEL")
        .env("CNI_CONTAINERID", std::ffi::OsStr::from_bytes(b"c-\xff"))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", crate::common::PLUGINS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(config.to_string().as_bytes())
        .unwrap();
    let e = err(&child.wait_with_output().unwrap());
    let msg = e["msg"].as_str().unwrap();
    assert!(!msg.contains("missing"), "{e}");
    assert!(msg.contains("c-\u{fffd}"), "{e}");
}

#[test]
fn a_log_file_that_cannot_be_opened_never_fails_the_call() {
    // The log is best effort: a logFile that cannot be opened (here a directory), reported on a
    // stderr that cannot be written either (the runtime gone, a full disk), still leaves the
    // runtime its answer and the right exit code.
    use std::io::Write;
    use std::process::{Command, Stdio};
    let node = Node::new();
    let bridge = unique_name("pl");
    let config = node.config(json!({"cniVersion": "1.1.0",
        "delegates": [node.bridge("net-a", &bridge, 17)],
        "logFile": node.dir.path()}));
    let mut child = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .env_clear()
        .env("CNI_COMMAND", "STATUS")
        .env("CNI_PATH", crate::common::PLUGINS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(fs::File::create("/dev/full").unwrap())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&config).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn gc_leaves_a_sandbox_with_a_call_running_to_the_next_gc() {
    let p = pod(two_bridges(43, 44));
    let mut config = p.config.clone();
    config["cniVersion"] = json!("1.1.0");
    let p = Pod { config, ..p };
    ok(&p.call("ADD", "c-busy"));
    assert_eq!(p.node.all_allocations(), 2);
    let mut gc = p.config.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    // A call for the sandbox still runs (a DEL the runtime sent before its GC, say): it holds
    // the sandbox's lock. GC must neither run beside it nor count its addresses as stale.
    let lock = p.node.state_dir().join("c-busy.lock");
    let held = nix::fcntl::Flock::lock(
        std::fs::File::open(&lock).unwrap(),
        nix::fcntl::FlockArg::LockExclusive,
    )
    .unwrap();
    let out = run_node_wide("GC", &gc);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    ok(&out);
    assert!(
        stderr.contains("GC: c-busy has a call running; left to the next GC"),
        "{stderr}"
    );
    assert_eq!(p.node.all_allocations(), 2, "its addresses were released");
    assert!(p.node.record("c-busy").exists());
    drop(held);
    ok(&run_node_wide("GC", &gc));
    assert_eq!(p.node.all_allocations(), 0);
    assert!(!p.node.record("c-busy").exists());
    assert!(!lock.exists());
}

#[test]
fn plumb_run_as_its_own_delegate_fails_at_once_instead_of_waiting_for_itself() {
    // The delegate (plumb again, same container, same state directory) would wait for the
    // container's lock, which the plugin holds while it waits for the delegate: a hang until
    // the runtime gives up. It fails at once, saying why, and DEL undoes the rest.
    testkit::netns::require_root();
    let node = Node::new();
    let config = crate::common::plumb_as_its_own_delegate(&node, json!({}));
    crate::common::add_fails_at_once_and_del_undoes_it(&node, &config, "c-nested");
    crate::common::node_wide_calls_fail_at_once(&config);
}

/// Runs the shell `script` in a mount namespace of its own (so that it can mount a small
/// tmpfs on the state directory), with `$STATE` (the node's state directory), `$PLUMB`,
/// `$CONF` (the configuration file `conf`), `CNI_PATH` and `env` set.
fn with_its_own_mounts(
    script: &str,
    node: &Node,
    conf: &std::path::Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> std::process::Output {
    std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("STATE", node.state_dir())
        .env("PLUMB", env!("CARGO_BIN_EXE_plumb"))
        .env("CONF", conf)
        .env("CNI_PATH", crate::common::PLUGINS)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn del_works_on_a_state_directory_with_no_room_for_a_lock_file() {
    // A pod added by a plumb before the container lock has no lock file; when its DEL comes on
    // a node out of inodes (where the kubelet evicts pods to make room), the lock file cannot
    // be made. DEL must still undo the pod, taking turns on the directory instead.
    testkit::netns::require_root();
    let node = Node::new();
    let bridge = unique_name("nf");
    let _bridge = Link::adopt(&bridge);
    let config = node.config(json!({"delegates": [node.bridge("net-a", &bridge, 47)]}));
    let conf = node.path("plumb.conf");
    std::fs::write(&conf, config.to_string()).unwrap();
    std::fs::create_dir_all(node.state_dir()).unwrap();
    let ns = Netns::new();
    // In a mount namespace of its own: the state directory a small tmpfs, filled up between
    // ADD and DEL.
    let script = r#"
        mount -t tmpfs -o size=1m,nr_inodes=64 plumb-full "$STATE" || exit 90
        CNI_COMMAND=ADD "$PLUMB" < "$CONF" > /dev/null || exit 91
        rm "$STATE/c-full.lock"
        i=0; while touch "$STATE/fill$i" 2>/dev/null; do i=$((i+1)); done
        CNI_COMMAND=DEL "$PLUMB" < "$CONF"; echo "DEL exited $?" >&2
        ls "$STATE" | grep -v '^fill' >&2
        exit 0
    "#;
    let netns = ns.path();
    let out = with_its_own_mounts(
        script,
        &node,
        &conf,
        &[
            ("CNI_CONTAINERID", "c-full".as_ref()),
            ("CNI_NETNS", netns.as_os_str()),
            ("CNI_IFNAME", "eth0".as_ref()),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("DEL exited 0"),
        "{stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !stderr.contains("c-full.json"),
        "the record is left: {stderr}"
    );
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
}

#[test]
fn a_node_wide_call_started_by_plumb_itself_is_refused_on_a_full_state_directory_too() {
    // With no room for `.node-calls.lock`, the calls lock the state directory instead; the
    // nested STATUS must still find the outer one (it went on before, and with a configuration
    // naming itself would have started plumb again and again).
    testkit::netns::require_root();
    let node = Node::new();
    let mut config = crate::common::plumb_as_its_own_delegate(&node, json!({}));
    config["cniVersion"] = json!("1.1.0");
    config["delegates"][0]["cniVersion"] = json!("1.1.0");
    let conf = node.path("plumb.conf");
    std::fs::write(&conf, config.to_string()).unwrap();
    std::fs::create_dir_all(node.state_dir()).unwrap();
    let script = r#"
        mount -t tmpfs -o size=1m,nr_inodes=64 plumb-full "$STATE" || exit 90
        i=0; while touch "$STATE/fill$i" 2>/dev/null; do i=$((i+1)); done
        CNI_COMMAND=STATUS timeout 20 "$PLUMB" < "$CONF"; echo "STATUS exited $?" >&2
        exit 0
    "#;
    let out = with_its_own_mounts(script, &node, &conf, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stderr.contains("STATUS exited 1"), "{stderr}\n{stdout}");
    assert!(
        stdout.contains("STATUS: plumb is running as a delegate of plumb itself"),
        "{stdout}"
    );
}

#[test]
fn a_call_that_waits_long_for_its_container_says_so_as_an_error_naming_who_holds_it() {
    // A DEL queued behind a call that does not end (a delegate that hangs) used to wait without
    // a word at the error level: an operator looking at a pod stuck in Terminating found
    // nothing in plumb's log. A short wait (a DEL behind its ADD) is normal and no error; past
    // 10 s the call says, as an error, what it waits for and which process holds the lock.
    testkit::netns::require_root();
    let node = Node::new();
    let (_a, _b, mut config) = two_fakes(&node);
    let log = node.path("plumb.log");
    config["logLevel"] = json!("error");
    config["logFile"] = json!(log);
    ok(&fake_call(&config, "ADD", "c-held"));
    let held = crate::common::hold_lock(&node.state_dir().join("c-held.lock"));
    let started = std::time::Instant::now();
    let del = std::thread::spawn({
        let config = config.clone();
        move || fake_call(&config, "DEL", "c-held")
    });
    let logged = || fs::read_to_string(&log).unwrap_or_default();
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        !del.is_finished(),
        "DEL ran beside the call holding the lock"
    );
    assert_eq!(logged(), "", "a short wait is logged as an error");
    let expected = format!("process {} (flock) holds", held.pid());
    while !logged().contains(&expected) && started.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let line = logged();
    assert!(
        line.contains("DEL: container c-held: still waiting after 10 s for the call running")
            && line.contains(&expected),
        "{line}"
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(10),
        "{line}"
    );
    drop(held);
    ok(&del.join().unwrap());
    assert_eq!(state_files(&node), Vec::<String>::new());
}

#[test]
fn a_delegate_left_running_by_a_killed_plumb_holds_back_the_del_which_then_undoes_it() {
    // The runtime kills a plugin whose deadline passed and sends DEL at once. The delegate
    // plumb was running went on: it finished its ADD after the DEL had found the container
    // free, undone the record and gone, leaving an interface and an address nobody would
    // undo. The delegates now share plumb's turn: the DEL waits for the one left running,
    // then undoes what it made too.
    use std::os::unix::fs::PermissionsExt;
    let started = std::cell::OnceCell::new();
    let p = pod(|node| {
        let bin = node.path("bin");
        fs::create_dir_all(&bin).unwrap();
        let marker = node.path("slow-started");
        let script = bin.join("slow-bridge");
        fs::write(
            &script,
            format!(
                "#!/bin/sh\n[ \"$CNI_COMMAND\" = ADD ] && touch {} && sleep 11\nexec {}/bridge \"$@\"\n",
                marker.display(),
                crate::common::PLUGINS
            ),
        )
        .unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        started.set(marker).unwrap();
        let (a, b) = (unique_name("pa"), unique_name("pb"));
        let mut slow = node.bridge("net-b", &b, 49);
        slow["type"] = json!("slow-bridge");
        (vec![node.bridge("net-a", &a, 48), slow], vec![a, b])
    });
    let marker = started.get().unwrap();
    let mut config = p.config.clone();
    config["binDir"] = json!(p.node.path("bin"));
    let log = p.node.path("plumb.log");
    config["logLevel"] = json!("error");
    config["logFile"] = json!(log);
    let netns = p.ns.path().display().to_string();
    let mut add = crate::common::start(
        &CniCall {
            command: "ADD",
            container_id: "c-killed",
            netns: &netns,
            ifname: "eth0",
            args: "",
            config: &config,
        },
        crate::common::quiet,
    );
    crate::common::wait_for_file(marker); // net-b started
    // Its configuration written to it, plumb is killed as a runtime's deadline kills it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    add.kill().unwrap();
    add.wait().unwrap();
    let del = Pod { config, ..p };
    let before = std::time::Instant::now();
    let out = del.call("DEL", "c-killed");
    let waited = before.elapsed();
    // Long enough for a delegate that outlived the DEL to have finished (before anything is
    // asserted: the bridges are removed as the test ends, even when it fails).
    std::thread::sleep(std::time::Duration::from_secs(4));
    ok(&out);
    assert!(
        waited > std::time::Duration::from_secs(1),
        "DEL did not wait for the delegate left running"
    );
    // It waited long, and said for whom: the lock's holder is gone, and the delegate it left
    // holds it now.
    let logged = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("DEL: container c-killed: still waiting after 10 s")
            && logged.contains("that process is gone, and the lock is held by what it started")
            && logged.contains("(slow-bridge)"),
        "{logged}"
    );
    assert_eq!(del.ns.links(), ["lo"], "left in the pod");
    assert_eq!(del.node.all_allocations(), 0, "addresses left");
    assert_eq!(state_files(&del.node), Vec::<String>::new());
}

#[test]
fn a_call_refused_before_its_work_says_why_in_plumbs_log_too() {
    // The runtime's copy of the error is not always at hand (a kubelet event long gone, a
    // runtime's log rotated): a bad CNI_ARGS and a container lock that cannot be taken are in
    // plumb's log as every later failure is.
    testkit::netns::require_root();
    let node = Node::new();
    let log = node.path("plumb.log");
    let config = node.config(json!({
        "logFile": log, "logLevel": "error", "logToStderr": false,
        "delegates": [node.bridge("net-a", &unique_name("pa"), 60)]
    }));
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let call = |container_id, args| CniCall {
        command: "ADD",
        container_id,
        netns: &netns,
        ifname: "eth0",
        args,
        config: &config,
    };
    let e = err(&run(&call(
        "c-args",
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default",
    )));
    assert_eq!(e["code"], 4, "{e}");
    // The lock file's place is taken by a directory: the lock cannot be opened.
    fs::create_dir_all(node.state_dir().join("c-lock.lock")).unwrap();
    let e = err(&run(&call("c-lock", "")));
    assert!(e["msg"].as_str().unwrap().contains("c-lock.lock"), "{e}");
    assert_eq!(ns.links(), ["lo"]);
    let logged = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("[error] container c-args: CNI_ARGS names a pod but has no K8S_POD_NAME"),
        "{logged}"
    );
    assert!(
        logged.contains("[error] ADD: container c-lock: ") && logged.contains("c-lock.lock"),
        "{logged}"
    );
}

#[test]
fn a_del_removes_its_records_temporary_files_and_no_other() {
    // What a call killed while writing the record left (`.<id>.json.tmp<pid>`) goes with the
    // container's DEL, deterministically here (the kill sweeps of e2e_kubernetes.rs meet it by
    // timing); another container's, and names that only look alike, stay.
    testkit::netns::require_root();
    let node = Node::new();
    let bridge = unique_name("pr");
    let _bridge = Link::adopt(&bridge);
    let config = node.config(json!({"delegates": [node.bridge("net-a", &bridge, 61)]}));
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let call = |command| CniCall {
        command,
        container_id: "c-st",
        netns: &netns,
        ifname: "eth0",
        args: "",
        config: &config,
    };
    ok(&run(&call("ADD")));
    let dir = node.state_dir();
    for name in [
        ".c-st.json.tmp4242",
        ".c-st.json.tmp",
        ".c-st2.json.tmp4242",
        ".c-st.json.tmp1.json.tmp2",
    ] {
        fs::write(dir.join(name), "{}").unwrap();
    }
    ok(&run(&call("DEL")));
    assert_eq!(
        state_files(&node),
        [
            ".c-st.json.tmp",
            ".c-st.json.tmp1.json.tmp2",
            ".c-st2.json.tmp4242"
        ]
    );
}

#[test]
fn a_del_removes_what_an_add_killed_while_writing_a_result_cache_entry_left() {
    // An ADD killed between writing a result cache entry under its temporary name and renaming
    // it into place leaves `.<network>-<id>-<ifname>.tmp<pid>` and no entry: the DEL removes
    // it; another container's stays.
    testkit::netns::require_root();
    let node = Node::new();
    let bridge = unique_name("pr");
    let _bridge = Link::adopt(&bridge);
    let config = node.config(json!({"delegates": [node.bridge("net-a", &bridge, 62)]}));
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let call = |command| CniCall {
        command,
        container_id: "c-kc",
        netns: &netns,
        ifname: "eth0",
        args: "",
        config: &config,
    };
    ok(&run(&call("ADD")));
    let results = node.cache_dir().join("results");
    let entry = results.join("net-a-c-kc-eth0");
    assert!(entry.exists());
    fs::rename(&entry, results.join(".net-a-c-kc-eth0.tmp4242")).unwrap();
    fs::write(results.join(".net-a-c-other-eth0.tmp4242"), "{}").unwrap();
    ok(&run(&call("DEL")));
    assert_eq!(node.cache_entries(), [".net-a-c-other-eth0.tmp4242"]);
}
