//! A node moved from Multus to plumb with pods running: their sandboxes were attached by Multus,
//! so plumb has no record of them, only Multus's scratch cache `<cniDir>/<containerID>` and its
//! libcni result cache (docs/multus-behaviour.md §2.11, §2.13). Here the test plays Multus: it runs
//! Debian's real plugins itself (bridge + host-local, in a real netns) and writes both caches as
//! Multus would have; then the built `plumb` binary gets the runtime's DEL, with the pod gone
//! from the API server (or no API server at all), and must release everything. Needs root.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{CniCall, Node, PLUGINS, err, ok, run};
use serde_json::{Value, json};
use testkit::fake_plugin::FakePlugin;
use testkit::kube_api::{KubeApi, KubeApiOptions, KubeconfigUser};
use testkit::netns::{Link, Netns, unique_name};

/// The runtime's CNI_ARGS for the pod.
fn pod_args(cid: &str) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=gone;\
         K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=0d4b1b5e-1c1d-4c53-9c1f-2a6d0e4f7a10"
    )
}

/// Runs one plugin as libcni does, returning its result.
fn plugin_add(plugin: &str, stdin: &Value, cid: &str, ns: &Netns, ifname: &str) -> Value {
    let mut child = Command::new(Path::new(PLUGINS).join(plugin))
        .env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", ns.path())
        .env("CNI_IFNAME", ifname)
        .env("CNI_ARGS", pod_args(cid))
        .env("CNI_PATH", PLUGINS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{plugin} ADD: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One delegate Multus attached: its configuration bytes (a conf or a conflist), what its
/// scratch cache entry adds, and the interface it got.
struct Delegate {
    name: &'static str,
    config: Value,
    ifname_request: Option<&'static str>,
    ifname: &'static str,
}

/// What Multus's ADD did for sandbox `cid`: the scratch cache written first (`saveDelegates`:
/// `json.Marshal` of its `[]*DelegateNetConf`, `Bytes` as base64), then each delegate run by
/// libcni (a conflist's plugins in order, each given the previous result; the fake plugin
/// `recorder` is left out, it only records DEL) and its result cached (`cniCacheV1`).
/// Returns the scratch file.
fn attach_as_multus(cni_dir: &Path, cid: &str, ns: &Netns, delegates: &[Delegate]) -> PathBuf {
    let scratch: Vec<Value> = delegates
        .iter()
        .map(|d| {
            let bytes = d.config.to_string();
            let mut v = json!({
                "Conf": {"cniVersion": d.config["cniVersion"], "name": d.config["name"],
                         "ipam": {}, "dns": {}},
                "ConfList": {},
                "Name": d.name,
                "IsFilterV4Gateway": true, "IsFilterV6Gateway": true,
                "Bytes": cni::base64::encode(bytes.as_bytes()),
            });
            if let Some(i) = d.ifname_request {
                v["ifnameRequest"] = json!(i);
            }
            v
        })
        .collect();
    fs::create_dir_all(cni_dir).unwrap();
    let path = cni_dir.join(cid);
    fs::write(&path, serde_json::to_vec(&scratch).unwrap()).unwrap();
    for d in delegates {
        let plugins = match d.config.get("plugins") {
            Some(p) => p.as_array().unwrap().clone(),
            None => vec![d.config.clone()],
        };
        let mut result: Option<Value> = None;
        for p in plugins.iter().filter(|p| p["type"] != "recorder") {
            let mut stdin = p.clone();
            stdin["name"] = d.config["name"].clone();
            stdin["cniVersion"] = d.config["cniVersion"].clone();
            if let Some(prev) = &result {
                stdin["prevResult"] = prev.clone();
            }
            result = Some(plugin_add(
                p["type"].as_str().unwrap(),
                &stdin,
                cid,
                ns,
                d.ifname,
            ));
        }
        let net = d.config["name"].as_str().unwrap();
        let args: Vec<(String, String)> = pod_args(cid)
            .split(';')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        let entry = json!({
            "kind": "cniCacheV1", "containerId": cid,
            "config": cni::base64::encode(d.config.to_string().as_bytes()),
            "ifName": d.ifname, "networkName": net, "netns": ns.path(),
            "cniArgs": args, "result": result,
        });
        let results = cni_dir.join("results");
        fs::create_dir_all(&results).unwrap();
        fs::write(
            results.join(format!("{net}-{cid}-{}", d.ifname)),
            entry.to_string(),
        )
        .unwrap();
    }
    path
}

/// A bridge + host-local configuration on `bridge`, subnet `10.241.<subnet>.0/24`.
fn bridge(node: &Node, name: &str, bridge: &str, subnet: u8) -> Value {
    json!({"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": bridge,
           "isGateway": true,
           "ipam": {"type": "host-local", "subnet": format!("10.241.{subnet}.0/24"),
                    "dataDir": node.ipam_dir()}})
}

/// The runtime's DEL of `cid`, as plumb gets it.
fn del(config: &Value, cid: &str, netns: &str) -> std::process::Output {
    run(&CniCall {
        command: "DEL",
        container_id: cid,
        netns,
        ifname: "eth0",
        args: &pod_args(cid),
        config,
    })
}

/// A sandbox Multus attached to three networks: the cluster network on `eth0`, a conflist NAD
/// the pod asked for on `blue` whose last plugin is the fake `recorder` (it shows what a
/// delegate's DEL is given), and a NAD on `net2`, Multus's name for the third.
struct Migrated {
    node: Node,
    ns: Netns,
    _links: Vec<Link>,
    fakes: PathBuf,
    recorder: FakePlugin,
    scratch: PathBuf,
}

fn attached_by_multus(cid: &str, net: u8) -> Migrated {
    testkit::netns::require_root();
    let node = Node::new();
    let ns = Netns::new();
    let names = [unique_name("mm"), unique_name("mm"), unique_name("mm")];
    let links: Vec<Link> = names.iter().map(|n| Link::bridge(n)).collect();
    let fakes = node.path("fakes");
    let recorder = FakePlugin::install(&fakes, "recorder");
    let mut with_recorder = bridge(&node, "mm-a", &names[1], net + 1);
    let bridge_conf = with_recorder.as_object_mut().unwrap();
    let bridge_plugin = json!({"type": "bridge", "bridge": bridge_conf.remove("bridge"),
                               "isGateway": true, "ipam": bridge_conf.remove("ipam")});
    let conflist = json!({"cniVersion": "1.0.0", "name": "mm-a",
                          "plugins": [bridge_plugin, {"type": "recorder"}]});
    let scratch = attach_as_multus(
        &node.cache_dir(),
        cid,
        &ns,
        &[
            Delegate {
                name: "mm-default",
                config: bridge(&node, "mm-default", &names[0], net),
                ifname_request: None,
                ifname: "eth0",
            },
            Delegate {
                name: "default/mm-a",
                config: conflist,
                ifname_request: Some("blue"),
                ifname: "blue",
            },
            Delegate {
                name: "default/mm-b",
                config: bridge(&node, "mm-b", &names[2], net + 2),
                ifname_request: None,
                ifname: "net2",
            },
        ],
    );
    let mut links_in_ns = ns.links();
    links_in_ns.sort();
    assert_eq!(links_in_ns, ["blue", "eth0", "lo", "net2"]);
    assert_eq!(node.all_allocations(), 3);
    assert_eq!(node.cache_entries().len(), 3);
    Migrated {
        node,
        ns,
        _links: links,
        fakes,
        recorder,
        scratch,
    }
}

#[test]
fn del_of_a_sandbox_multus_attached_releases_everything_when_the_pod_is_gone() {
    let cid = "c0ffee-multus-1";
    let Migrated {
        node,
        ns,
        _links,
        fakes,
        recorder,
        scratch,
    } = attached_by_multus(cid, 1);
    // The API server no longer has the pod.
    let api = KubeApi::start(KubeApiOptions::default());
    let kubeconfig = api.write_kubeconfig(node.path("kubeconfig"), KubeconfigUser::Token);
    let config = node.config(
        json!({"clusterNetwork": "mm-default", "kubeconfig": kubeconfig,
                                    "binDir": fakes, "logLevel": "verbose"}),
    );
    let out = del(&config, cid, &ns.path().display().to_string());
    ok(&out);
    assert_eq!(ns.links(), ["lo"], "interfaces left");
    assert_eq!(node.all_allocations(), 0, "addresses left");
    assert!(!scratch.exists(), "the scratch file is left");
    assert!(
        node.cache_entries().is_empty(),
        "{:?}",
        node.cache_entries()
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deleted from Multus's scratch cache"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The recorder's DEL: on Multus's interface name, with the runtime's CNI_ARGS and the
    // result Multus's cache held as prevResult.
    let dels = recorder.calls_of("DEL");
    assert_eq!(dels.len(), 1);
    assert_eq!(dels[0].var("CNI_IFNAME"), Some("blue"));
    assert_eq!(
        dels[0].var("CNI_ARGS").map(str::to_string),
        Some(pod_args(cid))
    );
    let prev = &dels[0].stdin_json()["prevResult"];
    assert_eq!(prev["interfaces"][2]["name"], "blue", "{prev}");
    assert!(
        prev["ips"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("10.241.2."),
        "{prev}"
    );
    // The runtime's retry has nothing left to do.
    ok(&del(&config, cid, &ns.path().display().to_string()));
}

#[test]
fn del_from_multus_cache_releases_addresses_when_the_netns_and_the_api_are_gone() {
    testkit::netns::require_root();
    let node = Node::new();
    let ns = Netns::new();
    let b = unique_name("mm");
    let _link = Link::bridge(&b);
    let cid = "c0ffee-multus-2";
    let netns = ns.path().display().to_string();
    let scratch = attach_as_multus(
        &node.cache_dir(),
        cid,
        &ns,
        &[Delegate {
            name: "mm-default",
            config: bridge(&node, "mm-default", &b, 4),
            ifname_request: None,
            ifname: "eth0",
        }],
    );
    assert_eq!(node.all_allocations(), 1);
    drop(ns);
    // No kubeconfig: plumb without Kubernetes.
    let config = node.config(json!({"delegates": [bridge(&node, "mm-default", &b, 4)]}));
    ok(&del(&config, cid, &netns));
    assert_eq!(node.all_allocations(), 0, "addresses left");
    assert!(!scratch.exists());
    assert!(
        node.cache_entries().is_empty(),
        "{:?}",
        node.cache_entries()
    );
}

#[test]
fn a_corrupt_scratch_file_fails_del_naming_it_and_deletes_nothing() {
    testkit::netns::require_root();
    let node = Node::new();
    let ns = Netns::new();
    let b = unique_name("mm");
    let _link = Link::bridge(&b);
    let cid = "c0ffee-multus-3";
    let scratch = attach_as_multus(
        &node.cache_dir(),
        cid,
        &ns,
        &[Delegate {
            name: "mm-default",
            config: bridge(&node, "mm-default", &b, 5),
            ifname_request: None,
            ifname: "eth0",
        }],
    );
    // Cut short, as a node losing power mid-write leaves it.
    let whole = fs::read(&scratch).unwrap();
    fs::write(&scratch, &whole[..whole.len() / 2]).unwrap();
    let config = node.config(json!({"delegates": [bridge(&node, "mm-default", &b, 5)]}));
    let e = err(&del(&config, cid, &ns.path().display().to_string()));
    assert_eq!(e["code"], 6, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains(&scratch.display().to_string()) && msg.contains("nothing was deleted"),
        "{e}"
    );
    assert!(ns.links().contains(&"eth0".to_string()));
    assert_eq!(node.all_allocations(), 1);
    assert!(scratch.exists());
    assert_eq!(node.cache_entries().len(), 1);
}

#[test]
fn a_del_that_fails_part_way_keeps_the_scratch_file_and_its_retry_finishes_the_job() {
    let cid = "c0ffee-multus-4";
    let m = attached_by_multus(cid, 11);
    m.recorder
        .fail("DEL", 11, "the plugin's daemon is restarting");
    let config = m
        .node
        .config(json!({"delegates": [{"cniVersion": "1.0.0", "name": "x",
                                                     "type": "bridge"}],
                                      "binDir": m.fakes}));
    let netns = m.ns.path().display().to_string();
    let e = err(&del(&config, cid, &netns));
    assert!(
        e["msg"].as_str().unwrap().contains("restarting")
            && e["msg"]
                .as_str()
                .unwrap()
                .contains("Multus's scratch cache"),
        "{e}"
    );
    // Every delegate was attempted: only the failed one's result is kept, and the file.
    assert_eq!(m.ns.links(), ["lo"]);
    assert_eq!(m.node.all_allocations(), 0);
    assert!(m.scratch.exists());
    assert_eq!(
        m.node.cache_entries().len(),
        1,
        "{:?}",
        m.node.cache_entries()
    );
    // The retry DELs only what failed, still with Multus's cached result, and then the file
    // goes.
    m.recorder.respond("DEL", "", "", 0);
    ok(&del(&config, cid, &netns));
    let dels = m.recorder.calls_of("DEL");
    assert_eq!(dels.len(), 2);
    assert_eq!(
        dels[1].stdin_json()["prevResult"]["interfaces"][2]["name"],
        "blue"
    );
    assert!(!m.scratch.exists());
    assert!(
        m.node.cache_entries().is_empty(),
        "{:?}",
        m.node.cache_entries()
    );
    assert!(!m.node.record(cid).exists());
}

#[test]
fn gc_releases_a_sandbox_multus_attached_whose_del_never_came() {
    // The node went down with the pod: its netns is gone, the runtime never sent its DEL and
    // no longer lists it. Its addresses were held for ever (Debian's host-local has no GC),
    // and Multus's files with them; GC now deletes it as its DEL would have.
    let cid = "c0ffee-multus-gc";
    let Migrated {
        node,
        ns,
        _links,
        fakes,
        recorder,
        scratch,
    } = attached_by_multus(cid, 21);
    drop(ns);
    // The node's configuration now: its default network is another (GC does not reach it: its
    // version has no GC), which DEL from the scratch cache does not use.
    let mut config = node.config(json!({"binDir": fakes, "delegates": [
        {"cniVersion": "1.0.0", "name": "now-default", "type": "bridge", "bridge": "mmgc0"}]}));
    config["cniVersion"] = json!("1.1.0");
    // A live sandbox Multus attached is kept (its scratch file is all the test needs).
    let live = node.cache_dir().join("c0ffee-multus-live");
    fs::copy(&scratch, &live).unwrap();
    config["cni.dev/valid-attachments"] =
        json!([{"containerID": "c0ffee-multus-live", "ifname": "eth0"}]);
    let out = crate::common::run_node_wide("GC", &config);
    ok(&out);
    assert_eq!(node.all_allocations(), 0, "addresses left");
    assert!(!scratch.exists(), "the scratch file is left");
    assert!(
        node.cache_entries().is_empty(),
        "{:?}",
        node.cache_entries()
    );
    // Each delegate got its DEL, on Multus's interface name, with no netns.
    let dels = recorder.calls_of("DEL");
    assert_eq!(dels.len(), 1);
    assert_eq!(dels[0].var("CNI_IFNAME"), Some("blue"));
    assert_eq!(dels[0].var("CNI_NETNS"), Some(""));
    assert!(live.exists(), "the live sandbox's scratch file is gone");
}
