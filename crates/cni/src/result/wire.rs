//! The three JSON layouts of a result, used only to (de)serialise [`CniResult`].

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{CniResult, Dns, Interface, IpConfig, IpNet, Route, optional_ip};
use crate::go_json::null_as_default;
use crate::version::Version;

fn dns_is_empty(d: &Dns) -> bool {
    d.is_empty()
}

/// An `ips[].interface` index. Go's reference types hold it as a signed `*int`, and a negative
/// index means "no interface" (multi-net spec §5.3.3.1), so plugins that write -1 are read
/// rather than refused.
fn interface_index<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    Ok(Option::<i64>::deserialize(d)?.and_then(|i| usize::try_from(i).ok()))
}

/// 0.1.0 and 0.2.0.
#[derive(Serialize, Deserialize)]
pub(super) struct Result020 {
    #[serde(rename = "cniVersion", default, deserialize_with = "null_as_default")]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<IpConfig020>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<IpConfig020>,
    #[serde(
        default,
        skip_serializing_if = "dns_is_empty",
        deserialize_with = "null_as_default"
    )]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct IpConfig020 {
    ip: IpNet,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_ip"
    )]
    gateway: Option<IpAddr>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<Route020>,
}

#[derive(Serialize, Deserialize)]
struct Route020 {
    dst: IpNet,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_ip"
    )]
    gw: Option<IpAddr>,
}

impl Result020 {
    pub(super) fn into_canonical(self) -> CniResult {
        let mut r = CniResult::empty(Version::V0_2_0);
        for ipc in [self.ip4, self.ip6].into_iter().flatten() {
            r.ips.push(IpConfig {
                interface: None,
                address: ipc.ip,
                gateway: ipc.gateway,
            });
            r.routes
                .extend(ipc.routes.into_iter().map(|rt| Route::new(rt.dst, rt.gw)));
        }
        r.dns = self.dns;
        r
    }

    /// `r` must already be reduced to 0.2.0's content (one address per family).
    pub(super) fn from_canonical(r: &CniResult) -> Self {
        let pick = |v4: bool| {
            r.ips
                .iter()
                .find(|ip| ip.address.is_ipv4() == v4)
                .map(|ip| IpConfig020 {
                    ip: ip.address,
                    gateway: ip.gateway,
                    routes: r
                        .routes
                        .iter()
                        .filter(|rt| rt.dst.is_ipv4() == v4)
                        .map(|rt| Route020 {
                            dst: rt.dst,
                            gw: rt.gw,
                        })
                        .collect(),
                })
        };
        Result020 {
            cni_version: r.cni_version.to_string(),
            ip4: pick(true),
            ip6: pick(false),
            dns: r.dns.clone(),
        }
    }
}

/// 0.3.0, 0.3.1 and 0.4.0.
#[derive(Serialize, Deserialize)]
pub(super) struct Result040 {
    #[serde(rename = "cniVersion", default, deserialize_with = "null_as_default")]
    cni_version: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    interfaces: Vec<Interface040>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    ips: Vec<IpConfig040>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<Route020>,
    #[serde(
        default,
        skip_serializing_if = "dns_is_empty",
        deserialize_with = "null_as_default"
    )]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct Interface040 {
    name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    mac: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    sandbox: String,
}

#[derive(Serialize, Deserialize)]
struct IpConfig040 {
    /// "4" or "6". Derived from the address when writing; ignored when reading, because the
    /// address itself says which family it is.
    #[serde(default, deserialize_with = "null_as_default")]
    version: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "interface_index"
    )]
    interface: Option<usize>,
    address: IpNet,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_ip"
    )]
    gateway: Option<IpAddr>,
}

impl Result040 {
    pub(super) fn into_canonical(self) -> CniResult {
        CniResult {
            cni_version: Version::V0_4_0,
            interfaces: self
                .interfaces
                .into_iter()
                .map(|i| Interface {
                    name: i.name,
                    mac: i.mac,
                    sandbox: i.sandbox,
                    ..Interface::default()
                })
                .collect(),
            ips: self
                .ips
                .into_iter()
                .map(|ip| IpConfig {
                    interface: ip.interface,
                    address: ip.address,
                    gateway: ip.gateway,
                })
                .collect(),
            routes: self
                .routes
                .into_iter()
                .map(|rt| Route::new(rt.dst, rt.gw))
                .collect(),
            dns: self.dns,
        }
    }

    pub(super) fn from_canonical(r: &CniResult) -> Self {
        Result040 {
            cni_version: r.cni_version.to_string(),
            interfaces: r
                .interfaces
                .iter()
                .map(|i| Interface040 {
                    name: i.name.clone(),
                    mac: i.mac.clone(),
                    sandbox: i.sandbox.clone(),
                })
                .collect(),
            ips: r
                .ips
                .iter()
                .map(|ip| IpConfig040 {
                    version: if ip.address.is_ipv4() { "4" } else { "6" }.to_string(),
                    interface: ip.interface,
                    address: ip.address,
                    gateway: ip.gateway,
                })
                .collect(),
            routes: r
                .routes
                .iter()
                .map(|rt| Route020 {
                    dst: rt.dst,
                    gw: rt.gw,
                })
                .collect(),
            dns: r.dns.clone(),
        }
    }
}

/// 1.0.0 and 1.1.0.
#[derive(Serialize, Deserialize)]
pub(super) struct Result100 {
    #[serde(rename = "cniVersion", default, deserialize_with = "null_as_default")]
    cni_version: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    interfaces: Vec<Interface>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    ips: Vec<IpConfig100>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<Route>,
    #[serde(
        default,
        skip_serializing_if = "dns_is_empty",
        deserialize_with = "null_as_default"
    )]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct IpConfig100 {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "interface_index"
    )]
    interface: Option<usize>,
    address: IpNet,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_ip"
    )]
    gateway: Option<IpAddr>,
}

impl Result100 {
    pub(super) fn into_canonical(self) -> CniResult {
        CniResult {
            cni_version: Version::V1_0_0,
            interfaces: self.interfaces,
            ips: self
                .ips
                .into_iter()
                .map(|ip| IpConfig {
                    interface: ip.interface,
                    address: ip.address,
                    gateway: ip.gateway,
                })
                .collect(),
            routes: self.routes,
            dns: self.dns,
        }
    }

    pub(super) fn from_canonical(r: &CniResult) -> Self {
        Result100 {
            cni_version: r.cni_version.to_string(),
            interfaces: r.interfaces.clone(),
            ips: r
                .ips
                .iter()
                .map(|ip| IpConfig100 {
                    interface: ip.interface,
                    address: ip.address,
                    gateway: ip.gateway,
                })
                .collect(),
            routes: r.routes.clone(),
            dns: r.dns.clone(),
        }
    }
}
