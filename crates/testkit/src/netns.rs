//! Real network namespaces and links for tests that run the reference CNI plugins, and `ip -j`
//! read-backs of what the plugins did. Everything made here is removed on drop, so a failing
//! test leaves nothing behind on the machine.
//!
//! These need root (CI runs as root). This kernel has no `dummy`, `ipvlan`, `vlan` or `vrf`
//! links: tests use bridges, veth pairs and macvlan on a bridge parent.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

/// Panics with a clear message unless running as root.
pub fn require_root() {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    assert_eq!(
        uid, "0",
        "this test creates network namespaces and links: run it as root (CI does)"
    );
}

/// A name unique to this process and call, at most 15 bytes (a link name's limit), starting
/// with `prefix` (at most 4 bytes).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    assert!(prefix.len() <= 4, "prefix {prefix:?} too long");
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{:x}{n:x}", std::process::id() % 0xffff)
}

/// Runs `ip` with `args`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip -j args` as JSON (an empty output is an empty list).
pub fn ip_json(args: &[&str]) -> Value {
    let mut all = vec!["-j"];
    all.extend_from_slice(args);
    let text = ip(&all);
    if text.trim().is_empty() {
        return Value::Array(Vec::new());
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {text}"))
}

/// Whether a link of that name exists in the host namespace.
pub fn host_link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", name])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A network namespace made with `ip netns add`, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn new() -> Netns {
        require_root();
        let name = unique_name("tk");
        ip(&["netns", "add", &name]);
        // The loopback, up, as a runtime leaves it.
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Netns { name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path a runtime passes as `CNI_NETNS`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// `ip -n <ns> -j args`.
    pub fn ip_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip_json(&all)
    }

    /// The names of every link in the namespace.
    pub fn links(&self) -> Vec<String> {
        self.ip_json(&["link", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect()
    }

    /// The link `ifname` as `ip -j link show` gives it, if it exists.
    pub fn link(&self, ifname: &str) -> Option<Value> {
        self.ip_json(&["link", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["ifname"] == ifname)
            .cloned()
    }

    /// The MAC address of `ifname`.
    pub fn mac(&self, ifname: &str) -> Option<String> {
        self.link(ifname)
            .and_then(|l| l["address"].as_str().map(str::to_string))
    }

    /// The global addresses of `ifname` as "address/prefix".
    pub fn addresses(&self, ifname: &str) -> Vec<String> {
        self.ip_json(&["addr", "show", "dev", ifname])
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["scope"] == "global")
            .filter_map(|a| Some(format!("{}/{}", a["local"].as_str()?, a["prefixlen"])))
            .collect()
    }

    /// The routes of one family ("-4" or "-6") as `ip -j route show` gives them.
    pub fn routes(&self, family: &str) -> Vec<Value> {
        self.ip_json(&[family, "route", "show"])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Default for Netns {
    fn default() -> Self {
        Netns::new()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A link in the host namespace, deleted on drop: a bridge (`Link::bridge`) to give macvlan a
/// parent, or whatever a test creates and must not leak.
#[derive(Debug)]
pub struct Link {
    name: String,
}

impl Link {
    /// A new bridge, up.
    pub fn bridge(name: &str) -> Link {
        require_root();
        ip(&["link", "add", name, "type", "bridge"]);
        ip(&["link", "set", name, "up"]);
        Link {
            name: name.to_string(),
        }
    }

    /// Takes ownership of a link something else created (e.g. the bridge plugin's bridge), so
    /// it is deleted when the test ends.
    pub fn adopt(name: &str) -> Link {
        Link {
            name: name.to_string(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Quietly: a test may adopt a link that was never made (its ADD failed first).
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .stderr(std::process::Stdio::null())
            .status();
    }
}
