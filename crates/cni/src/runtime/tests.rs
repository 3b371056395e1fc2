//! The list semantics of spec §3, against a fake exec that records every call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};

use super::*;
use crate::version::SUPPORTED;

#[derive(Clone, Debug)]
struct Call {
    plugin: String,
    env: PluginEnv,
    stdin: Value,
}

/// Plugins are "installed" by name; each answers per command from `replies`, or echoes its
/// `prevResult` (or a fixed result) on ADD.
#[derive(Default)]
struct FakeExec {
    installed: Vec<String>,
    replies: HashMap<(String, String), Result<String, CniError>>,
    calls: Mutex<Vec<Call>>,
}

impl FakeExec {
    fn with(plugins: &[&str]) -> Self {
        FakeExec {
            installed: plugins.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }
    fn reply(mut self, plugin: &str, cmd: &str, r: Result<&str, CniError>) -> Self {
        self.replies
            .insert((plugin.into(), cmd.into()), r.map(|s| s.to_string()));
        self
    }
}

impl Exec for FakeExec {
    fn find_in_path(&self, t: &str, _dirs: &[PathBuf]) -> Result<PathBuf, CniError> {
        crate::validate::plugin_type(t)?;
        if self.installed.iter().any(|p| p == t) {
            Ok(PathBuf::from(format!("/fake/{t}")))
        } else {
            Err(CniError::new(
                ErrorCode::InvalidConfig,
                format!("failed to find plugin {t:?}"),
            ))
        }
    }

    fn exec_plugin(
        &self,
        path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<ExecOutput, CniError> {
        let plugin = path.file_name().unwrap().to_string_lossy().into_owned();
        let stdin: Value = serde_json::from_slice(stdin).unwrap();
        self.calls.lock().unwrap().push(Call {
            plugin: plugin.clone(),
            env: env.clone(),
            stdin: stdin.clone(),
        });
        let out = match self.replies.get(&(plugin.clone(), env.command.clone())) {
            Some(Ok(s)) => s.clone(),
            Some(Err(e)) => return Err(e.clone()),
            None if env.command == "ADD" => match stdin.get("prevResult") {
                Some(p) => p.to_string(),
                None => json!({
                    "cniVersion": stdin["cniVersion"],
                    "interfaces": [{"name": env.ifname, "sandbox": env.netns}],
                    "ips": [{"interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1", "version": "4"}],
                    "ip4": {"ip": "10.0.0.2/24"}
                })
                .to_string(),
            },
            None => String::new(),
        };
        Ok(ExecOutput {
            stdout: out.into_bytes(),
            stderr: b"plugin log".to_vec(),
        })
    }
}

fn list(version: &str, extra: Value) -> NetworkConfigList {
    let mut v = json!({
        "cniVersion": version, "name": "testnet",
        "plugins": [
            {"type": "bridge", "bridge": "br0", "ipam": {"type": "host-local"}},
            {"type": "tuning", "capabilities": {"mac": true}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    for (k, val) in extra.as_object().unwrap() {
        v[k] = val.clone();
    }
    NetworkConfigList::from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap()
}

fn rt() -> RuntimeConf {
    RuntimeConf {
        container_id: "ctr1".into(),
        netns: "/var/run/netns/ctr1".into(),
        ifname: "eth0".into(),
        args: vec![
            ("IgnoreUnknown".into(), "true".into()),
            ("K8S_POD_NAME".into(), "p".into()),
        ],
        capability_args: json!({"mac": "02:00:00:00:00:09", "bandwidth": {"ingressRate": 1}})
            .as_object()
            .unwrap()
            .clone(),
    }
}

fn cni(exec: FakeExec, dir: &Path) -> (CniConfig, &'static FakeExec) {
    // Leak the fake so the test can read its calls after handing a Box to CniConfig.
    let exec: &'static FakeExec = Box::leak(Box::new(exec));
    struct Ref(&'static FakeExec);
    impl Exec for Ref {
        fn find_in_path(&self, t: &str, d: &[PathBuf]) -> Result<PathBuf, CniError> {
            self.0.find_in_path(t, d)
        }
        fn exec_plugin(&self, p: &Path, s: &[u8], e: &PluginEnv) -> Result<ExecOutput, CniError> {
            self.0.exec_plugin(p, s, e)
        }
    }
    let c = CniConfig::new(
        vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")],
        ResultCache::new(dir),
    )
    .with_exec(Box::new(Ref(exec)));
    (c, exec)
}

fn calls(f: &FakeExec) -> Vec<Call> {
    std::mem::take(&mut *f.calls.lock().unwrap())
}

#[test]
fn add_chains_prev_results_injects_and_caches_for_every_version() {
    for v in SUPPORTED {
        let d = tempfile::tempdir().unwrap();
        let (c, f) = cni(FakeExec::with(&["bridge", "tuning", "portmap"]), d.path());
        let l = list(&v.to_string(), json!({}));
        let r = c.add_network_list(&l, &rt()).unwrap();
        assert_eq!(r.cni_version, v);
        let calls = calls(f);
        assert_eq!(
            calls.iter().map(|c| c.plugin.as_str()).collect::<Vec<_>>(),
            ["bridge", "tuning", "portmap"]
        );
        for call in &calls {
            assert_eq!(call.env.command, "ADD");
            assert_eq!(call.env.container_id, "ctr1");
            assert_eq!(call.env.netns, "/var/run/netns/ctr1");
            assert_eq!(call.env.ifname, "eth0");
            assert_eq!(call.env.args, "IgnoreUnknown=true;K8S_POD_NAME=p");
            assert_eq!(call.env.path, "/opt/cni/bin:/usr/lib/cni");
            assert_eq!(call.stdin["name"], json!("testnet"));
            assert_eq!(call.stdin["cniVersion"], json!(v.to_string()));
            assert!(call.stdin.get("capabilities").is_none());
        }
        assert!(calls[0].stdin.get("prevResult").is_none());
        assert!(
            calls[0].stdin.get("runtimeConfig").is_none(),
            "bridge declares nothing"
        );
        assert_eq!(
            calls[1].stdin["runtimeConfig"],
            json!({"mac": "02:00:00:00:00:09"})
        );
        assert!(
            calls[2].stdin.get("runtimeConfig").is_none(),
            "portMappings not supplied"
        );
        assert_eq!(
            calls[1].stdin["prevResult"]["cniVersion"],
            json!(v.to_string())
        );
        let cached = c.cache.read("testnet", "ctr1", "eth0").unwrap().unwrap();
        assert_eq!(cached.config, l.bytes);
        assert_eq!(cached.cni_args, rt().args);
        assert_eq!(cached.capability_args, rt().capability_args);
        assert_eq!(cached.result.unwrap()["cniVersion"], json!(v.to_string()));
    }
}

#[test]
fn add_stops_at_the_first_failure_and_names_the_plugin() {
    let d = tempfile::tempdir().unwrap();
    let fail = CniError::new(ErrorCode::Other(117), "no such sysctl");
    let (c, f) = cni(
        FakeExec::with(&["bridge", "tuning", "portmap"]).reply("tuning", "ADD", Err(fail)),
        d.path(),
    );
    let e = c
        .add_network_list(&list("1.0.0", json!({})), &rt())
        .unwrap_err();
    assert_eq!(e.code, 117);
    assert!(
        e.msg.contains("\"tuning\" (2 of 3) failed (ADD)") && e.msg.contains("no such sysctl"),
        "{e}"
    );
    assert_eq!(calls(f).len(), 2, "portmap must not run");
    assert!(
        c.cache.read("testnet", "ctr1", "eth0").unwrap().is_none(),
        "nothing cached"
    );
}

#[test]
fn nothing_runs_when_a_plugin_is_missing_or_a_parameter_is_bad() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(FakeExec::with(&["bridge", "tuning"]), d.path());
    let e = c
        .add_network_list(&list("1.0.0", json!({})), &rt())
        .unwrap_err();
    assert!(e.msg.contains("portmap"), "{e}");
    for (field, bad) in [
        ("container_id", ""),
        ("container_id", "a/b"),
        ("ifname", "x".repeat(16).as_str()),
        ("ifname", "a:b"),
    ] {
        let mut r = rt();
        if field == "container_id" {
            r.container_id = bad.into()
        } else {
            r.ifname = bad.into()
        }
        let e = c
            .add_network_list(&list("1.0.0", json!({})), &r)
            .unwrap_err();
        assert_eq!(e.code, 4, "{field}={bad}: {e}");
    }
    assert!(
        calls(f).is_empty(),
        "validation happens before any plugin runs"
    );
}

#[test]
fn prepare_add_makes_the_pre_run_checks_and_add_prepared_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(FakeExec::with(&["bridge", "tuning"]), d.path());
    // The same failure as ADD's own, with nothing run: a caller knows there is nothing to undo.
    let e = c.prepare_add(&list("1.0.0", json!({})), &rt()).unwrap_err();
    assert!(e.msg.contains("portmap"), "{e}");
    let (c, f2) = cni(FakeExec::with(&["bridge", "tuning", "portmap"]), d.path());
    let l = list("1.0.0", json!({}));
    let prepared = c.prepare_add(&l, &rt()).unwrap();
    assert!(calls(f2).is_empty(), "preparing runs nothing");
    c.add_prepared(&l, &rt(), prepared).unwrap();
    let ran: Vec<String> = calls(f2).into_iter().map(|c| c.plugin).collect();
    assert_eq!(ran, ["bridge", "tuning", "portmap"]);
    // Prepared for one list, given another: refused before anything runs.
    let prepared = c.prepare_add(&l, &rt()).unwrap();
    let other = NetworkConfigList::from_bytes(
        br#"{"cniVersion":"1.0.0","name":"one","plugins":[{"type":"bridge"}]}"#,
    )
    .unwrap();
    let e = c.add_prepared(&other, &rt(), prepared).unwrap_err();
    assert_eq!((e.error.code, e.started), (999, 0), "{e:?}");
    assert!(calls(f2).is_empty() && calls(f).is_empty());
}

#[test]
fn a_failed_add_says_how_many_plugins_were_started() {
    // A plugin that could not be started ran nothing, so it is not counted: a rollback DELs
    // the plugins before it only. One that ran and failed is counted.
    let cannot_start = || {
        CniError::new(ErrorCode::Io, "cannot execute plugin /fake/x: No such file")
            .plugin_not_started()
    };
    for (plugin, error, started) in [
        ("bridge", cannot_start(), 0),
        ("tuning", cannot_start(), 1),
        ("portmap", cannot_start(), 2),
        ("tuning", CniError::new(ErrorCode::Io, "ran and failed"), 2),
    ] {
        let d = tempfile::tempdir().unwrap();
        let exec = FakeExec::with(&["bridge", "tuning", "portmap"]).reply(
            plugin,
            "ADD",
            Err(error.clone()),
        );
        let (c, _) = cni(exec, d.path());
        let l = list("1.0.0", json!({}));
        let prepared = c.prepare_add(&l, &rt()).unwrap();
        let e = c.add_prepared(&l, &rt(), prepared).unwrap_err();
        assert_eq!(e.started, started, "{plugin}: {e:?}");
        // The runtime sees the same error either way: its code and message are unchanged.
        assert_eq!(
            (e.error.code, e.error.not_started()),
            (5, error.not_started())
        );
        assert!(e.error.msg.ends_with(&error.msg), "{e:?}");
        assert!(c.cache.list(None).unwrap().is_empty(), "nothing cached");
    }
}

#[test]
fn a_plugin_result_that_is_not_json_fails_add() {
    let d = tempfile::tempdir().unwrap();
    let (c, _) = cni(
        FakeExec::with(&["bridge", "tuning", "portmap"]).reply("bridge", "ADD", Ok("not json")),
        d.path(),
    );
    let e = c
        .add_network_list(&list("1.0.0", json!({})), &rt())
        .unwrap_err();
    assert_eq!(e.code, 6);
    assert!(
        e.msg.contains("bridge") && e.msg.contains("unusable result"),
        "{e}"
    );
}

#[test]
fn an_error_object_printed_with_exit_status_0_fails_add() {
    // The plugin says it failed, but exits 0: its error is not an empty result to chain on
    // and cache.
    for (stdout, code) in [
        (
            r#"{"cniVersion":"1.0.0","code":7,"msg":"bad subnet","details":"10.0.0.0/31"}"#,
            7,
        ),
        (r#"{"code":0,"msg":"oops"}"#, 999),
    ] {
        let d = tempfile::tempdir().unwrap();
        let (c, f) = cni(
            FakeExec::with(&["bridge", "tuning", "portmap"]).reply("bridge", "ADD", Ok(stdout)),
            d.path(),
        );
        let e = c
            .add_network_list(&list("1.0.0", json!({})), &rt())
            .unwrap_err();
        assert_eq!(e.code, code, "{stdout}: {e}");
        assert!(
            e.msg.contains("bridge") && e.msg.contains("exit status 0"),
            "{e}"
        );
        if code == 7 {
            assert_eq!(e.details, "10.0.0.0/31");
            assert!(e.msg.contains("bad subnet"), "{e}");
        }
        assert_eq!(calls(f).len(), 1, "nothing runs after the failing plugin");
        assert!(
            c.cache.read("testnet", "ctr1", "eth0").unwrap().is_none(),
            "nothing is cached"
        );
    }
}

#[test]
fn del_runs_in_reverse_with_the_cached_result_and_removes_the_cache() {
    for v in SUPPORTED {
        let d = tempfile::tempdir().unwrap();
        let (c, f) = cni(FakeExec::with(&["bridge", "tuning", "portmap"]), d.path());
        let l = list(&v.to_string(), json!({}));
        c.add_network_list(&l, &rt()).unwrap();
        calls(f);
        c.del_network_list(&l, &rt()).unwrap();
        let calls = calls(f);
        assert_eq!(
            calls.iter().map(|c| c.plugin.as_str()).collect::<Vec<_>>(),
            ["portmap", "tuning", "bridge"]
        );
        for call in &calls {
            assert_eq!(call.env.command, "DEL");
            // The cached result is passed from 0.4.0 on (spec §3; libcni).
            assert_eq!(
                call.stdin.get("prevResult").is_some(),
                v >= Version::V0_4_0,
                "{v}"
            );
        }
        assert!(c.cache.read("testnet", "ctr1", "eth0").unwrap().is_none());
        // Idempotent: again, with nothing cached.
        c.del_network_list(&l, &rt()).unwrap();
    }
}

#[test]
fn del_keeps_going_past_failures_reports_all_and_keeps_the_cache() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(
        FakeExec::with(&["bridge", "tuning", "portmap"])
            .reply(
                "portmap",
                "DEL",
                Err(CniError::new(ErrorCode::Io, "iptables locked")),
            )
            .reply(
                "tuning",
                "DEL",
                Err(CniError::new(ErrorCode::Other(120), "tuning broke")),
            ),
        d.path(),
    );
    let l = list("1.0.0", json!({}));
    c.add_network_list(&l, &rt()).unwrap();
    calls(f);
    let e = c.del_network_list(&l, &rt()).unwrap_err();
    assert!(
        e.msg.contains("iptables locked") && e.msg.contains("tuning broke"),
        "{e}"
    );
    assert_eq!(
        calls(f).len(),
        3,
        "bridge still ran DEL, so IPAM released the address"
    );
    assert!(
        c.cache.read("testnet", "ctr1", "eth0").unwrap().is_some(),
        "kept for the retry"
    );
}

#[test]
fn del_with_a_corrupt_cache_goes_on_without_prev_result() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(FakeExec::with(&["bridge", "tuning", "portmap"]), d.path());
    let l = list("1.0.0", json!({}));
    std::fs::create_dir_all(c.cache.results_dir()).unwrap();
    std::fs::write(c.cache.path("testnet", "ctr1", "eth0").unwrap(), "{broken").unwrap();
    c.del_network_list(&l, &rt()).unwrap();
    assert!(calls(f).iter().all(|c| c.stdin.get("prevResult").is_none()));
    assert!(!c.cache.path("testnet", "ctr1", "eth0").unwrap().exists());
}

#[test]
fn check_rules() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(FakeExec::with(&["bridge", "tuning", "portmap"]), d.path());
    for v in SUPPORTED.iter().filter(|v| **v < Version::V0_4_0) {
        let e = c
            .check_network_list(&list(&v.to_string(), json!({})), &rt())
            .unwrap_err();
        assert_eq!(e.code, 1, "{v}");
    }
    for v in SUPPORTED.iter().filter(|v| **v >= Version::V0_4_0) {
        let l = list(&v.to_string(), json!({}));
        let e = c.check_network_list(&l, &rt()).unwrap_err();
        assert!(e.msg.contains("no cached result"), "{e}");
        c.add_network_list(&l, &rt()).unwrap();
        calls(f);
        c.check_network_list(&l, &rt()).unwrap();
        let calls = calls(f);
        assert_eq!(
            calls.iter().map(|c| c.plugin.as_str()).collect::<Vec<_>>(),
            ["bridge", "tuning", "portmap"]
        );
        assert!(calls.iter().all(|c| c.env.command == "CHECK"
            && c.stdin["prevResult"]["cniVersion"] == json!(v.to_string())));
        c.check_network_list(&list(&v.to_string(), json!({"disableCheck": true})), &rt())
            .unwrap();
        assert!(
            f.calls.lock().unwrap().is_empty(),
            "disableCheck: no plugin runs"
        );
        c.del_network_list(&l, &rt()).unwrap();
        self::calls(f);
    }
}

#[test]
fn gc_deletes_stale_cached_attachments_then_gcs_every_plugin() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(
        FakeExec::with(&["bridge", "tuning", "portmap"]).reply(
            "tuning",
            "GC",
            Err(CniError::new(ErrorCode::Io, "gc tuning failed")),
        ),
        d.path(),
    );
    let l = list("1.1.0", json!({}));
    let mut stale = rt();
    stale.container_id = "stale".into();
    stale.netns = "/var/run/netns/stale".into();
    c.add_network_list(&l, &rt()).unwrap();
    c.add_network_list(&l, &stale).unwrap();
    calls(f);
    let valid = [GcAttachment {
        container_id: "ctr1".into(),
        ifname: "eth0".into(),
    }];
    let e = c.gc_network_list(&l, &valid).unwrap_err();
    assert!(e.msg.contains("gc tuning failed"), "{e}");
    let calls = calls(f);
    let dels: Vec<_> = calls.iter().filter(|c| c.env.command == "DEL").collect();
    assert_eq!(dels.len(), 3);
    assert!(
        dels.iter()
            .all(|c| c.env.container_id == "stale" && c.env.netns == "/var/run/netns/stale")
    );
    assert_eq!(
        dels[1].stdin["runtimeConfig"],
        json!({"mac": "02:00:00:00:00:09"}),
        "cached capability args"
    );
    let gcs: Vec<_> = calls.iter().filter(|c| c.env.command == "GC").collect();
    assert_eq!(gcs.len(), 3, "keeps going past tuning's error");
    for g in gcs {
        assert_eq!(
            g.stdin["cni.dev/valid-attachments"],
            json!([{"containerID":"ctr1","ifname":"eth0"}])
        );
        assert_eq!(
            g.stdin["cni.dev/attachments"],
            g.stdin["cni.dev/valid-attachments"]
        );
        assert_eq!(g.env.container_id, "");
    }
    assert!(c.cache.read("testnet", "stale", "eth0").unwrap().is_none());
    assert!(c.cache.read("testnet", "ctr1", "eth0").unwrap().is_some());
    // disableGC: nothing at all.
    c.gc_network_list(&list("1.1.0", json!({"disableGC": true})), &[])
        .unwrap();
    assert!(f.calls.lock().unwrap().is_empty());
    // Before 1.1.0: stale attachments are deleted but plugins get no GC.
    let old = list("1.0.0", json!({}));
    c.gc_network_list(&old, &[]).unwrap();
    assert!(
        f.calls
            .lock()
            .unwrap()
            .iter()
            .all(|c| c.env.command == "DEL")
    );
}

#[test]
fn gc_of_a_network_whose_plugin_is_missing_names_the_network() {
    // The node-wide GC runs every network; an error that names only the plugin leaves the
    // operator to find which network's configuration it is in.
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(FakeExec::with(&["bridge", "portmap"]), d.path());
    let e = c
        .gc_network_list(&list("1.1.0", json!({})), &[])
        .unwrap_err();
    assert_eq!(
        e.msg, "network \"testnet\": failed to find plugin \"tuning\"",
        "{e}"
    );
    assert_eq!(calls(f).len(), 2, "the other plugins still get GC");
}

#[test]
fn status_stops_at_the_first_error_and_keeps_its_code() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(
        FakeExec::with(&["bridge", "tuning", "portmap"]).reply(
            "tuning",
            "STATUS",
            Err(CniError::new(ErrorCode::LimitedConnectivity, "degraded")),
        ),
        d.path(),
    );
    let e = c
        .status_network_list(&list("1.1.0", json!({})))
        .unwrap_err();
    assert_eq!(e.code, 51);
    assert_eq!(calls(f).len(), 2);
    c.status_network_list(&list("1.0.0", json!({}))).unwrap();
    assert!(calls(f).is_empty(), "STATUS needs 1.1.0");
}

#[test]
fn version_probing_handles_legacy_plugins() {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = cni(
        FakeExec::with(&["new", "old", "legacy"])
            .reply(
                "new",
                "VERSION",
                Ok(r#"{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0"]}"#),
            )
            .reply("old", "VERSION", Ok(r#"{"cniVersion":"0.2.0"}"#))
            .reply(
                "legacy",
                "VERSION",
                Err(CniError::new(
                    ErrorCode::Other(0),
                    "unknown CNI_COMMAND: VERSION",
                )),
            ),
        d.path(),
    );
    assert_eq!(
        c.version_info("new").unwrap(),
        vec![Version::V0_4_0, Version::V1_0_0]
    );
    assert_eq!(
        c.version_info("old").unwrap(),
        vec![Version::V0_1_0, Version::V0_2_0]
    );
    assert_eq!(c.version_info("legacy").unwrap(), vec![Version::V0_1_0]);
    let call = &calls(f)[0];
    assert_eq!(
        (call.env.netns.as_str(), call.env.ifname.as_str()),
        ("dummy", "dummy")
    );
    assert_eq!(call.stdin, json!({"cniVersion": "1.1.0"}));
}
