//! The JSON list format of the selection annotation (multi-net spec §4.1.2): a list of objects,
//! one per attachment, with the keys of §4.1.2.1 and Multus's `deviceID` and `interfaceRequest`.
//!
//! A `null` value counts as an absent key (Go reads both the same way). Keys are checked in the
//! spec's order, so the first problem reported is the first the spec lists.

use std::collections::BTreeMap;

use serde_json::Value;

use super::validate::{self, string, type_name};
use super::{NetworkSelectionElement, SelectionError};
use crate::names;

/// The keys this version reads; every other key is kept in `extensions`.
const KNOWN_KEYS: &[&str] = &[
    "name",
    "namespace",
    "ips",
    "mac",
    "interface",
    "interfaceRequest",
    "cni-args",
    "portMappings",
    "bandwidth",
    "default-route",
    "infiniband-guid",
    "ipam-claim-reference",
    "deviceID",
];

/// Parses a JSON list annotation value.
pub fn parse(value: &str) -> Result<Vec<NetworkSelectionElement>, SelectionError> {
    parse_with(value, element)
}

/// Parses a JSON list of elements of Multus's `v1.multus-cni.io/default-network` annotation:
/// every key's value is checked as in [`parse`], but not §4.1.2.1.11's rule against `ips` with
/// `ipam-claim-reference` ([`element_values`]).
pub fn parse_default_network(value: &str) -> Result<Vec<NetworkSelectionElement>, SelectionError> {
    parse_with(value, element_values)
}

fn parse_with(
    value: &str,
    element: fn(usize, &Value) -> Result<NetworkSelectionElement, SelectionError>,
) -> Result<Vec<NetworkSelectionElement>, SelectionError> {
    let parsed: Value = serde_json::from_str(value).map_err(|e| SelectionError::Malformed {
        reason: format!("not a valid JSON list: {e}"),
    })?;
    let Value::Array(list) = parsed else {
        return Err(SelectionError::Malformed {
            reason: format!(
                "expected a JSON list of network selection elements, not {}",
                type_name(&parsed)
            ),
        });
    };
    // serde_json kept the last of two equal keys (`namespace` twice bears on isolation).
    if let Some(twice) =
        cni::json_keys::duplicate_key(value.as_bytes(), cni::json_keys::Checked::ListOfObjects)
    {
        return Err(SelectionError::Malformed { reason: twice });
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| element(i + 1, v))
        .collect()
}

/// Reads and checks one element at `position` (1-based).
pub fn element(position: usize, value: &Value) -> Result<NetworkSelectionElement, SelectionError> {
    let e = element_values(position, value)?;
    if e.ipam_claim_reference.is_some() && !e.ips.is_empty() {
        // §4.1.2.1.11: a static IP request and a claim reference are an error together.
        return Err(SelectionError::element(
            position,
            Some(&e.name),
            Some("ipam-claim-reference"),
            "cannot be used together with \"ips\"",
        ));
    }
    Ok(e)
}

/// One element at `position` with each key's value checked, but not the rule of §4.1.2.1.11
/// that a secondary attachment may not have both `ips` and `ipam-claim-reference`. Multus's
/// `v1.multus-cni.io/default-network` annotation, which the spec does not define, takes
/// elements of this format for the cluster-wide default network, and OVN-Kubernetes asks for
/// both there (a VM's address and the claim that keeps it, set by KubeVirt's ipam-extensions
/// webhook); plumb gives the default network neither key, so the pair must not fail the pod.
pub fn element_values(
    position: usize,
    value: &Value,
) -> Result<NetworkSelectionElement, SelectionError> {
    let Value::Object(m) = value else {
        return Err(SelectionError::element(
            position,
            None,
            None,
            format!("expected an object, not {}", type_name(value)),
        ));
    };
    let name = match m.get("name") {
        None | Some(Value::Null) => {
            return Err(SelectionError::element(
                position,
                None,
                Some("name"),
                "the key is required",
            ));
        }
        Some(v) => {
            let s = string(v)
                .map_err(|why| SelectionError::element(position, None, Some("name"), why))?;
            if let Some(why) = names::nad_name_problem(s) {
                return Err(SelectionError::element(
                    position,
                    Some(s),
                    Some("name"),
                    format!("{s:?} is not a valid DNS-1123 label: {why}"),
                ));
            }
            s.to_string()
        }
    };
    let fail =
        |key: &str, why: String| SelectionError::element(position, Some(&name), Some(key), why);
    // A key's value, when present and not null.
    let get = |key: &str| m.get(key).filter(|v| !v.is_null());

    let namespace = match get("namespace") {
        None => None,
        Some(v) => {
            let s = string(v).map_err(|why| fail("namespace", why))?;
            if s.is_empty() {
                // §4.1.2.1.1: "missing or empty" both mean the pod's namespace.
                None
            } else {
                if let Some(why) = names::dns1123_label_problem(s) {
                    return Err(fail(
                        "namespace",
                        format!("{s:?} is not a valid DNS-1123 label: {why}"),
                    ));
                }
                Some(s.to_string())
            }
        }
    };
    let ips = match get("ips") {
        None => Vec::new(),
        Some(v) => validate::ips(v).map_err(|why| fail("ips", why))?,
    };
    let mac = get("mac")
        .map(validate::mac)
        .transpose()
        .map_err(|why| fail("mac", why))?;
    let interface = match (get("interface"), get("interfaceRequest")) {
        (Some(v), _) => Some(validate::interface(v).map_err(|why| fail("interface", why))?),
        // Multus's deprecated alias, read only when `interface` is absent.
        (None, Some(v)) => {
            Some(validate::interface(v).map_err(|why| fail("interfaceRequest", why))?)
        }
        (None, None) => None,
    };
    let cni_args = get("cni-args")
        .map(validate::cni_args)
        .transpose()
        .map_err(|why| fail("cni-args", why))?;
    let port_mappings = match get("portMappings") {
        None => Vec::new(),
        Some(v) => validate::port_mappings(v).map_err(|why| fail("portMappings", why))?,
    };
    let bandwidth = get("bandwidth")
        .map(validate::bandwidth)
        .transpose()
        .map_err(|why| fail("bandwidth", why))?;
    let default_route = get("default-route")
        .map(validate::default_route)
        .transpose()
        .map_err(|why| fail("default-route", why))?;
    let infiniband_guid = get("infiniband-guid")
        .map(validate::hw_addr::<8>)
        .transpose()
        .map_err(|why| fail("infiniband-guid", why))?;
    let ipam_claim_reference = match get("ipam-claim-reference") {
        None => None,
        Some(v) => {
            let s = string(v).map_err(|why| fail("ipam-claim-reference", why))?;
            // An IPAMClaim is a custom resource: its name is a DNS-1123 subdomain (§8.3).
            if let Some(why) = names::dns1123_subdomain_problem(s) {
                return Err(fail(
                    "ipam-claim-reference",
                    format!("{s:?} is not a valid IPAMClaim name: {why}"),
                ));
            }
            Some(s.to_string())
        }
    };
    let device_id = match get("deviceID") {
        None => None,
        Some(v) => {
            let s = string(v).map_err(|why| fail("deviceID", why))?;
            if s.is_empty() {
                return Err(fail("deviceID", "must not be empty".into()));
            }
            Some(s.to_string())
        }
    };
    let extensions: BTreeMap<String, Value> = m
        .iter()
        .filter(|(k, _)| !KNOWN_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();

    Ok(NetworkSelectionElement {
        name,
        namespace,
        ips,
        mac,
        interface,
        cni_args,
        port_mappings,
        bandwidth,
        default_route,
        infiniband_guid,
        ipam_claim_reference,
        device_id,
        extensions,
    })
}
