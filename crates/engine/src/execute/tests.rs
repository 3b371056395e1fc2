use std::path::PathBuf;
use std::sync::Mutex;

use cni::cache::ResultCache;
use cni::exec::{Exec, ExecOutput, PluginEnv, StdinGate};
use serde_json::{Map, json};

use super::*;

/// A delegate's answer, as the fakes give it.
fn answered() -> Result<ExecOutput, CniError> {
    Ok(ExecOutput {
        stdout: br#"{"cniVersion":"1.0.0"}"#.to_vec(),
        stderr: Vec::new(),
    })
}

/// A delegate's failure, as the fakes give it.
fn delegate_failed() -> Result<ExecOutput, CniError> {
    Err(CniError::new(
        cni::ErrorCode::Internal,
        "the delegate failed",
    ))
}

/// Plugins that start, then wait for the gate as `RawExec`'s do; the state directory is
/// removed once the record is staged, so the record cannot be put in place.
struct LosingTheStateDir {
    state_dir: PathBuf,
    gate: Mutex<Option<StdinGate>>,
    ran: std::sync::Arc<Mutex<Vec<String>>>,
}

impl Exec for LosingTheStateDir {
    fn find_in_path(&self, plugin_type: &str, _: &[PathBuf]) -> Result<PathBuf, CniError> {
        Ok(PathBuf::from(plugin_type))
    }

    fn hold_next_stdin(&self, gate: StdinGate) -> Result<(), CniError> {
        std::fs::remove_dir_all(&self.state_dir).unwrap();
        *self.gate.lock().unwrap() = Some(gate);
        Ok(())
    }

    fn take_stdin_gate(&self) -> Option<StdinGate> {
        self.gate.lock().unwrap().take()
    }

    fn exec_plugin(&self, _: &Path, _: &[u8], env: &PluginEnv) -> Result<ExecOutput, CniError> {
        if let Some(gate) = self.take_stdin_gate() {
            gate()?;
        }
        self.ran.lock().unwrap().push(env.command.clone());
        answered()
    }
}

/// An attachment of one delegate, `plugin_type`, which the fake executors take as its path.
fn attachment(name: &str, ifname: &str, plugin_type: &str) -> Attachment {
    let list = NetworkConfigList::from_any_bytes(
        json!({"cniVersion": "1.0.0", "name": name, "type": plugin_type})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    Attachment {
        network: name.into(),
        ifname: ifname.into(),
        ifname_requested: false,
        network_list: list.clone(),
        list,
        capability_args: Map::new(),
        is_default: ifname == "eth0",
        default_route: None,
        device: None,
        resource: None,
    }
}

/// The device-info file of device 0000:03:00.1 of resource vendor.com/nic, as its device
/// plugin writes it; its path.
fn device_plugin_file(dirs: &DeviceInfoDirs) -> PathBuf {
    let dp = dirs.dp_path("vendor.com/nic", "0000:03:00.1");
    std::fs::create_dir_all(dp.parent().unwrap()).unwrap();
    std::fs::write(
        &dp,
        r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:03:00.1"}}"#,
    )
    .unwrap();
    dp
}

/// `a` given that device ([`device_plugin_file`]): plumb copies its device plugin's file.
fn with_device(a: Attachment) -> Attachment {
    Attachment {
        device: Some(crate::plan::Device {
            id: "0000:03:00.1".into(),
            resource: Some("vendor.com/nic".into()),
        }),
        ..a
    }
}

/// Plugins of type `fails` fail their DEL, after another call rewrote the record on disk
/// (`rewrite`); the others succeed.
struct RecordRewrittenMeanwhile {
    records: RecordStore,
    rewrite: Record,
}

impl Exec for RecordRewrittenMeanwhile {
    fn find_in_path(&self, plugin_type: &str, _: &[PathBuf]) -> Result<PathBuf, CniError> {
        Ok(PathBuf::from(plugin_type))
    }

    fn exec_plugin(&self, p: &Path, _: &[u8], _: &PluginEnv) -> Result<ExecOutput, CniError> {
        if p == Path::new("fails") {
            self.records.save(&self.rewrite).unwrap();
            return delegate_failed();
        }
        answered()
    }
}

#[test]
fn a_record_naming_another_container_is_refused_and_neither_record_is_touched() {
    // c-a.json holds c-b's record (copied or edited by hand): DEL of c-a must not run c-b's
    // delegates under c-a's ID, nor remove or rewrite c-b's record.
    let d = tempfile::tempdir().unwrap();
    let records = RecordStore::new(d.path().join("state"));
    let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
    let b = Record {
        version: RECORD_VERSION,
        container_id: "c-b".into(),
        netns: "/var/run/netns/b".into(),
        pod_namespace: String::new(),
        pod_name: String::new(),
        pod_uid: String::new(),
        cni_args: vec![],
        attachments: vec![recorded(&attachment("net-b", "eth0", "fake"), "c-b", &dirs)],
        standalone: false,
        for_changes: None,
    };
    records.save(&b).unwrap();
    let b_path = records.path("c-b").unwrap();
    let a_path = records.path("c-a").unwrap();
    std::fs::copy(&b_path, &a_path).unwrap();
    let exec = ByInterface::default();
    let ran = std::sync::Arc::clone(&exec.ran);
    let cni = runner(d.path(), exec);
    let executor = executor(&cni, &records, &dirs);
    let sandbox = Sandbox {
        container_id: "c-a".into(),
        netns: "/var/run/netns/a".into(),
        ..Sandbox::default()
    };
    let e = executor.del(&sandbox, &sandbox.netns).unwrap_err();
    assert_eq!(e.code, 6, "{e}");
    assert!(
        e.msg.contains("c-a.json") && e.msg.contains("\"c-b\""),
        "{e}"
    );
    assert!(ran.lock().unwrap().is_empty(), "{:?}", ran.lock().unwrap());
    assert_eq!(records.load("c-b").unwrap(), Some(b.clone()));
    assert!(a_path.exists());
    // ADD and CHECK refuse it alike, rather than undoing or checking c-b's attachments.
    let e = executor
        .add(&sandbox, None, &[attachment("net-a", "eth0", "fake")])
        .unwrap_err();
    assert_eq!(e.code, 6, "{e}");
    assert_eq!(executor.check(&sandbox).unwrap_err().code, 6);
    assert!(ran.lock().unwrap().is_empty(), "{:?}", ran.lock().unwrap());
    assert_eq!(records.load("c-b").unwrap(), Some(b));
}

/// Delegates run by `exec`, their results cached under `dir`.
fn runner(dir: &Path, exec: impl Exec + 'static) -> CniConfig {
    CniConfig::new(vec![], ResultCache::new(dir.join("cache"))).with_exec(Box::new(exec))
}

/// An executor of these parts that changes no default route.
fn executor<'a>(
    cni: &'a CniConfig,
    records: &'a RecordStore,
    dirs: &'a DeviceInfoDirs,
) -> Executor<'a> {
    Executor {
        cni,
        records,
        routes: &NoRoutes,
        device_info: dirs,
    }
}

struct NoRoutes;

impl DefaultRoutes for NoRoutes {
    fn set_default_route(&self, _: &Path, _: &str, _: &[IpAddr]) -> Result<(), CniError> {
        Ok(())
    }

    fn interfaces(&self, _: &Path) -> Result<Vec<String>, CniError> {
        Ok(Vec::new())
    }
}

#[test]
fn a_plugin_not_installed_for_a_later_network_fails_add_before_any_delegate_acts() {
    // The default network's plugin is there, the second network's is not: found out before
    // the first ran, there is nothing to attach and then undo (a rollback can fail too).
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    let fake = testkit::fake_plugin::FakePlugin::install(&bin, "fake");
    let cni = CniConfig::new(vec![bin.clone()], ResultCache::new(d.path().join("cache")));
    let records = RecordStore::new(d.path().join("state"));
    let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
    let sandbox = Sandbox {
        container_id: "c-missing".into(),
        netns: "/var/run/netns/x".into(),
        ..Sandbox::default()
    };
    let e = executor(&cni, &records, &dirs)
        .add(
            &sandbox,
            None,
            &[
                attachment("net-a", "eth0", "fake"),
                attachment("net-b", "net1", "not-installed"),
            ],
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
    assert!(
        e.msg
            .contains("attachment 2 of 2 (network net-b, interface net1)")
            && e.msg.contains(&format!(
                "failed to find plugin \"not-installed\" in path [{}]",
                bin.display()
            )),
        "{e}"
    );
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    assert!(!records.path("c-missing").unwrap().exists());
}

#[test]
fn a_record_that_cannot_be_put_in_place_fails_add_before_any_delegate_acts() {
    // Whether the first attachment has a device-info file to make (the record is then put
    // in place before it) or not (the record's write is then held by its first delegate).
    for first_has_device in [true, false] {
        let d = tempfile::tempdir().unwrap();
        let state_dir = d.path().join("state");
        let ran = std::sync::Arc::new(Mutex::new(Vec::new()));
        let exec = LosingTheStateDir {
            state_dir: state_dir.clone(),
            gate: Mutex::new(None),
            ran: std::sync::Arc::clone(&ran),
        };
        let cni = runner(d.path(), exec);
        let records = RecordStore::new(&state_dir);
        let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
        let executor = executor(&cni, &records, &dirs);
        let sandbox = Sandbox {
            container_id: "c-lost".into(),
            netns: "/var/run/netns/x".into(),
            ..Sandbox::default()
        };
        // A device whose device plugin wrote a device-info file, which plumb would copy
        // for the attachment before its delegate starts.
        let dp = device_plugin_file(&dirs);
        let mut first = attachment("net-a", "eth0", "fake");
        if first_has_device {
            first = with_device(first);
        }
        let e = executor
            .add(
                &sandbox,
                None,
                &[first, attachment("net-b", "net1", "fake")],
            )
            .unwrap_err();
        let case = format!("first attachment with a device: {first_has_device}");
        assert!(e.msg.contains("c-lost.json"), "{case}: {e}");
        // Said to be the attachment record, not the libcni result cache it is written like.
        assert!(
            e.msg.contains("attachment record") && !e.msg.contains("result cache"),
            "{case}: {e}"
        );
        // No delegate acted (not even a rollback DEL), and nothing is left behind.
        assert!(ran.lock().unwrap().is_empty(), "{case}: {:?}", ran.lock());
        assert!(cni.exec.take_stdin_gate().is_none(), "{case}");
        assert!(!records.path("c-lost").unwrap().exists(), "{case}");
        assert!(cni.cache.list(Some("c-lost")).unwrap().is_empty(), "{case}");
        // None was made (not made and then removed).
        assert!(
            !dirs.cni_dir().exists(),
            "{case}: a device-info file was made"
        );
        assert!(
            dp.exists(),
            "the device plugin's own file is not plumb's to remove"
        );
    }
}

/// plumb killed as its first delegate starts (a panic stands for the kill): the delegates of
/// a later call succeed.
#[derive(Default)]
struct KilledAtFirstStart {
    gate: Mutex<Option<StdinGate>>,
    killed: std::sync::atomic::AtomicBool,
    ran: std::sync::Arc<Mutex<Vec<String>>>,
}

impl Exec for KilledAtFirstStart {
    fn find_in_path(&self, plugin_type: &str, _: &[PathBuf]) -> Result<PathBuf, CniError> {
        Ok(PathBuf::from(plugin_type))
    }

    fn hold_next_stdin(&self, gate: StdinGate) -> Result<(), CniError> {
        *self.gate.lock().unwrap() = Some(gate);
        Ok(())
    }

    fn take_stdin_gate(&self) -> Option<StdinGate> {
        self.gate.lock().unwrap().take()
    }

    fn exec_plugin(&self, _: &Path, _: &[u8], env: &PluginEnv) -> Result<ExecOutput, CniError> {
        if !self.killed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // Killed before the delegate got its stdin: a record still held back is lost.
            drop(self.take_stdin_gate());
            panic!("plumb killed as its first delegate starts");
        }
        self.ran.lock().unwrap().push(env.command.clone());
        answered()
    }
}

#[test]
fn an_add_killed_after_its_first_device_info_file_is_made_leaves_a_record_that_removes_it() {
    // A DEL without a record plans from the API, which may no longer know the pod: only a
    // record can say that the first attachment's device-info file is plumb's to remove.
    let d = tempfile::tempdir().unwrap();
    let exec = KilledAtFirstStart::default();
    let ran = std::sync::Arc::clone(&exec.ran);
    let cni = runner(d.path(), exec);
    let records = RecordStore::new(d.path().join("state"));
    let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
    let executor = executor(&cni, &records, &dirs);
    let sandbox = Sandbox {
        container_id: "c-killed".into(),
        netns: "/var/run/netns/x".into(),
        ..Sandbox::default()
    };
    let dp = device_plugin_file(&dirs);
    let first = with_device(attachment("net-a", "eth0", "fake"));
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        executor.add(&sandbox, None, &[first])
    }));
    assert!(killed.is_err(), "the ADD was not stopped");
    let made: Vec<_> = std::fs::read_dir(dirs.cni_dir()).unwrap().collect();
    assert_eq!(
        made.len(),
        1,
        "the first attachment's device-info file: {made:?}"
    );
    assert!(records.path("c-killed").unwrap().exists(), "no record");
    executor.del(&sandbox, &sandbox.netns).unwrap();
    assert_eq!(*ran.lock().unwrap(), ["DEL"]);
    let left: Vec<_> = std::fs::read_dir(dirs.cni_dir()).unwrap().collect();
    assert!(left.is_empty(), "device-info files left: {left:?}");
    assert!(!records.path("c-killed").unwrap().exists());
    assert!(
        dp.exists(),
        "the device plugin's own file is not plumb's to remove"
    );
}

/// Plugins of type `unstartable` cannot be started (as an exec that fails); the others
/// succeed.
struct Unstartable;

impl Exec for Unstartable {
    fn find_in_path(&self, plugin_type: &str, _: &[PathBuf]) -> Result<PathBuf, CniError> {
        Ok(PathBuf::from(plugin_type))
    }

    fn exec_plugin(&self, p: &Path, _: &[u8], _: &PluginEnv) -> Result<ExecOutput, CniError> {
        if p == Path::new("unstartable") {
            return Err(
                CniError::new(cni::ErrorCode::Io, "cannot execute plugin: EACCES")
                    .plugin_not_started(),
            );
        }
        answered()
    }
}

#[test]
fn a_device_info_file_copied_for_a_plugin_that_cannot_start_is_removed() {
    // The attachment failed before anything of it ran, so the rollback leaves it out of
    // the record: its device-info file, copied already, must go with the ADD's failure,
    // whether it is the first attachment's or a later one's.
    for device_at in [0, 1] {
        let d = tempfile::tempdir().unwrap();
        let cni = runner(d.path(), Unstartable);
        let records = RecordStore::new(d.path().join("state"));
        let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
        let executor = executor(&cni, &records, &dirs);
        let sandbox = Sandbox {
            container_id: "c-ns".into(),
            netns: "/var/run/netns/x".into(),
            ..Sandbox::default()
        };
        let dp = device_plugin_file(&dirs);
        let mut attachments = [
            attachment("net-a", "eth0", "fake"),
            attachment("net-b", "net1", "fake"),
        ];
        let (network, ifname) = (
            &attachments[device_at].network,
            &attachments[device_at].ifname,
        );
        attachments[device_at] = with_device(attachment(network, ifname, "unstartable"));
        let e = executor.add(&sandbox, None, &attachments).unwrap_err();
        assert!(e.msg.contains("EACCES"), "device at {device_at}: {e}");
        let left: Vec<_> = std::fs::read_dir(dirs.cni_dir()).unwrap().collect();
        assert!(left.is_empty(), "device at {device_at}: left {left:?}");
        executor.del(&sandbox, &sandbox.netns).unwrap();
        assert!(!records.path("c-ns").unwrap().exists());
        assert!(
            dp.exists(),
            "the device plugin's own file is not plumb's to remove"
        );
    }
}

/// Plugins that cannot be found, looked for after the state directory was removed: the
/// attachment fails before any delegate starts, and the record cannot be put in place.
struct MissingAndNoStateDir {
    state_dir: PathBuf,
    gate: Mutex<Option<StdinGate>>,
    looked_up: std::sync::atomic::AtomicUsize,
}

impl Exec for MissingAndNoStateDir {
    fn find_in_path(&self, plugin_type: &str, _: &[PathBuf]) -> Result<PathBuf, CniError> {
        // Found by ADD's check of every plugin, gone when its attachment runs (the node's
        // plugins upgraded in between).
        if self
            .looked_up
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            == 0
        {
            return Ok(PathBuf::from(plugin_type));
        }
        let _ = std::fs::remove_dir_all(&self.state_dir);
        Err(CniError::new(
            cni::ErrorCode::InvalidConfig,
            format!("cannot find plugin {plugin_type:?}"),
        ))
    }

    fn hold_next_stdin(&self, gate: StdinGate) -> Result<(), CniError> {
        *self.gate.lock().unwrap() = Some(gate);
        Ok(())
    }

    fn take_stdin_gate(&self) -> Option<StdinGate> {
        self.gate.lock().unwrap().take()
    }

    fn exec_plugin(&self, p: &Path, _: &[u8], _: &PluginEnv) -> Result<ExecOutput, CniError> {
        panic!("no plugin can be found, yet {} ran", p.display())
    }
}

#[test]
fn an_add_that_fails_keeps_its_error_when_the_record_cannot_be_written_either() {
    // The first attachment fails before its delegate starts (its plugin removed since ADD
    // found it), and the record cannot be put in place: the operator must see why the
    // attachment failed, with the record's problem beside it, not only the record's.
    let d = tempfile::tempdir().unwrap();
    let state_dir = d.path().join("state");
    let exec = MissingAndNoStateDir {
        state_dir: state_dir.clone(),
        gate: Mutex::new(None),
        looked_up: Default::default(),
    };
    let cni = runner(d.path(), exec);
    let records = RecordStore::new(&state_dir);
    let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
    let executor = executor(&cni, &records, &dirs);
    let sandbox = Sandbox {
        container_id: "c-twice".into(),
        netns: "/var/run/netns/x".into(),
        ..Sandbox::default()
    };
    let e = executor
        .add(&sandbox, None, &[attachment("net-a", "eth0", "macvlan")])
        .unwrap_err();
    assert_eq!(e.code, 7, "{e:?}");
    assert!(
        e.msg.contains("cannot find plugin \"macvlan\"") && e.msg.contains("net-a"),
        "{e:?}"
    );
    assert!(e.details.contains("c-twice.json"), "{e:?}");
    assert!(!records.path("c-twice").unwrap().exists());
}

#[test]
fn a_record_another_call_rewrote_during_a_failed_del_is_left_as_it_is() {
    // DEL fails part-way, and would trim the record to what is left; but another call for
    // the container rewrote it meanwhile: that call's record stays, and the error says so.
    let d = tempfile::tempdir().unwrap();
    let records = RecordStore::new(d.path().join("state"));
    let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
    let sandbox = Sandbox {
        container_id: "c-race".into(),
        netns: "/var/run/netns/x".into(),
        ..Sandbox::default()
    };
    let attachments = [
        attachment("net-a", "eth0", "fake"),
        attachment("net-b", "net1", "fails"),
    ];
    let record = Record {
        version: RECORD_VERSION,
        container_id: sandbox.container_id.clone(),
        netns: sandbox.netns.clone(),
        pod_namespace: String::new(),
        pod_name: String::new(),
        pod_uid: String::new(),
        cni_args: vec![],
        attachments: attachments
            .iter()
            .map(|a| recorded(a, &sandbox.container_id, &dirs))
            .collect(),
        standalone: false,
        for_changes: None,
    };
    records.save(&record).unwrap();
    let rewrite = Record {
        netns: "/var/run/netns/the-other-call".into(),
        ..record.clone()
    };
    let exec = RecordRewrittenMeanwhile {
        records: records.clone(),
        rewrite: rewrite.clone(),
    };
    let cni = runner(d.path(), exec);
    let executor = executor(&cni, &records, &dirs);
    let e = executor.del(&sandbox, &sandbox.netns).unwrap_err();
    assert!(e.msg.contains("the delegate failed"), "{e}");
    assert!(e.details.contains("changed meanwhile"), "{e:?}");
    assert_eq!(records.load("c-race").unwrap(), Some(rewrite));
}

/// Plugins that succeed, remembering each call's command and interface, but for those of type
/// `fails`, whose ADD fails.
#[derive(Default)]
struct ByInterface {
    ran: std::sync::Arc<Mutex<Vec<(String, String)>>>,
}

impl Exec for ByInterface {
    fn find_in_path(&self, plugin_type: &str, _: &[PathBuf]) -> Result<PathBuf, CniError> {
        Ok(PathBuf::from(plugin_type))
    }

    fn exec_plugin(&self, p: &Path, _: &[u8], env: &PluginEnv) -> Result<ExecOutput, CniError> {
        self.ran
            .lock()
            .unwrap()
            .push((env.command.clone(), env.ifname.clone()));
        if p == Path::new("fails") && env.command == "ADD" {
            return delegate_failed();
        }
        answered()
    }
}

/// A sandbox `c1` recorded with the default network on eth0 and `net-a`, `net-b` on net1, net2.
fn recorded_sandbox(records: &RecordStore, dirs: &DeviceInfoDirs) -> (Sandbox, Record) {
    let record = Record {
        version: RECORD_VERSION,
        container_id: "c1".into(),
        netns: "/var/run/netns/c1".into(),
        pod_namespace: "default".into(),
        pod_name: "web".into(),
        pod_uid: "u1".into(),
        cni_args: vec![("K8S_POD_NAME".into(), "web".into())],
        attachments: [
            ("default-net", "eth0"),
            ("net-a", "net1"),
            ("net-b", "net2"),
        ]
        .iter()
        .map(|(n, i)| recorded(&attachment(n, i, "fake"), "c1", dirs))
        .collect(),
        standalone: false,
        for_changes: None,
    };
    records.save(&record).unwrap();
    let sandbox = Sandbox {
        container_id: "c1".into(),
        ..Sandbox::default()
    };
    (sandbox, record)
}

/// What applying a change did: how many attachments it added (or its error), the calls the
/// plugins got (command, interface), the record before and after.
type Applied = (
    Result<usize, CniError>,
    Vec<(String, String)>,
    Record,
    Option<Record>,
);

/// `change` applied to the sandbox of [`recorded_sandbox`].
fn applying(change: crate::change::Change) -> Applied {
    let d = tempfile::tempdir().unwrap();
    let records = RecordStore::new(d.path().join("state"));
    let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
    let (sandbox, before) = recorded_sandbox(&records, &dirs);
    let exec = ByInterface::default();
    let ran = std::sync::Arc::clone(&exec.ran);
    let cni = runner(d.path(), exec);
    let outcome = executor(&cni, &records, &dirs)
        .apply_change(&sandbox, &change)
        .map(|(added, _)| added.len());
    let calls = ran.lock().unwrap().clone();
    (outcome, calls, before, records.load("c1").unwrap())
}

fn calls(of: &[(&str, &str)]) -> Vec<(String, String)> {
    of.iter()
        .map(|(c, i)| (c.to_string(), i.to_string()))
        .collect()
}

#[test]
fn a_change_detaches_then_attaches_and_the_record_follows() {
    let (outcome, ran, _, after) = applying(crate::change::Change {
        detach: vec![2],
        attach: vec![attachment("net-c", "net3", "fake")],
        kept: vec![0, 1],
    });
    assert_eq!(outcome.unwrap(), 1);
    assert_eq!(ran, calls(&[("DEL", "net2"), ("ADD", "net3")]));
    let after = after.unwrap();
    let names: Vec<&str> = after
        .attachments
        .iter()
        .map(|a| a.ifname.as_str())
        .collect();
    assert_eq!(names, ["eth0", "net1", "net3"]);
}

#[test]
fn a_failed_attach_of_a_change_rolls_back_what_it_attached_and_keeps_the_rest() {
    let (outcome, ran, before, after) = applying(crate::change::Change {
        detach: vec![],
        attach: vec![
            attachment("net-c", "net3", "fake"),
            attachment("net-d", "net4", "fails"),
        ],
        kept: vec![0, 1, 2],
    });
    let e = outcome.unwrap_err();
    assert!(e.msg.contains("the delegate failed"), "{e}");
    // The failed one's plugin started: its DEL too, then the one before it, in reverse.
    assert_eq!(
        ran,
        calls(&[
            ("ADD", "net3"),
            ("ADD", "net4"),
            ("DEL", "net4"),
            ("DEL", "net3")
        ])
    );
    assert_eq!(after, Some(before));
}

#[test]
fn a_change_of_a_sandbox_plumb_did_not_attach_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let records = RecordStore::new(d.path().join("state"));
    let dirs = DeviceInfoDirs::new(d.path().join("devinfo"));
    let cni = runner(d.path(), ByInterface::default());
    let executor = executor(&cni, &records, &dirs);
    let change = crate::change::Change {
        detach: vec![],
        attach: vec![attachment("net-c", "net3", "fake")],
        kept: vec![],
    };
    let sandbox = Sandbox {
        container_id: "c9".into(),
        ..Sandbox::default()
    };
    let e = executor.apply_change(&sandbox, &change).unwrap_err();
    assert_eq!(e.code, 3, "{e}");
}
