//! The exact stdin and environment each plugin of a list receives (spec §3 "Deriving request
//! configuration", §2 "Parameters"), proven with testkit's recording fake plugin: a real
//! executable found in CNI_PATH and run by the crate as any plugin would be.

use std::path::{Path, PathBuf};

use cni::cache::ResultCache;
use cni::request::GcAttachment;
use cni::runtime::{CniConfig, RuntimeConf};
use cni::{NetworkConfigList, Version};
use serde_json::json;
use testkit::fake_plugin::{FakePlugin, sequence};

struct Setup {
    dir: tempfile::TempDir,
    a: FakePlugin,
    b: FakePlugin,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let a = FakePlugin::install(&bin, "fake-a");
    let b = FakePlugin::install(&bin, "fake-b");
    Setup { dir, a, b }
}

impl Setup {
    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn cni(&self) -> CniConfig {
        // A second, empty directory first: plugins are searched in order.
        let empty = self.dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        CniConfig::new(
            vec![empty, self.bin()],
            ResultCache::new(self.dir.path().join("cache")),
        )
    }
}

fn list(version: &str) -> NetworkConfigList {
    let v = json!({
        "cniVersion": version, "name": "fakenet", "someListKey": 1,
        "plugins": [
            {"type": "fake-a", "capabilities": {"mac": true, "ips": false}, "custom": {"x": [1, 2]},
             "args": {"cni": {"from-config": "yes"}}},
            {"type": "fake-b", "capabilities": {"portMappings": true}}
        ]
    });
    NetworkConfigList::from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap()
}

fn rt() -> RuntimeConf {
    RuntimeConf {
        container_id: "ctr-7".into(),
        netns: "/var/run/netns/not-used-by-fakes".into(),
        ifname: "net1".into(),
        args: vec![("K8S_POD_NAMESPACE".into(), "ns".into())],
        capability_args: json!({"mac": "02:00:00:00:00:07", "ips": ["10.0.0.7/24"]})
            .as_object()
            .unwrap()
            .clone(),
    }
}

const A_RESULT: &str = r#"{"cniVersion":"1.0.0",
    "interfaces":[{"name":"net1","mac":"02:00:00:00:00:07","sandbox":"/var/run/netns/x"}],
    "ips":[{"address":"10.0.0.7/24","interface":0}]}"#;

fn assert_env(call: &testkit::fake_plugin::Call, command: &str, path: &Path, empty: &Path) {
    assert_eq!(call.var("CNI_COMMAND"), Some(command));
    assert_eq!(call.var("CNI_CONTAINERID"), Some("ctr-7"));
    assert_eq!(
        call.var("CNI_NETNS"),
        Some("/var/run/netns/not-used-by-fakes")
    );
    assert_eq!(call.var("CNI_IFNAME"), Some("net1"));
    assert_eq!(call.var("CNI_ARGS"), Some("K8S_POD_NAMESPACE=ns"));
    let want_path = format!("{}:{}", empty.display(), path.display());
    assert_eq!(call.var("CNI_PATH"), Some(want_path.as_str()));
}

#[test]
fn add_chains_results_and_gives_each_plugin_only_its_capabilities() {
    let s = setup();
    s.a.respond("ADD", A_RESULT, "a log line", 0);
    // fake-b prints a result of its own (with no addresses): the list's result is the last one.
    let result = s.cni().add_network_list(&list("1.0.0"), &rt()).unwrap();
    assert!(result.ips.is_empty(), "{result:?}");

    let a = &s.a.calls_of("ADD")[0];
    assert_env(a, "ADD", &s.bin(), &s.dir.path().join("empty"));
    // name and cniVersion injected, the plugin's own keys unchanged, runtimeConfig holding only
    // the capability the plugin declares true, `capabilities` gone (spec §3 "must not be set"),
    // no prevResult for the first plugin.
    assert_eq!(
        a.stdin_json(),
        json!({"cniVersion": "1.0.0", "name": "fakenet", "type": "fake-a",
               "custom": {"x": [1, 2]},
               "args": {"cni": {"from-config": "yes"}},
               "runtimeConfig": {"mac": "02:00:00:00:00:07"}})
    );
    // The second gets the first's result as prevResult and, declaring no capability that was
    // given, no runtimeConfig key at all.
    let b = &s.b.calls_of("ADD")[0];
    let stdin = b.stdin_json();
    assert!(stdin.get("runtimeConfig").is_none(), "{stdin}");
    assert_eq!(
        stdin["prevResult"]["ips"][0]["address"], "10.0.0.7/24",
        "{stdin}"
    );
    assert_eq!(stdin["name"], "fakenet");
    assert_eq!(stdin["cniVersion"], "1.0.0");
}

#[test]
fn del_runs_in_reverse_with_the_cached_result() {
    let s = setup();
    s.a.respond("ADD", A_RESULT, "", 0);
    s.b.respond("ADD", A_RESULT, "", 0);
    let cni = s.cni();
    cni.add_network_list(&list("1.0.0"), &rt()).unwrap();
    cni.del_network_list(&list("1.0.0"), &rt()).unwrap();
    let order: Vec<(String, String)> = sequence(&s.bin());
    let want = [
        ("fake-a", "ADD"),
        ("fake-b", "ADD"),
        ("fake-b", "DEL"),
        ("fake-a", "DEL"),
    ];
    assert_eq!(
        order,
        want.map(|(n, c)| (n.to_string(), c.to_string())).to_vec()
    );
    for p in [&s.a, &s.b] {
        let del = &p.calls_of("DEL")[0];
        assert_env(del, "DEL", &s.bin(), &s.dir.path().join("empty"));
        assert_eq!(
            del.stdin_json()["prevResult"]["ips"][0]["address"],
            "10.0.0.7/24"
        );
    }
}

#[test]
fn del_keeps_going_past_a_failing_plugin_and_reports_it() {
    let s = setup();
    s.a.respond("ADD", A_RESULT, "", 0);
    s.b.respond("ADD", A_RESULT, "", 0);
    s.b.fail("DEL", 11, "iptables lock held");
    let cni = s.cni();
    cni.add_network_list(&list("1.0.0"), &rt()).unwrap();
    let e = cni.del_network_list(&list("1.0.0"), &rt()).unwrap_err();
    assert!(e.msg.contains("iptables lock held"), "{e}");
    assert_eq!(s.a.calls_of("DEL").len(), 1, "fake-a still got DEL");
    // The cache entry stays, so a retried DEL still has the prevResult.
    assert!(
        s.dir
            .path()
            .join("cache/results/fakenet-ctr-7-net1")
            .exists()
    );
}

#[test]
fn a_plugin_without_error_json_has_its_stderr_as_the_message() {
    let s = setup();
    s.a.respond("ADD", "", "panic: something broke", 2);
    let e = s.cni().add_network_list(&list("1.0.0"), &rt()).unwrap_err();
    assert!(e.msg.contains("panic: something broke"), "{e}");
    assert!(s.b.calls().is_empty(), "the chain stopped at the failure");
}

#[test]
fn check_and_old_versions() {
    let s = setup();
    s.a.respond("ADD", A_RESULT, "", 0);
    s.b.respond("ADD", A_RESULT, "", 0);
    let cni = s.cni();
    cni.add_network_list(&list("1.0.0"), &rt()).unwrap();
    cni.check_network_list(&list("1.0.0"), &rt()).unwrap();
    for p in [&s.a, &s.b] {
        let check = &p.calls_of("CHECK")[0];
        assert_eq!(
            check.stdin_json()["prevResult"]["ips"][0]["address"],
            "10.0.0.7/24"
        );
    }
    // CHECK does not exist before 0.4.0: refused without running anything.
    let before = sequence(&s.bin()).len();
    let e = cni.check_network_list(&list("0.3.1"), &rt()).unwrap_err();
    assert_eq!(e.code, 1, "{e}");
    assert_eq!(sequence(&s.bin()).len(), before);
}

#[test]
fn gc_deletes_stale_attachments_then_sends_gc_with_both_keys() {
    let s = setup();
    s.a.respond("ADD", A_RESULT, "", 0);
    s.b.respond("ADD", A_RESULT, "", 0);
    let cni = s.cni();
    let l = list("1.1.0");
    let mut keep = rt();
    keep.container_id = "ctr-keep".into();
    cni.add_network_list(&l, &rt()).unwrap();
    cni.add_network_list(&l, &keep).unwrap();
    cni.gc_network_list(
        &l,
        &[GcAttachment {
            container_id: "ctr-keep".into(),
            ifname: "net1".into(),
        }],
    )
    .unwrap();
    // The stale attachment got a full DEL, the kept one none.
    let dels = s.a.calls_of("DEL");
    assert_eq!(dels.len(), 1);
    assert_eq!(dels[0].var("CNI_CONTAINERID"), Some("ctr-7"));
    // Then GC to every plugin, with both spellings of the valid list.
    for p in [&s.a, &s.b] {
        let gc = &p.calls_of("GC")[0];
        let stdin = gc.stdin_json();
        let valid = json!([{"containerID": "ctr-keep", "ifname": "net1"}]);
        assert_eq!(stdin["cni.dev/valid-attachments"], valid, "{stdin}");
        assert_eq!(stdin["cni.dev/attachments"], valid, "{stdin}");
        assert!(gc.var("CNI_PATH").is_some());
    }
}

#[test]
fn status_stops_at_the_first_unavailable_plugin() {
    let s = setup();
    s.a.fail("STATUS", 50, "ipam not ready");
    let e = s.cni().status_network_list(&list("1.1.0")).unwrap_err();
    assert_eq!(e.code, 50, "{e}");
    assert!(e.msg.contains("ipam not ready"));
    assert!(s.b.calls().is_empty());
}

#[test]
fn version_probing_reads_what_a_plugin_supports() {
    let s = setup();
    let versions = s.cni().version_info("fake-a").unwrap();
    assert!(versions.contains(&Version::V1_1_0));
    // A legacy plugin that does not know VERSION means 0.1.0.
    s.b.fail("VERSION", 4, "unknown CNI_COMMAND: VERSION");
    assert_eq!(s.cni().version_info("fake-b").unwrap(), [Version::V0_1_0]);
}
