//! `plumb cni`, the operator's cnitool, run as a user runs it: the built binary, configuration
//! in a NETCONFPATH directory, Debian's reference plugins, a real network namespace. Needs root
//! (CI runs as root).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use testkit::netns::{Link, Netns, unique_name};

struct Setup {
    dir: tempfile::TempDir,
    bridge: String,
}

impl Setup {
    /// A NETCONFPATH holding `lists` (name → plugins), each a `.conflist`.
    fn new(lists: &[(&str, Vec<Value>)]) -> Setup {
        testkit::netns::require_root();
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("net.d");
        fs::create_dir_all(&conf).unwrap();
        for (name, plugins) in lists {
            let list = json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins});
            fs::write(
                conf.join(format!("10-{name}.conflist")),
                serde_json::to_vec_pretty(&list).unwrap(),
            )
            .unwrap();
        }
        Setup {
            dir,
            bridge: String::new(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn plumb(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plumb"));
        cmd.arg("cni")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("NETCONFPATH", self.path("net.d"))
            .env("CNI_PATH", "/usr/lib/cni")
            .env("CNI_CACHE_DIR", self.path("cache"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run plumb")
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if !self.bridge.is_empty() {
            drop(Link::adopt(&self.bridge));
        }
    }
}

fn bridge(name: &str, subnet: &str, ipam_dir: &Path) -> Value {
    json!({"type": "bridge", "bridge": name, "isGateway": true,
           "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir}})
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "plumb failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn allocations(ipam_dir: &Path, network: &str) -> usize {
    fs::read_dir(ipam_dir.join(network))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn add_and_del_like_cnitool() {
    let br = unique_name("tc");
    let ipam = tempfile::tempdir().unwrap();
    let mut s = Setup::new(&[(
        "pc-chain",
        vec![
            bridge(&br, "10.202.1.0/24", ipam.path()),
            json!({"type": "tuning", "capabilities": {"mac": true}}),
            json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        ],
    )]);
    s.bridge = br;
    let ns = Netns::new();
    let caps = r#"{"mac":"02:00:00:00:c1:01",
        "portMappings":[{"hostPort":18621,"containerPort":80,"protocol":"tcp"}]}"#;
    let env = [
        ("CAP_ARGS", caps),
        ("CNI_ARGS", "IgnoreUnknown=true;K8S_POD_NAME=demo"),
    ];

    // A namespace given by name, as `ip netns` knows it.
    let out = s.plumb(&["add", "pc-chain", ns.name()], &env);
    let result: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["ips"][0]["address"], "10.202.1.2/24");
    assert_eq!(ns.addresses("eth0"), ["10.202.1.2/24"]);
    assert_eq!(ns.mac("eth0").as_deref(), Some("02:00:00:00:c1:01"));

    // The cache entry where cnitool would put it, under cnitool's container ID.
    let id = plumb::cli::cni::container_id_for(&ns.path().display().to_string());
    let entry = s.path(&format!("cache/results/pc-chain-{id}-eth0"));
    let cached: Value = serde_json::from_slice(&fs::read(&entry).unwrap()).unwrap();
    assert_eq!(cached["containerId"], id.as_str());
    assert_eq!(
        cached["cniArgs"],
        json!([["IgnoreUnknown", "true"], ["K8S_POD_NAME", "demo"]])
    );
    assert_eq!(cached["capabilityArgs"]["mac"], "02:00:00:00:c1:01");
    assert_eq!(allocations(ipam.path(), "pc-chain"), 1);

    // DEL, by the namespace's path this time: the same container ID, so the same entry.
    let path = ns.path().display().to_string();
    ok(&s.plumb(&["del", "pc-chain", &path], &env));
    assert_eq!(ns.links(), ["lo"]);
    assert!(!entry.exists());
    assert_eq!(allocations(ipam.path(), "pc-chain"), 0);
}

#[test]
fn check_reports_a_broken_attachment_with_a_non_zero_exit() {
    let br = unique_name("tc");
    let ipam = tempfile::tempdir().unwrap();
    let mut s = Setup::new(&[(
        "pc-check",
        vec![
            bridge(&br, "10.202.2.0/24", ipam.path()),
            json!({"type": "tuning"}),
        ],
    )]);
    s.bridge = br;
    let ns = Netns::new();
    ok(&s.plumb(&["add", "pc-check", ns.name()], &[]));
    ok(&s.plumb(&["check", "pc-check", ns.name()], &[]));
    testkit::netns::ip(&["-n", ns.name(), "link", "del", "eth0"]);
    let out = s.plumb(&["check", "pc-check", ns.name()], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("plumb cni check") && err.contains("bridge"),
        "{err}"
    );
    ok(&s.plumb(&["del", "pc-check", ns.name()], &[]));
    assert_eq!(allocations(ipam.path(), "pc-check"), 0);
}

#[test]
fn errors_are_readable_and_name_what_is_wrong() {
    let s = Setup::new(&[]);
    let out = s.plumb(&["add", "no-such-net", "/var/run/netns/none"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-net"), "{err}");
    assert!(err.contains("CNI error code"), "{err}");
    assert!(out.stdout.is_empty());

    let s = Setup::new(&[("pc-caps", vec![json!({"type": "tuning"})])]);
    let out = s.plumb(&["add", "pc-caps", "x"], &[("CAP_ARGS", "[1]")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CAP_ARGS"), "{err}");
}
