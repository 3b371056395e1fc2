//! Network configuration lists and plugin configuration objects (spec §1).
//!
//! Configs are kept as raw JSON objects so that every key a plugin may read passes through
//! unchanged (spec §1: "The runtime MUST pass through these fields, unchanged"); the keys the
//! protocol itself uses are read out and validated. A single plugin config (`.conf`) becomes a
//! one-plugin list as libcni's `ConfListFromConf` does.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{CniError, ErrorCode};
use crate::validate;
use crate::version::Version;

/// A network configuration list (spec §1 "Configuration format").
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkConfigList {
    /// The version selected from `cniVersion` and `cniVersions` (spec §1 "Version
    /// considerations": the highest one this implementation supports).
    pub cni_version: Version,
    pub name: String,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub load_only_inlined_plugins: bool,
    pub plugins: Vec<PluginConfig>,
    /// The top-level object, unknown keys included.
    pub raw: Map<String, Value>,
    /// The bytes the list was read from; the result cache stores them (libcni's `config`).
    pub bytes: Vec<u8>,
}

/// One plugin configuration object (spec §1 "Plugin configuration objects").
#[derive(Clone, Debug, PartialEq)]
pub struct PluginConfig {
    pub plugin_type: String,
    /// `capabilities`: only the keys whose value is `true` matter (spec §3 "Deriving
    /// runtimeConfig").
    pub capabilities: BTreeMap<String, bool>,
    /// The whole object as configured.
    pub raw: Map<String, Value>,
}

fn invalid(msg: impl Into<String>) -> CniError {
    CniError::new(ErrorCode::InvalidConfig, msg)
}

fn decode_object(bytes: &[u8], what: &str) -> Result<Map<String, Value>, CniError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(CniError::new(
            ErrorCode::DecodingFailure,
            format!("invalid {what}: not a JSON object"),
        )),
        Err(e) => Err(CniError::new(
            ErrorCode::DecodingFailure,
            format!("invalid {what}: {e}"),
        )),
    }
}

/// `disableCheck`, `disableGC`, `loadOnlyInlinedPlugins`: a bool, or the strings "true"/"false"
/// in any case (libcni accepts both); anything else names the key.
fn read_bool(raw: &Map<String, Value>, key: &str) -> Result<bool, CniError> {
    match raw.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(other) => Err(invalid(format!(
            "invalid value {other} for {key:?}: expected true or false"
        ))),
    }
}

fn read_string<'a>(raw: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, CniError> {
    match raw.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(format!(
            "invalid value {other} for {key:?}: expected a string"
        ))),
    }
}

/// The highest of `cniVersion` ∪ `cniVersions` that this implementation supports (spec §1
/// "Version considerations": "the highest supported version from the set"). libcni drops only the
/// entries newer than itself, and so can pick an older one it cannot speak ("1.0.1" beside
/// "1.0.0"); here every version this crate does not implement is passed over.
fn select_version(raw: &Map<String, Value>) -> Result<Version, CniError> {
    let mut candidates = Vec::new();
    let declared = read_string(raw, "cniVersion")?;
    if let Some(s) = declared {
        candidates.push(
            Version::parse(s).map_err(|e| invalid(format!("key \"cniVersion\": {}", e.msg)))?,
        );
    }
    match raw.get("cniVersions") {
        None => {}
        Some(Value::Array(list)) => {
            for (i, v) in list.iter().enumerate() {
                let s = v.as_str().ok_or_else(|| {
                    invalid(format!(
                        "key \"cniVersions\" entry {i}: {v} is not a string"
                    ))
                })?;
                candidates.push(
                    Version::parse(s).map_err(|e| {
                        invalid(format!("key \"cniVersions\" entry {i}: {}", e.msg))
                    })?,
                );
            }
        }
        Some(other) => {
            return Err(invalid(format!(
                "invalid value {other} for \"cniVersions\": expected a list of strings"
            )));
        }
    }
    if candidates.is_empty() {
        // No version at all: the oldest protocol (spec: absent means 0.1.0).
        return Ok(Version::V0_1_0);
    }
    // None supported: the highest not newer than this crate, so that the error below names the
    // version given ("unsupported CNI version 0.5.0", with the supported ones).
    let best = candidates
        .iter()
        .copied()
        .filter(|v| v.is_supported())
        .max()
        .or_else(|| {
            candidates
                .iter()
                .copied()
                .filter(|v| *v <= Version::CURRENT)
                .max()
        })
        .ok_or_else(|| {
            CniError::new(
                ErrorCode::IncompatibleVersion,
                format!(
                    "no supported CNI version in \"cniVersion\"/\"cniVersions\" (newest supported \
                     is {})",
                    Version::CURRENT
                ),
            )
        })?;
    best.require_supported()
        .map_err(|e| e.context("keys \"cniVersion\"/\"cniVersions\""))
}

impl PluginConfig {
    /// Validates one plugin object: it must be an object with a valid `type`; `capabilities`, if
    /// present, maps names to booleans.
    pub fn from_value(v: Value) -> Result<Self, CniError> {
        let Value::Object(raw) = v else {
            return Err(invalid("plugin configuration is not a JSON object"));
        };
        let plugin_type = match raw.get("type") {
            Some(Value::String(t)) => t.clone(),
            None => return Err(invalid("missing plugin type (key \"type\")")),
            Some(other) => {
                return Err(invalid(format!(
                    "invalid value {other} for \"type\": expected a string"
                )));
            }
        };
        validate::plugin_type(&plugin_type)?;
        let mut capabilities = BTreeMap::new();
        match raw.get("capabilities") {
            None | Some(Value::Null) => {}
            Some(Value::Object(caps)) => {
                for (k, v) in caps {
                    let b = v.as_bool().ok_or_else(|| {
                        invalid(format!(
                            "plugin {plugin_type:?}: capability {k:?} must be true or false, not {v}"
                        ))
                    })?;
                    capabilities.insert(k.clone(), b);
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "plugin {plugin_type:?}: invalid value {other} for \"capabilities\": expected \
                     an object"
                )));
            }
        }
        Ok(PluginConfig {
            plugin_type,
            capabilities,
            raw,
        })
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CniError> {
        Self::from_value(Value::Object(decode_object(bytes, "plugin configuration")?))
    }

    /// Whether the plugin declares `capability` as true.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities.get(capability).copied().unwrap_or(false)
    }
}

impl NetworkConfigList {
    /// Parses a configuration list (a `.conflist`). With `loadOnlyInlinedPlugins` false, an
    /// empty or missing `plugins` is allowed here: the caller may add plugins from the sibling
    /// directory (`conf_dir`), and [`NetworkConfigList::require_plugins`] checks at the
    /// end.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CniError> {
        let raw = decode_object(bytes, "network configuration list")?;
        Self::from_map(raw, bytes.to_vec())
    }

    /// The list held in `raw`, read from `bytes`.
    fn from_map(raw: Map<String, Value>, bytes: Vec<u8>) -> Result<Self, CniError> {
        let name = match read_string(&raw, "name")? {
            Some(n) => n.to_string(),
            None => return Err(invalid("missing network name (key \"name\")")),
        };
        validate::network_name(&name)?;
        let cni_version =
            select_version(&raw).map_err(|e| e.context(format!("network {name:?}")))?;
        let load_only_inlined_plugins = read_bool(&raw, "loadOnlyInlinedPlugins")?;
        let mut plugins = Vec::new();
        match raw.get("plugins") {
            None if load_only_inlined_plugins => {
                return Err(invalid(format!(
                    "network {name:?}: \"loadOnlyInlinedPlugins\" is true but there is no \
                     \"plugins\" list"
                )));
            }
            None => {}
            Some(Value::Array(list)) => {
                if list.is_empty() {
                    return Err(invalid(format!("network {name:?}: \"plugins\" is empty")));
                }
                for (i, p) in list.iter().enumerate() {
                    plugins.push(
                        PluginConfig::from_value(p.clone())
                            .map_err(|e| e.context(format!("network {name:?} plugin {i}")))?,
                    );
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "network {name:?}: invalid value {other} for \"plugins\": expected a list"
                )));
            }
        }
        Ok(NetworkConfigList {
            cni_version,
            disable_check: read_bool(&raw, "disableCheck")?,
            disable_gc: read_bool(&raw, "disableGC")?,
            load_only_inlined_plugins,
            name,
            plugins,
            raw,
            bytes,
        })
    }

    /// Parses a single plugin configuration (a `.conf`) as a one-plugin list, the way libcni's
    /// `ConfListFromConf` does: the list takes the config's `name` and `cniVersion`.
    pub fn from_conf_bytes(bytes: &[u8]) -> Result<Self, CniError> {
        let raw = decode_object(bytes, "network configuration")?;
        PluginConfig::from_value(Value::Object(raw.clone()))?;
        let mut list = Map::new();
        for key in ["name", "cniVersion"] {
            if let Some(v) = raw.get(key) {
                list.insert(key.to_string(), v.clone());
            }
        }
        list.insert("plugins".into(), Value::Array(vec![Value::Object(raw)]));
        // The map itself becomes the list, with no second parse.
        let bytes = serde_json::to_vec(&list).map_err(|e| {
            CniError::new(ErrorCode::Internal, format!("serialising the list: {e}"))
        })?;
        Self::from_map(list, bytes)
    }

    /// A list or a single config, told apart by the `plugins` key (as NADs hold either,
    /// multi-net spec §3.4.2).
    pub fn from_any_bytes(bytes: &[u8]) -> Result<Self, CniError> {
        let raw = decode_object(bytes, "network configuration")?;
        if raw.contains_key("plugins") {
            Self::from_bytes(bytes)
        } else {
            Self::from_conf_bytes(bytes)
        }
    }

    /// Fails when the list ended up with no plugins at all.
    pub fn require_plugins(&self) -> Result<(), CniError> {
        if self.plugins.is_empty() {
            return Err(invalid(format!(
                "network {:?}: no plugin configurations found",
                self.name
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn list(v: Value) -> Result<NetworkConfigList, CniError> {
        NetworkConfigList::from_bytes(&serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn parses_the_spec_example_and_keeps_unknown_keys() {
        let l = list(json!({
            "cniVersion": "1.1.0", "cniVersions": ["1.0.0", "1.1.0"], "name": "dbnet",
            "custom": {"x": 1},
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "keyA": ["some more", "plugin specific", "configuration"],
                 "ipam": {"type": "host-local", "subnet": "10.1.0.0/16", "gateway": "10.1.0.1",
                          "routes": [{"dst": "0.0.0.0/0"}]},
                 "dns": {"nameservers": ["10.1.0.1"]}},
                {"type": "tuning", "capabilities": {"mac": true}, "sysctl": {"net.core.somaxconn": "500"}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        }))
        .unwrap();
        assert_eq!(l.name, "dbnet");
        assert_eq!(l.cni_version, Version::V1_1_0);
        assert_eq!(l.plugins.len(), 3);
        assert_eq!(l.plugins[0].raw["keyA"][1], json!("plugin specific"));
        assert!(l.plugins[1].has_capability("mac"));
        assert!(!l.plugins[1].has_capability("portMappings"));
        assert_eq!(l.raw["custom"], json!({"x": 1}));
        assert!(!l.disable_check && !l.disable_gc && !l.load_only_inlined_plugins);
    }

    #[test]
    fn cni_versions_picks_the_highest_supported() {
        let pick = |v: Value| list(v).map(|l| l.cni_version);
        assert_eq!(
            pick(json!({"name":"n","cniVersion":"0.3.1","cniVersions":["0.4.0","1.0.0"],"plugins":[{"type":"x"}]})).unwrap(),
            Version::V1_0_0
        );
        // Newer than this implementation: skipped, not chosen.
        assert_eq!(
            pick(json!({"name":"n","cniVersions":["1.0.0","9.0.0"],"plugins":[{"type":"x"}]}))
                .unwrap(),
            Version::V1_0_0
        );
        // Not newer, but not a version this crate implements: skipped too (spec §1 "Version
        // considerations": the highest *supported* version of the set).
        assert_eq!(
            pick(json!({"name":"n","cniVersions":["0.4.0","1.0.1"],"plugins":[{"type":"x"}]}))
                .unwrap(),
            Version::V0_4_0
        );
        assert_eq!(
            pick(json!({"name":"n","cniVersion":"0.3.2","cniVersions":["0.3.1"],"plugins":[{"type":"x"}]}))
                .unwrap(),
            Version::V0_3_1
        );
        assert_eq!(
            pick(json!({"name":"n","plugins":[{"type":"x"}]})).unwrap(),
            Version::V0_1_0
        );
        let e =
            pick(json!({"name":"n","cniVersions":["9.0.0"],"plugins":[{"type":"x"}]})).unwrap_err();
        assert_eq!(e.code, 1, "{e}");
        let e =
            pick(json!({"name":"n","cniVersion":"0.5.0","plugins":[{"type":"x"}]})).unwrap_err();
        assert_eq!(e.code, 1, "{e}");
        // The error names the unsupported version given and the supported ones.
        assert!(e.msg.contains("0.5.0"), "{e}");
        assert!(e.details.contains("1.0.0"), "{e:?}");
        let e =
            pick(json!({"name":"n","cniVersions":"1.0.0","plugins":[{"type":"x"}]})).unwrap_err();
        assert!(e.msg.contains("cniVersions"), "{e}");
        let e = pick(json!({"name":"n","cniVersions":[1],"plugins":[{"type":"x"}]})).unwrap_err();
        assert!(e.msg.contains("entry 0"), "{e}");
    }

    #[test]
    fn booleans_accept_strings_in_any_case_and_name_the_key_otherwise() {
        let l = list(
            json!({"name":"n","cniVersion":"1.1.0","disableCheck":"TRUE","disableGC":"False",
            "loadOnlyInlinedPlugins":true,"plugins":[{"type":"x"}]}),
        )
        .unwrap();
        assert!(l.disable_check && !l.disable_gc && l.load_only_inlined_plugins);
        for key in ["disableCheck", "disableGC", "loadOnlyInlinedPlugins"] {
            for bad in [json!("yes"), json!(1), json!(null)] {
                let mut v = json!({"name":"n","plugins":[{"type":"x"}]});
                v[key] = bad.clone();
                let e = list(v).unwrap_err();
                assert_eq!(e.code, 7);
                assert!(e.msg.contains(key), "{key}={bad}: {e}");
            }
        }
    }

    #[test]
    fn structural_errors_name_what_is_wrong() {
        let cases = [
            (json!({"plugins":[{"type":"x"}]}), "name"),
            (
                json!({"name":"bad name","plugins":[{"type":"x"}]}),
                "bad name",
            ),
            (json!({"name":7,"plugins":[{"type":"x"}]}), "name"),
            (json!({"name":"n","plugins":[]}), "empty"),
            (json!({"name":"n","plugins":{}}), "plugins"),
            (
                json!({"name":"n","plugins":[{"bridge":"x"}]}),
                "plugin 0: missing plugin type",
            ),
            (
                json!({"name":"n","plugins":[{"type":"x"},{"type":"../sh"}]}),
                "plugin 1",
            ),
            (
                json!({"name":"n","plugins":[{"type":"x","capabilities":{"mac":"yes"}}]}),
                "mac",
            ),
            (
                json!({"name":"n","plugins":[{"type":"x","capabilities":[]}]}),
                "capabilities",
            ),
            (json!({"name":"n","plugins":[7]}), "not a JSON object"),
            (
                json!({"name":"n","loadOnlyInlinedPlugins":true}),
                "loadOnlyInlinedPlugins",
            ),
        ];
        for (v, needle) in cases {
            let e = list(v.clone()).unwrap_err();
            assert_eq!(e.code, 7, "{v}: {e}");
            assert!(e.msg.contains(needle), "{v}: {e}");
        }
        for bad in [&b"{"[..], b"[]", b"", b"\"x\""] {
            assert_eq!(NetworkConfigList::from_bytes(bad).unwrap_err().code, 6);
        }
    }

    #[test]
    fn plugins_may_come_later_unless_only_inlined() {
        let l = list(json!({"name":"n","cniVersion":"1.1.0"})).unwrap();
        assert!(l.plugins.is_empty());
        assert!(l.require_plugins().unwrap_err().msg.contains("no plugin"));
    }

    #[test]
    fn a_single_conf_becomes_a_one_plugin_list() {
        let conf = br#"{"cniVersion":"0.4.0","name":"mynet","type":"bridge","bridge":"br9",
            "ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}"#;
        let l = NetworkConfigList::from_conf_bytes(conf).unwrap();
        assert_eq!(l.name, "mynet");
        assert_eq!(l.cni_version, Version::V0_4_0);
        assert_eq!(l.plugins.len(), 1);
        assert_eq!(l.plugins[0].plugin_type, "bridge");
        assert_eq!(l.plugins[0].raw["bridge"], json!("br9"));
        let any = NetworkConfigList::from_any_bytes(conf).unwrap();
        assert_eq!(any, l);
        let e = NetworkConfigList::from_conf_bytes(br#"{"name":"x"}"#).unwrap_err();
        assert!(e.msg.contains("type"), "{e}");
    }

    #[test]
    fn a_single_conf_keeps_every_value_exactly() {
        // fuzz/crashes/cni_config/conf-float-reparse.json: an integer too large for u64 is
        // read as a float that serde_json's parser does not read back to the same value.
        let conf = br#"{"name":"x_lo","type":"7ck","ic":1111111111111111111003}"#;
        let original: Value = serde_json::from_slice(conf).unwrap();
        let l = NetworkConfigList::from_conf_bytes(conf).unwrap();
        assert_eq!(Value::Object(l.plugins[0].raw.clone()), original);
    }
}
