use std::sync::Arc;

use cni::skel::CmdArgs;
use serde_json::{Value, json};
use testkit::fake_plugin::FakePlugin;

use super::call::{Call, delegates_runner};
use super::*;
use crate::fake::Unreachable;
use crate::routes::NetlinkRoutes;

/// plumb's configuration under `dir` (its state, configuration and device-info
/// directories there, no `cniDir`), of this `cniVersion`, with one delegate network `net-a`
/// of the recording plugin `plugin`, installed in `dir/bin`.
fn one_fake_network(dir: &std::path::Path, plugin: &str, version: &str) -> (FakePlugin, Value) {
    let bin = dir.join("bin");
    let fake = FakePlugin::install(&bin, plugin);
    let config = json!({
        "cniVersion": version, "name": "plumb-net", "type": "plumb", "binDir": bin,
        "plumbStateDir": dir.join("state"), "confDir": dir.join("conf"),
        "plumbDeviceInfoDir": dir.join("devinfo"), "logToStderr": false,
        "delegates": [{"cniVersion": version, "name": "net-a", "type": plugin}]
    });
    (fake, config)
}

/// A request of `config` for `container_id` in `netns`, interface eth0, as the skeleton
/// makes it.
fn request(config: &Value, container_id: &str, netns: &str) -> CmdArgs {
    CmdArgs {
        container_id: container_id.into(),
        netns: netns.into(),
        ifname: "eth0".into(),
        args: String::new(),
        path: Vec::new(),
        stdin: config.to_string().into_bytes(),
        config: config.as_object().unwrap().clone(),
        version: config["cniVersion"].as_str().unwrap().parse().unwrap(),
    }
}

/// What Multus left under `multus` of `container_id` attached on eth0 to `net-a` (its
/// `config`): the scratch cache naming the delegate, as Multus's saveDelegates writes it
/// (multus_cache's tests show the whole shape), and the delegate's `result` in Multus's
/// result cache. The scratch file's path.
fn attached_by_multus(
    multus: &std::path::Path,
    container_id: &str,
    config: &[u8],
    result: Value,
) -> std::path::PathBuf {
    std::fs::create_dir_all(multus).unwrap();
    let scratch = multus.join(container_id);
    std::fs::write(
        &scratch,
        json!([{"Name": "net-a", "Bytes": cni::base64::encode(config)}]).to_string(),
    )
    .unwrap();
    cni::cache::ResultCache::new(multus)
        .write(&cni::cache::CachedAttachment {
            container_id: container_id.into(),
            config: config.to_vec(),
            if_name: "eth0".into(),
            network_name: "net-a".into(),
            netns: format!("/var/run/netns/{container_id}"),
            cni_args: Vec::new(),
            capability_args: Default::default(),
            result: Some(result),
        })
        .unwrap();
    scratch
}

#[test]
fn an_add_whose_forwarding_plugin_is_gone_when_its_turn_comes_is_not_run() {
    // The daemon sees the plugin's connection close only when it next reads it: a plugin
    // killed by the runtime, whose ADD then gets its turn at once (the runtime's DEL done
    // already), is told by asking the kernel. Here the daemon's flag is never set.
    let d = tempfile::tempdir().unwrap();
    let (fake, mut config) = one_fake_network(d.path(), "fake-late", "1.0.0");
    config["cniDir"] = json!(d.path().join("cni"));
    let args = |id: &str| request(&config, id, "/proc/self/ns/net");
    let add = |id: &str, connection: &std::os::unix::net::UnixStream| {
        Plumb {
            routes: &NetlinkRoutes,
            connect: &Unreachable,
            caller: Caller::Forwarded {
                pid: None,
                connection: Some(Arc::new(
                    std::os::fd::AsFd::as_fd(connection)
                        .try_clone_to_owned()
                        .unwrap(),
                )),
                abandoned: Arc::default(),
            },
        }
        .add(&args(id))
    };
    // The plugin's end open (it waits for the answer, with what it sent unread): run.
    let (daemon_end, mut plugin_end) = std::os::unix::net::UnixStream::pair().unwrap();
    std::io::Write::write_all(&mut plugin_end, b"POST /cni").unwrap();
    add("c-waiting", &daemon_end).unwrap();
    assert_eq!(fake.calls_of("ADD").len(), 1);
    // Its end closed (the plugin killed): not run.
    drop(plugin_end);
    let e = add("c-gone", &daemon_end).unwrap_err();
    assert_eq!(e.code, 11, "{e}");
    assert!(e.msg.contains("the runtime gave up on this ADD"), "{e}");
    assert_eq!(
        fake.calls_of("ADD").len(),
        1,
        "an ADD ran for a plugin gone"
    );
}

#[test]
fn gc_keeps_valid_the_attachments_multus_made_of_a_live_sandbox() {
    // A node moved from Multus with a pod still running: its attachments are in Multus's
    // result cache only, which is apart from plumb's when `cniDir` is not set.
    let d = tempfile::tempdir().unwrap();
    let (fake, mut config) = one_fake_network(d.path(), "fake-gc", "1.1.0");
    config["cni.dev/valid-attachments"] = json!([{"containerID": "c-multus", "ifname": "eth0"}]);
    let args = request(&config, "", "");
    let mut call = Call::new(&args, &Unreachable).unwrap();
    call.config.cni_dir = d.path().join("cni");
    call.config.multus_cni_dir = d.path().join("multus");
    call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
    let net_a = br#"{"cniVersion":"1.1.0","name":"net-a","type":"fake-gc"}"#;
    cni::cache::ResultCache::new(&call.config.multus_cni_dir)
        .write(&cni::cache::CachedAttachment {
            container_id: "c-multus".into(),
            config: net_a.to_vec(),
            if_name: "eth0".into(),
            network_name: "net-a".into(),
            netns: "/var/run/netns/x".into(),
            cni_args: Vec::new(),
            capability_args: Default::default(),
            result: Some(json!({"cniVersion": "1.1.0"})),
        })
        .unwrap();
    Plumb {
        routes: &NetlinkRoutes,
        connect: &Unreachable,
        caller: Caller::ThisProcess,
    }
    .do_gc(&call, &args)
    .unwrap();
    let gc = fake.calls_of("GC");
    assert_eq!(gc.len(), 1);
    assert_eq!(
        gc[0].stdin_json()["cni.dev/valid-attachments"],
        json!([{"containerID": "c-multus", "ifname": "eth0"}])
    );
}

#[test]
fn gc_deletes_the_sandboxes_multus_attached_that_the_runtime_no_longer_has() {
    // A node moved from Multus that went down with its pods: their DEL never came, and
    // only Multus's scratch cache says what they were attached to. GC releases them as
    // their DEL would have (a delegate without GC would hold their addresses for ever),
    // and leaves the live one, and what is no scratch cache.
    let d = tempfile::tempdir().unwrap();
    let (fake, mut config) = one_fake_network(d.path(), "fake-gc", "1.1.0");
    config["cni.dev/valid-attachments"] = json!([{"containerID": "c-live", "ifname": "eth0"}]);
    let args = request(&config, "", "");
    let mut call = Call::new(&args, &Unreachable).unwrap();
    call.config.cni_dir = d.path().join("cni");
    call.config.multus_cni_dir = d.path().join("multus");
    call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
    let net_a = br#"{"cniVersion":"1.1.0","name":"net-a","type":"fake-gc"}"#;
    let multus = &call.config.multus_cni_dir;
    let results = cni::cache::ResultCache::new(multus);
    for id in ["c-live", "c-gone"] {
        attached_by_multus(
            multus,
            id,
            net_a,
            json!({"cniVersion": "1.1.0", "ips": [{"address": "10.9.0.7/24"}]}),
        );
    }
    std::fs::write(multus.join("notes"), "not a scratch cache").unwrap();
    Plumb {
        routes: &NetlinkRoutes,
        connect: &Unreachable,
        caller: Caller::ThisProcess,
    }
    .do_gc(&call, &args)
    .unwrap();
    let del = fake.calls_of("DEL");
    assert_eq!(del.len(), 1, "one DEL, of the stale sandbox");
    assert_eq!(del[0].var("CNI_CONTAINERID"), Some("c-gone"));
    assert_eq!(del[0].var("CNI_IFNAME"), Some("eth0"));
    assert_eq!(
        del[0].stdin_json()["prevResult"]["ips"][0]["address"],
        "10.9.0.7/24"
    );
    assert!(
        !multus.join("c-gone").exists(),
        "the stale scratch file is left"
    );
    assert!(results.read("net-a", "c-gone", "eth0").unwrap().is_none());
    assert!(multus.join("c-live").exists() && multus.join("notes").exists());
    assert!(results.read("net-a", "c-live", "eth0").unwrap().is_some());
    let gc = fake.calls_of("GC");
    assert_eq!(
        gc[0].stdin_json()["cni.dev/valid-attachments"],
        json!([{"containerID": "c-live", "ifname": "eth0"}])
    );
    // Nothing of the stale sandbox is left in plumb's state either (its lock).
    let state: Vec<_> = std::fs::read_dir(d.path().join("state"))
        .map(|r| r.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(state.is_empty(), "{state:?}");
}

#[test]
fn gc_finishes_a_del_from_multus_cache_that_stopped_part_way_with_multus_results() {
    // A runtime DEL from Multus's scratch cache that failed leaves a record beside the
    // file. GC, the pod gone, finishes it as the DEL's retry would: the delegate gets
    // Multus's cached result as prevResult, once, and neither file is left.
    let d = tempfile::tempdir().unwrap();
    let (fake, mut config) = one_fake_network(d.path(), "fake-gc", "1.1.0");
    config["cni.dev/valid-attachments"] = json!([]);
    let call_for = |id: &str| {
        let args = request(&config, id, "");
        let mut call = Call::new(&args, &Unreachable).unwrap();
        call.config.cni_dir = d.path().join("cni");
        call.config.multus_cni_dir = d.path().join("multus");
        call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
        (args, call)
    };
    let plumb = Plumb {
        routes: &NetlinkRoutes,
        connect: &Unreachable,
        caller: Caller::ThisProcess,
    };
    let (del_args, del_call) = call_for("c-stuck");
    let net_a = br#"{"cniVersion":"1.1.0","name":"net-a","type":"fake-gc"}"#;
    let result = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.9.0.8/24"}]});
    let scratch = attached_by_multus(&d.path().join("multus"), "c-stuck", net_a, result.clone());
    fake.fail("DEL", 11, "try again later");
    plumb.do_del(&del_call, &del_args).unwrap_err();
    assert!(scratch.exists());
    assert!(del_call.records.load("c-stuck").unwrap().is_some());
    // A GC while the delegate still fails: its DEL once, not again from the scratch file.
    let (gc_args, gc_call) = call_for("");
    plumb.do_gc(&gc_call, &gc_args).unwrap_err();
    assert_eq!(
        fake.calls_of("DEL").len(),
        2,
        "the failed DEL, then GC's one"
    );
    assert!(scratch.exists() && gc_call.records.load("c-stuck").unwrap().is_some());
    fake.respond("DEL", "", "", 0);
    plumb.do_gc(&gc_call, &gc_args).unwrap();
    let del = fake.calls_of("DEL");
    assert_eq!(del.len(), 3, "the failed DELs, then the next GC's one");
    assert_eq!(del[2].var("CNI_CONTAINERID"), Some("c-stuck"));
    assert_eq!(del[2].stdin_json()["prevResult"], result);
    assert!(!scratch.exists(), "the scratch file is left");
    assert!(gc_call.records.load("c-stuck").unwrap().is_none());
}

/// A call for `container_id` on a node moved from Multus, under `dir`: one delegate network
/// `net-a` of the recording plugin `fake-del`, plumb's result cache in `dir/cni` and
/// Multus's caches in `dir/multus` (apart, as when the configuration sets no `cniDir`);
/// device-info files under `dir/devinfo`.
fn migration_call(
    dir: &std::path::Path,
    container_id: &str,
) -> (FakePlugin, CmdArgs, Call<'static>) {
    let (fake, config) = one_fake_network(dir, "fake-del", "1.0.0");
    let args = request(&config, container_id, "/var/run/netns/gone");
    let mut call = Call::new(&args, &Unreachable).unwrap();
    call.config.cni_dir = dir.join("cni");
    call.config.multus_cni_dir = dir.join("multus");
    call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
    (fake, args, call)
}

#[test]
fn del_from_multus_caches_apart_from_plumbs_gives_multus_results_and_clears_them() {
    // The usual migration: Multus's configuration kept, no `cniDir`, so Multus's scratch
    // and result caches (/var/lib/cni/multus) are apart from plumb's result cache
    // (/var/lib/cni). The delegate's DEL gets Multus's cached result as prevResult, and
    // Multus's files go once it succeeded; plumb's cache is not touched.
    let d = tempfile::tempdir().unwrap();
    let (fake, args, call) = migration_call(d.path(), "c-multus");
    let net_a = br#"{"cniVersion":"1.0.0","name":"net-a","type":"fake-del"}"#;
    let result = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/gone"}],
        "ips": [{"address": "10.9.0.7/24", "interface": 0}]});
    let scratch = attached_by_multus(
        &call.config.multus_cni_dir,
        "c-multus",
        net_a,
        result.clone(),
    );
    let multus_results = cni::cache::ResultCache::new(&call.config.multus_cni_dir);
    Plumb {
        routes: &NetlinkRoutes,
        connect: &Unreachable,
        caller: Caller::ThisProcess,
    }
    .do_del(&call, &args)
    .unwrap();
    let del = fake.calls_of("DEL");
    assert_eq!(del.len(), 1);
    assert_eq!(del[0].var("CNI_IFNAME"), Some("eth0"));
    assert_eq!(del[0].stdin_json()["prevResult"], result);
    assert!(!scratch.exists(), "the scratch file is left");
    assert!(
        multus_results
            .read("net-a", "c-multus", "eth0")
            .unwrap()
            .is_none()
    );
    assert!(!call.config.cni_dir.join("results").exists());
}

#[test]
fn del_from_multus_cache_deletes_the_device_info_files_multus_made() {
    // device-info spec §4.2.1: "When CNI DELETE action is called, the NPWG Implementation
    // must delete the CNI Plugin Device Information File". Multus made one for every
    // delegate with a device ID, named <Name with / as ->-<containerID>_<ifname>
    // (docs/multus-behaviour.md §2.9), and its scratch cache keeps the device ID.
    let d = tempfile::tempdir().unwrap();
    let devinfo = d.path().join("devinfo");
    let (fake, args, call) = migration_call(d.path(), "0a1b2c3d4e");
    let net_a = br#"{"cniVersion":"1.0.0","name":"net-a","type":"fake-del"}"#;
    let sriov = br#"{"cniVersion":"1.0.0","name":"sriov-net","type":"fake-del","deviceID":"0000:18:02.5","pciBusID":"0000:18:02.5"}"#;
    std::fs::create_dir_all(&call.config.multus_cni_dir).unwrap();
    let scratch = call.config.multus_cni_dir.join("0a1b2c3d4e");
    std::fs::write(
        &scratch,
        json!([
            {"Name": "net-a", "Bytes": cni::base64::encode(net_a)},
            {"Name": "ns1/sriov-net", "Bytes": cni::base64::encode(sriov),
             "deviceID": "0000:18:02.5", "resourceName": "intel.com/sriov"}
        ])
        .to_string(),
    )
    .unwrap();
    // What Multus's ADD left: the device plugin's file copied for the VF's attachment.
    let cni_dir = devinfo.join("cni");
    std::fs::create_dir_all(&cni_dir).unwrap();
    let multus_file = cni_dir.join("ns1-sriov-net-0a1b2c3d4e_net1");
    std::fs::write(
        &multus_file,
        r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:02.5"}}"#,
    )
    .unwrap();
    let other = cni_dir.join("ns1-sriov-net-c-other_net1");
    std::fs::write(&other, "{}").unwrap();
    Plumb {
        routes: &NetlinkRoutes,
        connect: &Unreachable,
        caller: Caller::ThisProcess,
    }
    .do_del(&call, &args)
    .unwrap();
    let del = fake.calls_of("DEL");
    assert_eq!(del.len(), 2);
    assert_eq!(del[0].var("CNI_IFNAME"), Some("net1"));
    assert!(!scratch.exists(), "the scratch file is left");
    assert!(
        !multus_file.exists(),
        "Multus's device-info file is left after DEL"
    );
    assert!(other.exists(), "another sandbox's file was deleted");
}

mod change;
mod in_memory;
