//! The kubelet's device-manager checkpoint as the kubelet writes it (`Data.PodDeviceEntries`,
//! `Data.RegisteredDevices`, `Checksum`; `DeviceIDs` keyed by NUMA node since kubelet 1.20, a
//! plain list before), read into each pod's device IDs per resource, as the PodResources API
//! gives them (docs/multus-behaviour.md §2.9). Pure: bytes in, the [`Checkpoint`] or what is
//! wrong with them out, never a panic. `Checksum` is not checked: it is a hash of Go's printing
//! of the kubelet's structures, which only the kubelet's own code computes.

use std::collections::{BTreeMap, BTreeSet};

use cni::quote;
use serde_json::{Map, Value};

use crate::kubelet::PodDevices;

/// What plumb takes from a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Each pod's device IDs per resource, by pod UID: every container's IDs of the resource,
    /// sorted and deduplicated (blank IDs and resource names left out, as from the API).
    pub pods: BTreeMap<String, PodDevices>,
    /// The resources the node's device plugins registered (`RegisteredDevices`' keys).
    pub registered: BTreeSet<String>,
}

impl Checkpoint {
    /// The devices of the pod with UID `uid`. The kubelet writes an entry for every device it
    /// gives a pod when it admits the pod, before the pod's sandbox is made, so a pod it does
    /// not list has none.
    pub fn pod_devices(&self, uid: &str) -> PodDevices {
        self.pods.get(uid).cloned().unwrap_or_default()
    }
}

/// The checkpoint in `bytes`, or what is wrong with them. Keys are matched as the kubelet
/// writes them; `null` or a missing list or map is empty (Go writes a nil one as `null`), and
/// keys plumb does not use (`ContainerName`, `AllocResp`, `Checksum`) are not looked at.
pub fn parse(bytes: &[u8]) -> Result<Checkpoint, String> {
    let root: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("not JSON: {}", quote::cut(&e.to_string(), quote::MESSAGE)))?;
    let Value::Object(root) = root else {
        return Err(format!("{}, not a JSON object", kind(&root)));
    };
    let data = match root.get("Data") {
        Some(Value::Object(data)) => data,
        None => return Err("no \"Data\": not a kubelet device-manager checkpoint".into()),
        Some(v) => return Err(format!("\"Data\" is {}, not an object", kind(v))),
    };
    let mut pods = BTreeMap::<String, PodDevices>::new();
    for (i, entry) in list(data, "PodDeviceEntries", "Data")?.iter().enumerate() {
        let at = format!("Data.PodDeviceEntries[{i}]");
        let Value::Object(entry) = entry else {
            return Err(format!("{at} is {}, not an object", kind(entry)));
        };
        let uid = string(entry, "PodUID", &at)?;
        let resource = string(entry, "ResourceName", &at)?;
        let ids = device_ids(entry.get("DeviceIDs"), &format!("{at}.DeviceIDs"))?;
        // No pod has a blank UID: such an entry is nobody's.
        if uid.is_empty() {
            continue;
        }
        let devices = pods.entry(uid.to_owned()).or_default();
        if !resource.is_empty() {
            let all = devices.entry(resource.to_owned()).or_default();
            all.extend(
                ids.into_iter()
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned),
            );
        }
    }
    for devices in pods.values_mut() {
        devices.retain(|_, ids| {
            ids.sort();
            ids.dedup();
            !ids.is_empty()
        });
    }
    let registered = match data.get("RegisteredDevices") {
        None | Some(Value::Null) => BTreeSet::new(),
        Some(Value::Object(m)) => m.keys().filter(|r| !r.is_empty()).cloned().collect(),
        Some(v) => {
            return Err(format!(
                "Data.RegisteredDevices is {}, not an object",
                kind(v)
            ));
        }
    };
    Ok(Checkpoint { pods, registered })
}

/// `DeviceIDs`: an object of NUMA node (a number, `-1` for none) to IDs (kubelet 1.20+), or the
/// IDs themselves (before 1.20).
fn device_ids<'a>(v: Option<&'a Value>, at: &str) -> Result<Vec<&'a str>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(ids)) => strings(ids, at),
        Some(Value::Object(by_node)) => {
            let mut all = Vec::new();
            for (node, ids) in by_node {
                if node.parse::<i64>().is_err() {
                    return Err(format!(
                        "{at} has the key {:?}, which is not a NUMA node number",
                        quote::cut(node, quote::VALUE)
                    ));
                }
                let at = format!("{at}[{node:?}]");
                match ids {
                    Value::Null => {}
                    Value::Array(ids) => all.extend(strings(ids, &at)?),
                    v => return Err(format!("{at} is {}, not a list of device IDs", kind(v))),
                }
            }
            Ok(all)
        }
        Some(v) => Err(format!(
            "{at} is {}, neither a list of device IDs nor an object of them by NUMA node",
            kind(v)
        )),
    }
}

/// The list `key` of `object` (at `at`); missing or `null` is empty.
fn list<'a>(object: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a [Value], String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(v) => Err(format!("{at}.{key} is {}, not a list", kind(v))),
    }
}

/// The string `key` of `object` (at `at`), which must be there.
fn string<'a>(object: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a str, String> {
    match object.get(key) {
        Some(Value::String(s)) => Ok(s),
        None => Err(format!("{at} has no {key:?}")),
        Some(v) => Err(format!("{at}.{key} is {}, not a string", kind(v))),
    }
}

fn strings<'a>(items: &'a [Value], at: &str) -> Result<Vec<&'a str>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s.as_str()),
            v => Err(format!("{at}[{i}] is {}, not a device ID string", kind(v))),
        })
        .collect()
}

/// What a JSON value is, for a message (never the value itself, which may be huge).
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A checkpoint as kubelet 1.20+ writes it: entries of several containers and resources,
    /// IDs keyed by NUMA node (`-1`: none), another pod, and a nil list written as `null`.
    const KUBELET_1_20: &str = r#"{"Data":{"PodDeviceEntries":[
        {"PodUID":"0b3f7c1e-uid-a","ContainerName":"app","ResourceName":"intel.com/sriov",
         "DeviceIDs":{"0":["0000:03:02.2","0000:03:02.1"]},"AllocResp":"CiQKGFBDSURFVklDRV9JTlRFTA=="},
        {"PodUID":"0b3f7c1e-uid-a","ContainerName":"sidecar","ResourceName":"intel.com/sriov",
         "DeviceIDs":{"1":["0000:81:02.0"],"-1":["0000:03:02.1"]},"AllocResp":""},
        {"PodUID":"0b3f7c1e-uid-a","ContainerName":"app","ResourceName":"mellanox.com/rdma",
         "DeviceIDs":{"-1":["mlx5_3"]},"AllocResp":null},
        {"PodUID":"77aa-uid-b","ContainerName":"c","ResourceName":"intel.com/sriov",
         "DeviceIDs":{"0":["0000:03:02.3"]},"AllocResp":""},
        {"PodUID":"77aa-uid-b","ContainerName":"c","ResourceName":"example.com/none",
         "DeviceIDs":null,"AllocResp":""}],
      "RegisteredDevices":{"intel.com/sriov":["0000:03:02.1","0000:03:02.2","0000:03:02.3",
         "0000:81:02.0"],"mellanox.com/rdma":["mlx5_3"],"example.com/none":null}},
     "Checksum":2764932512}"#;

    /// Before kubelet 1.20: `DeviceIDs` is the list itself.
    const KUBELET_1_19: &str = r#"{"Data":{"PodDeviceEntries":[
        {"PodUID":"uid-old","ContainerName":"a","ResourceName":"intel.com/sriov",
         "DeviceIDs":["0000:03:02.5","0000:03:02.4"],"AllocResp":"Cg=="},
        {"PodUID":"uid-old","ContainerName":"b","ResourceName":"intel.com/sriov",
         "DeviceIDs":["0000:03:02.4",""],"AllocResp":"Cg=="}],
      "RegisteredDevices":{"intel.com/sriov":["0000:03:02.4","0000:03:02.5"]}},
     "Checksum":1234567}"#;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_containers_ids_of_a_resource_sorted_without_duplicates_by_pod_uid() {
        let c = parse(KUBELET_1_20.as_bytes()).unwrap();
        assert_eq!(
            c.pod_devices("0b3f7c1e-uid-a"),
            PodDevices::from([
                (
                    "intel.com/sriov".to_owned(),
                    ids(&["0000:03:02.1", "0000:03:02.2", "0000:81:02.0"])
                ),
                ("mellanox.com/rdma".to_owned(), ids(&["mlx5_3"])),
            ])
        );
        // A resource without IDs is left out, as from the PodResources API.
        assert_eq!(
            c.pod_devices("77aa-uid-b"),
            PodDevices::from([("intel.com/sriov".to_owned(), ids(&["0000:03:02.3"]))])
        );
        assert_eq!(
            c.registered,
            BTreeSet::from([
                "example.com/none".to_owned(),
                "intel.com/sriov".to_owned(),
                "mellanox.com/rdma".to_owned()
            ])
        );
    }

    #[test]
    fn device_ids_as_a_plain_list_are_read_as_kubelets_before_1_20_wrote_them() {
        let c = parse(KUBELET_1_19.as_bytes()).unwrap();
        assert_eq!(
            c.pod_devices("uid-old"),
            PodDevices::from([(
                "intel.com/sriov".to_owned(),
                ids(&["0000:03:02.4", "0000:03:02.5"])
            )])
        );
        assert_eq!(c.registered, BTreeSet::from(["intel.com/sriov".to_owned()]));
    }

    #[test]
    fn a_pod_the_checkpoint_does_not_list_has_no_devices() {
        let c = parse(KUBELET_1_20.as_bytes()).unwrap();
        assert_eq!(c.pod_devices("not-there"), PodDevices::new());
        assert_eq!(c.pod_devices(""), PodDevices::new());
        // A node without device pods: the kubelet writes its nil list as null.
        let c = parse(br#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":1}"#)
            .unwrap();
        assert_eq!(c, Checkpoint::default());
    }

    #[test]
    fn garbage_and_wrong_shapes_are_errors_saying_what_is_wrong() {
        let entry = |fields: Value| json!({"Data": {"PodDeviceEntries": [fields]}}).to_string();
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "not JSON"),
            ("\u{0}\u{ff}garbage".into(), "not JSON"),
            (
                KUBELET_1_20[..KUBELET_1_20.len() / 2].into(),
                "not JSON: EOF while parsing",
            ),
            ("[]".into(), "a list, not a JSON object"),
            (
                "{}".into(),
                "no \"Data\": not a kubelet device-manager checkpoint",
            ),
            (
                r#"{"Data":"x"}"#.into(),
                "\"Data\" is a string, not an object",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":{}}}"#.into(),
                "Data.PodDeviceEntries is an object, not a list",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[7]}}"#.into(),
                "Data.PodDeviceEntries[0] is a number, not an object",
            ),
            (
                entry(json!({"ResourceName": "r", "DeviceIDs": []})),
                "Data.PodDeviceEntries[0] has no \"PodUID\"",
            ),
            (
                entry(json!({"PodUID": 1, "ResourceName": "r"})),
                "Data.PodDeviceEntries[0].PodUID is a number, not a string",
            ),
            (
                entry(json!({"PodUID": "u", "DeviceIDs": []})),
                "Data.PodDeviceEntries[0] has no \"ResourceName\"",
            ),
            (
                entry(json!({"PodUID": "u", "ResourceName": "r", "DeviceIDs": "0000:03:02.1"})),
                "Data.PodDeviceEntries[0].DeviceIDs is a string, neither a list of device IDs \
                 nor an object of them by NUMA node",
            ),
            (
                entry(json!({"PodUID": "u", "ResourceName": "r", "DeviceIDs": {"numa0": ["a"]}})),
                "Data.PodDeviceEntries[0].DeviceIDs has the key \"numa0\", which is not a NUMA \
                 node number",
            ),
            (
                entry(json!({"PodUID": "u", "ResourceName": "r", "DeviceIDs": {"0": "a"}})),
                "Data.PodDeviceEntries[0].DeviceIDs[\"0\"] is a string, not a list of device IDs",
            ),
            (
                entry(json!({"PodUID": "u", "ResourceName": "r", "DeviceIDs": {"0": ["a", 5]}})),
                "Data.PodDeviceEntries[0].DeviceIDs[\"0\"][1] is a number, not a device ID string",
            ),
            (
                entry(json!({"PodUID": "u", "ResourceName": "r", "DeviceIDs": [null]})),
                "Data.PodDeviceEntries[0].DeviceIDs[0] is null, not a device ID string",
            ),
            (
                r#"{"Data":{"RegisteredDevices":["intel.com/sriov"]}}"#.into(),
                "Data.RegisteredDevices is a list, not an object",
            ),
        ];
        for (bytes, want) in cases {
            let e = parse(bytes.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{bytes}: {e}");
        }
    }

    #[test]
    fn huge_or_deep_input_gives_a_bounded_message_and_no_panic() {
        let key = "n".repeat(10_000);
        let e = parse(
            json!({"Data": {"PodDeviceEntries": [
                {"PodUID": "u", "ResourceName": "r", "DeviceIDs": {key: []}}]}})
            .to_string()
            .as_bytes(),
        )
        .unwrap_err();
        assert!(e.len() < 1_000, "{} bytes", e.len());
        // Nesting past serde_json's limit is an error, not a stack overflow.
        let deep = "[".repeat(100_000);
        assert!(parse(deep.as_bytes()).unwrap_err().starts_with("not JSON"));
    }
}
