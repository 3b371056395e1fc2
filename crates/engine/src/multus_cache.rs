//! Multus's scratch cache, read by DEL so that a node moved from Multus to plumb with pods
//! running does not leak their addresses (docs/multus-behaviour.md §2.11, §2.13). plumb has no
//! record of a sandbox Multus attached, but Multus wrote `<cniDir>/<containerID>` before its ADD
//! ran any delegate; DEL undoes those delegates as Multus's `CmdDel` would, each with its
//! `prevResult` from Multus's libcni result cache `<cniDir>/results`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use cni::error::{CniError, ErrorCode};
use cni::{NetworkConfigList, Version};
use netattach::runtime_config::capability;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::plan::{Attachment, Device};

/// The largest scratch file read: far above what Multus writes for any pod (each delegate's
/// configuration is a NAD's, which Kubernetes bounds at about 1.5 MiB).
pub const MAX_SCRATCH_FILE: u64 = 16 << 20;

/// One delegate of a scratch file, as DEL needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Delegate {
    /// Multus's `Name`: the NAD (`namespace/name`) or the configuration's name.
    pub network: String,
    /// `ifnameRequest`: the interface the pod's selection asked for.
    pub ifname_request: Option<String>,
    /// The configuration `Bytes` held, a single configuration or a list.
    pub list: NetworkConfigList,
    /// What Multus gave it as capability arguments when it is not the master (`ips`, `mac`,
    /// `infinibandGUID`, `deviceID`; `mergeCNIRuntimeConfig`).
    pub capability_args: Map<String, Value>,
}

/// The fields of Multus's `DelegateNetConf` (`pkg/types/types.go`) that DEL uses, as
/// `encoding/json` writes them (untagged fields under their Go names); a scratch file is a JSON
/// array of them. `Bytes` is the delegate's raw configuration (base64, a Go `[]byte`); `Conf` and
/// `ConfList` are the same configuration, parsed; the gateway filters concern ADD only.
#[derive(Deserialize)]
struct GoDelegate {
    #[serde(rename = "Name", default)]
    name: Option<String>,
    #[serde(rename = "ifnameRequest", default)]
    ifname_request: Option<String>,
    #[serde(rename = "macRequest", default)]
    mac_request: Option<String>,
    #[serde(rename = "infinibandGUIDRequest", default)]
    infiniband_guid_request: Option<String>,
    #[serde(rename = "ipRequest", default)]
    ip_request: Option<Vec<String>>,
    #[serde(rename = "deviceID", default)]
    device_id: Option<String>,
    #[serde(rename = "Bytes", default)]
    bytes: Option<String>,
}

/// Where Multus's scratch file of `container_id` is under Multus's `cni_dir`, when there is
/// one. A directory there is none (a container named `results` would find the result cache).
pub fn find(cni_dir: &Path, container_id: &str) -> Result<Option<PathBuf>, CniError> {
    cni::validate::container_id(container_id)?;
    let path = cni_dir.join(container_id);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => Ok(None),
        Ok(_) => Ok(Some(path)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(CniError::new(
            ErrorCode::Io,
            format!(
                "cannot look for Multus's scratch cache {}: {e}",
                path.display()
            ),
        )),
    }
}

/// The container IDs that have a scratch file under Multus's `cni_dir`: its regular files
/// whose names are container IDs (CNI spec §2: not `results`, a directory, nor a hidden
/// temporary file, whose names a container ID cannot have).
pub fn list(cni_dir: &Path) -> Result<Vec<String>, CniError> {
    let entries = match fs::read_dir(cni_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CniError::new(
                ErrorCode::Io,
                format!(
                    "cannot list Multus's scratch caches in {}: {e}",
                    cni_dir.display()
                ),
            ));
        }
    };
    let mut ids: Vec<String> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            (e.file_type().ok()?.is_file() && cni::validate::container_id(&name).is_ok())
                .then_some(name)
        })
        .collect();
    ids.sort();
    Ok(ids)
}

/// The delegates of the scratch file at `path`. Conflists without a `cniVersion` get
/// `cni_version`, Multus's own, as Multus's DEL gives them. The file is untrusted input: read
/// bounded, parsed without panics, wholly or not at all; one that cannot be read is an error
/// naming it, never a silent success (Multus's IP leak, issue #1087).
pub fn load(path: &Path, cni_version: Version) -> Result<Vec<Delegate>, CniError> {
    let parsed = cni::files::read_bounded(path, MAX_SCRATCH_FILE)
        .map_err(|e| (ErrorCode::Io, e.to_string()))
        .and_then(|bytes| parse(&bytes, cni_version).map_err(|e| (ErrorCode::DecodingFailure, e)));
    parsed.map_err(|(code, why)| {
        CniError::new(
            code,
            format!(
                "Multus's scratch cache {} cannot be read: {why}. It names the networks Multus \
                 attached this sandbox to, whose DEL releases their addresses; nothing was \
                 deleted. Repair the file, or remove it to delete without it (the pod's networks \
                 are then planned from the API server, and what Multus allocated may leak)",
                path.display()
            ),
        )
    })
}

/// The delegates of a scratch file's bytes, or why there are none.
pub fn parse(bytes: &[u8], cni_version: Version) -> Result<Vec<Delegate>, String> {
    let go: Vec<GoDelegate> = serde_json::from_slice(bytes)
        .map_err(|e| format!("it is not a JSON array of Multus delegates: {e}"))?;
    go.into_iter()
        .enumerate()
        .map(|(i, d)| delegate(d, cni_version).map_err(|e| format!("delegate {i}: {e}")))
        .collect()
}

fn delegate(d: GoDelegate, cni_version: Version) -> Result<Delegate, String> {
    let encoded = d.bytes.ok_or("it has no configuration (\"Bytes\")")?;
    let raw = cni::base64::decode(&encoded).ok_or("its \"Bytes\" is not base64")?;
    let mut config: Map<String, Value> = serde_json::from_slice(&raw)
        .map_err(|e| format!("its configuration is not a JSON object: {e}"))?;
    // CmdDel: a conflist without a cniVersion takes Multus's.
    if config.contains_key("plugins")
        && config
            .get("cniVersion")
            .is_none_or(|v| v.as_str() == Some(""))
    {
        config.insert("cniVersion".into(), Value::String(cni_version.to_string()));
    }
    let bytes = serde_json::to_vec(&config).map_err(|e| e.to_string())?;
    let list = NetworkConfigList::from_any_bytes(&bytes).map_err(|e| e.to_string())?;
    list.require_plugins().map_err(|e| e.to_string())?;
    let ifname_request = d.ifname_request.filter(|i| !i.is_empty());
    if let Some(i) = &ifname_request
        && let Some(problem) = cni::validate::interface_name_problem(i)
    {
        return Err(format!("its \"ifnameRequest\" {i:?} {problem}"));
    }
    let mut capability_args = Map::new();
    if let Some(ips) = d.ip_request.filter(|ips| !ips.is_empty()) {
        capability_args.insert(
            capability::IPS.into(),
            ips.into_iter().map(Value::String).collect(),
        );
    }
    for (key, value) in [
        (capability::MAC, d.mac_request),
        (capability::INFINIBAND_GUID, d.infiniband_guid_request),
        (capability::DEVICE_ID, d.device_id),
    ] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            capability_args.insert(key.into(), Value::String(v));
        }
    }
    Ok(Delegate {
        network: d
            .name
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| list.name.clone()),
        ifname_request,
        list,
        capability_args,
    })
}

/// The attachments Multus made of `delegates`, for DEL: the first is the master, on the
/// runtime's `ifname` with the runtime's `runtime_config`; the others on their
/// `ifnameRequest`, else `net<position>` (Multus's `getIfname`), with their own capability
/// arguments. Multus's `mergeCNIRuntimeConfig` starts every delegate from the runtime's
/// `runtimeConfig` and adds those to the non-master ones; plumb gives the runtime's to the
/// master alone, as it does in ADD (multi-net spec §7.5), so a NAD's portmap gets no
/// `portMappings` on this DEL either. DEL undoes them as Multus's `CmdDel` would: in reverse
/// order, every one attempted; a successful DEL empties their result cache entries, as libcni
/// does.
pub fn attachments(
    delegates: &[Delegate],
    ifname: &str,
    runtime_config: &Map<String, Value>,
) -> Vec<Attachment> {
    delegates
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let master = i == 0;
            let ifname = match (&d.ifname_request, master) {
                (Some(requested), _) => requested.clone(),
                (None, true) => ifname.to_string(),
                (None, false) => format!("net{i}"),
            };
            // Multus made a device-info file for every delegate with a device ID, and its DEL
            // deletes it (device-info spec §4.2.1): as a device of the attachment, DEL does too.
            let device = d
                .capability_args
                .get(capability::DEVICE_ID)
                .and_then(Value::as_str)
                .map(|id| Device {
                    id: id.to_string(),
                    resource: None,
                });
            let capability_args = if master {
                runtime_config.clone()
            } else {
                d.capability_args.clone()
            };
            Attachment {
                network: d.network.clone(),
                ifname,
                ifname_requested: false,
                list: d.list.clone(),
                network_list: d.list.clone(),
                capability_args,
                is_default: master,
                default_route: None,
                device,
                resource: None,
            }
        })
        .collect()
}

/// Removes the scratch file once everything it names was deleted.
pub fn remove(path: &Path) -> Result<(), CniError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CniError::new(
            ErrorCode::Io,
            format!(
                "every network in Multus's scratch cache {} was deleted, but the file cannot be \
                 removed: {e}",
                path.display()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A conflist NAD (`default/net-a`) without a `cniVersion` of its own.
    const NET_B: &str = r#"{"name":"net-b","plugins":[{"type":"ipvlan","master":"eth2","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}]}"#;

    /// A scratch file as Multus's `saveDelegates` writes it: `json.Marshal` of its
    /// `[]*DelegateNetConf` (multus-cni `pkg/types/types.go`, `pkg/multus/multus.go`). Fields
    /// in struct order; untagged ones under their Go names; `Conf` and `ConfList` are libcni's
    /// `NetConf`/`NetConfList` (`omitempty`, but `ipam` and `dns` are structs, so always
    /// written); `Bytes`, a `[]byte`, is base64. The first delegate is the cluster network (a
    /// single configuration), the second a conflist NAD the pod asked for on `mv1` with an IP
    /// and a MAC, the third a conflist NAD without a `cniVersion`. The first two `Bytes` were
    /// encoded with coreutils' `base64`.
    fn scratch_file() -> String {
        json!([
            {
                "Conf": {"cniVersion": "0.3.1", "name": "cbr0", "type": "bridge",
                         "ipam": {"type": "host-local"}, "dns": {}},
                "ConfList": {},
                "Name": "cbr0",
                "IsFilterV4Gateway": false, "IsFilterV6Gateway": false,
                "Bytes": "eyJjbmlWZXJzaW9uIjoiMC4zLjEiLCJuYW1lIjoiY2JyMCIsInR5cGUiOiJicmlkZ2UiLCJicmlkZ2UiOiJjbmkwIiwiaXBhbSI6eyJ0eXBlIjoiaG9zdC1sb2NhbCIsInN1Ym5ldCI6IjEwLjI0NC4xLjAvMjQifX0="
            },
            {
                "Conf": {"cniVersion": "1.0.0", "name": "net-a", "ipam": {}, "dns": {}},
                "ConfList": {"cniVersion": "1.0.0", "name": "net-a", "plugins": [
                    {"type": "macvlan", "ipam": {"type": "whereabouts"}, "dns": {}},
                    {"type": "tuning", "ipam": {}, "dns": {}}]},
                "Name": "default/net-a",
                "ifnameRequest": "mv1",
                "macRequest": "0a:58:0a:f4:02:05",
                "ipRequest": ["192.168.2.5/24"],
                "IsFilterV4Gateway": true, "IsFilterV6Gateway": true,
                "Bytes": "eyJjbmlWZXJzaW9uIjoiMS4wLjAiLCJuYW1lIjoibmV0LWEiLCJwbHVnaW5zIjpbeyJ0eXBlIjoibWFjdmxhbiIsIm1hc3RlciI6ImV0aDEiLCJpcGFtIjp7InR5cGUiOiJ3aGVyZWFib3V0cyIsInJhbmdlIjoiMTkyLjE2OC4yLjAvMjQifX0seyJ0eXBlIjoidHVuaW5nIiwic3lzY3RsIjp7Im5ldC5pcHY0LmNvbmYuYWxsLmFycF9ub3RpZnkiOiIxIn19XX0="
            },
            {
                "Conf": {"name": "net-b", "ipam": {}, "dns": {}},
                "ConfList": {"name": "net-b", "plugins": [
                    {"type": "ipvlan", "ipam": {"type": "host-local"}, "dns": {}}]},
                "Name": "other/net-b",
                "IsFilterV4Gateway": true, "IsFilterV6Gateway": true,
                "Bytes": cni::base64::encode(NET_B.as_bytes())
            }
        ])
        .to_string()
    }

    #[test]
    fn a_scratch_file_as_multus_writes_it_gives_its_delegates_in_order() {
        let d = parse(scratch_file().as_bytes(), Version::V1_0_0).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(
            (d[0].network.as_str(), d[0].list.name.as_str()),
            ("cbr0", "cbr0")
        );
        assert_eq!(d[0].list.cni_version, Version::parse("0.3.1").unwrap());
        assert_eq!(d[0].list.plugins[0].plugin_type, "bridge");
        assert_eq!(d[1].network, "default/net-a");
        assert_eq!(d[1].ifname_request.as_deref(), Some("mv1"));
        let types: Vec<_> = d[1].list.plugins.iter().map(|p| &p.plugin_type).collect();
        assert_eq!(types, ["macvlan", "tuning"]);
        assert_eq!(
            Value::Object(d[1].capability_args.clone()),
            json!({"ips": ["192.168.2.5/24"], "mac": "0a:58:0a:f4:02:05"})
        );
        // A conflist without a cniVersion takes Multus's, as Multus's DEL gives it.
        assert_eq!(d[2].list.cni_version, Version::V1_0_0);
        assert_eq!(d[2].list.name, "net-b");
    }

    #[test]
    fn interfaces_are_named_as_multus_named_them() {
        let d = parse(scratch_file().as_bytes(), Version::V1_0_0).unwrap();
        let runtime_config = json!({"portMappings": [{"hostPort": 80, "containerPort": 8080}]});
        let a = attachments(&d, "eth0", runtime_config.as_object().unwrap());
        let names: Vec<_> = a.iter().map(|a| a.ifname.as_str()).collect();
        // The master on the runtime's name; `net<position>` counts the named one too.
        assert_eq!(names, ["eth0", "mv1", "net2"]);
        assert!(a[0].is_default && !a[1].is_default);
        assert_eq!(Value::Object(a[0].capability_args.clone()), runtime_config);
        assert_eq!(a[1].capability_args["ips"], json!(["192.168.2.5/24"]));
        assert!(a[2].capability_args.is_empty());
    }

    #[test]
    fn an_empty_list_names_nothing() {
        assert!(parse(b"[]", Version::V1_0_0).unwrap().is_empty());
    }

    #[test]
    fn bad_scratch_files_are_refused_with_the_reason() {
        let with = |field: &str, value: Value| {
            let mut v: Value = serde_json::from_str(&scratch_file()).unwrap();
            v[1][field] = value;
            v.to_string()
        };
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        for (bytes, why) in [
            ("".to_string(), "not a JSON array"),
            ("[{\"Bytes\":".to_string(), "not a JSON array"),
            ("{}".to_string(), "not a JSON array"),
            ("null".to_string(), "not a JSON array"),
            (deep, "not a JSON array"),
            (
                with("Bytes", Value::Null),
                "delegate 1: it has no configuration",
            ),
            (
                with("Bytes", json!("not base64!")),
                "delegate 1: its \"Bytes\" is not",
            ),
            (
                with("Bytes", json!(cni::base64::encode(b"[1]"))),
                "delegate 1: its configuration is not a JSON object",
            ),
            (
                with("Bytes", json!(cni::base64::encode(b"{\"name\":\"x\"}"))),
                "delegate 1:",
            ),
            (
                with("ifnameRequest", json!("../eth0")),
                "delegate 1: its \"ifnameRequest\"",
            ),
            (with("ipRequest", json!("10.0.0.1")), "not a JSON array"),
        ] {
            let e = parse(bytes.as_bytes(), Version::V1_0_0).unwrap_err();
            assert!(e.contains(why), "{bytes:.80}: {e}");
        }
    }

    #[test]
    fn the_file_is_found_only_for_a_valid_container_id_and_only_as_a_file() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(find(d.path(), "c1").unwrap(), None);
        assert_eq!(find(&d.path().join("missing"), "c1").unwrap(), None);
        fs::write(d.path().join("c1"), "[]").unwrap();
        assert_eq!(find(d.path(), "c1").unwrap(), Some(d.path().join("c1")));
        // A container named like the result cache's directory has no scratch file there.
        fs::create_dir(d.path().join("results")).unwrap();
        assert_eq!(find(d.path(), "results").unwrap(), None);
        // An ID that would leave the directory is refused before any look.
        for bad in ["../c1", "a/b", ""] {
            assert!(find(d.path(), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_naming_it_with_the_way_out() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c1");
        fs::write(&path, "[{\"Bytes\": \"").unwrap();
        let e = load(&path, Version::V1_0_0).unwrap_err();
        assert_eq!(e.kind(), ErrorCode::DecodingFailure, "{e}");
        assert!(e.msg.contains(&path.display().to_string()), "{e}");
        assert!(
            e.msg.contains("nothing was deleted") && e.msg.contains("remove it"),
            "{e}"
        );
        // A FIFO is refused, not waited on.
        let fifo = d.path().join("c2");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = load(&fifo, Version::V1_0_0).unwrap_err();
        assert!(e.msg.contains("not a regular file"), "{e}");
    }
}
