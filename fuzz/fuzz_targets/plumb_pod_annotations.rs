//! The pod's annotations as the runtime gives them (the `io.kubernetes.cri.pod-annotations`
//! capability in the `runtimeConfig` of plumb's stdin configuration), from arbitrary JSON, taken
//! as the plugin takes them and planned against a few NADs: nothing panics; a plan made has the
//! default network first on `eth0`, then attachments each on a valid interface name of its own.
#![no_main]

use std::collections::BTreeSet;
use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use plumb_engine::cluster::annotations_from;
use plumb_engine::commands::POD_ANNOTATIONS_CAPABILITY;
use plumb_engine::config::Config;
use plumb_engine::objects::{FileNetworks, FileObject};
use plumb_engine::plan::{self, Pod};
use serde_json::{Value, json};

fn nad(namespace: &str, name: &str, config: Option<Value>, resource: Option<&str>) -> FileObject {
    let mut value = json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"namespace": namespace, "name": name},
    });
    if let Some(c) = config {
        value["spec"] = json!({"config": c.to_string()});
    }
    if let Some(r) = resource {
        value["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/resourceName": r});
    }
    FileObject {
        file: PathBuf::from("nads.yaml"),
        document: 1,
        value,
    }
}

fn networks() -> FileNetworks {
    let objects = [
        nad(
            "default",
            "net-a",
            Some(json!({"cniVersion": "1.0.0", "plugins": [
                {"type": "bridge", "bridge": "br-a", "ipam": {"type": "static"},
                 "capabilities": {"ips": true}},
                {"type": "tuning", "capabilities": {"mac": true}}]})),
            None,
        ),
        nad(
            "default",
            "net-b",
            Some(
                json!({"cniVersion": "0.4.0", "type": "macvlan", "master": "eth0",
                        "capabilities": {"portMappings": true, "bandwidth": true}}),
            ),
            None,
        ),
        nad(
            "default",
            "sriov",
            Some(json!({"cniVersion": "1.0.0", "type": "sriov"})),
            Some("intel.com/sriov"),
        ),
        nad("default", "on-disk", None, None),
        nad(
            "kube-system",
            "shared",
            Some(json!({"cniVersion": "1.0.0", "type": "bridge"})),
            None,
        ),
    ];
    FileNetworks::new(&objects, PathBuf::from("/nonexistent/plumb-fuzz/net.d"))
        .expect("the fuzz target's NADs are valid")
}

fuzz_target!(|data: &[u8]| {
    let Ok(annotations) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // As the runtime writes plumb's stdin: the capability declared, its value in runtimeConfig.
    let stdin = json!({
        "cniVersion": "1.0.0",
        "name": "plumb",
        "type": "plumb",
        "delegates": [{"cniVersion": "1.0.0", "name": "cluster", "type": "bridge"}],
        "namespaceIsolation": true,
        "globalNamespaces": "kube-system",
        "capabilities": {POD_ANNOTATIONS_CAPABILITY: true},
        "runtimeConfig": {POD_ANNOTATIONS_CAPABILITY: annotations},
    });
    let config = Config::parse(stdin.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("the fuzz target's configuration is refused: {e}"));
    // As the plugin takes them (plugin.rs `pod`): an object, its string values.
    let Some(Value::Object(a)) = config.runtime_config.get(POD_ANNOTATIONS_CAPABILITY) else {
        return;
    };
    let pod = Pod {
        namespace: "default".into(),
        name: "sandbox".into(),
        uid: String::new(),
        annotations: annotations_from(a),
    };
    let refs = plan::nads_to_prefetch(&config, &pod, 16);
    assert!(refs.len() <= 16);
    let Ok(p) = plan::plan(&config, Some(&pod), "eth0", &networks(), None) else {
        return;
    };
    let first = p
        .attachments
        .first()
        .expect("a plan has the default network");
    assert!(first.is_default && first.ifname == "eth0", "{first:?}");
    let mut names = BTreeSet::new();
    for (i, a) in p.attachments.iter().enumerate() {
        assert_eq!(a.is_default, i == 0, "{a:?}");
        assert!(
            cni::validate::interface_name_problem(&a.ifname).is_none(),
            "{:?}",
            a.ifname
        );
        assert!(names.insert(a.ifname.as_str()), "{:?} twice", a.ifname);
        assert!(!a.list.plugins.is_empty(), "{a:?}");
    }
});
