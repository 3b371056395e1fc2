//! `plumb daemon --host-root`: the daemon run as a DaemonSet pod runs it, with a directory tree
//! standing for the node's `/` (its own mount namespace gives the tree the node's `/proc` and
//! `/run/netns`, as a hostPath volume of `/` has them): its delegates find their plugins and the
//! files they read in the tree, its result cache, records and kubeconfig are written there, and
//! its service account, a file of its pod, is still read.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use testkit::kube_api::Resource;
use testkit::netns::Netns;

use crate::common::cluster::{Cluster, NETWORKS, NODE, nad};
use crate::common::daemon::{Daemon, forwarded};
use crate::common::{PLUGINS, files_in, ok};

/// The paths on the node (inside the tree).
pub(super) const SOCKET: &str = "/run/plumb/plumb.sock";
pub(super) const KUBECONFIG: &str = "/etc/cni/net.d/plumb.d/plumb.kubeconfig";
pub(super) const BIN_DIR: &str = "/opt/cni/bin";

/// The cluster network's first address, held on the node by a container before the test.
pub(super) const HELD: &str = "10.156.1.2";

/// A tree standing for a node's `/` at `root`: the reference plugins `bridge` and `host-local`
/// in `/opt/cni/bin` with the libraries they load, the address [`HELD`] in host-local's data,
/// and the directories a node has.
pub(super) fn node_tree(root: &Path) {
    for dir in ["proc", "run/netns", "tmp", "var", "etc/cni/net.d", BIN_DIR] {
        fs::create_dir_all(root.join(dir.trim_start_matches('/'))).unwrap();
    }
    // As on a Debian node: the netns path the runtime gives is /var/run/netns/….
    std::os::unix::fs::symlink("../run", root.join("var/run")).unwrap();
    for plugin in ["bridge", "host-local"] {
        let from = Path::new(PLUGINS).join(plugin);
        fs::copy(
            &from,
            root.join(BIN_DIR.trim_start_matches('/')).join(plugin),
        )
        .unwrap();
        copy_libraries(root, &from);
    }
    let held = root.join("var/lib/cni/networks/default-net");
    fs::create_dir_all(&held).unwrap();
    fs::write(held.join(HELD), "other-container\neth0").unwrap();
}

/// The shared libraries `program` loads copied into the tree at `root`, each at its path: a
/// program of this machine then runs in the tree (chrooted) as it does here.
pub(super) fn copy_libraries(root: &Path, program: &Path) {
    for library in libraries(program) {
        let to = root.join(library.strip_prefix("/").unwrap());
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(&library, &to).unwrap();
    }
}

/// The shared libraries `program` loads, its loader among them (`ldd`'s paths; none for a
/// static one).
fn libraries(program: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(program).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The addresses host-local holds in the tree, in every network.
pub(super) fn allocations(root: &Path) -> Vec<String> {
    let networks = root.join("var/lib/cni/networks");
    (files_in(&networks).iter())
        .flat_map(|n| files_in(&networks.join(n)))
        .filter(|f| f.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

/// `plumb daemon --host-root root` in a mount namespace of its own where `root` has this
/// machine's `/proc` and `/run/netns` (netns made later appear in it too: the mounts are
/// slaves of this machine's, as a DaemonSet's `HostToContainer` mount is), with `args`.
fn daemon_in(root: &Path, args: &[&str], env: &[(&str, String)]) -> Daemon {
    daemon_of_binary_in(Path::new(env!("CARGO_BIN_EXE_plumb")), root, args, env)
}

/// [`daemon_in`], the daemon run from `binary`.
pub(super) fn daemon_of_binary_in(
    binary: &Path,
    root: &Path,
    args: &[&str],
    env: &[(&str, String)],
) -> Daemon {
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "slave", "--", "sh", "-c"])
        .arg(r#"mount --rbind /run/netns "$0/run/netns" && mount -t proc proc "$0/proc" && exec "$@""#)
        .arg(root)
        .arg(binary)
        .args(["daemon", "--host-root"])
        .arg(root)
        .args(["--socket", SOCKET])
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .envs(env.iter().map(|(k, v)| (k, v)));
    Daemon::start_command(command, &root.join(SOCKET.trim_start_matches('/')))
}

#[test]
fn a_daemon_in_the_nodes_root_runs_delegates_on_the_nodes_files_and_keeps_its_own_there() {
    let mut c = Cluster::new(156);
    let root = c.node.path("host");
    node_tree(&root);
    // Neither NAD names a data directory: host-local keeps its addresses in the node's
    // /var/lib/cni/networks, where one is held already.
    let bridges: Vec<String> = c._links.iter().map(|l| l.name().to_string()).collect();
    for (ns, name, bridge, subnet, more) in [
        (
            "kube-system",
            "default-net",
            &bridges[0],
            1,
            json!({"routes": [{"dst": "0.0.0.0/0"}]}),
        ),
        ("default", "net-a", &bridges[1], 2, json!({})),
    ] {
        let mut ipam = json!({"type": "host-local", "subnet": format!("10.156.{subnet}.0/24")});
        ipam.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        c.api.put(
            Resource::NetworkAttachmentDefinitions,
            nad(
                ns,
                name,
                json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge,
                       "isGateway": true, "ipam": ipam}),
            ),
        );
    }
    // The pod's service account, in the daemon's pod (outside the tree).
    let sa = c.node.path("serviceaccount");
    fs::create_dir_all(&sa).unwrap();
    c.api.accept_token("host-root-sa-token");
    fs::write(sa.join("token"), "host-root-sa-token").unwrap();
    fs::write(sa.join("ca.crt"), c.api.ca_pem().unwrap()).unwrap();
    let uid = c.pod("default", "web", json!({NETWORKS: "net-a"}));
    let ns = Netns::new();

    let sa_arg = sa.display().to_string();
    let daemon = daemon_in(
        &root,
        &[
            "--node-name",
            NODE,
            "--service-account-dir",
            &sa_arg,
            "--write-kubeconfig",
            KUBECONFIG,
            "--node-token-check",
            "0",
        ],
        &[
            ("KUBERNETES_SERVICE_HOST", c.api.addr().ip().to_string()),
            ("KUBERNETES_SERVICE_PORT", c.api.addr().port().to_string()),
        ],
    );
    daemon.wait_for(&format!("entered the node's root {}", root.display()));
    // The kubeconfig, in the node's directory, from the service account read through the
    // directory opened before the daemon entered the tree.
    daemon.wait_for(&format!("wrote {KUBECONFIG}"));
    assert!(root.join(KUBECONFIG.trim_start_matches('/')).exists());
    let socket = root.join(SOCKET.trim_start_matches('/'));
    // The caches watch with the service account too.
    super::caches::holding(&socket, 1);

    // The runtime's configuration names the node's paths (the shim, on this machine, finds the
    // socket in the tree).
    let config = c.config.as_object_mut().unwrap();
    for key in ["cniDir", "plumbStateDir", "confDir"] {
        config.remove(key);
    }
    c.config["binDir"] = json!(BIN_DIR);
    c.config["kubeconfig"] = json!(KUBECONFIG);
    c.config["plumbDaemonSocket"] = json!(socket);
    let pod = ("default", "web", uid.as_str());
    let out = c.call("ADD", &ns, pod, "hr1");
    assert!(forwarded(&out), "{}", String::from_utf8_lossy(&out.stderr));
    let result = ok(&out);
    // Found in the node's /opt/cni/bin (this machine has none there), host-local read the
    // node's allocations and skipped the address held there.
    assert_eq!(
        result["ips"][0]["address"], "10.156.1.3/24",
        "the cluster network's address, next to the one held on the node: {result}"
    );
    assert!(
        ns.addresses("net1")
            .iter()
            .any(|a| a.starts_with("10.156.2."))
    );
    // What the daemon keeps, on the node.
    let results = root.join("var/lib/cni/results");
    let cached = files_in(&results);
    assert_eq!(cached.len(), 2, "the node's result cache: {cached:?}");
    assert!(
        (cached.iter()).any(|f| fs::read_to_string(results.join(f))
            .unwrap()
            .contains("10.156.1.3/24")),
        "{cached:?}"
    );
    assert!(root.join("var/lib/plumb/hr1.json").exists());
    assert_eq!(allocations(&root).len(), 3);
    assert_eq!(c.status_of("default", "web").unwrap().len(), 2);
    // Nothing of it on this machine's own paths.
    assert!(!Path::new("/var/lib/plumb/hr1.json").exists());
    assert!(
        !files_in(Path::new("/var/lib/cni/results"))
            .iter()
            .any(|f| f.contains("hr1")),
    );

    let out = c.call("DEL", &ns, pod, "hr1");
    assert!(forwarded(&out));
    ok(&out);
    assert_eq!(ns.links(), ["lo"]);
    assert_eq!(files_in(&results), Vec::<String>::new());
    assert!(!root.join("var/lib/plumb/hr1.json").exists());
    assert_eq!(allocations(&root), [HELD]);
    let (status, said) = daemon.stop();
    assert!(status.success(), "{said}");
}

#[test]
fn a_host_root_without_the_nodes_proc_or_the_service_account_stops_the_daemon_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plumb.sock");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut daemon = Command::new(env!("CARGO_BIN_EXE_plumb"))
            .args(["daemon", "--host-root"])
            .arg(dir.path())
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A daemon that did not stop would serve until killed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while daemon.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = daemon.kill();
                panic!("the daemon did not stop");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = daemon.wait_with_output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = run(&[], &[]);
    assert!(
        said.contains(&format!("--host-root {}", dir.path().display()))
            && said.contains("no proc file system at /proc"),
        "{said}"
    );
    // In a pod without --kubeconfig, the daemon watches with its service account: one it
    // cannot open before it enters the node's root stops it.
    let said = run(
        &["--service-account-dir", "/nonexistent/serviceaccount"],
        &[("KUBERNETES_SERVICE_HOST", "10.0.0.1")],
    );
    assert!(
        said.contains("--service-account-dir /nonexistent/serviceaccount"),
        "{said}"
    );
    assert!(!socket.exists(), "no socket bound");
}
