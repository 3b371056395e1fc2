//! The comma-delimited format of the selection annotation (multi-net spec §4.1.1):
//! `name`, `namespace/name`, and Multus's `name@ifname` / `namespace/name@ifname`, separated by
//! commas, each part trimmed of whitespace.
//!
//! An empty item (as in `net-a,` or `net-a,,net-b`) is an error, not a nameless network.

use super::validate;
use super::{NetworkSelectionElement, SelectionError};
use crate::names;

/// Parses a comma-delimited annotation value.
pub fn parse(value: &str) -> Result<Vec<NetworkSelectionElement>, SelectionError> {
    value
        .split(',')
        .enumerate()
        .map(|(i, item)| item_at(i + 1, item))
        .collect()
}

/// One item, at `position` (1-based).
fn item_at(position: usize, raw: &str) -> Result<NetworkSelectionElement, SelectionError> {
    let item = raw.trim();
    if item.is_empty() {
        return Err(SelectionError::element(
            position,
            None,
            None,
            "empty network reference (is there a stray comma?)",
        ));
    }
    // Multus splits on '/' first, then the name part on '@'; more than one of either is an error.
    let (namespace, rest) = match item.split_once('/') {
        Some((ns, rest)) => (Some(ns.trim()), rest),
        None => (None, item),
    };
    let (name, ifname) = match rest.split_once('@') {
        Some((n, ifname)) => (n.trim(), Some(ifname.trim())),
        None => (rest.trim(), None),
    };
    let fail = |key: &str, why: String| {
        SelectionError::element(
            position,
            Some(if name.is_empty() { item } else { name }),
            Some(key),
            why,
        )
    };
    if rest.contains('/') {
        return Err(fail(
            "name",
            format!("{item:?} has more than one '/' (expected [namespace/]name[@interface])"),
        ));
    }
    if ifname.is_some_and(|i| i.contains('@')) {
        return Err(fail(
            "interface",
            format!("{item:?} has more than one '@' (expected [namespace/]name[@interface])"),
        ));
    }
    if let Some(why) = names::nad_name_problem(name) {
        return Err(fail(
            "name",
            format!("{name:?} is not a valid DNS-1123 label: {why}"),
        ));
    }
    if let Some(ns) = namespace
        && let Some(why) = names::dns1123_label_problem(ns)
    {
        return Err(fail(
            "namespace",
            format!("{ns:?} is not a valid DNS-1123 label: {why}"),
        ));
    }
    let interface = match ifname {
        None => None,
        Some(i) => Some(
            validate::interface(&serde_json::Value::String(i.to_string()))
                .map_err(|why| fail("interface", why))?,
        ),
    };
    Ok(NetworkSelectionElement {
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
        interface,
        ..Default::default()
    })
}
