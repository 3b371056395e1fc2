//! The Device Information format (NPWG device-info spec 1.1.0 §3): what a device plugin or a CNI
//! plugin says about the device behind an attachment, carried into network-status as
//! `device-info` (multi-net spec §5.3.7, device-info spec §6). Reading checks what the spec makes
//! required and keeps the keys it does not define ([`DeviceInfo::from_value`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

/// The spec version this crate writes (device-info spec §1).
pub const DEVICE_INFO_VERSION: &str = "1.1.0";

/// §3.1.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeviceType {
    #[serde(rename = "pci")]
    Pci,
    #[serde(rename = "vdpa")]
    Vdpa,
    #[serde(rename = "vhost-user")]
    VhostUser,
    #[serde(rename = "memif")]
    Memif,
}

impl DeviceType {
    /// The key of the type's own map, which is also the `type` value.
    pub fn key(self) -> &'static str {
        match self {
            DeviceType::Pci => "pci",
            DeviceType::Vdpa => "vdpa",
            DeviceType::VhostUser => "vhost-user",
            DeviceType::Memif => "memif",
        }
    }
}

/// §3.1.3. Addresses are kept as written (BDF `dddd:BB:DD.f` by the spec; not enforced, because
/// the spec's own examples do not all follow it and the value is only reported).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PciDevice {
    #[serde(rename = "pci-address")]
    pub pci_address: String,
    #[serde(rename = "vhost-net", default, skip_serializing_if = "Option::is_none")]
    pub vhost_net: Option<String>,
    #[serde(
        rename = "rdma-device",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub rdma_device: Option<String>,
    #[serde(
        rename = "pf-pci-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pf_pci_address: Option<String>,
    #[serde(
        rename = "representor-device",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub representor_device: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// §3.1.4.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VdpaDriver {
    Vhost,
    Virtio,
}

/// §3.1.4.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VdpaDevice {
    #[serde(rename = "parent-device")]
    pub parent_device: String,
    pub driver: VdpaDriver,
    pub path: String,
    #[serde(
        rename = "pci-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pci_address: Option<String>,
    #[serde(
        rename = "pf-pci-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pf_pci_address: Option<String>,
    #[serde(
        rename = "representor-device",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub representor_device: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// §3.1.5.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VhostUserMode {
    Client,
    Server,
}

/// §3.1.5.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VhostUserDevice {
    pub mode: VhostUserMode,
    pub path: String,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// §3.1.6.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemifRole {
    Master,
    Slave,
}

/// §3.1.6.3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemifMode {
    Ethernet,
    Ip,
    InjectPunt,
}

/// §3.1.6.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemifDevice {
    pub role: MemifRole,
    pub path: String,
    pub mode: MemifMode,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A device-info map (§3.1). Serialises in the spec's key order: `type`, `version`, the maps,
/// then any other keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    #[serde(rename = "type")]
    pub device_type: DeviceType,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<PciDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vdpa: Option<VdpaDevice>,
    #[serde(
        rename = "vhost-user",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub vhost_user: Option<VhostUserDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memif: Option<MemifDevice>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A device-info map that does not follow the spec.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DeviceInfoError {
    #[error("invalid device-info: not valid JSON: {0}")]
    Json(String),
    #[error("invalid device-info: {0}")]
    Invalid(String),
}

impl From<DeviceInfoError> for cni::CniError {
    fn from(e: DeviceInfoError) -> Self {
        cni::CniError::new(cni::ErrorCode::InvalidConfig, e.to_string())
    }
}

impl DeviceInfo {
    /// A PCI device-info map of the current version (§4.3's first example).
    pub fn pci(device: PciDevice) -> Self {
        DeviceInfo {
            device_type: DeviceType::Pci,
            version: DEVICE_INFO_VERSION.to_string(),
            pci: Some(device),
            vdpa: None,
            vhost_user: None,
            memif: None,
            extra: BTreeMap::new(),
        }
    }

    /// Reads and checks a device-info map: what the spec makes required, `type` (one of the
    /// four), `version` (`X.Y.Z`), the map for the type, and that map's required keys and
    /// enumerated values. Keys the spec does not define are kept, so a file passes through to
    /// the status unchanged.
    pub fn from_value(v: &Value) -> Result<Self, DeviceInfoError> {
        let Value::Object(m) = v else {
            return Err(DeviceInfoError::Invalid("expected a JSON object".into()));
        };
        // Name the key at fault before serde's own message, which does not say where.
        match m.get("type") {
            None => return Err(DeviceInfoError::Invalid("\"type\" is required".into())),
            Some(Value::String(t))
                if !matches!(t.as_str(), "pci" | "vdpa" | "vhost-user" | "memif") =>
            {
                return Err(DeviceInfoError::Invalid(format!(
                    "\"type\": {t:?} is not one of \"pci\", \"vdpa\", \"vhost-user\", \"memif\""
                )));
            }
            Some(Value::String(_)) => {}
            Some(other) => {
                return Err(DeviceInfoError::Invalid(format!(
                    "\"type\": {other} is not a string"
                )));
            }
        }
        match m.get("version") {
            None => return Err(DeviceInfoError::Invalid("\"version\" is required".into())),
            Some(Value::String(s)) if !is_version(s) => {
                return Err(DeviceInfoError::Invalid(format!(
                    "\"version\": {s:?} is not a version of the form MAJOR.MINOR.PATCH"
                )));
            }
            Some(Value::String(_)) => {}
            Some(other) => {
                return Err(DeviceInfoError::Invalid(format!(
                    "\"version\": {other} is not a string"
                )));
            }
        }
        for key in ["pci", "vdpa", "vhost-user", "memif"] {
            if let Some(sub) = m.get(key).filter(|v| !v.is_null()) {
                check_sub(key, sub)?;
            }
        }
        let info =
            DeviceInfo::deserialize(v).map_err(|e| DeviceInfoError::Invalid(e.to_string()))?;
        // §3.1.3–§3.1.6: the map of the type is "required if type is set to" it.
        let present = match info.device_type {
            DeviceType::Pci => info.pci.is_some(),
            DeviceType::Vdpa => info.vdpa.is_some(),
            DeviceType::VhostUser => info.vhost_user.is_some(),
            DeviceType::Memif => info.memif.is_some(),
        };
        if !present {
            let key = info.device_type.key();
            return Err(DeviceInfoError::Invalid(format!(
                "\"type\" is {key:?} but the {key:?} map is missing"
            )));
        }
        Ok(info)
    }

    /// Reads and checks a device-info file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, DeviceInfoError> {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| DeviceInfoError::Json(e.to_string()))?;
        Self::from_value(&v)
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A type map's own errors, prefixed with its key.
fn check_sub(key: &str, sub: &Value) -> Result<(), DeviceInfoError> {
    let res = match key {
        "pci" => PciDevice::deserialize(sub).map(drop),
        "vdpa" => VdpaDevice::deserialize(sub).map(drop),
        "vhost-user" => VhostUserDevice::deserialize(sub).map(drop),
        _ => MemifDevice::deserialize(sub).map(drop),
    };
    res.map_err(|e| DeviceInfoError::Invalid(format!("{key:?}: {e}")))
}

/// `X.Y.Z` with decimal numbers (§3.1.2).
fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_four_types_read_and_write_back_unchanged() {
        for v in [
            json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:01:02.2", "pf-pci-address": "0000:01:02.0"}}),
            json!({"type": "vdpa", "version": "1.1.0", "vdpa": {"parent-device": "vdpa3", "driver": "vhost", "path": "/dev/vdpa-vhost0"}}),
            json!({"type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": "server", "path": "/var/run/vhost.sock"}}),
            json!({"type": "memif", "version": "1.0.0", "memif": {"role": "master", "path": "/run/memif.sock", "mode": "inject-punt"}}),
            json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:18:0a.2", "vhost-net": "/dev/vhost-net", "rdma-device": "mlx5_0", "representor-device": "eth3", "x.y/z": 1}, "org.example.k": [1]}),
        ] {
            let info = DeviceInfo::from_value(&v).unwrap();
            assert_eq!(info.to_value(), v);
        }
    }

    #[test]
    fn required_keys_and_values_are_checked() {
        let cases = [
            (json!([]), "expected a JSON object"),
            (
                json!({"version": "1.1.0", "pci": {"pci-address": "a"}}),
                "\"type\" is required",
            ),
            (
                json!({"type": "usb", "version": "1.1.0"}),
                "\"type\": \"usb\" is not one of",
            ),
            (
                json!({"type": "pci", "pci": {"pci-address": "a"}}),
                "\"version\" is required",
            ),
            (
                json!({"type": "pci", "version": "1.1", "pci": {"pci-address": "a"}}),
                "MAJOR.MINOR.PATCH",
            ),
            (
                json!({"type": "pci", "version": 1, "pci": {"pci-address": "a"}}),
                "\"version\": 1 is not a string",
            ),
            (
                json!({"type": 5, "version": "1.1.0", "pci": {"pci-address": "a"}}),
                "\"type\": 5 is not a string",
            ),
            (
                json!({"type": null, "version": "1.1.0", "pci": {"pci-address": "a"}}),
                "\"type\": null is not a string",
            ),
            (
                json!({"type": "pci", "version": "1.1.0"}),
                "\"type\" is \"pci\" but the \"pci\" map is missing",
            ),
            (
                json!({"type": "pci", "version": "1.1.0", "pci": {}}),
                "\"pci\": missing field `pci-address`",
            ),
            (
                json!({"type": "vdpa", "version": "1.1.0", "vdpa": {"parent-device": "v", "driver": "dpdk", "path": "/p"}}),
                "\"vdpa\": unknown variant `dpdk`",
            ),
            (
                json!({"type": "vdpa", "version": "1.1.0", "vdpa": {"driver": "vhost", "path": "/p"}}),
                "missing field `parent-device`",
            ),
            (
                json!({"type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": "both", "path": "/p"}}),
                "unknown variant `both`",
            ),
            (
                json!({"type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": "client"}}),
                "missing field `path`",
            ),
            (
                json!({"type": "memif", "version": "1.1.0", "memif": {"role": "leader", "path": "/p", "mode": "ip"}}),
                "\"memif\": unknown variant `leader`",
            ),
            (
                json!({"type": "memif", "version": "1.1.0", "memif": {"role": "slave", "path": "/p"}}),
                "missing field `mode`",
            ),
            (
                json!({"type": "memif", "version": "1.1.0", "memif": {"role": "slave", "path": "/p", "mode": "ip"}, "pci": {}}),
                "\"pci\": missing field",
            ),
        ];
        for (v, needle) in cases {
            let e = DeviceInfo::from_value(&v).unwrap_err();
            assert!(e.to_string().contains(needle), "{v}: {e}");
        }
        assert!(matches!(
            DeviceInfo::parse(b"{"),
            Err(DeviceInfoError::Json(_))
        ));
        let c: cni::CniError = DeviceInfo::parse(b"[]").unwrap_err().into();
        assert_eq!(c.code, 7);
    }

    #[test]
    fn a_new_pci_info_has_the_current_version() {
        let info = DeviceInfo::pci(PciDevice {
            pci_address: "0000:18:02.5".into(),
            ..PciDevice::default()
        });
        assert_eq!(
            info.to_value(),
            json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:18:02.5"}})
        );
    }
}
