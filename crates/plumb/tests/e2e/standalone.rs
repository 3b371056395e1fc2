//! plumb without Kubernetes: `plumb plan` (compared with a fixture of the exact delegate
//! stdin), `plumb attach`/`detach` with NADs from files, and the CNI plugin with `plumbNadDir`
//! and a selection in `CNI_ARGS`. The attach tests need root (CI runs as root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{CniCall, Node, err, ok, run, run_node_wide};
use serde_json::{Value, json};
use testkit::netns::{Link, Netns, unique_name};

fn plumb(args: &[&str]) -> Output {
    plumb_command(args).output().expect("run plumb")
}

/// `plumb plan` of the pod in `pod`, with the demo's NADs and configuration and `more`
/// arguments.
fn plan_demo(pod: &Path, more: &[&str]) -> Output {
    let (nads, config) = (
        repo("examples/standalone/nads"),
        repo("examples/standalone/plumb.conf"),
    );
    let mut args = vec![
        "plan",
        "--pod",
        s(pod),
        "--nads",
        s(&nads),
        "--config",
        s(&config),
    ];
    args.extend(more);
    plumb(&args)
}

/// `plumb` with these arguments and the reference plugins on `CNI_PATH`, not yet run.
fn plumb_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_plumb"));
    command.args(args).env("CNI_PATH", crate::common::PLUGINS);
    command
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(p)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn plan_prints_the_exact_stdin_of_every_delegate() {
    let out = plan_demo(&repo("examples/standalone/pods/demo.yaml"), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: Value = serde_json::from_slice(
        &std::fs::read(repo("crates/plumb/tests/fixtures/plan/demo.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(got, want);
}

#[test]
fn plan_prints_the_error_add_would_return() {
    let d = tempfile::tempdir().unwrap();
    let pod = d.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: team\n  annotations:\n    \
         k8s.v1.cni.cncf.io/networks: macvlan\n",
    )
    .unwrap();
    let out = plan_demo(&pod, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("pod team/p") && e.contains("team/macvlan not found") && e.contains("code 7"),
        "{e}"
    );
}

#[test]
fn plan_refuses_an_interface_name_add_would_refuse() {
    // ADD refuses such a CNI_IFNAME (code 4) before planning: `plan`, which shows what ADD
    // would do with the same rules and errors, must not print a plan for it.
    for ifname in ["bad/name", "", "waytoolonginterfacename"] {
        let out = plan_demo(
            &repo("examples/standalone/pods/demo.yaml"),
            &["--ifname", ifname],
        );
        assert_eq!(out.status.code(), Some(1), "{ifname:?}");
        assert!(out.stdout.is_empty(), "{ifname:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains(&format!("--ifname: invalid interface name {ifname:?}"))
                && e.contains("code 4"),
            "{e}"
        );
    }
}

/// NADs in a temporary directory: a bridge and a macvlan on `parent`, host-local in `ipam`.
fn write_nads(dir: &Path, bridge: &str, parent: &str, ipam: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let nad = |name: &str, config: Value| {
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": name}, "spec": {"config": config.to_string()}})
    };
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        nad("br", json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge,
            "ipam": {"type": "host-local", "subnet": "10.219.2.0/24", "dataDir": ipam}})),
        nad("mv", json!({"cniVersion": "1.0.0", "type": "macvlan", "master": parent,
            "ipam": {"type": "host-local", "subnet": "10.219.3.0/24", "dataDir": ipam}})),
    ]});
    std::fs::write(dir.join("nads.json"), list.to_string()).unwrap();
}

/// A node and a netns for `plumb attach`: the default network a bridge (subnet
/// `10.219.<default_subnet>.0/24`), the NADs of [`write_nads`] in `nads/`, the configuration in
/// `plumb.conf`. Bind `_links` when taking it apart: its links are deleted when it drops.
struct Attachable {
    node: Node,
    b1: String,
    _links: [Link; 3],
    config_file: PathBuf,
    ns: Netns,
}

impl Attachable {
    fn new(default_subnet: u8) -> Attachable {
        testkit::netns::require_root();
        let node = Node::new();
        let (b0, b1, parent) = (unique_name("sd"), unique_name("sb"), unique_name("sp"));
        let links = [Link::adopt(&b0), Link::adopt(&b1), Link::bridge(&parent)];
        write_nads(&node.path("nads"), &b1, &parent, &node.ipam_dir());
        let config =
            node.config(json!({"delegates": [node.bridge("default-net", &b0, default_subnet)]}));
        let config_file = node.path("plumb.conf");
        std::fs::write(&config_file, config.to_string()).unwrap();
        Attachable {
            node,
            b1,
            _links: links,
            config_file,
            ns: Netns::new(),
        }
    }
}

#[test]
fn attach_and_detach_with_nads_from_files() {
    let Attachable {
        node,
        b1,
        config_file,
        ns,
        _links,
        ..
    } = Attachable::new(1);

    let out = plumb(&[
        "attach",
        "--netns",
        ns.name(),
        "--networks",
        "br,mv@mv1",
        "--nads",
        s(&node.path("nads")),
        "--config",
        s(&config_file),
    ]);
    let status = ok(&out);
    let interfaces: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["interface"].as_str().unwrap())
        .collect();
    assert_eq!(interfaces, ["eth0", "net1", "mv1"]);
    assert_eq!(status[1]["name"], "default/br");
    assert_eq!(ns.addresses("net1"), ["10.219.2.2/24"]);
    assert_eq!(ns.addresses("mv1"), ["10.219.3.2/24"]);

    let out = plumb(&["detach", "--netns", ns.name(), "--config", s(&config_file)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
    // Detaching what is not attached says so.
    let out = plumb(&["detach", "--netns", ns.name(), "--config", s(&config_file)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing is attached"));

    // An attach that fails is undone and leaves nothing behind, not even a record: no runtime
    // follows it with DEL, and detach says nothing is attached.
    let tuned = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "tuned"}, "spec": {"config": json!({
            "cniVersion": "1.0.0", "name": "tuned", "plugins": [
                {"type": "bridge", "bridge": b1,
                 "ipam": {"type": "host-local", "subnet": "10.219.4.0/24",
                          "dataDir": node.ipam_dir()}},
                // tuning refuses this after the bridge plugin made the interface.
                {"type": "tuning", "mac": "not-a-mac"}]}).to_string()}});
    std::fs::write(node.path("nads").join("tuned.json"), tuned.to_string()).unwrap();
    let out = plumb(&[
        "attach",
        "--netns",
        ns.name(),
        "--networks",
        "tuned",
        "--nads",
        s(&node.path("nads")),
        "--config",
        s(&config_file),
    ]);
    assert!(!out.status.success());
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
    let records = std::fs::read_dir(node.state_dir()).map_or(0, |d| d.count());
    assert_eq!(records, 0, "a record is left");
    let out = plumb(&["detach", "--netns", ns.name(), "--config", s(&config_file)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing is attached"));
}

#[test]
fn the_runtimes_gc_leaves_what_attach_made() {
    // `plumb attach` shares the plugin's records and cache. The runtime's GC lists only its own
    // sandboxes as valid; what an operator attached by hand must survive it.
    testkit::netns::require_root();
    let node = Node::new();
    let (b0, b1, parent) = (unique_name("sd"), unique_name("sb"), unique_name("sp"));
    let _links = [Link::adopt(&b0), Link::adopt(&b1), Link::bridge(&parent)];
    write_nads(&node.path("nads"), &b1, &parent, &node.ipam_dir());
    let config = node.config(json!({"cniVersion": "1.1.0",
        "delegates": [node.bridge("default-net", &b0, 5)]}));
    let config_file = node.path("plumb.conf");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let ns = Netns::new();
    ok(&plumb(&[
        "attach",
        "--netns",
        ns.name(),
        "--networks",
        "br",
        "--nads",
        s(&node.path("nads")),
        "--config",
        s(&config_file),
    ]));
    assert_eq!(node.all_allocations(), 2);

    let mut gc = config.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c-other", "ifname": "eth0"}]);
    ok(&run_node_wide("GC", &gc));
    assert_eq!(
        ns.addresses("net1"),
        ["10.219.2.2/24"],
        "GC undid the attach"
    );
    assert_eq!(node.all_allocations(), 2);

    ok(&plumb(&[
        "detach",
        "--netns",
        ns.name(),
        "--config",
        s(&config_file),
    ]));
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
}

#[test]
fn the_cni_plugin_without_kubernetes_reads_nads_from_files() {
    testkit::netns::require_root();
    let node = Node::new();
    let (b0, b1, parent) = (unique_name("sd"), unique_name("sb"), unique_name("sp"));
    let _links = [Link::adopt(&b0), Link::adopt(&b1), Link::bridge(&parent)];
    write_nads(&node.path("nads"), &b1, &parent, &node.ipam_dir());
    let config = node.config(json!({"plumbNadDir": node.path("nads"),
        "delegates": [node.bridge("default-net", &b0, 4)]}));
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let call = |command, args| {
        run(&CniCall {
            command,
            container_id: "c-files",
            netns: &netns,
            ifname: "eth0",
            args,
            config: &config,
        })
    };
    ok(&call("ADD", "IgnoreUnknown=1;PLUMB_NETWORKS=br,mv@mv1"));
    assert_eq!(ns.addresses("net1"), ["10.219.2.2/24"]);
    assert_eq!(ns.addresses("mv1"), ["10.219.3.2/24"]);
    ok(&call("DEL", "IgnoreUnknown=1;PLUMB_NETWORKS=br,mv@mv1"));
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
    // A selection naming a NAD the files do not have fails, naming it.
    let e = err(&call("ADD", "IgnoreUnknown=1;PLUMB_NETWORKS=nope"));
    assert!(e["msg"].as_str().unwrap().contains("default/nope"), "{e}");
    // Without IgnoreUnknown, as docs/configuration.md shows it: PLUMB_NETWORKS is plumb's key,
    // not the delegates'. Passed on, the reference plugins refused it ("unknown args"), the
    // rollback failed the same way, and DEL (replaying the recorded arguments) for ever.
    ok(&call("ADD", "PLUMB_NETWORKS=br"));
    // host-local hands out the next address of the range after the one released above.
    assert_eq!(ns.addresses("net1"), ["10.219.2.3/24"]);
    ok(&call("DEL", "PLUMB_NETWORKS=br"));
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
    // A runtime that gives the pod's keys without IgnoreUnknown: Multus always gives its
    // delegates `IgnoreUnknown=true` first (docs/multus-behaviour.md §2.6), so they take them.
    let args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_UID=u1;PLUMB_NETWORKS=br";
    ok(&call("ADD", args));
    assert_eq!(ns.addresses("net1"), ["10.219.2.4/24"]);
    ok(&call("DEL", args));
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
}

#[test]
fn status_prints_a_pods_network_status_as_a_table() {
    let d = tempfile::tempdir().unwrap();
    let pod = d.path().join("pod.json");
    let status = json!([
        {"name": "kube-system/default-net", "interface": "eth0", "ips": ["10.1.0.5"],
         "mac": "02:00:00:00:00:05", "default": true},
        {"name": "default/net-a", "interface": "net1", "ips": ["10.2.0.5", "fd00::5"],
         "mac": "02:00:00:00:01:05", "default-route": ["10.2.0.1"]}
    ]);
    std::fs::write(
        &pod,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web",
            "annotations": {"k8s.v1.cni.cncf.io/network-status": status.to_string()}}})
        .to_string(),
    )
    .unwrap();
    let out = plumb(&["status", s(&pod)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("NETWORK") && lines[0].contains("INTERFACE"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("kube-system/default-net") && lines[1].ends_with("default"),
        "{text}"
    );
    assert!(
        lines[2].contains("net1")
            && lines[2].contains("10.2.0.5,fd00::5")
            && lines[2].ends_with("default-route via 10.2.0.1"),
        "{text}"
    );
    // A pod that was never attached says so.
    let bare = d.path().join("bare.yaml");
    std::fs::write(&bare, "kind: Pod\nmetadata: {name: bare}\n").unwrap();
    let out = plumb(&["status", s(&bare)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no \"k8s.v1.cni.cncf.io/network-status\"")
    );
}

#[test]
fn attach_refuses_a_device_backed_network_it_cannot_give_a_device() {
    testkit::netns::require_root();
    let node = Node::new();
    let nads = node.path("nads");
    std::fs::create_dir_all(&nads).unwrap();
    std::fs::write(
        nads.join("vf.json"),
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": "vf",
                            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"}},
               "spec": {"config": json!({"cniVersion": "1.0.0", "type": "host-device"}).to_string()}})
        .to_string(),
    )
    .unwrap();
    let b0 = unique_name("sr");
    let _link = Link::adopt(&b0);
    let config = node.config(json!({"delegates": [node.bridge("default-net", &b0, 9)]}));
    let config_file = node.path("plumb.conf");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let ns = Netns::new();
    let out = plumb(&[
        "attach",
        "--netns",
        ns.name(),
        "--networks",
        "vf",
        "--nads",
        s(&nads),
        "--config",
        s(&config_file),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("network default/vf is backed by device resource \"intel.com/sriov\""),
        "{stderr}"
    );
    // Refused before anything ran.
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
}

#[test]
fn detach_waits_for_another_call_of_its_container_and_leaves_nothing_after() {
    // `plumb attach`/`detach` take the container's lock as the CNI plugin does: a detach
    // started while another call for the container runs waits for it, then undoes it all and
    // removes the lock file with the record.
    let Attachable {
        node,
        config_file,
        ns,
        _links,
        ..
    } = Attachable::new(3);
    let id = ["--container-id", "c-by-hand"];
    let nads = node.path("nads");
    let mut attach = vec![
        "attach",
        "--netns",
        ns.name(),
        "--networks",
        "br",
        "--nads",
        s(&nads),
        "--config",
        s(&config_file),
    ];
    attach.extend(id);
    ok(&plumb(&attach));
    let lock = node.state_dir().join("c-by-hand.lock");
    let held = crate::common::hold_lock(&lock);
    let mut detach = std::process::Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["detach", "--netns", ns.name(), "--config", s(&config_file)])
        .args(id)
        .env("CNI_PATH", crate::common::PLUGINS)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        detach.try_wait().unwrap().is_none(),
        "detach ran beside the call holding the container's lock"
    );
    assert_eq!(
        ns.links(),
        ["lo", "eth0", "net1"],
        "detach undid part of it"
    );
    drop(held);
    let out = detach.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("waiting for it to end"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
    let left: Vec<_> = std::fs::read_dir(node.state_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the state directory: {left:?}");
}

#[test]
fn attach_that_cannot_print_says_the_namespace_is_attached() {
    // The attachments are made and recorded before the network-status is printed: when the
    // printing fails (a closed pipe, a full disk), the error must say that the namespace is
    // attached and how to undo it, not only the I/O error, or a script takes it for a failed
    // attach and never detaches.
    let Attachable {
        node,
        config_file,
        ns,
        _links,
        ..
    } = Attachable::new(7);
    let out = plumb_command(&[
        "attach",
        "--netns",
        ns.name(),
        "--networks",
        "br",
        "--nads",
        s(&node.path("nads")),
        "--config",
        s(&config_file),
    ])
    .stdout(std::fs::File::create("/dev/full").unwrap())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is attached, but its network-status could not be printed"),
        "{stderr}"
    );
    let detach = format!(
        "`plumb detach --netns {} --config {}` undoes it",
        ns.name(),
        config_file.display()
    );
    assert!(stderr.contains(&detach), "{stderr}");
    assert_eq!(ns.links(), ["lo", "eth0", "net1"]);
    ok(&plumb(&[
        "detach",
        "--netns",
        ns.name(),
        "--config",
        s(&config_file),
    ]));
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(node.all_allocations(), 0);
}

#[test]
fn plan_with_a_record_shows_what_a_changed_selection_would_detach_and_attach() {
    // The demo pod's sandbox as plumb recorded it: the default network, static-bridge (net1,
    // with the MAC the element asks for) and macvlan (mv1).
    let d = tempfile::tempdir().unwrap();
    let attachment = |network: &str, ifname: &str, default: bool, caps: Value| {
        serde_json::json!({"network": network, "ifname": ifname, "config": {},
                           "default": default, "capabilityArgs": caps})
    };
    let record = d.path().join("c1.json");
    std::fs::write(
        &record,
        serde_json::json!({"version": 1, "containerId": "c1", "netns": "/var/run/netns/demo",
            "podNamespace": "default", "podName": "demo", "attachments": [
                attachment("demo-default", "eth0", true, serde_json::json!({})),
                attachment("default/static-bridge", "net1", false,
                           serde_json::json!({"mac": "02:00:00:00:de:01"})),
                attachment("default/macvlan", "mv1", false, serde_json::json!({}))]})
        .to_string(),
    )
    .unwrap();
    let plan = |networks: &str| {
        let pod = d.path().join("pod.yaml");
        std::fs::write(
            &pod,
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: demo\n  namespace: default\n  \
                 annotations:\n    k8s.v1.cni.cncf.io/networks: '{networks}'\n"
            ),
        )
        .unwrap();
        let out = plan_demo(&pod, &["--record", s(&record)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["change"].clone()
    };
    let one =
        |network: &str, ifname: &str| serde_json::json!({"network": network, "interface": ifname});
    // macvlan removed, the MAC asked of static-bridge unchanged: only mv1 goes.
    let c = plan(r#"[{"name": "static-bridge", "mac": "02:00:00:00:de:01"}]"#);
    assert_eq!(
        c["detach"],
        serde_json::json!([one("default/macvlan", "mv1")]),
        "{c}"
    );
    assert_eq!(c["attach"], serde_json::json!([]), "{c}");
    // Another MAC: net1 detached and attached again under its name; a second macvlan gets a
    // name the pod never had.
    let c = plan(
        r#"[{"name": "static-bridge", "mac": "02:00:00:00:de:02"}, {"name": "macvlan", "interface": "mv1"}, {"name": "macvlan"}]"#,
    );
    assert_eq!(
        c["detach"],
        serde_json::json!([one("default/static-bridge", "net1")]),
        "{c}"
    );
    assert_eq!(
        c["attach"],
        serde_json::json!([
            one("default/static-bridge", "net1"),
            one("default/macvlan", "net2")
        ]),
        "{c}"
    );
    // Not a record.
    std::fs::write(&record, "{}").unwrap();
    let out = plan_demo(
        &repo("examples/standalone/pods/demo.yaml"),
        &["--record", s(&record)],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--record"));
}
