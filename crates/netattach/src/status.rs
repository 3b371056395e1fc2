//! The network attachment status annotation `k8s.v1.cni.cncf.io/network-status` (multi-net spec
//! §5): building one entry from an attachment's CNI result (§5.1.1, §5.3), writing the
//! annotation, and reading one back (for DEL and tooling).

use std::collections::BTreeMap;
use std::net::IpAddr;

use cni::result::IpConfig;
use cni::{CniResult, Version};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::device_info::DeviceInfo;

/// The annotation's name (§5).
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// `dns` of a status entry (§5.3.6): only the keys the spec defines are built; others read
/// are kept in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusDns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One entry of the annotation (§5.3). Values read back are kept as written (other
/// implementations write addresses with prefix lengths, for instance).
///
/// Keys are written in the order of the spec's examples (§5.4): `name`, `interface`, `ips`,
/// `mac`, `default-route`, `default`, `dns`, `device-info`; keys read but not defined here
/// follow, sorted. `default` is always written, as a "required key" (§5.3.5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkStatus {
    /// §5.3.1: `namespace/name` of the NAD, or the cluster-wide default network's name.
    pub name: String,
    /// §5.3.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// §5.3.3. `null` (another writer's "none") reads as none, as for every list and flag
    /// here: one such entry must not make the whole annotation unreadable.
    #[serde(
        default,
        deserialize_with = "cni::go_json::null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ips: Vec<String>,
    /// §5.3.4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// §5.3.6.4: only for an attachment whose element had `default-route`.
    #[serde(
        rename = "default-route",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub default_route: Option<Vec<String>>,
    /// §5.3.5.
    #[serde(default, deserialize_with = "cni::go_json::null_as_default")]
    pub default: bool,
    /// §5.3.6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<StatusDns>,
    /// §5.3.7: a device-info map (device-info spec §6.1).
    #[serde(
        rename = "device-info",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub device_info: Option<StatusDeviceInfo>,
    /// Keys not defined above, as read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `device-info` of an entry: a map in the device-info format, or, when read from an annotation
/// some other writer made, whatever JSON it held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatusDeviceInfo {
    Known(Box<DeviceInfo>),
    Other(Value),
}

/// An annotation value that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum StatusError {
    #[error("invalid \"{NETWORK_STATUS_ANNOTATION}\" annotation: {0}")]
    Malformed(String),
    #[error("invalid \"{NETWORK_STATUS_ANNOTATION}\" annotation: entry {position}: {reason}")]
    Entry { position: usize, reason: String },
}

impl From<StatusError> for cni::CniError {
    fn from(e: StatusError) -> Self {
        cni::CniError::new(cni::ErrorCode::InvalidConfig, e.to_string())
    }
}

/// What one attachment's entry is built from.
#[derive(Clone, Copy, Debug)]
pub struct StatusInput<'a> {
    /// The entry's `name`: `namespace/name` for a NAD (§5.3.1).
    pub name: &'a str,
    /// The result of ADD (or GET); `None` when the plugin returned none, which still gives a
    /// minimal entry (§5.1.1).
    pub result: Option<&'a CniResult>,
    /// The `CNI_IFNAME` used: the `interface` of a pre-0.3.0 result (§5.3.2.1).
    pub ifname: &'a str,
    /// Whether this is the cluster-wide default network (§5.2).
    pub is_default: bool,
    /// `Some` when the element had `default-route` (§5.3.6.4), with its gateways. An empty list
    /// reports the result's own default gateways instead.
    pub default_route: Option<&'a [IpAddr]>,
    /// The attachment's device information (§5.3.7).
    pub device_info: Option<&'a DeviceInfo>,
}

/// Builds the status entry of one attachment (§5.1.1, §5.3).
///
/// `interface` and `mac` come from the first interface with a sandbox; `ips` from the result's
/// addresses whose `interface` index points at it, or, when no interface has a sandbox, from
/// those with no index (which is how 0.1.0/0.2.0 `ip4`/`ip6` are held). Addresses are written
/// without their prefix length, as Multus does (§5.3.3 "addresses").
pub fn build(input: &StatusInput<'_>) -> NetworkStatus {
    let mut entry = NetworkStatus {
        name: input.name.to_string(),
        default: input.is_default,
        device_info: input
            .device_info
            .map(|d| StatusDeviceInfo::Known(Box::new(d.clone()))),
        ..NetworkStatus::default()
    };
    let selected: Vec<&IpConfig> = match input.result {
        None => Vec::new(),
        Some(r) => {
            let sandbox = r.interfaces.iter().position(|i| !i.sandbox.is_empty());
            if let Some(idx) = sandbox {
                if let Some(iface) = r.interfaces.get(idx) {
                    // A nameless sandbox interface is the one CNI_IFNAME named; `mac` only
                    // with an `interface` (§5.3.4: "if mac is present, interface must also be").
                    entry.interface = non_empty(&iface.name).or_else(|| non_empty(input.ifname));
                    if entry.interface.is_some() {
                        entry.mac = non_empty(&iface.mac);
                    }
                }
            } else if r.cni_version < Version::V0_3_0 {
                // §5.3.2.1: "may populate the field from the CNI_IFNAME environment variable".
                entry.interface = non_empty(input.ifname);
            }
            let selected: Vec<&IpConfig> =
                r.ips.iter().filter(|ip| ip.interface == sandbox).collect();
            entry.ips = selected
                .iter()
                .map(|ip| ip.address.addr.to_string())
                .collect();
            let dns = StatusDns {
                nameservers: r.dns.nameservers.clone(),
                domain: non_empty(&r.dns.domain),
                search: r.dns.search.clone(),
                extra: BTreeMap::new(),
            };
            if dns != StatusDns::default() {
                entry.dns = Some(dns);
            }
            selected
        }
    };
    if let Some(requested) = input.default_route {
        let gateways: Vec<IpAddr> = if requested.is_empty() {
            input
                .result
                .map(|r| default_gateways(r, &selected))
                .unwrap_or_default()
        } else {
            requested.to_vec()
        };
        entry.default_route = Some(gateways.iter().map(IpAddr::to_string).collect());
    }
    entry
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The gateways of the result's default routes (`0.0.0.0/0`, `::/0`), in order and without
/// repeats. A default route with no `gw` goes through the gateway of the attachment's first
/// address of its family (CNI spec: "if omitted, a default gateway is assumed").
pub fn default_gateways(result: &CniResult, ips: &[&IpConfig]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for route in result.routes.iter().filter(|r| r.dst.prefix == 0) {
        let gw = route.gw.or_else(|| {
            ips.iter()
                .filter(|ip| ip.address.is_ipv4() == route.dst.is_ipv4())
                .find_map(|ip| ip.gateway)
        });
        if let Some(gw) = gw
            && !out.contains(&gw)
        {
            out.push(gw);
        }
    }
    out
}

/// The annotation's value for `entries`, laid out as Multus writes it (each entry indented by
/// four spaces, entries joined by commas), so tools that diff it see no change.
pub fn to_annotation(entries: &[NetworkStatus]) -> String {
    let mut out = String::from("[");
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        // Serialising these types into memory cannot fail: every key is a string.
        if entry.serialize(&mut ser).is_ok() {
            out.push_str(&String::from_utf8_lossy(&buf));
        }
    }
    out.push(']');
    out
}

/// Reads an annotation value; an empty value has no entries. Unknown keys are kept.
pub fn parse(value: &str) -> Result<Vec<NetworkStatus>, StatusError> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let parsed: Value = serde_json::from_str(value)
        .map_err(|e| StatusError::Malformed(format!("not valid JSON: {e}")))?;
    let Value::Array(list) = parsed else {
        return Err(StatusError::Malformed("expected a JSON list".into()));
    };
    list.into_iter()
        .enumerate()
        .map(|(i, v)| {
            NetworkStatus::deserialize(v).map_err(|e| StatusError::Entry {
                position: i + 1,
                reason: e.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
