//! plumb's life on a node as the DaemonSets of `deploy/` lead it, on a directory tree standing
//! for the node's root: installed by `plumb install` (the init container), the node's files kept
//! by the daemon (`--host-root`), upgraded (a new binary installed, a new daemon taking over from
//! the old one), then uninstalled (`plumb daemon --uninstall`). The runtime is played by
//! `plumb cni` run as the node's own binary, chrooted into the tree, from the configuration files
//! there, as a runtime on the node runs its configuration list.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use testkit::kube_api::Resource;
use testkit::netns::Netns;

use super::host_root::{
    BIN_DIR, HELD, KUBECONFIG, SOCKET, allocations, copy_libraries, daemon_of_binary_in, node_tree,
};
use crate::common::cluster::{Cluster, NETWORKS, NODE, nad, pod_args};
use crate::common::daemon::Daemon;
use crate::common::{files_in, ok};

/// The node's path `path` in the tree at `root`.
fn at(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// `plumb install --bin-dir <the node's /opt/cni/bin>` run from `binary`: what it said.
fn install(binary: &Path, root: &Path) -> String {
    let out = Command::new(binary)
        .args(["install", "--bin-dir"])
        .arg(at(root, BIN_DIR))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The runtime on the node running `op` of `plumb-cni-network` for the sandbox in `netns`
/// (a node path), from the configuration files in the node's `conf_dir`: `plumb cni` as the
/// node's binary, in the daemon's mount namespace (where the tree has the node's /proc and
/// /run/netns), chrooted into the tree.
fn runtime(
    daemon: &Daemon,
    root: &Path,
    conf_dir: &str,
    op: &str,
    netns: &str,
    args: &str,
) -> Output {
    Command::new("nsenter")
        .arg(format!("--mount=/proc/{}/ns/mnt", daemon.pid()))
        .args(["--", "chroot"])
        .arg(root)
        .args(["/opt/cni/bin/plumb", "cni", op, "plumb-cni-network", netns])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NETCONFPATH", conf_dir)
        .env("CNI_PATH", BIN_DIR)
        .env("CNI_CACHE_DIR", "/var/lib/cni")
        .env("CAP_ARGS", "{}")
        .env("CNI_ARGS", args)
        .output()
        .unwrap()
}

/// `plumb health [--ready]` against the daemon's socket in the tree: whether it exited 0.
fn healthy(root: &Path, ready: bool) -> bool {
    let mut c = Command::new(env!("CARGO_BIN_EXE_plumb"));
    c.arg("health").arg("--socket").arg(at(root, SOCKET));
    if ready {
        c.arg("--ready");
    }
    c.output().unwrap().status.success()
}

/// What the node's files must always be while plumb is installed: a configuration naming
/// plumb, and a whole binary (one of `sizes`) that can be run.
fn usable(root: &Path, sizes: &[u64]) -> Result<(), String> {
    let conf = at(root, "/etc/cni/net.d/00-plumb.conflist");
    let text = fs::read(&conf).map_err(|e| format!("{}: {e}", conf.display()))?;
    let conf: Value =
        serde_json::from_slice(&text).map_err(|e| format!("the configuration: {e}"))?;
    if conf["plugins"][0]["type"] != "plumb" {
        return Err(format!("the configuration names no plumb: {conf}"));
    }
    let binary = at(root, "/opt/cni/bin/plumb");
    let m = fs::metadata(&binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    if !sizes.contains(&m.len()) || m.permissions().mode() & 0o111 == 0 {
        return Err(format!(
            "{}: {} bytes, mode {:o}",
            binary.display(),
            m.len(),
            m.permissions().mode()
        ));
    }
    Ok(())
}

#[test]
fn a_node_installed_upgraded_then_uninstalled_keeps_a_usable_configuration_and_loses_no_pod() {
    let c = Cluster::new(155);
    let root = c.node.path("host");
    node_tree(&root);
    let old = Path::new(env!("CARGO_BIN_EXE_plumb"));
    // The node's plumb runs chrooted there, as the runtime runs it on the node.
    copy_libraries(&root, old);
    let bridges: Vec<String> = c._links.iter().map(|l| l.name().to_string()).collect();
    // The default network's configuration, as its own installer leaves it on the node.
    fs::write(
        at(&root, "/etc/cni/net.d/10-default.conflist"),
        json!({"cniVersion": "1.0.0", "name": "default-net", "plugins": [
            {"type": "bridge", "bridge": bridges[0], "isGateway": true,
             "ipam": {"type": "host-local", "subnet": "10.155.1.0/24",
                      "routes": [{"dst": "0.0.0.0/0"}]}}]})
        .to_string(),
    )
    .unwrap();
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "net-a",
            json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridges[1],
                   "ipam": {"type": "host-local", "subnet": "10.155.2.0/24"}}),
        ),
    );
    // The daemon's pod: its service account, and the template of deploy/'s ConfigMap.
    let sa = c.node.path("serviceaccount");
    fs::create_dir_all(&sa).unwrap();
    c.api.accept_token("lifecycle-sa-token");
    fs::write(sa.join("token"), "lifecycle-sa-token").unwrap();
    fs::write(sa.join("ca.crt"), c.api.ca_pem().unwrap()).unwrap();
    let configmap = plumb_engine::objects::read_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/common/configmap.yaml"),
    )
    .unwrap();
    let template = c.node.path("template.json");
    fs::write(
        &template,
        configmap[0].value["data"]["template.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let (sa, template) = (sa.display().to_string(), template.display().to_string());
    let pod_env = [
        ("KUBERNETES_SERVICE_HOST", c.api.addr().ip().to_string()),
        ("KUBERNETES_SERVICE_PORT", c.api.addr().port().to_string()),
    ];
    let keeping = [
        "--node-name",
        NODE,
        "--service-account-dir",
        &sa,
        "--node-token-check",
        "0",
        "--write-kubeconfig",
        KUBECONFIG,
    ];
    let serving: Vec<&str> = keeping
        .iter()
        .copied()
        .chain(["--write-config", &template])
        .collect();

    // Installed: the init container, then the daemon.
    assert!(install(old, &root).starts_with("installed plumb"));
    assert!(
        install(old, &root).contains("already"),
        "the same binary again: nothing to do"
    );
    // Made first: the daemon's mount namespace binds /run/netns, which `ip netns` makes.
    let ns1 = Netns::new();
    let first = daemon_of_binary_in(old, &root, &serving, &pod_env);
    first.wait_for("wrote /etc/cni/net.d/00-plumb.conflist");
    let uid = c.pod("default", "web1", json!({NETWORKS: "net-a"}));
    let netns1 = format!("/var/run/netns/{}", ns1.name());
    let args1 = pod_args(("default", "web1", &uid), "life1");
    let added = ok(&runtime(
        &first,
        &root,
        "/etc/cni/net.d",
        "add",
        &netns1,
        &args1,
    ));
    assert_eq!(added["ips"][0]["address"], "10.155.1.2/24", "{added}");
    assert_eq!(ns1.links().len(), 3, "lo, eth0, net1");

    // The upgrade: a new binary (the old one with bytes more) installed over the old one while
    // it runs, and the new daemon taking over; all along, the node's configuration names
    // plumb and the binary it names is whole.
    let new = c.node.path("new-plumb");
    let mut bytes = fs::read(old).unwrap();
    let old_size = bytes.len() as u64;
    bytes.extend_from_slice(b"\0the next version of plumb");
    fs::write(&new, &bytes).unwrap();
    fs::set_permissions(&new, fs::Permissions::from_mode(0o755)).unwrap();
    let sizes = [old_size, bytes.len() as u64];
    drop(bytes);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (root, stop) = (root.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut looks, mut bad) = (0, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                looks += 1;
                if let Err(e) = usable(&root, &sizes) {
                    bad.push(e);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            (looks, bad)
        })
    };
    assert!(install(&new, &root).contains("replacing"));
    let second = daemon_of_binary_in(&new, &root, &serving, &pod_env);
    second.wait_for(&format!("took over {SOCKET}"));
    first.wait_for("now belongs to another daemon");
    let (status, said) = first.stop();
    assert!(status.success(), "{said}");
    // A pod after the upgrade, through the new daemon.
    let uid2 = c.pod("default", "web2", json!({NETWORKS: "net-a"}));
    let ns2 = Netns::new();
    let netns2 = format!("/var/run/netns/{}", ns2.name());
    let args2 = pod_args(("default", "web2", &uid2), "life2");
    ok(&runtime(
        &second,
        &root,
        "/etc/cni/net.d",
        "add",
        &netns2,
        &args2,
    ));
    assert_eq!(ns2.links().len(), 3, "lo, eth0, net1");
    stop.store(true, Ordering::SeqCst);
    let (looks, bad) = watcher.join().unwrap();
    assert!(
        looks > 10 && bad.is_empty(),
        "{looks} looks, unusable: {bad:?}"
    );
    assert_eq!(
        fs::read(at(&root, "/opt/cni/bin/plumb")).unwrap().len() as u64,
        sizes[1]
    );
    // The runtime keeps the configuration a sandbox was added with, for its DEL.
    let cached = at(&root, "/tmp/runtime-conf");
    fs::create_dir_all(&cached).unwrap();
    fs::copy(
        at(&root, "/etc/cni/net.d/00-plumb.conflist"),
        cached.join("00-plumb.conflist"),
    )
    .unwrap();

    // The uninstall, with web1 and web2 still attached: the configuration goes at once; what
    // their DELs need stays until they have run; then the rest goes.
    let uninstalling: Vec<&str> = keeping.iter().copied().chain(["--uninstall"]).collect();
    let last = daemon_of_binary_in(&new, &root, &uninstalling, &pod_env);
    last.wait_for("uninstall: removed /etc/cni/net.d/00-plumb.conflist");
    second.wait_for("now belongs to another daemon");
    let (status, said) = second.stop();
    assert!(status.success(), "{said}");
    // The old daemon may have written the file once more before it saw its socket taken: the
    // uninstall removes it again at its next look.
    let conf = at(&root, "/etc/cni/net.d/00-plumb.conflist");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while conf.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the configuration stays"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    last.wait_for("uninstall: waiting: 2 sandboxes attached by plumb are left");
    assert_eq!(
        files_in(&at(&root, "/etc/cni/net.d")),
        ["10-default.conflist", "plumb.d"]
    );
    for needed in ["/opt/cni/bin/plumb", KUBECONFIG] {
        assert!(
            at(&root, needed).exists(),
            "{needed} removed while web1 and web2 need it"
        );
    }
    // Their records (named by the container ID `plumb cni` gives, from the netns path).
    let records: Vec<String> = (files_in(&at(&root, "/var/lib/plumb")).into_iter())
        .filter(|f| f.ends_with(".json"))
        .collect();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        healthy(&root, false) && !healthy(&root, true),
        "alive, not ready"
    );
    let status = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["status", "--node", "--state-dir"])
        .arg(at(&root, "/var/lib/plumb"))
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains(records[0].trim_end_matches(".json"))
            && status.contains("default/web1")
            && status.contains("default/web2")
            && status.contains("net1:default/net-a"),
        "{status}"
    );
    // web2 deleted by a runtime that runs DEL with the node's configuration of the moment
    // (containerd): plumb is not called, the default network's plugin is, and the netns goes.
    // The daemon runs plumb's DEL itself: web2's net-a address is released.
    drop(ns2);
    last.wait_for("ran the DEL of default/web2");
    // web1 deleted by a runtime that runs DEL with the configuration it added with (CRI-O):
    // the daemon serves no calls now, the plugin runs it itself.
    ok(&runtime(
        &last,
        &root,
        "/tmp/runtime-conf",
        "del",
        &netns1,
        &args1,
    ));
    assert_eq!(ns1.links(), ["lo"]);
    last.wait_for("uninstall: nothing of plumb is left on the node");
    assert!(healthy(&root, true), "ready: the node is done");
    assert_eq!(
        allocations(&root),
        [HELD],
        "every address plumb's networks held is released"
    );
    assert_eq!(files_in(&at(&root, BIN_DIR)), ["bridge", "host-local"]);
    assert_eq!(
        files_in(&at(&root, "/etc/cni/net.d")),
        ["10-default.conflist"]
    );
    assert!(!at(&root, "/var/lib/plumb").exists());
    assert_eq!(
        files_in(&at(&root, "/var/lib/cni/results")),
        Vec::<String>::new()
    );
    let (status, said) = last.stop();
    assert!(status.success(), "{said}");
    assert!(!at(&root, SOCKET).exists());
}

#[test]
fn plumb_install_replaces_a_plugin_binary_that_runs_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let old = Path::new(env!("CARGO_BIN_EXE_plumb"));
    let run = |binary: &Path, args: &[&str]| {
        let out = Command::new(binary)
            .args(["install", "--bin-dir"])
            .arg(&bin)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, said) = run(old, &[]);
    assert!(ok && said.starts_with("installed plumb"), "{said}");
    let installed = bin.join("plumb");
    assert_eq!(fs::read(&installed).unwrap(), fs::read(old).unwrap());
    assert_eq!(
        fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
        0o755
    );
    // The installed binary running (a daemon started from it) while a new one is installed:
    // written beside it and renamed over it, never opened for writing ("text file busy").
    let running = Daemon::start_command(
        {
            let mut c = Command::new(&installed);
            c.args(["daemon", "--socket"]).arg(dir.path().join("s"));
            c
        },
        &dir.path().join("s"),
    );
    let new = dir.path().join("new-plumb");
    let mut bytes = fs::read(old).unwrap();
    bytes.extend_from_slice(b"\0the next version");
    fs::write(&new, &bytes).unwrap();
    fs::set_permissions(&new, fs::Permissions::from_mode(0o755)).unwrap();
    let (ok, said) = run(&new, &[]);
    assert!(ok && said.contains("replacing"), "{said}");
    assert_eq!(fs::read(&installed).unwrap(), bytes);
    let (status, said) = running.stop();
    assert!(status.success(), "the old binary ran on: {said}");
    assert_eq!(files_in(&bin), ["plumb"], "no temporary file left");
    // A name that is no plugin's file name.
    let (ok, said) = run(old, &["--name", "../plumb"]);
    assert!(!ok && said.contains("--name \"../plumb\""), "{said}");
}
