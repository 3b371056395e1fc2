//! A change of a running pod's attachments (`Plumb::cmd_change`): the sandboxes it leaves alone,
//! and a pod that has nothing to change, before any delegate runs.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::plan::Pod;
use crate::record::{ChangeBasis, RECORD_VERSION, Record, RecordStore, RecordedAttachment};

fn plumb() -> Plumb<'static> {
    Plumb {
        routes: &NetlinkRoutes,
        connect: &Unreachable,
        caller: Caller::ThisProcess,
    }
}

fn pod(networks: &str) -> Pod {
    Pod {
        namespace: "default".into(),
        name: "web".into(),
        uid: "u-1".into(),
        annotations: [(
            netattach::NETWORKS_ANNOTATION.to_string(),
            networks.to_string(),
        )]
        .into(),
    }
}

/// Sandbox `id`'s record in `state`, of a pod attached to net-a, keeping `basis`.
fn recorded(state: &Path, id: &str, netns: &Path, basis: Option<ChangeBasis>) -> RecordStore {
    let records = RecordStore::new(state);
    records
        .save(&Record {
            version: RECORD_VERSION,
            container_id: id.into(),
            netns: netns.display().to_string(),
            pod_namespace: "default".into(),
            pod_name: "web".into(),
            pod_uid: "u-1".into(),
            cni_args: vec![
                ("K8S_POD_NAMESPACE".into(), "default".into()),
                ("K8S_POD_NAME".into(), "web".into()),
            ],
            attachments: vec![RecordedAttachment {
                network: "default/net-a".into(),
                ifname: "net1".into(),
                config: json!({"cniVersion": "1.0.0", "name": "net-a",
                               "plugins": [{"type": "fake-change"}]}),
                network_config: None,
                capability_args: Default::default(),
                default: false,
                default_route: None,
                device_info_file: None,
                pending: false,
            }],
            standalone: false,
            for_changes: basis,
        })
        .unwrap();
    records
}

fn basis(config: &serde_json::Value, selection: &str, netns_inode: u64) -> ChangeBasis {
    ChangeBasis {
        selection: Some(selection.into()),
        netns_inode,
        config: config.clone(),
        cni_path: Vec::new(),
    }
}

/// A file standing for the sandbox's netns in `dir`, and its inode.
fn file_of(dir: &Path) -> (std::path::PathBuf, u64) {
    let netns = dir.join("netns");
    std::fs::write(&netns, "").unwrap();
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&netns).unwrap());
    (netns, inode)
}

fn never(_: &str, _: &'static str, _: &CniError) -> bool {
    panic!("nothing is to be reported")
}

#[test]
fn a_sandbox_without_a_record_or_with_one_that_keeps_nothing_to_change_it_with_is_skipped() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state");
    let netns = d.path().join("netns");
    let skipped = |id: &str| match plumb().cmd_change(&state, id, &pod("net-b"), &never) {
        Ok(Changed::Skipped(why)) => why,
        other => panic!("{other:?}"),
    };
    assert!(skipped("gone").contains("no attachment record"));
    // Attached by a plumb before dynamic attachments.
    recorded(&state, "old", &netns, None);
    assert!(
        skipped("old").contains("recreate the pod"),
        "{}",
        skipped("old")
    );
    // Nothing ran and no lock was taken.
    assert!(!state.join("old.lock").exists());
}

#[test]
fn a_pod_whose_annotation_is_the_recorded_one_has_nothing_to_change() {
    let d = tempfile::tempdir().unwrap();
    let (fake, config) = one_fake_network(d.path(), "fake-change", "1.0.0");
    let state = d.path().join("state");
    let (netns, inode) = file_of(d.path());
    recorded(&state, "same", &netns, Some(basis(&config, "net-a", inode)));
    let done = plumb().cmd_change(&state, "same", &pod("net-a"), &never);
    assert_eq!(done.unwrap(), Changed::Nothing);
    assert!(fake.calls().is_empty());
    assert!(!state.join("same.lock").exists());
}

#[test]
fn a_sandbox_whose_netns_is_another_now_is_not_changed() {
    let d = tempfile::tempdir().unwrap();
    let (fake, config) = one_fake_network(d.path(), "fake-change", "1.0.0");
    let state = d.path().join("state");
    // The path names another file than the one ADD saw (the sandbox gone, its path reused).
    let (netns, inode) = file_of(d.path());
    let records = recorded(
        &state,
        "moved",
        &netns,
        Some(basis(&config, "net-a", inode + 1)),
    );
    let before = records.load("moved").unwrap();
    match plumb().cmd_change(&state, "moved", &pod("net-a,net-a"), &never) {
        Ok(Changed::Skipped(why)) => assert!(why.contains("no longer the sandbox's"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(fake.calls().is_empty());
    assert_eq!(records.load("moved").unwrap(), before);
}

#[test]
fn a_sandbox_attached_with_another_state_directory_than_the_daemons_is_skipped() {
    let d = tempfile::tempdir().unwrap();
    let (fake, config) = one_fake_network(d.path(), "fake-change", "1.0.0");
    // The daemon's --state-dir is not the configuration's plumbStateDir.
    let elsewhere = d.path().join("elsewhere");
    let (netns, inode) = file_of(d.path());
    recorded(
        &elsewhere,
        "far",
        &netns,
        Some(basis(&config, "net-a", inode)),
    );
    match plumb().cmd_change(&elsewhere, "far", &pod("net-a,net-a"), &never) {
        Ok(Changed::Skipped(why)) => assert!(why.contains("plumbStateDir"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(fake.calls().is_empty());
    assert!(!elsewhere.join("far.lock").exists());
}
