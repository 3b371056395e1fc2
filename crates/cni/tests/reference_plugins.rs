//! The runtime side against Debian's reference plugins (`/usr/lib/cni`, containernetworking-
//! plugins 1.1.1) in real network namespaces: what a user of the crate would see on the machine
//! after ADD, CHECK and DEL. Needs root (CI runs as root).
//!
//! Every test has its own bridge, subnet, host-local data directory and result cache, so they
//! run in parallel without touching each other.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cni::cache::ResultCache;
use cni::runtime::{CniConfig, RuntimeConf};
use cni::{NetworkConfigList, Version};
use serde_json::{Map, Value, json};
use testkit::netns::{Link, Netns, unique_name};

const PLUGINS: &str = "/usr/lib/cni";

/// One test's private world: cache and IPAM directories, a bridge name, a subnet.
struct World {
    dir: tempfile::TempDir,
    bridge: String,
    /// The third octet of 10.201.X.0/24.
    subnet: u8,
}

impl World {
    fn new(subnet: u8) -> World {
        testkit::netns::require_root();
        World {
            dir: tempfile::tempdir().unwrap(),
            bridge: unique_name("tb"),
            subnet,
        }
    }

    fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam")
    }

    fn cache(&self) -> ResultCache {
        ResultCache::new(self.dir.path().join("cache"))
    }

    fn cni(&self) -> CniConfig {
        CniConfig::new(vec![PathBuf::from(PLUGINS)], self.cache())
    }

    fn bridge_plugin(&self) -> Value {
        json!({
            "type": "bridge", "bridge": self.bridge, "isGateway": true,
            "ipam": {"type": "host-local", "subnet": format!("10.201.{}.0/24", self.subnet),
                     "dataDir": self.ipam_dir()}
        })
    }

    fn list(&self, name: &str, version: &str, plugins: Vec<Value>) -> NetworkConfigList {
        let v = json!({"cniVersion": version, "name": name, "plugins": plugins});
        NetworkConfigList::from_bytes(&serde_json::to_vec_pretty(&v).unwrap()).unwrap()
    }

    /// Addresses host-local still holds for `network` (its files named for an IP).
    fn allocations(&self, network: &str) -> Vec<String> {
        let Ok(rd) = fs::read_dir(self.ipam_dir().join(network)) else {
            return Vec::new();
        };
        rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // The bridge plugin creates the bridge and leaves it on DEL, as it does on a node.
        drop(Link::adopt(&self.bridge));
    }
}

fn rt(ns: &Netns, container_id: &str, caps: Value) -> RuntimeConf {
    RuntimeConf {
        container_id: container_id.into(),
        netns: ns.path().display().to_string(),
        ifname: "eth0".into(),
        args: vec![
            ("IgnoreUnknown".into(), "true".into()),
            ("K8S_POD_NAME".into(), "p".into()),
        ],
        capability_args: match caps {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    }
}

fn iptables_nat() -> String {
    let out = Command::new("iptables-save")
        .args(["-t", "nat"])
        .output()
        .expect("iptables-save");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn bridge_tuning_portmap_add_then_del_leaves_nothing() {
    let w = World::new(11);
    let ns = Netns::new();
    let list = w.list(
        "rp-chain",
        "1.0.0",
        vec![
            w.bridge_plugin(),
            json!({"type": "tuning", "capabilities": {"mac": true}}),
            json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        ],
    );
    let caps = json!({
        "mac": "02:00:00:c0:ff:ee",
        "portMappings": [{"hostPort": 18611, "containerPort": 80, "protocol": "tcp"}]
    });
    let rt = rt(&ns, "rp-chain-1", caps.clone());
    let cni = w.cni();

    let result = cni.add_network_list(&list, &rt).expect("ADD");
    assert_eq!(result.cni_version, Version::V1_0_0);
    assert_eq!(result.ips[0].address.to_string(), "10.201.11.2/24");

    // In the namespace: eth0 with the address and the MAC asked for.
    assert_eq!(ns.addresses("eth0"), ["10.201.11.2/24"]);
    assert_eq!(ns.mac("eth0").as_deref(), Some("02:00:00:c0:ff:ee"));
    assert!(
        iptables_nat().contains("--dport 18611"),
        "portmap DNAT rule"
    );
    assert_eq!(w.allocations("rp-chain"), ["10.201.11.2"]);

    // The cache entry, in libcni's shape and modes.
    let entry_path = w.dir.path().join("cache/results/rp-chain-rp-chain-1-eth0");
    assert_eq!(mode(&entry_path), 0o600);
    assert_eq!(mode(entry_path.parent().unwrap()), 0o700);
    let entry: Value = serde_json::from_slice(&fs::read(&entry_path).unwrap()).unwrap();
    assert_eq!(entry["kind"], "cniCacheV1");
    assert_eq!(entry["containerId"], "rp-chain-1");
    assert_eq!(entry["ifName"], "eth0");
    assert_eq!(entry["networkName"], "rp-chain");
    assert_eq!(entry["netns"], ns.path().display().to_string());
    assert_eq!(entry["capabilityArgs"], caps);
    assert_eq!(
        entry["cniArgs"],
        json!([["IgnoreUnknown", "true"], ["K8S_POD_NAME", "p"]])
    );
    assert_eq!(entry["result"]["ips"][0]["address"], "10.201.11.2/24");
    let config = cni::base64::decode(entry["config"].as_str().unwrap()).unwrap();
    assert_eq!(config, list.bytes, "config is the list's bytes, base64");

    cni.del_network_list(&list, &rt).expect("DEL");
    assert_eq!(ns.links(), ["lo"], "eth0 is gone");
    assert!(!entry_path.exists(), "cache entry removed");
    assert!(w.allocations("rp-chain").is_empty(), "address released");
    assert!(
        !iptables_nat().contains("--dport 18611"),
        "portmap rule removed"
    );

    // DEL is idempotent (spec §3): a second one succeeds and changes nothing.
    cni.del_network_list(&list, &rt).expect("second DEL");
}

#[test]
fn check_passes_on_a_healthy_attachment_and_fails_when_it_is_broken() {
    let w = World::new(12);
    let ns = Netns::new();
    let list = w.list(
        "rp-check",
        "1.0.0",
        vec![
            w.bridge_plugin(),
            json!({"type": "tuning", "capabilities": {"mac": true}}),
        ],
    );
    let rt = rt(&ns, "rp-check-1", json!({"mac": "02:00:00:00:12:01"}));
    let cni = w.cni();
    cni.add_network_list(&list, &rt).expect("ADD");
    cni.check_network_list(&list, &rt)
        .expect("CHECK of a healthy attachment");

    // Take the address away behind the plugins' back: the bridge plugin's CHECK must notice.
    testkit::netns::ip(&[
        "-n",
        ns.name(),
        "addr",
        "del",
        "10.201.12.2/24",
        "dev",
        "eth0",
    ]);
    let e = cni.check_network_list(&list, &rt).unwrap_err();
    assert!(e.msg.contains("bridge"), "names the failing plugin: {e}");

    cni.del_network_list(&list, &rt).expect("DEL");
    assert!(w.allocations("rp-check").is_empty());
}

#[test]
fn check_without_an_add_says_there_is_nothing_cached() {
    let w = World::new(13);
    let ns = Netns::new();
    let list = w.list("rp-nocache", "1.0.0", vec![w.bridge_plugin()]);
    let e = w
        .cni()
        .check_network_list(&list, &rt(&ns, "rp-nocache-1", json!({})))
        .unwrap_err();
    assert!(e.msg.contains("no cached result"), "{e}");
}

#[test]
fn macvlan_on_a_bridge_parent() {
    let w = World::new(14);
    let parent = Link::bridge(&unique_name("tp"));
    let ns = Netns::new();
    let list = w.list(
        "rp-macvlan",
        "1.0.0",
        vec![json!({
            "type": "macvlan", "master": parent.name(), "mode": "bridge",
            "ipam": {"type": "host-local", "subnet": "10.201.14.0/24", "dataDir": w.ipam_dir()}
        })],
    );
    let rt = rt(&ns, "rp-macvlan-1", json!({}));
    let cni = w.cni();
    let result = cni.add_network_list(&list, &rt).expect("ADD");
    assert_eq!(result.interfaces[0].name, "eth0");
    let link = ns.link("eth0").expect("eth0 in the namespace");
    assert_eq!(link["link_type"], "ether");
    let detail = ns.ip_json(&["-d", "link", "show", "dev", "eth0"]);
    assert_eq!(detail[0]["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(ns.addresses("eth0"), ["10.201.14.2/24"]);

    cni.del_network_list(&list, &rt).expect("DEL");
    assert_eq!(ns.links(), ["lo"]);
    assert!(w.allocations("rp-macvlan").is_empty());
}

#[test]
fn every_version_the_reference_plugins_speak() {
    // Debian's plugins 1.1.1 speak 0.1.0-1.0.0; each version's result is in its own layout.
    for (i, version) in ["0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]
        .into_iter()
        .enumerate()
    {
        let w = World::new(20 + i as u8);
        let ns = Netns::new();
        let name = format!("rp-v{i}");
        let list = w.list(&name, version, vec![w.bridge_plugin()]);
        let rt = rt(&ns, &format!("rp-v{i}-1"), json!({}));
        let cni = w.cni();
        let result = cni.add_network_list(&list, &rt).expect(version);
        assert_eq!(result.cni_version.to_string(), version);
        let printed = result.to_value().unwrap();
        let want = format!("10.201.{}.2/24", 20 + i);
        if version == "0.2.0" {
            assert_eq!(printed["ip4"]["ip"], want.as_str(), "{printed}");
        } else {
            assert_eq!(printed["ips"][0]["address"], want.as_str(), "{printed}");
        }
        assert_eq!(ns.addresses("eth0"), [want.as_str()], "{version}");
        cni.del_network_list(&list, &rt).expect(version);
        assert_eq!(ns.links(), ["lo"], "{version}");
        assert!(w.allocations(&name).is_empty(), "{version}");
    }
}

#[test]
fn a_plugin_failing_mid_chain_stops_add_and_del_cleans_up_what_ran() {
    let w = World::new(15);
    let ns = Netns::new();
    let list = w.list(
        "rp-fail",
        "1.0.0",
        vec![
            w.bridge_plugin(),
            json!({"type": "tuning", "capabilities": {"mac": true}}),
        ],
    );
    // tuning refuses a MAC that is not one, after the bridge plugin made eth0 and took an IP.
    let rt = rt(&ns, "rp-fail-1", json!({"mac": "not-a-mac"}));
    let e = w.cni().add_network_list(&list, &rt).unwrap_err();
    assert!(e.msg.contains("rp-fail") && e.msg.contains("tuning"), "{e}");
    assert!(
        !w.dir
            .path()
            .join("cache/results/rp-fail-rp-fail-1-eth0")
            .exists(),
        "nothing cached for a failed ADD"
    );
    assert_eq!(
        w.allocations("rp-fail").len(),
        1,
        "the bridge plugin's IP is held"
    );

    // DEL of the half-done attachment releases everything the first plugin did.
    w.cni()
        .del_network_list(&list, &rt)
        .expect("DEL after a failed ADD");
    assert_eq!(ns.links(), ["lo"]);
    assert!(w.allocations("rp-fail").is_empty());
}
