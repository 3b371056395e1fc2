//! ADD results of every spec version, and conversion between them (spec §5 "ADD Success"). A
//! [`CniResult`] holds the superset of the three wire layouts in one shape, tagged with its
//! version; converting down drops what the older version cannot carry, as the reference
//! library's converters mostly do, and serialising writes the version's own layout (`wire`).

mod ipnet;
mod wire;

use std::net::IpAddr;

pub use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::error::{CniError, ErrorCode};
use crate::go_json::null_as_default;
use crate::version::Version;

/// An interface created by the attachment (spec §5 "interfaces").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub mac: String,
    /// 1.0.0+.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The netns path for interfaces in the container; empty for host interfaces.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub sandbox: String,
    /// 1.1.0.
    #[serde(
        rename = "socketPath",
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub socket_path: String,
    /// 1.1.0.
    #[serde(
        rename = "pciID",
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub pci_id: String,
}

/// An address assigned by the attachment (spec §5 "ips").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpConfig {
    /// Index into `interfaces`. Absent is not the same as 0: IPAM plugins leave it out.
    pub interface: Option<usize>,
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

/// A gateway as Go's `net.IP` reads it, which libcni and the reference plugins use: absent,
/// `null` or `""` is none (`net.IP.UnmarshalText` takes empty text as no address, and plugins
/// not written in Go write `""` for "no gateway"); anything else must be an address.
pub(crate) fn optional_ip<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<IpAddr>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("invalid IP address {s:?}"))),
    }
}

/// A route created by the attachment (spec §5 "routes"). The fields after `gw` are 1.1.0 ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNet,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_ip"
    )]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u32>,
}

impl Route {
    pub fn new(dst: IpNet, gw: Option<IpAddr>) -> Self {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }

    /// Only `dst` and `gw`: what versions before 1.0.0 carry.
    fn basic(&self) -> Route {
        Route::new(self.dst, self.gw)
    }
}

/// DNS information (spec §5 "dns"), the same in every version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub nameservers: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub domain: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub search: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self == &Dns::default()
    }
}

/// A result of any version, holding only ever what that version can express. There are three
/// wire layouts:
/// - 0.1.0 and 0.2.0: `ip4` and `ip6` objects, each with one address, its gateway and its routes;
/// - 0.3.0, 0.3.1 and 0.4.0: `interfaces`, `ips` (with a `version` of "4" or "6"), `routes`;
/// - 1.0.0 and 1.1.0: the same without `version`, with interface `mtu`, `socketPath`, `pciID`
///   and route `mtu`, `advmss`, `priority`, `table`, `scope` (1.1 added those fields; the
///   reference library uses one layout for both, so 1.0.0 results may carry them too).
///
/// The reference library's 0.3.x/0.4.0 layout shares the route type of 1.x and so keeps a
/// route's `mtu`, `advmss`, `priority`, `table` and `scope`, which those versions do not define:
/// they are dropped here ([`CniResult::convert_to`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniResult {
    pub cni_version: Version,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

impl CniResult {
    /// An empty result of `version`.
    pub fn empty(version: Version) -> Self {
        CniResult {
            cni_version: version,
            interfaces: Vec::new(),
            ips: Vec::new(),
            routes: Vec::new(),
            dns: Dns::default(),
        }
    }

    /// Decodes a result in the layout its own `cniVersion` names. A missing or empty
    /// `cniVersion` takes `default_version` (libcni's fixup: the result is taken to be in the
    /// version the plugin was asked for).
    pub fn parse(bytes: &[u8], default_version: Version) -> Result<Self, CniError> {
        let decode_err = |e: serde_json::Error| {
            CniError::new(
                ErrorCode::DecodingFailure,
                format!("cannot decode CNI result: {e}"),
            )
        };
        let raw: serde_json::Value = serde_json::from_slice(bytes).map_err(decode_err)?;
        Self::from_value(raw, default_version)
    }

    /// As [`CniResult::parse`], from an already decoded JSON value (e.g. a `prevResult`).
    pub fn from_value(raw: serde_json::Value, default_version: Version) -> Result<Self, CniError> {
        let decode_err = |e: serde_json::Error| {
            CniError::new(
                ErrorCode::DecodingFailure,
                format!("cannot decode CNI result: {e}"),
            )
        };
        if !raw.is_object() {
            return Err(CniError::new(
                ErrorCode::DecodingFailure,
                "cannot decode CNI result: not a JSON object",
            ));
        }
        let version = match raw.get("cniVersion") {
            None | Some(serde_json::Value::Null) => default_version,
            Some(serde_json::Value::String(s)) if s.is_empty() => default_version,
            Some(serde_json::Value::String(s)) => Version::parse(s)?,
            Some(_) => {
                return Err(CniError::new(
                    ErrorCode::DecodingFailure,
                    "cannot decode CNI result: cniVersion is not a string",
                ));
            }
        };
        version.require_supported()?;
        let mut result = if version < Version::V0_3_0 {
            serde_json::from_value::<wire::Result020>(raw)
                .map_err(decode_err)?
                .into_canonical()
        } else if version < Version::V1_0_0 {
            serde_json::from_value::<wire::Result040>(raw)
                .map_err(decode_err)?
                .into_canonical()
        } else {
            serde_json::from_value::<wire::Result100>(raw)
                .map_err(decode_err)?
                .into_canonical()
        };
        result.cni_version = version;
        Ok(result)
    }

    /// The result in `target`'s version, dropping what `target` cannot express. Going down to
    /// 0.1.0/0.2.0 needs at least one address ("no valid IP addresses" otherwise).
    pub fn convert_to(&self, target: Version) -> Result<CniResult, CniError> {
        target.require_supported()?;
        let mut out = self.clone();
        out.cni_version = target;
        if target < Version::V1_0_0 {
            for i in &mut out.interfaces {
                i.mtu = None;
                i.socket_path.clear();
                i.pci_id.clear();
            }
            out.routes = out.routes.iter().map(Route::basic).collect();
        }
        if target < Version::V0_3_0 {
            out.reduce_to_020(self.cni_version)?;
        }
        Ok(out)
    }

    /// 0.1.0/0.2.0 carry one address per family, no interfaces, and only routes of a family
    /// that has an address. Unlike the reference conversion, the first address *of each
    /// family* is kept (libcni's check files a second IPv4 address as `ip6`).
    fn reduce_to_020(&mut self, from: Version) -> Result<(), CniError> {
        let first = |v4: bool| {
            self.ips
                .iter()
                .find(|ip| ip.address.is_ipv4() == v4)
                .map(|ip| IpConfig {
                    interface: None,
                    address: ip.address,
                    gateway: ip.gateway,
                })
        };
        let ips: Vec<IpConfig> = [first(true), first(false)].into_iter().flatten().collect();
        if ips.is_empty() {
            return Err(CniError::new(
                ErrorCode::IncompatibleVersion,
                format!(
                    "cannot convert result from {} to {}: no valid IP addresses",
                    from, self.cni_version
                ),
            ));
        }
        let has = |v4: bool| ips.iter().any(|ip| ip.address.is_ipv4() == v4);
        let (v4, v6): (Vec<Route>, Vec<Route>) =
            self.routes.drain(..).partition(|r| r.dst.is_ipv4());
        self.routes = v4
            .into_iter()
            .filter(|_| has(true))
            .chain(v6.into_iter().filter(|_| has(false)))
            .collect();
        self.ips = ips;
        self.interfaces.clear();
        Ok(())
    }

    /// The result as JSON in its version's layout. Fails only for a 0.1.0/0.2.0 result with no
    /// address, which that layout cannot express.
    pub fn to_value(&self) -> Result<serde_json::Value, CniError> {
        let v = self.convert_to(self.cni_version)?;
        let json = if v.cni_version < Version::V0_3_0 {
            serde_json::to_value(wire::Result020::from_canonical(&v))
        } else if v.cni_version < Version::V1_0_0 {
            serde_json::to_value(wire::Result040::from_canonical(&v))
        } else {
            serde_json::to_value(wire::Result100::from_canonical(&v))
        };
        json.map_err(|e| CniError::new(ErrorCode::Internal, format!("cannot encode result: {e}")))
    }

    pub fn to_json(&self) -> Result<String, CniError> {
        Ok(self.to_value()?.to_string())
    }

    /// Indented JSON, as the reference tools print results.
    pub fn to_json_pretty(&self) -> Result<String, CniError> {
        serde_json::to_string_pretty(&self.to_value()?)
            .map_err(|e| CniError::new(ErrorCode::Internal, format!("cannot encode result: {e}")))
    }
}

#[cfg(test)]
mod tests;
