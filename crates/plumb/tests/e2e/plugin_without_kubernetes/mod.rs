//! plumb as the runtime's CNI plugin with no Kubernetes in the picture (inline `delegates`): the
//! built binary run as a runtime runs it, the reference plugins doing the work in real network
//! namespaces. What ADD leaves, and that DEL leaves nothing, in every way it can be reached.
//! Needs root (CI runs as root).

use std::fs;

use crate::common::{CniCall, Node, err, ok, run, run_node_wide, run_without};
use serde_json::{Value, json};
use testkit::netns::{Link, Netns, unique_name};

struct Pod {
    node: Node,
    ns: Netns,
    config: Value,
    _bridges: Vec<Link>,
}

/// A sandbox whose plumb config has the given delegates; `bridges` are adopted for cleanup.
fn pod(delegates: impl FnOnce(&Node) -> (Vec<Value>, Vec<String>)) -> Pod {
    testkit::netns::require_root();
    let node = Node::new();
    let (delegates, bridges) = delegates(&node);
    let config = node.config(json!({"delegates": delegates}));
    Pod {
        ns: Netns::new(),
        config,
        _bridges: bridges.iter().map(|b| Link::adopt(b)).collect(),
        node,
    }
}

impl Pod {
    fn call(&self, command: &str, container_id: &str) -> std::process::Output {
        run(&CniCall {
            command,
            container_id,
            netns: &self.ns.path().display().to_string(),
            ifname: "eth0",
            args: "IgnoreUnknown=1",
            config: &self.config,
        })
    }
}

fn two_bridges(subnet_a: u8, subnet_b: u8) -> impl FnOnce(&Node) -> (Vec<Value>, Vec<String>) {
    move |node: &Node| {
        let (a, b) = (unique_name("pa"), unique_name("pb"));
        (
            vec![
                node.bridge("net-a", &a, subnet_a),
                node.bridge("net-b", &b, subnet_b),
            ],
            vec![a, b],
        )
    }
}

/// A call for a sandbox whose delegates are fakes (the namespace, made for the call, is not
/// touched: plumb only checks that it is one).
fn fake_call(config: &Value, command: &str, container_id: &str) -> std::process::Output {
    fake_call_with_args(config, command, container_id, "")
}

/// [`fake_call`] with these `CNI_ARGS`.
fn fake_call_with_args(
    config: &Value,
    command: &str,
    container_id: &str,
    args: &str,
) -> std::process::Output {
    let ns = testkit::netns::Netns::new();
    run(&CniCall {
        command,
        container_id,
        netns: &ns.path().display().to_string(),
        ifname: "eth0",
        args,
        config,
    })
}

/// Two recording fake delegates in the node's configuration: `net-a` (fake-a), then `net-b`
/// (fake-b).
fn two_fakes(
    node: &Node,
) -> (
    testkit::fake_plugin::FakePlugin,
    testkit::fake_plugin::FakePlugin,
    Value,
) {
    two_fakes_speaking(node, "1.0.0")
}

/// [`two_fakes`], plumb's configuration and both networks of this `cniVersion` (1.1.0 for
/// STATUS and GC to reach them).
fn two_fakes_speaking(
    node: &Node,
    version: &str,
) -> (
    testkit::fake_plugin::FakePlugin,
    testkit::fake_plugin::FakePlugin,
    Value,
) {
    use testkit::fake_plugin::FakePlugin;
    let bin = node.path("bin");
    let a = FakePlugin::install(&bin, "fake-a");
    let b = FakePlugin::install(&bin, "fake-b");
    let config = node.config(json!({"cniVersion": version, "binDir": bin, "delegates": [
        {"cniVersion": version, "name": "net-a", "type": "fake-a"},
        {"cniVersion": version, "name": "net-b", "type": "fake-b"}]}));
    (a, b, config)
}

/// The files in the node's record directory (none when it does not exist).
fn state_files(node: &Node) -> Vec<String> {
    crate::common::files_in(&node.state_dir())
}

#[test]
fn two_delegates_add_then_del_leaves_nothing() {
    let p = pod(two_bridges(1, 2));
    let result = ok(&p.call("ADD", "c-two"));
    // The runtime gets the default network's result, in plumb's cniVersion.
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["ips"][0]["address"], "10.203.1.2/24");
    assert_eq!(p.ns.addresses("eth0"), ["10.203.1.2/24"]);
    assert_eq!(p.ns.addresses("net1"), ["10.203.2.2/24"]);

    let record: Value = serde_json::from_slice(&fs::read(p.node.record("c-two")).unwrap()).unwrap();
    let attachments = record["attachments"].as_array().unwrap();
    assert_eq!(attachments.len(), 2);
    assert_eq!(attachments[1]["ifname"], "net1");
    assert_eq!(attachments[1]["config"]["name"], "net-b");

    // ADD again without DEL (a runtime retrying): the first ADD is undone first, nothing leaks.
    ok(&p.call("ADD", "c-two"));
    assert_eq!(p.node.all_allocations(), 2);

    ok(&p.call("DEL", "c-two"));
    assert_eq!(p.ns.links(), ["lo"]);
    assert_eq!(p.node.all_allocations(), 0);
    assert!(!p.node.record("c-two").exists());
    assert!(
        p.node.cache_entries().is_empty(),
        "{:?}",
        p.node.cache_entries()
    );
    // DEL again: nothing left to do, and that is a success.
    ok(&p.call("DEL", "c-two"));
}

#[test]
fn a_delegate_failing_midway_is_rolled_back_and_named() {
    let p = pod(|node| {
        let (a, b) = (unique_name("pa"), unique_name("pb"));
        let mut second = node.bridge("net-b", &b, 4);
        second = json!({"cniVersion": "1.0.0", "name": "tuned", "plugins": [
            second,
            // tuning refuses this after the bridge plugin made the interface and took an IP.
            {"type": "tuning", "mac": "not-a-mac"}]});
        (vec![node.bridge("net-a", &a, 3), second], vec![a, b])
    });
    let e = err(&p.call("ADD", "c-fail"));
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("attachment 2 of 2") && msg.contains("tuned") && msg.contains("net1"),
        "{e}"
    );
    // Nothing is left: both attachments were undone, no address is held, nothing to undo.
    assert_eq!(p.ns.links(), ["lo"]);
    assert_eq!(p.node.all_allocations(), 0);
    assert!(p.node.left_to_undo("c-fail").is_empty(), "{e}");
    // The runtime's DEL after a failed ADD succeeds, and the record goes.
    ok(&p.call("DEL", "c-fail"));
    assert!(!p.node.record("c-fail").exists());
}

#[test]
fn when_the_rollback_fails_too_the_record_stays_for_del() {
    // Debian's macvlan 1.1.1 looks its master up on DEL too, so with a missing master both
    // ADD and DEL fail: the record must stay, and the error must say so.
    let p = pod(|node| {
        let a = unique_name("pa");
        (
            vec![
                node.bridge("net-a", &a, 11),
                json!({"cniVersion": "1.0.0", "name": "broken", "type": "macvlan",
                       "master": "no-such-link0",
                       "ipam": {"type": "host-local", "subnet": "10.203.12.0/24",
                                "dataDir": node.ipam_dir()}}),
            ],
            vec![a],
        )
    });
    let e = err(&p.call("ADD", "c-stuck"));
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .contains("record keeps what is left"),
        "{e}"
    );
    // What could be undone was: the first attachment is gone and its address released, and
    // the record keeps only the one still to undo.
    assert_eq!(p.ns.links(), ["lo"]);
    assert_eq!(p.node.all_allocations(), 0);
    let record: Value =
        serde_json::from_slice(&fs::read(p.node.record("c-stuck")).unwrap()).unwrap();
    let kept = record["attachments"].as_array().unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["network"], "broken");
    // DEL keeps failing, naming the delegate, and keeps the record.
    let e = err(&p.call("DEL", "c-stuck"));
    assert!(e["msg"].as_str().unwrap().contains("broken"), "{e}");
    assert!(p.node.record("c-stuck").exists());
}

#[test]
fn del_with_the_namespace_gone_still_releases_every_address() {
    let p = pod(two_bridges(5, 6));
    ok(&p.call("ADD", "c-gone"));
    assert_eq!(p.node.all_allocations(), 2);
    let netns = p.ns.path().display().to_string();
    testkit::netns::ip(&["netns", "del", p.ns.name()]);
    let out = run(&CniCall {
        command: "DEL",
        container_id: "c-gone",
        netns: &netns,
        ifname: "eth0",
        args: "IgnoreUnknown=1",
        config: &p.config,
    });
    ok(&out);
    assert_eq!(p.node.all_allocations(), 0);
    assert!(!p.node.record("c-gone").exists());
}

#[test]
fn a_corrupt_record_is_an_error_not_a_silent_success() {
    let p = pod(two_bridges(7, 8));
    ok(&p.call("ADD", "c-corrupt"));
    fs::write(p.node.record("c-corrupt"), "{\"version\":1,\"attach").unwrap();
    let e = err(&p.call("DEL", "c-corrupt"));
    assert_eq!(e["code"], 6, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("corrupt"), "{e}");
    // The addresses are still held: nothing was silently dropped. Clean up by hand, as the
    // message tells the operator to.
    assert_eq!(p.node.all_allocations(), 2);
    fs::remove_file(p.node.record("c-corrupt")).unwrap();
    ok(&p.call("DEL", "c-corrupt"));
    assert_eq!(p.node.all_allocations(), 0, "DEL planned from the config");
}

#[test]
fn check_covers_every_attachment() {
    let p = pod(two_bridges(9, 10));
    ok(&p.call("ADD", "c-check"));
    ok(&p.call("CHECK", "c-check"));
    testkit::netns::ip(&["-n", p.ns.name(), "link", "del", "net1"]);
    let e = err(&p.call("CHECK", "c-check"));
    assert!(
        e["msg"].as_str().unwrap().contains("attachment 2 of 2"),
        "{e}"
    );
    ok(&p.call("DEL", "c-check"));
    assert_eq!(p.node.all_allocations(), 0);
}

#[test]
fn version_and_bad_configurations() {
    let node = Node::new();
    let config =
        node.config(json!({"delegates": [{"cniVersion": "1.0.0", "name": "x", "type": "bridge"}]}));
    let out = run(&CniCall {
        command: "VERSION",
        container_id: "",
        netns: "",
        ifname: "",
        args: "",
        config: &config,
    });
    let v = ok(&out);
    assert_eq!(v["supportedVersions"].as_array().unwrap().len(), 7);

    let mut bad = config.clone();
    bad["namespaceIsolaton"] = json!(true);
    let out = run(&CniCall {
        command: "ADD",
        container_id: "c-bad",
        netns: "/var/run/netns/none",
        ifname: "eth0",
        args: "",
        config: &bad,
    });
    let e = err(&out);
    assert_eq!(e["code"], 7);
    assert!(
        e["msg"].as_str().unwrap().contains("namespaceIsolaton"),
        "{e}"
    );
}

#[test]
fn gc_deletes_the_sandboxes_the_runtime_no_longer_has() {
    // CNI 1.1 GC: the runtime lists the attachments it still has; plumb deletes every other
    // sandbox it recorded (all its networks), and keeps the listed ones.
    let p = pod(two_bridges(13, 14));
    let mut config = p.config.clone();
    config["cniVersion"] = json!("1.1.0");
    let p = Pod { config, ..p };
    let ns2 = Netns::new();
    ok(&p.call("ADD", "c-live"));
    ok(&run(&CniCall {
        command: "ADD",
        container_id: "c-stale",
        netns: &ns2.path().display().to_string(),
        ifname: "eth0",
        args: "IgnoreUnknown=1",
        config: &p.config,
    }));
    assert_eq!(p.node.all_allocations(), 4);

    // Without the runtime's list, GC refuses rather than deleting every sandbox.
    let e = err(&run(&CniCall {
        command: "GC",
        container_id: "",
        netns: "",
        ifname: "",
        args: "",
        config: &p.config,
    }));
    assert_eq!(e["code"], 7, "{e}");
    assert_eq!(
        p.node.all_allocations(),
        4,
        "GC without a list touched nothing"
    );

    // Temporary files of writers killed before their rename (a record's, a cached result's, a
    // device-info file's): GC removes them once they are old; a fresh one may be a live
    // writer's and stays.
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    let device_info = p.node.path("devinfo");
    std::fs::create_dir_all(device_info.join("cni")).unwrap();
    let killed = [
        p.node.state_dir().join(".c-gone.json.tmp4242"),
        p.node
            .cache_dir()
            .join("results/.net-a-c-gone-net1.tmp4242"),
        device_info.join("cni/.ns-sriov-net-c-gone_net1.tmp4242-3"),
    ];
    for f in &killed {
        std::fs::File::create(f)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }
    let writing = p.node.state_dir().join(".c-new.json.tmp4343");
    std::fs::write(&writing, "{").unwrap();

    let writing_device_info = device_info.join("cni/.ns-sriov-net-c-new_net1.tmp4343-0");
    std::fs::write(&writing_device_info, "{").unwrap();
    // A lock file with no record: a DEL killed between removing the record and its lock file
    // leaves one, and GC removes it; one that a call holds (an ADD that has not staged its
    // record yet) stays.
    let orphan_lock = p.node.state_dir().join("c-killed.lock");
    std::fs::write(&orphan_lock, "").unwrap();
    let starting_lock = p.node.state_dir().join("c-starting.lock");
    std::fs::write(&starting_lock, "").unwrap();
    let starting = nix::fcntl::Flock::lock(
        std::fs::File::open(&starting_lock).unwrap(),
        nix::fcntl::FlockArg::LockExclusive,
    )
    .unwrap();

    let mut gc = p.config.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c-live", "ifname": "eth0"}]);
    gc["plumbDeviceInfoDir"] = json!(device_info);
    ok(&run_node_wide("GC", &gc));
    assert_eq!(
        p.node.all_allocations(),
        2,
        "the stale sandbox's addresses are released"
    );
    assert!(!p.node.record("c-stale").exists());
    assert!(
        !p.node.state_dir().join("c-stale.lock").exists(),
        "the stale sandbox's lock file is removed with its record"
    );
    assert!(p.node.record("c-live").exists());
    assert!(
        p.node.state_dir().join("c-live.lock").exists(),
        "a live sandbox's lock file was removed"
    );
    assert!(!orphan_lock.exists(), "a lock file with no record was left");
    assert!(
        starting_lock.exists(),
        "a lock file a call holds was removed"
    );
    drop(starting);
    assert!(
        killed.iter().all(|f| !f.exists()),
        "old temporary files left"
    );
    assert!(writing.exists(), "a fresh temporary file was removed");
    assert!(
        writing_device_info.exists(),
        "a fresh device-info temporary file was removed"
    );
    assert_eq!(ns2.links(), ["lo"]);
    assert_eq!(
        p.ns.addresses("net1"),
        ["10.203.14.2/24"],
        "the live one is untouched"
    );

    // STATUS: ready while the default network is (these delegates speak 1.0.0, which has no
    // STATUS of its own); not available (code 50) while its readiness file is missing.
    let status = |config: &Value| run_node_wide("STATUS", config);
    ok(&status(&p.config));
    let mut waiting = p.config.clone();
    waiting["readinessindicatorfile"] = json!(p.node.path("not-yet"));
    let e = err(&status(&waiting));
    assert_eq!(e["code"], 50, "{e}");
    ok(&p.call("DEL", "c-live"));
    assert_eq!(p.node.all_allocations(), 0);
}

#[test]
fn check_skips_delegates_too_old_for_check() {
    // CHECK exists from CNI 0.4.0: a 0.3.1 delegate has nothing to check, and must not fail
    // the pod's other attachments.
    let p = pod(|node| {
        let (a, b) = (unique_name("pa"), unique_name("pb"));
        let mut old = node.bridge("old-net", &b, 16);
        old["cniVersion"] = json!("0.3.1");
        (vec![node.bridge("net-a", &a, 15), old], vec![a, b])
    });
    ok(&p.call("ADD", "c-old"));
    ok(&p.call("CHECK", "c-old"));
    ok(&p.call("DEL", "c-old"));
    assert_eq!(p.node.all_allocations(), 0);
}

#[test]
fn status_and_gc_reach_every_known_network() {
    // Recording fake plugins speaking CNI 1.1, so STATUS and GC really reach them.
    let node = Node::new();
    let (a, b, mut config) = two_fakes_speaking(&node, "1.1.0");
    let call = |command: &str, cid: &str, config: &Value| fake_call(config, command, cid);
    ok(&call("ADD", "c-live", &config));
    ok(&call("ADD", "c-gone", &config));

    // STATUS asks both networks; a secondary one that is not available makes plumb say so.
    ok(&call("STATUS", "", &config));
    assert_eq!(a.calls_of("STATUS").len(), 1);
    assert_eq!(b.calls_of("STATUS").len(), 1);
    // CNI_PATH is optional for STATUS (CNI spec §2): the delegates are found in binDir.
    let bare = CniCall {
        command: "STATUS",
        container_id: "",
        netns: "",
        ifname: "",
        args: "",
        config: &config,
    };
    ok(&run_without(&bare, &["CNI_PATH"]));
    assert_eq!(a.calls_of("STATUS").len(), 2);
    assert_eq!(b.calls_of("STATUS").len(), 2);
    b.fail("STATUS", 50, "daemon down");
    let e = err(&call("STATUS", "", &config));
    assert_eq!(e["code"], 50, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert_eq!(msg.matches("network \"net-b\"").count(), 1, "{e}");

    // GC: the sandbox the runtime no longer lists gets DEL on both networks, then both
    // networks get GC with the live sandbox's attachments as valid.
    config["cni.dev/valid-attachments"] = json!([{"containerID": "c-live", "ifname": "eth0"}]);
    ok(&call("GC", "", &config));
    for (p, ifname) in [(&a, "eth0"), (&b, "net1")] {
        let dels = p.calls_of("DEL");
        assert_eq!(dels.len(), 1, "{ifname}");
        assert_eq!(dels[0].var("CNI_CONTAINERID"), Some("c-gone"));
        let gc = p.calls_of("GC");
        assert_eq!(gc.len(), 1, "{ifname}");
        assert_eq!(
            gc[0].stdin_json()["cni.dev/valid-attachments"],
            json!([{"containerID": "c-live", "ifname": ifname}]),
            "{ifname}"
        );
    }
    assert!(!node.record("c-gone").exists());
    assert!(node.record("c-live").exists());
}

#[test]
fn status_passes_on_a_delegates_limited_connectivity_code_51() {
    // CNI spec 1.1 §2 STATUS: a plugin relying on a delegate must run STATUS on it and return
    // an error when it does; code 51 ("existing containers may have limited connectivity") is
    // the delegate's to say and must reach the runtime as 51, not be flattened to 50.
    let node = Node::new();
    let (_a, b, config) = two_fakes_speaking(&node, "1.1.0");
    b.fail("STATUS", 51, "uplink degraded");
    let e = err(&fake_call(&config, "STATUS", ""));
    assert_eq!(e["code"], 51, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("net-b"), "{e}");
    // §5 "Error": the version in use is plumb's configuration's, not the delegate's error's.
    assert_eq!(e["cniVersion"], "1.1.0", "{e}");
}

#[test]
fn gc_goes_on_past_a_delegate_whose_gc_fails_and_reports_it() {
    // CNI spec 1.1 §2 GC: "If an error is encountered, a plugin should continue; removing as
    // many resources as possible, and report the errors back to the runtime", and GC MUST be
    // forwarded to every delegate. The first network's GC failing must not keep the second's
    // from running, and plumb must still fail, naming it.
    let node = Node::new();
    let (a, b, mut config) = two_fakes_speaking(&node, "1.1.0");
    ok(&fake_call(&config, "ADD", "c-live"));
    a.fail("GC", 11, "ipam store locked");
    config["cni.dev/valid-attachments"] = json!([{"containerID": "c-live", "ifname": "eth0"}]);
    let e = err(&fake_call(&config, "GC", ""));
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("ipam store locked"),
        "{e}"
    );
    assert_eq!(a.calls_of("GC").len(), 1);
    let gc = b.calls_of("GC");
    assert_eq!(gc.len(), 1, "net-b still gets GC");
    assert_eq!(
        gc[0].stdin_json()["cni.dev/valid-attachments"],
        json!([{"containerID": "c-live", "ifname": "net1"}])
    );
    assert!(node.record("c-live").exists(), "a live sandbox is kept");
}

#[test]
fn the_runtimes_capability_args_reach_the_default_network_only_as_declared() {
    // CNI spec 1.1 §3 "Deriving runtimeConfig" and CONVENTIONS.md (portMappings, bandwidth):
    // the runtime's runtimeConfig given to plumb (which declares the capabilities) goes, as the
    // runtime of its delegates, to the plugins that declare each capability, of the default
    // network, without `capabilities`. Multi-net spec §7.5: it "must not be passed to or
    // applied by network attachments other than the cluster-wide default network", even one
    // whose plugin declares the capability (Multus gives it to every delegate).
    let node = Node::new();
    let (a, b, mut config) = two_fakes(&node);
    let ports = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]);
    config["capabilities"] = json!({"portMappings": true, "bandwidth": true});
    config["runtimeConfig"] = json!({"portMappings": ports, "bandwidth": {"ingressRate": 2048}});
    for delegate in config["delegates"].as_array_mut().unwrap() {
        delegate["capabilities"] = json!({"portMappings": true});
    }
    ok(&fake_call(&config, "ADD", "c-caps"));
    let add = a.calls_of("ADD");
    let stdin = add[0].stdin_json();
    assert_eq!(
        stdin["runtimeConfig"],
        json!({"portMappings": ports}),
        "{stdin}"
    );
    assert!(stdin.get("capabilities").is_none(), "{stdin}");
    let stdin = b.calls_of("ADD")[0].stdin_json();
    assert!(stdin.get("runtimeConfig").is_none(), "{stdin}");
    // DEL gives the same capability args (libcni caches them with the result).
    ok(&fake_call(&config, "DEL", "c-caps"));
    let del = a.calls_of("DEL")[0].stdin_json();
    assert_eq!(
        del["runtimeConfig"],
        json!({"portMappings": ports}),
        "{del}"
    );
    let del = b.calls_of("DEL")[0].stdin_json();
    assert!(del.get("runtimeConfig").is_none(), "{del}");
}

/// A NAD `net-x` of the fake plugin `fake-b` in `dir` (read through `plumbNadDir`), with the
/// extra configuration keys `extra`.
fn write_fake_nad(dir: &std::path::Path, extra: Value) {
    let mut config = json!({"cniVersion": "1.1.0", "type": "fake-b"});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    fs::create_dir_all(dir).unwrap();
    let nad = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "net-x"}, "spec": {"config": config.to_string()}});
    fs::write(dir.join("net-x.json"), nad.to_string()).unwrap();
}

#[test]
fn status_and_gc_reach_a_network_each_pod_attaches_with_its_own_arguments() {
    // Pods that select one NAD with their own `cni-args` (or IPAM claim, or device) give each
    // attachment its own delegate configuration, but it is one network: STATUS and GC reach
    // it, with the NAD's own configuration, not one pod's arguments. So does a NAD edited
    // while pods attached with its old configuration still run: GC reaches both
    // configurations, each with every live attachment of the network as valid.
    use testkit::fake_plugin::FakePlugin;
    let node = Node::new();
    let bin = node.path("bin");
    let a = FakePlugin::install(&bin, "fake-a");
    let b = FakePlugin::install(&bin, "fake-b");
    let nads = node.path("nads");
    write_fake_nad(&nads, json!({}));
    let mut config = node.config(json!({"cniVersion": "1.1.0", "binDir": bin,
        "plumbNadDir": nads,
        "delegates": [{"cniVersion": "1.1.0", "name": "net-a", "type": "fake-a"}]}));
    let call = |command: &str, cid: &str, args: &str, config: &Value| {
        fake_call_with_args(config, command, cid, args)
    };
    let selecting = |vf: &str| {
        format!(r#"IgnoreUnknown=1;PLUMB_NETWORKS=[{{"name":"net-x","cni-args":{{"vf":"{vf}"}}}}]"#)
    };
    ok(&call("ADD", "c-1", &selecting("1"), &config));
    ok(&call("ADD", "c-2", &selecting("2"), &config));
    let added = b.calls_of("ADD");
    assert_eq!(added[0].stdin_json()["args"]["cni"]["vf"], "1");
    assert_eq!(added[1].stdin_json()["args"]["cni"]["vf"], "2");
    // The record keeps the network's own configuration only where the pod added to it.
    let record: Value = serde_json::from_slice(&fs::read(node.record("c-1")).unwrap()).unwrap();
    assert!(record["attachments"][0].get("networkConfig").is_none());
    let own = &record["attachments"][1]["networkConfig"];
    assert!(own["plugins"][0].get("args").is_none(), "{own}");

    ok(&call("STATUS", "", "", &config));
    let status = b.calls_of("STATUS");
    assert_eq!(status.len(), 1, "net-x was left out of STATUS");
    assert_eq!(status[0].stdin_json()["name"], "net-x");
    assert!(
        status[0].stdin_json().get("args").is_none(),
        "one pod's arguments"
    );

    // The NAD changes; a third pod attaches with the new configuration.
    write_fake_nad(&nads, json!({"mtu": 1400}));
    ok(&call("ADD", "c-3", &selecting("3"), &config));
    config["cni.dev/valid-attachments"] = json!([
        {"containerID": "c-1", "ifname": "eth0"}, {"containerID": "c-3", "ifname": "eth0"}]);
    ok(&call("GC", "", "", &config));
    let dels = b.calls_of("DEL");
    assert_eq!(dels.len(), 1);
    assert_eq!(dels[0].var("CNI_CONTAINERID"), Some("c-2"));
    let gc = b.calls_of("GC");
    assert_eq!(gc.len(), 2, "each configuration of net-x gets GC");
    let mtus: Vec<Value> = gc.iter().map(|c| c.stdin_json()["mtu"].clone()).collect();
    assert_eq!(mtus, [Value::Null, json!(1400)]);
    for c in &gc {
        let stdin = c.stdin_json();
        assert!(stdin.get("args").is_none(), "one pod's arguments: {stdin}");
        assert_eq!(
            stdin["cni.dev/valid-attachments"],
            json!([{"containerID": "c-1", "ifname": "net1"},
                   {"containerID": "c-3", "ifname": "net1"}])
        );
    }
    assert_eq!(a.calls_of("GC").len(), 1);
}

#[test]
fn attachments_after_a_failure_are_neither_added_nor_deleted() {
    // multi-net spec §7.2: "attachments that have not yet been performed shall not be
    // attempted"; the rollback touches only what ran, in reverse.
    use testkit::fake_plugin::{FakePlugin, sequence};
    let node = Node::new();
    let bin = node.path("bin");
    let _a = FakePlugin::install(&bin, "fake-a");
    let b = FakePlugin::install(&bin, "fake-b");
    let c = FakePlugin::install(&bin, "fake-c");
    b.fail("ADD", 11, "try later");
    let config = node.config(json!({"binDir": bin, "delegates": [
        {"cniVersion": "1.0.0", "name": "net-a", "type": "fake-a"},
        {"cniVersion": "1.0.0", "name": "net-b", "type": "fake-b"},
        {"cniVersion": "1.0.0", "name": "net-c", "type": "fake-c"}]}));
    let e = err(&fake_call(&config, "ADD", "c-three"));
    assert_eq!(
        e["code"], 11,
        "the delegate's code reaches the runtime: {e}"
    );
    let order: Vec<String> = sequence(&bin)
        .into_iter()
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    assert_eq!(
        order,
        ["fake-a ADD", "fake-b ADD", "fake-b DEL", "fake-a DEL"]
    );
    assert!(c.calls().is_empty());
    // The runtime's DEL after the failed ADD has nothing left to undo: it runs no plugin
    // (DELs planned again would repeat the rollback's, and reach net-c, which never ran).
    assert!(node.left_to_undo("c-three").is_empty());
    let e = err(&fake_call(&config, "CHECK", "c-three"));
    assert_eq!(e["code"], 3, "CHECK of a failed ADD: {e}");
    ok(&fake_call(&config, "DEL", "c-three"));
    assert_eq!(sequence(&bin).len(), 4, "{:?}", sequence(&bin));
    assert!(!node.record("c-three").exists());
}

#[test]
fn the_record_is_in_place_before_the_first_delegate_reads_its_configuration() {
    // The record's fsyncs overlap the first delegate's start-up, but that delegate gets its
    // stdin only once the record is there, naming every attachment (multi-net spec §7.2: DEL
    // must be able to undo whatever ADD began).
    let node = Node::new();
    let (a, b, config) = two_fakes(&node);
    a.copy_on_add(&node.record("c-first"));
    let call = |command| fake_call(&config, command, "c-first");
    ok(&call("ADD"));
    let seen = a.calls_of("ADD")[0]
        .copied
        .clone()
        .expect("the record existed when the first delegate read its stdin");
    let record: Value = serde_json::from_slice(&seen).unwrap();
    let networks: Vec<&str> = record["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["config"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(networks, ["net-a", "net-b"]);
    assert_eq!(b.calls_of("ADD").len(), 1);
    // No temporary file is left beside it; the container's lock file stays until its DEL.
    assert_eq!(state_files(&node), ["c-first.json", "c-first.lock"]);
    ok(&call("DEL"));
    assert!(state_files(&node).is_empty(), "{:?}", state_files(&node));
}

mod failures;
