use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::{Value, json};

use super::*;
use crate::version::SUPPORTED;

/// A plugin that records what it was called with and answers a fixed 1.1.0 result.
#[derive(Default)]
struct Recorder {
    calls: RefCell<Vec<(&'static str, CmdArgs)>>,
    fail_with: Option<CniError>,
}

fn sample_result() -> CniResult {
    CniResult::parse(
        br#"{"cniVersion":"1.1.0",
            "interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/var/run/netns/x"}],
            "ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":0},
                   {"address":"fd00::5/64","interface":0}],
            "routes":[{"dst":"0.0.0.0/0"}],
            "dns":{"nameservers":["10.1.0.1"]}}"#,
        Version::V1_1_0,
    )
    .unwrap()
}

impl Recorder {
    fn record(&self, what: &'static str, args: &CmdArgs) -> Result<(), CniError> {
        self.calls.borrow_mut().push((what, args.clone()));
        match &self.fail_with {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl Plugin for Recorder {
    fn supported_versions(&self) -> &[Version] {
        &SUPPORTED
    }
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        self.record("add", args)?;
        Ok(sample_result())
    }
    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.record("check", args)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.record("del", args)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.record("gc", args)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.record("status", args)
    }
}

fn env(command: &str) -> HashMap<&'static str, String> {
    let mut m = HashMap::new();
    m.insert("CNI_COMMAND", command.to_string());
    m.insert("CNI_CONTAINERID", "ctr-1".to_string());
    m.insert("CNI_NETNS", "/var/run/netns/x".to_string());
    m.insert("CNI_IFNAME", "eth0".to_string());
    m.insert("CNI_PATH", "/opt/cni/bin:/usr/lib/cni".to_string());
    m.insert("CNI_ARGS", "K8S_POD_NAME=p".to_string());
    m
}

fn config(version: &str) -> String {
    json!({"cniVersion": version, "name": "net", "type": "recorder"}).to_string()
}

/// Runs `dispatch` and returns (exit code, stdout).
fn call(plugin: &Recorder, env: &HashMap<&'static str, String>, stdin: &str) -> (i32, String) {
    let getenv = |k: &str| env.get(k).cloned();
    let mut out = Vec::new();
    let code = dispatch(plugin, &getenv, &mut stdin.as_bytes(), &mut out);
    (code, String::from_utf8(out).unwrap())
}

fn error_of(stdout: &str) -> CniError {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not error JSON ({e}): {stdout}"))
}

#[test]
fn add_passes_every_parameter_and_prints_the_result_in_the_config_version() {
    for v in SUPPORTED {
        let p = Recorder::default();
        let (code, out) = call(&p, &env("ADD"), &config(&v.to_string()));
        assert_eq!(code, 0, "{v}: {out}");
        let printed: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(printed["cniVersion"], v.to_string(), "{v}: {out}");
        if v < Version::V0_3_0 {
            assert_eq!(printed["ip4"]["ip"], "10.1.0.5/24", "{v}: {out}");
            assert_eq!(printed["ip6"]["ip"], "fd00::5/64", "{v}: {out}");
        } else {
            assert_eq!(printed["ips"][0]["address"], "10.1.0.5/24", "{v}: {out}");
            assert_eq!(printed["interfaces"][0]["name"], "eth0", "{v}: {out}");
        }
        let calls = p.calls.borrow();
        let (what, args) = &calls[0];
        assert_eq!(*what, "add");
        assert_eq!(args.container_id, "ctr-1");
        assert_eq!(args.netns, "/var/run/netns/x");
        assert_eq!(args.ifname, "eth0");
        assert_eq!(args.args, "K8S_POD_NAME=p");
        assert_eq!(
            args.path,
            vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
        );
        assert_eq!(args.version, v);
        assert_eq!(args.config["name"], "net");
        assert_eq!(args.stdin, config(&v.to_string()).into_bytes());
    }
}

#[test]
fn missing_variables_are_named_and_the_plugin_never_runs() {
    for (command, var) in [
        ("ADD", "CNI_CONTAINERID"),
        ("ADD", "CNI_NETNS"),
        ("ADD", "CNI_IFNAME"),
        ("ADD", "CNI_PATH"),
        ("CHECK", "CNI_NETNS"),
        ("DEL", "CNI_CONTAINERID"),
        ("DEL", "CNI_IFNAME"),
        ("GC", "CNI_PATH"),
    ] {
        let p = Recorder::default();
        let mut e = env(command);
        e.remove(var);
        let (code, out) = call(&p, &e, &config("1.1.0"));
        assert_eq!(code, 1, "{command} without {var}");
        let err = error_of(&out);
        assert_eq!(err.code, 4, "{command} without {var}: {out}");
        assert!(err.msg.contains(var), "{command} without {var}: {out}");
        assert_eq!(err.cni_version, "", "no config was read yet: {out}");
        assert!(p.calls.borrow().is_empty(), "{command} ran without {var}");
    }
}

#[test]
fn del_runs_without_a_netns_and_prints_nothing() {
    let p = Recorder::default();
    let mut e = env("DEL");
    e.remove("CNI_NETNS");
    let (code, out) = call(&p, &e, &config("1.0.0"));
    assert_eq!((code, out.as_str()), (0, ""));
    assert_eq!(p.calls.borrow()[0].1.netns, "");
}

#[test]
fn gc_and_status_need_neither_container_nor_interface() {
    for command in ["GC", "STATUS"] {
        let p = Recorder::default();
        let mut e = HashMap::new();
        e.insert("CNI_COMMAND", command.to_string());
        e.insert("CNI_PATH", "/usr/lib/cni".to_string());
        let (code, out) = call(&p, &e, &config("1.1.0"));
        assert_eq!((code, out.as_str()), (0, ""), "{command}");
        assert_eq!(p.calls.borrow().len(), 1);
    }
}

#[test]
fn status_runs_without_cni_path() {
    // Spec §2 `STATUS`: `CNI_PATH` is an optional parameter there, unlike GC's.
    let p = Recorder::default();
    let mut e = HashMap::new();
    e.insert("CNI_COMMAND", "STATUS".to_string());
    let (code, out) = call(&p, &e, &config("1.1.0"));
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(p.calls.borrow()[0].1.path.is_empty());
}

#[test]
fn unknown_or_missing_command_is_code_4() {
    let p = Recorder::default();
    let (code, out) = call(&p, &env("FROB"), &config("1.0.0"));
    assert_eq!(code, 1);
    assert_eq!(error_of(&out).code, 4);
    assert!(error_of(&out).msg.contains("FROB"));
    let mut e = env("ADD");
    e.remove("CNI_COMMAND");
    let (code, out) = call(&p, &e, &config("1.0.0"));
    assert_eq!((code, error_of(&out).code), (1, 4));
}

#[test]
fn version_echoes_the_request_and_lists_every_supported_version() {
    let p = Recorder::default();
    let (code, out) = call(&p, &env("VERSION"), r#"{"cniVersion":"0.3.1"}"#);
    assert_eq!(code, 0);
    let info: VersionInfo = serde_json::from_str(&out).unwrap();
    assert_eq!(info.cni_version, "0.3.1");
    assert_eq!(
        info.supported_versions,
        [
            "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"
        ]
    );
    // No stdin at all, and nothing else in the environment.
    let mut e = HashMap::new();
    e.insert("CNI_COMMAND", "VERSION".to_string());
    let (code, out) = call(&p, &e, "");
    assert_eq!(code, 0);
    let info: VersionInfo = serde_json::from_str(&out).unwrap();
    assert_eq!(info.cni_version, "1.1.0");
    assert!(p.calls.borrow().is_empty());
}

#[test]
fn unsupported_config_version_is_code_1() {
    struct Old;
    impl Plugin for Old {
        fn supported_versions(&self) -> &[Version] {
            &[Version::V0_3_1, Version::V0_4_0]
        }
        fn add(&self, _: &CmdArgs) -> Result<CniResult, CniError> {
            panic!("must not run")
        }
        fn check(&self, _: &CmdArgs) -> Result<(), CniError> {
            panic!("must not run")
        }
        fn del(&self, _: &CmdArgs) -> Result<(), CniError> {
            panic!("must not run")
        }
    }
    let e = env("ADD");
    let getenv = |k: &str| e.get(k).cloned();
    let mut out = Vec::new();
    let code = dispatch(&Old, &getenv, &mut config("1.0.0").as_bytes(), &mut out);
    let err = error_of(std::str::from_utf8(&out).unwrap());
    assert_eq!((code, err.code), (1, 1));
    assert!(
        err.msg.contains("1.0.0") && err.msg.contains("0.4.0"),
        "{err}"
    );
    assert_eq!(err.cni_version, "1.0.0");
}

#[test]
fn commands_newer_than_the_config_version_are_refused() {
    for (command, version) in [
        ("CHECK", "0.3.1"),
        ("CHECK", "0.1.0"),
        ("GC", "1.0.0"),
        ("STATUS", "0.4.0"),
    ] {
        let p = Recorder::default();
        let (code, out) = call(&p, &env(command), &config(version));
        let err = error_of(&out);
        assert_eq!((code, err.code), (1, 1), "{command} at {version}: {out}");
        assert!(err.msg.contains(command), "{out}");
        assert!(p.calls.borrow().is_empty());
    }
    let p = Recorder::default();
    assert_eq!(call(&p, &env("CHECK"), &config("0.4.0")).0, 0);
}

#[test]
fn bad_configs_are_refused_with_the_right_code() {
    let cases = [
        ("not json", 6),
        ("[1,2]", 6),
        (r#"{"cniVersion":"1.0.0","type":"x"}"#, 7),
        (r#"{"cniVersion":"1.0.0","name":7}"#, 7),
        (r#"{"cniVersion":"1.0.0","name":"bad name"}"#, 7),
        (r#"{"cniVersion":"9.9.9","name":"n"}"#, 1),
        (r#"{"cniVersion":"banana","name":"n"}"#, 6),
    ];
    for (stdin, want) in cases {
        let p = Recorder::default();
        let (code, out) = call(&p, &env("ADD"), stdin);
        assert_eq!((code, error_of(&out).code), (1, want), "{stdin}: {out}");
        assert!(p.calls.borrow().is_empty(), "{stdin}");
    }
}

#[test]
fn bad_attachment_parameters_are_refused_before_the_plugin_runs() {
    for (var, value) in [
        ("CNI_CONTAINERID", "-leading-dash"),
        ("CNI_IFNAME", "a-name-longer-than-15"),
        ("CNI_IFNAME", "eth/0"),
    ] {
        let p = Recorder::default();
        let mut e = env("ADD");
        e.insert(var, value.to_string());
        let (code, out) = call(&p, &e, &config("1.0.0"));
        assert_eq!(code, 1, "{var}={value}");
        assert!(p.calls.borrow().is_empty(), "{var}={value}");
        assert_ne!(error_of(&out).code, 0);
    }
}

#[test]
fn a_plugin_error_is_printed_with_the_config_version() {
    let p = Recorder {
        fail_with: Some(CniError::new(ErrorCode::TryAgainLater, "busy").with_details("lock held")),
        ..Default::default()
    };
    for command in ["ADD", "DEL", "CHECK"] {
        let (code, out) = call(&p, &env(command), &config("1.0.0"));
        assert_eq!(code, 1);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"cniVersion":"1.0.0","code":11,"msg":"busy","details":"lock held"})
        );
    }
}

#[test]
fn a_delegates_error_is_printed_in_the_version_in_use_not_the_delegates() {
    // CNI spec 1.1 §5 "Error": `cniVersion` is "the protocol version in use", the one of the
    // configuration this plugin was called with. A delegating plugin passing on a delegate's
    // error (which carries the delegate's own version) must not print that version instead.
    let p = Recorder {
        fail_with: Some(
            CniError::new(ErrorCode::TryAgainLater, "delegate busy").with_version("0.3.1"),
        ),
        ..Default::default()
    };
    for command in ["ADD", "DEL", "CHECK"] {
        let (code, out) = call(&p, &env(command), &config("1.0.0"));
        assert_eq!(code, 1);
        assert_eq!(error_of(&out).cni_version, "1.0.0", "{command}: {out}");
    }
}

#[test]
fn a_netns_that_is_the_plugins_own_is_refused_before_the_plugin_runs() {
    // Go `pkg/skel` refuses ADD and DEL whose CNI_NETNS is the plugin's own namespace (code 8,
    // `ErrInvalidNetNS`); here the check comes first, so nothing is done to the host's netns.
    for command in ["ADD", "DEL"] {
        let p = Recorder::default();
        let mut e = env(command);
        e.insert("CNI_NETNS", "/proc/self/ns/net".to_string());
        let (code, out) = call(&p, &e, &config("1.0.0"));
        let err = error_of(&out);
        assert_eq!((code, err.code), (1, 8), "{command}: {out}");
        assert!(err.msg.contains("CNI_NETNS"), "{command}: {out}");
        assert!(
            p.calls.borrow().is_empty(),
            "{command} ran in its own netns"
        );
    }
    // A netns that cannot be inspected is left to the plugin (DEL after the netns is gone).
    let p = Recorder::default();
    let mut e = env("DEL");
    e.insert("CNI_NETNS", "/var/run/netns/gone-long-ago".to_string());
    assert_eq!(call(&p, &e, &config("1.0.0")).0, 0);
}
