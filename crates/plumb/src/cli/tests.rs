use std::path::PathBuf;

use cni::error::CniError;
use plumb_engine::config::Config;
use plumb_engine::paths;
use serde_json::{Value, json};

use super::local::{Source, Store, read_config};
use super::status::{StatusArgs, status};

fn config(extra: Value) -> Config {
    let mut c = json!({"cniVersion": "1.0.0", "name": "plumb", "type": "plumb",
        "delegates": [{"cniVersion": "1.0.0", "name": "d", "type": "bridge"}]});
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    Config::parse(c.to_string().as_bytes()).unwrap()
}

#[test]
fn a_configuration_list_is_read_as_the_runtime_gives_plumb_its_entry() {
    // What the daemon writes (`00-plumb.conflist`) is what `plan`, `attach` and `status`
    // read on such a node: plumb's entry with the list's name and version.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("00-plumb.conflist");
    std::fs::write(
        &f,
        json!({"cniVersion": "0.4.0", "name": "plumb-cni-network", "plugins": [
            {"type": "plumb", "logLevel": "debug",
             "delegates": [{"cniVersion": "0.4.0", "name": "d", "type": "bridge"}]}]})
        .to_string(),
    )
    .unwrap();
    let c = read_config(&f).unwrap();
    assert_eq!(c.delegates[0]["name"], "d");
    assert_eq!(c.cni_version.to_string(), "0.4.0");
    std::fs::write(
        &f,
        json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]}).to_string(),
    )
    .unwrap();
    let e = read_config(&f).unwrap_err();
    assert_eq!(e.code, 7);
    assert!(
        e.msg.contains("00-plumb.conflist") && e.msg.contains("without a plugin of type"),
        "{e}"
    );
}

fn source(kubeconfig: Option<PathBuf>) -> Source {
    Source {
        config: PathBuf::from(paths::CONFIG),
        nads: None,
        kubeconfig,
    }
}

/// The error of opening a store that must be the API's (the kubeconfig is missing).
fn api_error(config: &Config, source: &Source) -> CniError {
    match Store::open(config, source) {
        Ok(Store::Files(_)) => panic!("NADs read from plumbNadDir's files"),
        Ok(_) => panic!("no error for a missing kubeconfig"),
        Err(e) => e,
    }
}

#[test]
fn a_kubeconfig_wins_over_plumb_nad_dir_as_in_add() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("missing-kubeconfig");
    // `--kubeconfig` on the command line beats the configuration's `plumbNadDir`.
    let c = config(json!({"plumbNadDir": d.path()}));
    let e = api_error(&c, &source(Some(missing.clone())));
    assert!(e.msg.contains("missing-kubeconfig"), "{e}");
    // With both in the configuration, ADD reads the API (plumbNadDir is for plumb without
    // a kubeconfig, configuration.md): `plan` and `attach` must too.
    let c = config(json!({"plumbNadDir": d.path(), "kubeconfig": missing}));
    let e = api_error(&c, &source(None));
    assert!(e.msg.contains("missing-kubeconfig"), "{e}");
}

#[test]
fn status_escapes_what_would_drive_the_terminal() {
    // Anybody who may edit the pod may write its network-status: what it holds must not
    // reach the operator's terminal as control sequences or extra lines.
    let d = tempfile::tempdir().unwrap();
    let pod = d.path().join("pod.json");
    let annotation = json!([
        {"name": "ns/net-a\u{1b}[2K\rns/fake", "interface": "net1\nforged  row",
         "mac": "02:00:00:00:00:01\u{202e}", "default": false}
    ]);
    std::fs::write(
        &pod,
        json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
            "annotations": {"k8s.v1.cni.cncf.io/network-status": annotation.to_string()}}})
        .to_string(),
    )
    .unwrap();
    let args = StatusArgs {
        file: Some(pod),
        pod: None,
        kubeconfig: None,
        config: PathBuf::from(paths::CONFIG),
        node: false,
        state_dir: PathBuf::from(paths::STATE_DIR),
    };
    let mut out = Vec::new();
    status(&args, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(!text.contains(['\u{1b}', '\r', '\u{202e}']), "{text:?}");
    let row = text.lines().nth(1).unwrap();
    assert!(
        row.starts_with("ns/net-a\\u{1b}[2K\\rns/fake  net1\\nforged  row  -  "),
        "{row}"
    );
    assert!(row.ends_with("02:00:00:00:00:01\\u{202e}"), "{row}");
}
