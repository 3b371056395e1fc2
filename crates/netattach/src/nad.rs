//! The NetworkAttachmentDefinition object (multi-net spec §3) and getting the CNI configuration out
//! of it (§3.4.1, §3.4.2).
//!
//! The type implements kube's `Resource`, so `kube::Api::<NetworkAttachmentDefinition>::namespaced`
//! works in the crates that have a client; this crate itself only has the types.

use std::borrow::Cow;

use cni::NetworkConfigList;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::Resource;
use kube_core::object::HasSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

use crate::names::{self, NameError};

/// API group of the NPWG objects (multi-net spec §3.1, §8.1).
pub const GROUP: &str = "k8s.cni.cncf.io";
/// The NAD's version (§3.1).
pub const NAD_VERSION: &str = "v1";
pub const NAD_KIND: &str = "NetworkAttachmentDefinition";
pub const NAD_PLURAL: &str = "network-attachment-definitions";
/// The NAD annotation naming the device-plugin resource whose device an attachment takes
/// (device-info spec §4.1; Multus `k8s.v1.cni.cncf.io/resourceName`).
pub const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";

/// `NetworkAttachmentDefinitionSpec` (multi-net spec §3.2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinitionSpec {
    /// A JSON-encoded CNI configuration or configuration list. Absent or empty: the
    /// implementation-known network named like the object (§3.2, §3.4.1 second and third rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

/// A NetworkAttachmentDefinition (multi-net spec §3.2). `spec` may be absent (§3.2.4).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct NetworkAttachmentDefinition {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NetworkAttachmentDefinitionSpec,
}

/// Where an attachment's CNI configuration comes from (multi-net spec §3.4.1).
#[derive(Clone, Debug, PartialEq)]
pub enum NadConfig {
    /// From `spec.config`, with `name` injected when it was absent (§3.4.2).
    Inline(NetworkConfigList),
    /// No `spec.config`: a `.conflist` or `.conf` file on disk whose `name` is this one (§3.4.1
    /// rules 2 and 3; finding the file is the caller's job). No such file fails the request.
    OnDisk { name: String },
}

/// A NAD whose configuration cannot be used. Every variant names the NAD (`namespace/name`).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum NadError {
    #[error("NetworkAttachmentDefinition has no metadata.name")]
    MissingName,
    #[error("NetworkAttachmentDefinition {nad}: {source}")]
    InvalidName { nad: String, source: NameError },
    #[error("NetworkAttachmentDefinition {nad}: spec.config is not valid JSON: {reason}")]
    InvalidJson { nad: String, reason: String },
    #[error("NetworkAttachmentDefinition {nad}: spec.config is not a JSON object")]
    NotAnObject { nad: String },
    #[error("NetworkAttachmentDefinition {nad}: invalid CNI configuration in spec.config: {msg}")]
    InvalidConfig { nad: String, msg: String },
}

impl From<NadError> for cni::CniError {
    fn from(e: NadError) -> Self {
        cni::CniError::new(cni::ErrorCode::InvalidConfig, e.to_string())
    }
}

impl NetworkAttachmentDefinition {
    pub fn new(namespace: &str, name: &str, config: Option<String>) -> Self {
        NetworkAttachmentDefinition {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            spec: NetworkAttachmentDefinitionSpec { config },
        }
    }

    /// `metadata.name`, or "" when absent.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// `namespace/name` (or just the name when the object carries no namespace), for messages.
    pub fn qualified_name(&self) -> String {
        match self.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{}", self.name()),
            _ => self.name().to_string(),
        }
    }

    /// The `k8s.v1.cni.cncf.io/resourceName` annotation, when set and not empty.
    pub fn resource_name(&self) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RESOURCE_NAME_ANNOTATION))
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// Checks the object's name (multi-net spec §3.3: [`names::nad_name_problem`]) and its
    /// namespace (a DNS-1123 label).
    pub fn validate_name(&self) -> Result<(), NadError> {
        let name = self.metadata.name.as_deref().ok_or(NadError::MissingName)?;
        let nad = self.qualified_name();
        names::validate_nad_name(name).map_err(|source| NadError::InvalidName {
            nad: nad.clone(),
            source,
        })?;
        if let Some(ns) = self.metadata.namespace.as_deref() {
            names::validate_label(ns).map_err(|source| NadError::InvalidName { nad, source })?;
        }
        Ok(())
    }

    /// The CNI configuration this NAD selects (multi-net spec §3.4.1, §3.4.2).
    pub fn cni_config(&self) -> Result<NadConfig, NadError> {
        let name = self.metadata.name.as_deref().ok_or(NadError::MissingName)?;
        match self.spec.config.as_deref() {
            // Go's `omitempty` string: an empty config is no config (§3.4.1 falls through to the
            // on-disk rules), which is also how Multus reads it.
            None | Some("") => Ok(NadConfig::OnDisk {
                name: name.to_string(),
            }),
            Some(config) => {
                parse_config(&self.qualified_name(), name, config).map(NadConfig::Inline)
            }
        }
    }
}

/// Parses `spec.config` of the NAD called `nad_name` (used for `name` injection); `nad_label` is
/// how errors name it (normally `namespace/name`). A single configuration becomes a one-plugin
/// list; a configuration without a `name` (or with an empty one) gets `nad_name` (§3.4.2).
pub fn parse_config(
    nad_label: &str,
    nad_name: &str,
    config: &str,
) -> Result<NetworkConfigList, NadError> {
    let nad = || nad_label.to_string();
    let value: Value = serde_json::from_str(config).map_err(|e| NadError::InvalidJson {
        nad: nad(),
        reason: e.to_string(),
    })?;
    let Value::Object(mut raw) = value else {
        return Err(NadError::NotAnObject { nad: nad() });
    };
    let injected = inject_name(&mut raw, nad_name);
    let is_list = raw.contains_key("plugins");
    let bytes: Cow<'_, [u8]> = if injected {
        Cow::Owned(
            serde_json::to_vec(&Value::Object(raw)).map_err(|e| NadError::InvalidJson {
                nad: nad(),
                reason: e.to_string(),
            })?,
        )
    } else {
        Cow::Borrowed(config.as_bytes())
    };
    let parsed = if is_list {
        NetworkConfigList::from_bytes(&bytes)
    } else {
        NetworkConfigList::from_conf_bytes(&bytes)
    };
    let list = parsed.map_err(|e| NadError::InvalidConfig {
        nad: nad(),
        msg: e.msg,
    })?;
    // A conflist may leave its plugins to a sibling directory on disk; a NAD has no directory.
    if list.plugins.is_empty() {
        return Err(NadError::InvalidConfig {
            nad: nad(),
            msg: "the configuration list has no plugins".into(),
        });
    }
    Ok(list)
}

/// §3.4.2: `name` is added when the configuration omits it. An empty or null `name` counts as
/// omitted too: a network needs a name, and §3.4.2 gives it the NAD's. Returns whether it
/// injected.
fn inject_name(raw: &mut Map<String, Value>, nad_name: &str) -> bool {
    let missing = match raw.get("name") {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    };
    if missing {
        raw.insert("name".into(), Value::String(nad_name.to_string()));
    }
    missing
}

impl Serialize for NetworkAttachmentDefinition {
    /// Writes `apiVersion` and `kind` too, as the API server expects in a request body.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("NetworkAttachmentDefinition", 4)?;
        st.serialize_field("apiVersion", &format!("{GROUP}/{NAD_VERSION}"))?;
        st.serialize_field("kind", NAD_KIND)?;
        st.serialize_field("metadata", &self.metadata)?;
        st.serialize_field("spec", &self.spec)?;
        st.end()
    }
}

impl Resource for NetworkAttachmentDefinition {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(NAD_KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(NAD_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(NAD_PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl HasSpec for NetworkAttachmentDefinition {
    type Spec = NetworkAttachmentDefinitionSpec;
    fn spec(&self) -> &Self::Spec {
        &self.spec
    }
    fn spec_mut(&mut self) -> &mut Self::Spec {
        &mut self.spec
    }
}

#[cfg(test)]
mod tests {
    use cni::Version;
    use serde_json::json;

    use super::*;

    fn nad(config: &str) -> NetworkAttachmentDefinition {
        NetworkAttachmentDefinition::new("ns1", "a-bridge-network", Some(config.to_string()))
    }

    fn inline(n: &NetworkAttachmentDefinition) -> NetworkConfigList {
        match n.cni_config().unwrap() {
            NadConfig::Inline(l) => l,
            other => panic!("expected an inline config, got {other:?}"),
        }
    }

    #[test]
    fn a_named_single_config_is_kept_as_written() {
        let cfg =
            r#"{"cniVersion":"0.3.0","name":"a-bridge-network","type":"bridge","bridge":"br0"}"#;
        let l = inline(&nad(cfg));
        assert_eq!(l.name, "a-bridge-network");
        assert_eq!(l.cni_version, Version::V0_3_0);
        assert_eq!(l.plugins.len(), 1);
        assert_eq!(l.plugins[0].raw["bridge"], json!("br0"));
    }

    #[test]
    fn a_missing_empty_or_null_name_is_injected() {
        for cfg in [
            r#"{"cniVersion":"0.3.0","type":"awesome-plugin"}"#,
            r#"{"cniVersion":"0.3.0","name":"","type":"awesome-plugin"}"#,
            r#"{"cniVersion":"0.3.0","name":null,"type":"awesome-plugin"}"#,
        ] {
            let l = inline(&nad(cfg));
            assert_eq!(l.name, "a-bridge-network", "{cfg}");
            // The plugin's own object carries the name too (§3.4.2.1's expected JSON).
            assert_eq!(l.plugins[0].raw["name"], json!("a-bridge-network"));
        }
        let list = r#"{"cniVersion":"1.0.0","plugins":[{"type":"bridge"},{"type":"tuning"}]}"#;
        let l = inline(&nad(list));
        assert_eq!(l.name, "a-bridge-network");
        assert_eq!(l.plugins.len(), 2);
        let bytes: Value = serde_json::from_slice(&l.bytes).unwrap();
        assert_eq!(bytes["name"], json!("a-bridge-network"));
    }

    #[test]
    fn absent_or_empty_config_points_at_a_file_on_disk() {
        let mut n = nad("");
        assert_eq!(
            n.cni_config().unwrap(),
            NadConfig::OnDisk {
                name: "a-bridge-network".into()
            }
        );
        n.spec.config = None;
        assert!(matches!(n.cni_config().unwrap(), NadConfig::OnDisk { .. }));
    }

    #[test]
    fn errors_name_the_nad_and_the_problem() {
        let cases = [
            ("{", "ns1/a-bridge-network: spec.config is not valid JSON"),
            (
                "[1]",
                "ns1/a-bridge-network: spec.config is not a JSON object",
            ),
            (
                r#"{"cniVersion":"0.3.0","bridge":"br0"}"#,
                "ns1/a-bridge-network: invalid CNI configuration in spec.config: missing plugin type",
            ),
            (
                r#"{"cniVersion":"1.0.0","plugins":[{"type":"bridge"},{"x":1}]}"#,
                "plugin 1: missing plugin type",
            ),
            (
                r#"{"cniVersion":"1.0.0","plugins":[]}"#,
                "ns1/a-bridge-network: invalid CNI configuration",
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"x","plugins":null}"#,
                "\"plugins\"",
            ),
            (r#"{"name":5,"type":"x"}"#, "name"),
        ];
        for (cfg, needle) in cases {
            let e = nad(cfg).cni_config().unwrap_err();
            assert!(e.to_string().contains(needle), "{cfg}: {e}");
            let c: cni::CniError = e.into();
            assert_eq!(c.code, 7);
            assert!(c.msg.contains("a-bridge-network"), "{c}");
        }
        let no_name = NetworkAttachmentDefinition::default();
        assert_eq!(no_name.cni_config().unwrap_err(), NadError::MissingName);
    }

    #[test]
    fn names_must_be_labels() {
        assert!(nad("").validate_name().is_ok());
        let bad = NetworkAttachmentDefinition::new("ns1", "Bad_Name", None);
        let e = bad.validate_name().unwrap_err();
        assert!(
            e.to_string()
                .contains("\"Bad_Name\" is not a valid DNS-1123 label"),
            "{e}"
        );
    }

    #[test]
    fn resource_name_comes_from_the_annotation() {
        let mut n = nad("");
        assert_eq!(n.resource_name(), None);
        n.metadata.annotations = Some(
            [(
                RESOURCE_NAME_ANNOTATION.to_string(),
                "intel.com/sriov".to_string(),
            )]
            .into(),
        );
        assert_eq!(n.resource_name(), Some("intel.com/sriov"));
    }

    #[test]
    fn serialises_with_type_meta_and_reads_objects_without_spec() {
        let n = NetworkAttachmentDefinition::new("ns1", "x", Some("{}".into()));
        let v = serde_json::to_value(&n).unwrap();
        assert_eq!(v["apiVersion"], json!("k8s.cni.cncf.io/v1"));
        assert_eq!(v["kind"], json!("NetworkAttachmentDefinition"));
        assert_eq!(v["spec"]["config"], json!("{}"));
        let back: NetworkAttachmentDefinition = serde_json::from_value(v).unwrap();
        assert_eq!(back, n);
        let bare: NetworkAttachmentDefinition = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "a-bridge-network"}
        }))
        .unwrap();
        assert_eq!(bare.spec.config, None);
        assert_eq!(
            NetworkAttachmentDefinition::url_path(&(), Some("ns1")),
            "/apis/k8s.cni.cncf.io/v1/namespaces/ns1/network-attachment-definitions"
        );
    }
}
