//! Every example of the multi-net spec (§3.2, §3.4.2.1, §4.1, §4.2.2, §5.4, §8.2.1) and of the
//! device-info spec (§4.3, §6.1.2), from tests/fixtures/ (see its README for the corrections the
//! spec's text needed to be JSON).

use std::net::IpAddr;
use std::path::PathBuf;

use cni::request::{Extra, build as build_request};
use cni::{CniResult, NetworkConfigList, Version};
use netattach::device_info::{DeviceInfo, DeviceType};
use netattach::nad::NadConfig;
use netattach::runtime_config::{apply_cni_args, capability_args};
use netattach::status::{self, StatusInput};
use netattach::{IPAMClaim, NetworkAttachmentDefinition, selection};
use serde_json::{Map, Value, json};

fn fixture(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"))
}

fn yaml<T: serde::de::DeserializeOwned>(path: &str) -> T {
    serde_norway::from_str(&fixture(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json_fixture(path: &str) -> Value {
    serde_json::from_str(&fixture(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn annotation(pod: &str, key: &str) -> String {
    let pod: Value = yaml(pod);
    pod["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{pod}: no {key}"))
        .to_string()
}

fn inline(nad: &NetworkAttachmentDefinition) -> NetworkConfigList {
    match nad.cni_config().unwrap() {
        NadConfig::Inline(l) => l,
        other => panic!("expected inline config, got {other:?}"),
    }
}

// ---- §3: NetworkAttachmentDefinition ----

#[test]
fn nad_3_2_1_single_config() {
    let nad: NetworkAttachmentDefinition = yaml("nad/3.2.1-config.yaml");
    nad.validate_name().unwrap();
    let l = inline(&nad);
    assert_eq!(l.name, "a-bridge-network");
    assert_eq!(l.cni_version, Version::V0_3_0);
    assert_eq!(l.plugins.len(), 1);
    assert_eq!(l.plugins[0].plugin_type, "bridge");
    assert_eq!(
        l.plugins[0].raw["ipam"]["dataDir"],
        json!("/mnt/cluster-ipam")
    );
}

#[test]
fn nad_3_2_2_config_list() {
    let nad: NetworkAttachmentDefinition = yaml("nad/3.2.2-configlist.yaml");
    let l = inline(&nad);
    assert_eq!(l.name, "another-bridge-network");
    let types: Vec<&str> = l.plugins.iter().map(|p| p.plugin_type.as_str()).collect();
    assert_eq!(types, ["bridge", "port-forwarding", "tuning"]);
    assert_eq!(
        l.plugins[2].raw["sysctl"]["net.ipv4.conf.all.log_martians"],
        json!("1")
    );
}

#[test]
fn nad_3_2_3_and_3_4_2_1_name_injection() {
    let nad: NetworkAttachmentDefinition = yaml("nad/3.2.3-thick.yaml");
    let l = inline(&nad);
    // §3.4.2.1: what the 'awesome-plugin' binary receives.
    let sent = build_request(
        &l.name,
        l.cni_version,
        &l.plugins[0],
        Extra::Attachment {
            capability_args: &Map::new(),
            prev_result: None,
        },
    )
    .unwrap();
    let sent: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(sent, json_fixture("nad/3.4.2.1-expected.json"));
}

#[test]
fn nad_3_2_4_no_spec_means_a_file_on_disk() {
    let nad: NetworkAttachmentDefinition = yaml("nad/3.2.4-no-spec.yaml");
    assert_eq!(nad.spec.config, None);
    assert_eq!(
        nad.cni_config().unwrap(),
        NadConfig::OnDisk {
            name: "a-bridge-network".into()
        }
    );
}

// ---- §4: the selection annotation ----

const SELECTION_EXAMPLES: &[&str] = &[
    "4.1.1-comma",
    "4.1.2-json",
    "4.1.2.1.3.1-ips",
    "4.1.2.1.4.1-mac",
    "4.1.2.1.6.1-cni-args",
    "4.1.2.1.7.1-portMappings",
    "4.1.2.1.8.1-bandwidth",
    "4.1.2.1.9.1-default-route",
    "4.1.2.1.10.1-infiniband-guid",
    "4.1.2.1.11.1-ipam-claim-reference",
    "4.2.2-same-network-twice",
];

#[test]
fn selection_examples_parse_to_the_expected_elements() {
    for name in SELECTION_EXAMPLES {
        let value = annotation(
            &format!("selection/{name}.yaml"),
            selection::NETWORKS_ANNOTATION,
        );
        let elements = selection::parse(&value).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = json_fixture(&format!("selection/{name}.elements.json"));
        assert_eq!(serde_json::to_value(&elements).unwrap(), expected, "{name}");
    }
}

#[test]
fn selection_examples_give_the_spec_runtime_config() {
    let mut checked = 0;
    for name in SELECTION_EXAMPLES {
        let path = format!("selection/{name}.runtimeConfig.json");
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(&path);
        if !p.exists() {
            continue;
        }
        let value = annotation(
            &format!("selection/{name}.yaml"),
            selection::NETWORKS_ANNOTATION,
        );
        let elements = selection::parse(&value).unwrap();
        let args = capability_args(&elements[0], None, None);
        assert_eq!(Value::Object(args), json_fixture(&path), "{name}");
        checked += 1;
    }
    // ips, mac, portMappings, bandwidth, infiniband-guid: a renamed fixture must not pass quietly.
    assert_eq!(checked, 5);
}

#[test]
fn selection_4_1_1_resolves_namespaces() {
    let value = annotation("selection/4.1.1-comma.yaml", selection::NETWORKS_ANNOTATION);
    let refs: Vec<String> = selection::parse(&value)
        .unwrap()
        .iter()
        .map(|e| e.network_ref("my-namespace").to_string())
        .collect();
    assert_eq!(
        refs,
        ["my-namespace/net-a", "my-namespace/net-b", "other-ns/net-c"]
    );
}

#[test]
fn selection_4_1_2_1_6_cni_args_reach_args_cni() {
    let value = annotation(
        "selection/4.1.2.1.6.1-cni-args.yaml",
        selection::NETWORKS_ANNOTATION,
    );
    let e = &selection::parse(&value).unwrap()[0];
    let nad = NetworkAttachmentDefinition::new(
        "my-namespace",
        "net-b",
        Some(r#"{"cniVersion":"1.0.0","type":"sriov","args":{"cni":{"spoofchk":"off","vlan":"10"}}}"#.into()),
    );
    let l = apply_cni_args(
        "my-namespace/net-b",
        &inline(&nad),
        e.cni_args.as_ref().unwrap(),
    )
    .unwrap();
    assert_eq!(
        l.plugins[0].raw["args"],
        json!({"cni": {"spoofchk": "on", "vlan": "10"}})
    );
}

// ---- §5: network-status ----

const STATUS_EXAMPLES: &[&str] = &[
    "5.4-single-gateway",
    "5.4-multiple-gateways",
    "5.4-device-info",
    "device-info-6.1.2",
];

/// Builds every entry of a `*.cases.json` fixture.
fn build_cases(cases: &Value) -> Vec<status::NetworkStatus> {
    cases
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let result = c
                .get("result")
                .map(|r| CniResult::from_value(r.clone(), Version::V1_0_0).unwrap());
            let routes: Option<Vec<IpAddr>> = c.get("default-route").map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().parse().unwrap())
                    .collect()
            });
            let info = c
                .get("device-info")
                .map(|d| DeviceInfo::from_value(d).unwrap());
            status::build(&StatusInput {
                name: c["name"].as_str().unwrap(),
                result: result.as_ref(),
                ifname: c["ifname"].as_str().unwrap(),
                is_default: c["default"].as_bool().unwrap(),
                default_route: routes.as_deref(),
                device_info: info.as_ref(),
            })
        })
        .collect()
}

/// The spec's entry with the differences plumb makes on purpose (fixtures/README.md):
/// addresses without prefix length, `mac` trimmed, `infiniband-guid` reported as `mac`, the
/// misspelt `device` as `device-info`, `default` always present (true for the cluster-wide
/// default network).
fn as_plumb_writes_it(mut entry: Value) -> Value {
    let m = entry.as_object_mut().unwrap();
    if let Some(Value::Array(ips)) = m.get_mut("ips") {
        for ip in ips {
            let bare = ip.as_str().unwrap().split('/').next().unwrap().to_string();
            *ip = Value::String(bare);
        }
    }
    if let Some(Value::String(mac)) = m.get_mut("mac") {
        *mac = mac.trim().to_string();
    }
    if let Some(guid) = m.remove("infiniband-guid") {
        m.insert("mac".into(), guid);
    }
    if let Some(d) = m.remove("device") {
        m.insert("device-info".into(), d);
    }
    let is_default = m["name"]
        .as_str()
        .unwrap()
        .ends_with("cluster-wide-default");
    m.insert("default".into(), Value::Bool(is_default));
    entry
}

#[test]
fn status_examples_are_built_exactly() {
    for name in STATUS_EXAMPLES {
        let built = build_cases(&json_fixture(&format!("status/{name}.cases.json")));
        // Exact text: keys in the spec's order.
        let expected = fixture(&format!("status/{name}.built.json")).replace('\n', "");
        assert_eq!(serde_json::to_string(&built).unwrap(), expected, "{name}");
        // And the same content as the spec's example, entry by entry.
        let spec = annotation(
            &format!("status/{name}.yaml"),
            status::NETWORK_STATUS_ANNOTATION,
        );
        let spec: Vec<Value> = serde_json::from_str(&spec).unwrap();
        assert_eq!(spec.len(), built.len(), "{name}");
        for (s, b) in spec.into_iter().zip(&built) {
            assert_eq!(
                serde_json::to_value(b).unwrap(),
                as_plumb_writes_it(s),
                "{name}"
            );
        }
    }
}

#[test]
fn status_examples_parse_back() {
    for name in STATUS_EXAMPLES {
        let value = annotation(
            &format!("status/{name}.yaml"),
            status::NETWORK_STATUS_ANNOTATION,
        );
        let entries = status::parse(&value).unwrap_or_else(|e| panic!("{name}: {e}"));
        let raw: Value = serde_json::from_str(&value).unwrap();
        // Everything read is written back, unknown keys included.
        let again: Value = serde_json::from_str(&status::to_annotation(&entries)).unwrap();
        let mut raw_with_default = raw.clone();
        for e in raw_with_default.as_array_mut().unwrap() {
            e.as_object_mut()
                .unwrap()
                .entry("default")
                .or_insert(json!(false));
        }
        assert_eq!(again, raw_with_default, "{name}");
        assert_eq!(
            entries[0].ips,
            raw[0]["ips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        );
    }
    let value = annotation(
        "status/5.4-device-info.yaml",
        status::NETWORK_STATUS_ANNOTATION,
    );
    let entries = status::parse(&value).unwrap();
    // The misspelt "device" key of the spec's example is kept as an unknown key.
    assert_eq!(entries[3].extra["device"]["type"], json!("vhost-user"));
    match &entries[1].device_info {
        Some(status::StatusDeviceInfo::Known(d)) => assert_eq!(d.device_type, DeviceType::Pci),
        other => panic!("expected a known pci device-info, got {other:?}"),
    }
}

// ---- device-info spec ----

#[test]
fn device_info_4_3_examples() {
    for (file, t) in [
        ("device-info/4.3-pci.json", DeviceType::Pci),
        ("device-info/4.3-vdpa.json", DeviceType::Vdpa),
        ("device-info/4.3-vhost-user.json", DeviceType::VhostUser),
    ] {
        let text = fixture(file);
        let info = DeviceInfo::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(info.device_type, t);
        assert_eq!(info.version, "1.1.0");
        assert_eq!(
            info.to_value(),
            serde_json::from_str::<Value>(&text).unwrap()
        );
    }
}

// ---- §8: IPAMClaim ----

#[test]
fn ipamclaim_8_2_1() {
    let c: IPAMClaim = yaml("ipamclaim/8.2.1.yaml");
    assert_eq!(
        c.metadata.name.as_deref(),
        Some("vm-a.tenantred.pod16367aacb67")
    );
    assert_eq!(c.spec.network, "tenantred");
    assert_eq!(c.spec.interface, "pod16367aacb67");
    assert_eq!(c.ips(), ["10.128.20.8/24", "fd10:128:20::8/64"]);
    assert_eq!(
        c.metadata.owner_references.as_ref().unwrap()[0].kind,
        "VirtualMachine"
    );
    // §8.3: such a name is what an element's ipam-claim-reference may hold.
    let e = selection::parse(
        r#"[{"name":"tenantred","ipam-claim-reference":"vm-a.tenantred.pod16367aacb67"}]"#,
    )
    .unwrap();
    assert_eq!(
        e[0].ipam_claim_reference.as_deref(),
        c.metadata.name.as_deref()
    );
}
