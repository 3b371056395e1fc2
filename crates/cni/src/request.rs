//! Deriving the request configuration one plugin receives on stdin from its plugin configuration
//! object (spec §3 "Deriving request configuration from plugin configuration" and "Deriving
//! runtimeConfig"): `name` and `cniVersion` from the list, `runtimeConfig` from the capabilities
//! the plugin declares, `prevResult` in the list's version, GC's valid attachments ([`build`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::PluginConfig;
use crate::error::CniError;
use crate::result::CniResult;
use crate::version::Version;

/// One entry of GC's valid-attachments list (spec §2 "GC").
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// What a request carries beyond the plugin's own configuration.
#[derive(Clone, Copy, Debug)]
pub enum Extra<'a> {
    /// ADD, CHECK, DEL.
    Attachment {
        capability_args: &'a Map<String, Value>,
        prev_result: Option<&'a CniResult>,
    },
    /// GC.
    Gc { valid: &'a [GcAttachment] },
    /// STATUS and VERSION: nothing beyond `name` and `cniVersion`.
    None,
}

/// The `runtimeConfig` for `plugin`: the capability args it declares as true.
pub fn runtime_config(
    plugin: &PluginConfig,
    capability_args: &Map<String, Value>,
) -> Map<String, Value> {
    capability_args
        .iter()
        .filter(|(k, _)| plugin.has_capability(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Builds the request JSON for one plugin of list `name` at `version`.
///
/// - `name` and `cniVersion` are always inserted, from the list.
/// - For ADD, CHECK and DEL: `runtimeConfig` holds exactly the capability arguments the plugin
///   declares as `true` (no key at all when none match; a `runtimeConfig` written in the config
///   itself is then left as it is, as libcni does); `prevResult` is the previous result in the
///   list's version; `capabilities` is removed ("must not be set").
/// - For GC: `cni.dev/valid-attachments`, and `cni.dev/attachments` too, because spec 1.1.0
///   first named the key that way and plugins built then read it (libcni sends both, #1101).
/// - Keys starting with `cni.dev/` are reserved (spec §1): any the configuration holds are not
///   passed on. Every other key passes unchanged.
pub fn build(
    name: &str,
    version: Version,
    plugin: &PluginConfig,
    extra: Extra<'_>,
) -> Result<Vec<u8>, CniError> {
    let mut conf: Map<String, Value> = plugin
        .raw
        .iter()
        .filter(|(k, _)| !k.starts_with("cni.dev/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    conf.insert("name".into(), Value::String(name.to_string()));
    conf.insert("cniVersion".into(), Value::String(version.to_string()));
    match extra {
        Extra::Attachment {
            capability_args,
            prev_result,
        } => {
            conf.remove("capabilities");
            let rc = runtime_config(plugin, capability_args);
            if !rc.is_empty() {
                conf.insert("runtimeConfig".into(), Value::Object(rc));
            }
            if let Some(prev) = prev_result {
                let prev = prev
                    .convert_to(version)
                    .and_then(|r| r.to_value())
                    .map_err(|e| e.context("cannot pass prevResult"))?;
                conf.insert("prevResult".into(), prev);
            }
        }
        Extra::Gc { valid } => {
            let list = serde_json::to_value(valid).expect("attachments serialise");
            conf.insert("cni.dev/valid-attachments".into(), list.clone());
            conf.insert("cni.dev/attachments".into(), list);
        }
        Extra::None => {}
    }
    Ok(serde_json::to_vec(&Value::Object(conf)).expect("a JSON map serialises"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::version::SUPPORTED;

    fn plugin(v: Value) -> PluginConfig {
        PluginConfig::from_value(v).unwrap()
    }

    fn decode(b: Vec<u8>) -> Value {
        serde_json::from_slice(&b).unwrap()
    }

    #[test]
    fn runtime_config_holds_only_declared_capabilities() {
        let caps = json!({"mac":"02:00:00:00:00:01","portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"tcp"}],"ips":["10.0.0.5/24"]});
        let caps = caps.as_object().unwrap();
        let p = plugin(
            json!({"type":"tuning","capabilities":{"mac":true,"ips":false},"custom":{"k":[1,2]}}),
        );
        let req = decode(
            build(
                "net",
                Version::V1_1_0,
                &p,
                Extra::Attachment {
                    capability_args: caps,
                    prev_result: None,
                },
            )
            .unwrap(),
        );
        assert_eq!(
            req,
            json!({"type":"tuning","custom":{"k":[1,2]},"name":"net","cniVersion":"1.1.0",
                   "runtimeConfig":{"mac":"02:00:00:00:00:01"}})
        );
        // No declared capability asked for: no runtimeConfig key at all.
        let p = plugin(json!({"type":"bridge","capabilities":{"bandwidth":true}}));
        let req = decode(
            build(
                "net",
                Version::V1_1_0,
                &p,
                Extra::Attachment {
                    capability_args: caps,
                    prev_result: None,
                },
            )
            .unwrap(),
        );
        assert!(req.get("runtimeConfig").is_none());
        assert!(
            req.get("capabilities").is_none(),
            "capabilities must not be set"
        );
        assert!(
            req.get("prevResult").is_none(),
            "first ADD has no prevResult"
        );
    }

    #[test]
    fn prev_result_is_in_the_list_version_for_every_version() {
        let prev = CniResult::parse(
            br#"{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/x","mtu":1400}],
                 "ips":[{"interface":0,"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}"#,
            Version::V1_1_0,
        )
        .unwrap();
        let p = plugin(json!({"type":"portmap"}));
        let none = Map::new();
        for v in SUPPORTED {
            let req = decode(
                build(
                    "n",
                    v,
                    &p,
                    Extra::Attachment {
                        capability_args: &none,
                        prev_result: Some(&prev),
                    },
                )
                .unwrap(),
            );
            assert_eq!(req["cniVersion"], json!(v.to_string()));
            assert_eq!(req["prevResult"]["cniVersion"], json!(v.to_string()));
            if v < Version::V0_3_0 {
                assert_eq!(req["prevResult"]["ip4"]["ip"], json!("10.0.0.2/24"));
            } else {
                assert_eq!(req["prevResult"]["ips"][0]["address"], json!("10.0.0.2/24"));
            }
        }
    }

    #[test]
    fn gc_sends_both_attachment_keys_and_reserved_keys_are_dropped() {
        let p = plugin(json!({"type":"bridge","cni.dev/evil":1,"capabilities":{"mac":true}}));
        let valid = [GcAttachment {
            container_id: "c1".into(),
            ifname: "eth0".into(),
        }];
        let req = decode(build("n", Version::V1_1_0, &p, Extra::Gc { valid: &valid }).unwrap());
        let want = json!([{"containerID":"c1","ifname":"eth0"}]);
        assert_eq!(req["cni.dev/valid-attachments"], want);
        assert_eq!(req["cni.dev/attachments"], want);
        assert!(req.get("cni.dev/evil").is_none());
        let status = decode(build("n", Version::V1_1_0, &p, Extra::None).unwrap());
        assert_eq!(
            status,
            json!({"type":"bridge","capabilities":{"mac":true},"name":"n","cniVersion":"1.1.0"})
        );
    }

    #[test]
    fn injected_name_and_version_win_over_the_plugins_own() {
        let p = plugin(json!({"type":"x","name":"other","cniVersion":"0.1.0"}));
        let req = decode(build("n", Version::V0_4_0, &p, Extra::None).unwrap());
        assert_eq!(
            (req["name"].as_str(), req["cniVersion"].as_str()),
            (Some("n"), Some("0.4.0"))
        );
    }
}
