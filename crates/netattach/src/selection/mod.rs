//! The network attachment selection annotation `k8s.v1.cni.cncf.io/networks` (multi-net spec §4).
//! Both formats are read into the same [`NetworkSelectionElement`]s: the comma-delimited one
//! ([`comma`], §4.1.1, with Multus's `name@ifname`) and the JSON list ([`json`], §4.1.2). Every
//! rule of §4.1.2.1 is checked ([`validate`]); a violation is one [`SelectionError`] naming the
//! element (position and name), the key and the reason.

pub mod comma;
pub mod json;
pub mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

pub use self::validate::{
    Bandwidth, HwAddr, InfinibandGuid, IpRequest, MacAddress, PortMapping, Protocol,
};
use crate::names::NetworkRef;

/// The annotation's name (§4.1).
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

/// One network attachment request (§4.1.2.1). Optional list keys are empty when absent (the spec
/// forbids them empty), except `default-route`, where an empty list is allowed and differs from
/// absence (§4.1.2.1.9).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NetworkSelectionElement {
    /// §4.1.2.1.1: the NAD's name, a DNS-1123 label.
    pub name: String,
    /// §4.1.2.1.2: the NAD's namespace; `None` (absent or empty) means the pod's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// §4.1.2.1.3.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpRequest>,
    /// §4.1.2.1.4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddress>,
    /// §4.1.2.1.5 (also from Multus's `name@ifname` and `interfaceRequest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// §4.1.2.1.6.
    #[serde(rename = "cni-args", skip_serializing_if = "Option::is_none")]
    pub cni_args: Option<Map<String, Value>>,
    /// §4.1.2.1.7.
    #[serde(rename = "portMappings", skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<PortMapping>,
    /// §4.1.2.1.8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// §4.1.2.1.9: the gateways for the pod's default route.
    #[serde(rename = "default-route", skip_serializing_if = "Option::is_none")]
    pub default_route: Option<Vec<IpAddr>>,
    /// §4.1.2.1.10.
    #[serde(rename = "infiniband-guid", skip_serializing_if = "Option::is_none")]
    pub infiniband_guid: Option<InfinibandGuid>,
    /// §4.1.2.1.11: the name of an IPAMClaim in the pod's namespace.
    #[serde(
        rename = "ipam-claim-reference",
        skip_serializing_if = "Option::is_none"
    )]
    pub ipam_claim_reference: Option<String>,
    /// Multus's `deviceID`: a device for the delegate (passed as `runtimeConfig.deviceID`).
    #[serde(rename = "deviceID", skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// Every other key, kept as written: extension keys in reverse-domain notation (§4.1.2.1)
    /// and keys this version does not know (see [`NetworkSelectionElement::unknown_keys`]).
    /// Never one of the keys above (the parser puts those in their fields).
    #[serde(flatten)]
    pub extensions: BTreeMap<String, Value>,
}

impl NetworkSelectionElement {
    /// An element selecting `name` with nothing else requested.
    pub fn named(name: impl Into<String>) -> Self {
        NetworkSelectionElement {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The NAD this element selects, its namespace defaulting to the pod's (§4.1.2.1.2).
    pub fn network_ref(&self, pod_namespace: &str) -> NetworkRef {
        NetworkRef::new(
            self.namespace.as_deref().unwrap_or(pod_namespace),
            self.name.clone(),
        )
    }

    /// Kept keys without a period: reserved by the spec (§4.1.2.1) and unknown to this version.
    /// They are tolerated, as Multus ignores them; a caller may warn about them.
    pub fn unknown_keys(&self) -> impl Iterator<Item = &str> {
        self.extensions
            .keys()
            .map(String::as_str)
            .filter(|k| !k.contains('.'))
    }

    /// Reads one JSON element as the element at `position` (1-based) of an annotation. Checks
    /// only this element's own rules; [`parse`] checks those across elements too.
    pub fn from_value(position: usize, value: &Value) -> Result<Self, SelectionError> {
        json::element(position, value)
    }
}

impl<'de> Deserialize<'de> for NetworkSelectionElement {
    /// Through the same checks as the annotation, so a stored element is valid when read back.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        json::element(1, &v).map_err(serde::de::Error::custom)
    }
}

/// Where in the annotation a problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// 1-based position in the list.
    pub position: usize,
    /// The element's `name`, when it could be read.
    pub name: Option<String>,
    /// The key at fault, when one is.
    pub key: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "element {}", self.position)?;
        if let Some(name) = &self.name {
            write!(f, " ({})", cni::quote::quoted(name))?;
        }
        if let Some(key) = &self.key {
            write!(f, ", key {key:?}")?;
        }
        Ok(())
    }
}

/// An invalid selection annotation. The message starts with the annotation's name, then says
/// where (element position and name, key) and why.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SelectionError {
    /// The value as a whole cannot be read (not JSON, not a list).
    #[error("invalid \"{NETWORKS_ANNOTATION}\" annotation: {reason}")]
    Malformed { reason: String },
    /// One element breaks a rule.
    #[error("invalid \"{NETWORKS_ANNOTATION}\" annotation: {at}: {reason}")]
    Element { at: Location, reason: String },
}

impl SelectionError {
    pub(crate) fn element(
        position: usize,
        name: Option<&str>,
        key: Option<&str>,
        reason: impl Into<String>,
    ) -> Self {
        SelectionError::Element {
            at: Location {
                position,
                name: name.map(str::to_string),
                key: key.map(str::to_string),
            },
            reason: reason.into(),
        }
    }

    /// What is wrong, without the annotation's name: for a selection read from another
    /// annotation (Multus's `v1.multus-cni.io/default-network` takes the same format).
    pub fn detail(&self) -> String {
        match self {
            SelectionError::Malformed { reason } => reason.clone(),
            SelectionError::Element { at, reason } => format!("{at}: {reason}"),
        }
    }

    /// The element's location, for the `Element` kind.
    pub fn location(&self) -> Option<&Location> {
        match self {
            SelectionError::Element { at, .. } => Some(at),
            SelectionError::Malformed { .. } => None,
        }
    }
}

impl From<SelectionError> for cni::CniError {
    fn from(e: SelectionError) -> Self {
        cni::CniError::new(cni::ErrorCode::InvalidConfig, e.to_string())
    }
}

/// Which of the two formats a value is in: like Multus, any `[`, `{` or `"` means the JSON list
/// (none of them can appear in a valid comma-delimited value).
pub fn is_json(value: &str) -> bool {
    value.contains(['[', '{', '"'])
}

/// The most networks one annotation may select. The spec sets no limit and neither does Multus,
/// but every element costs the node a NAD read, a delegate run at ADD and at DEL, and a place in
/// the record, and the annotation is written by whoever may create pods: without a bound, one pod
/// could hold its node's CNI calls for minutes and drain its IP pools. No real pod comes near it
/// (a KubeVirt VM or an SR-IOV pod has tens of interfaces at most).
pub const MAX_ELEMENTS: usize = 256;

/// Parses the annotation's value. An empty (or all-whitespace) value selects no network. What to
/// do with an invalid annotation (fail the pod, or ignore the annotation as the spec allows) is
/// the caller's choice.
pub fn parse(value: &str) -> Result<Vec<NetworkSelectionElement>, SelectionError> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let elements = if is_json(value) {
        json::parse(value)?
    } else {
        comma::parse(value)?
    };
    if elements.len() > MAX_ELEMENTS {
        return Err(SelectionError::Malformed {
            reason: format!(
                "it selects {} networks; a pod may be attached to at most {MAX_ELEMENTS}",
                elements.len()
            ),
        });
    }
    check_across(&elements)?;
    Ok(elements)
}

/// Parses the value of Multus's `v1.multus-cni.io/default-network` annotation, which takes this
/// annotation's formats to name the cluster-wide default network: as [`parse`], without the
/// rules the spec gives for the attachments of this annotation, across elements and
/// §4.1.2.1.11's `ips` with `ipam-claim-reference` ([`json::element_values`]). The caller
/// checks that it names one network.
pub fn parse_default_network(value: &str) -> Result<Vec<NetworkSelectionElement>, SelectionError> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    if is_json(value) {
        json::parse_default_network(value)
    } else {
        comma::parse(value)
    }
}

/// The rules that involve more than one element.
fn check_across(elements: &[NetworkSelectionElement]) -> Result<(), SelectionError> {
    let mut default_route: Option<(usize, &str)> = None;
    let mut interfaces: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (i, e) in elements.iter().enumerate() {
        let position = i + 1;
        if e.default_route.is_some() {
            // §4.1.2.1.9: "Only one network attachment may specify the default-route key".
            if let Some((first, first_name)) = default_route {
                return Err(SelectionError::element(
                    position,
                    Some(&e.name),
                    Some("default-route"),
                    format!(
                        "only one element may have \"default-route\", and element {first} \
                         ({first_name:?}) already has it"
                    ),
                ));
            }
            default_route = Some((position, &e.name));
        }
        if let Some(ifname) = e.interface.as_deref() {
            // §4.1.2.1.5: a name used by a previous attachment fails that attachment; two requests
            // for one name can never both succeed, so refuse before attaching anything.
            if let Some((first, first_name)) = interfaces.insert(ifname, (position, &e.name)) {
                return Err(SelectionError::element(
                    position,
                    Some(&e.name),
                    Some("interface"),
                    format!(
                        "interface name {ifname:?} is already requested by element {first} \
                         ({first_name:?})"
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
