//! Kubernetes object names as the multi-net spec uses them (multi-net spec §3.3, §4.1.1).
//!
//! NetworkAttachmentDefinition names and namespaces are DNS-1123 labels; a network is referred to
//! as `name` (in the pod's namespace) or `namespace/name`. IPAMClaim names (§8.3) are any name the
//! API server accepts for a custom resource, which is a DNS-1123 subdomain.

use std::fmt;

use thiserror::Error;

/// The longest DNS-1123 label Kubernetes accepts.
pub const DNS1123_LABEL_MAX: usize = 63;
/// The longest DNS-1123 subdomain Kubernetes accepts.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// A name that is not valid where it is used.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum NameError {
    #[error("{} is not a valid DNS-1123 label: {why}", cni::quote::quoted(.name))]
    Label { name: String, why: &'static str },
    #[error("{} is not a valid DNS-1123 subdomain: {why}", cni::quote::quoted(.name))]
    Subdomain { name: String, why: &'static str },
}

impl From<NameError> for cni::CniError {
    fn from(e: NameError) -> Self {
        cni::CniError::new(cni::ErrorCode::InvalidConfig, e.to_string())
    }
}

/// Why `s` is not a DNS-1123 label, or `None` when it is one. multi-net spec §3.3: "must consist
/// of lower case alphanumeric characters or '-', and must start and end with an alphanumeric
/// character", `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (Kubernetes'
/// `IsDNS1123Label`, which the spec names as the rule for namespaces).
pub fn dns1123_label_problem(s: &str) -> Option<&'static str> {
    if s.len() > DNS1123_LABEL_MAX {
        return Some("it must be no more than 63 characters");
    }
    label_characters_problem(s)
}

/// Why `s` is not a valid NetworkAttachmentDefinition name, or `None`. multi-net spec §3.3: the
/// characters of a DNS-1123 label, with 63 characters or fewer only *recommended*; Kubernetes
/// takes custom-resource names of up to 253 characters and Multus's name check has no limit, so a
/// longer name is refused only beyond 253. (Namespaces are labels: [`dns1123_label_problem`].)
pub fn nad_name_problem(s: &str) -> Option<&'static str> {
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        return Some("it must be no more than 253 characters");
    }
    label_characters_problem(s)
}

/// The character rules of a DNS-1123 label, whatever its length.
fn label_characters_problem(s: &str) -> Option<&'static str> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Some("it must not be empty");
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    {
        return Some("it must consist of lower case alphanumeric characters or '-'");
    }
    if b.first() == Some(&b'-') || b.last() == Some(&b'-') {
        return Some("it must start and end with an alphanumeric character");
    }
    None
}

/// Why `s` is not a DNS-1123 subdomain (dot-separated labels, at most 253 characters), or `None`.
pub fn dns1123_subdomain_problem(s: &str) -> Option<&'static str> {
    if s.is_empty() {
        return Some("it must not be empty");
    }
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        return Some("it must be no more than 253 characters");
    }
    for label in s.split('.') {
        if label.is_empty() {
            return Some("it must not contain empty labels (leading, trailing or doubled '.')");
        }
        if !label
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        {
            return Some("it must consist of lower case alphanumeric characters, '-' or '.'");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some("each part must start and end with an alphanumeric character");
        }
    }
    None
}

/// Checks a DNS-1123 label (NAD names, namespaces).
pub fn validate_label(s: &str) -> Result<(), NameError> {
    match dns1123_label_problem(s) {
        None => Ok(()),
        Some(why) => Err(NameError::Label {
            name: s.to_string(),
            why,
        }),
    }
}

/// Checks a NetworkAttachmentDefinition name ([`nad_name_problem`]).
pub fn validate_nad_name(s: &str) -> Result<(), NameError> {
    match nad_name_problem(s) {
        None => Ok(()),
        Some(why) => Err(NameError::Label {
            name: s.to_string(),
            why,
        }),
    }
}

/// Checks a DNS-1123 subdomain (IPAMClaim names).
pub fn validate_subdomain(s: &str) -> Result<(), NameError> {
    match dns1123_subdomain_problem(s) {
        None => Ok(()),
        Some(why) => Err(NameError::Subdomain {
            name: s.to_string(),
            why,
        }),
    }
}

/// A reference to a NetworkAttachmentDefinition with its namespace resolved (multi-net spec
/// §4.1.1). Displays as `namespace/name`, the form the network-status `name` key takes (§5.3.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetworkRef {
    pub namespace: String,
    pub name: String,
}

impl NetworkRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        NetworkRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for NetworkRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_spec_regex_and_length() {
        for ok in ["a", "net-a", "0", "a-b-c", "x9", &"a".repeat(63)] {
            assert_eq!(dns1123_label_problem(ok), None, "{ok}");
        }
        let cases = [
            ("", "empty"),
            ("-a", "start and end"),
            ("a-", "start and end"),
            ("Net", "lower case"),
            ("a_b", "lower case"),
            ("a.b", "lower case"),
            ("a/b", "lower case"),
            ("é", "lower case"),
        ];
        for (bad, why) in cases {
            let p = dns1123_label_problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(p.contains(why), "{bad:?}: {p}");
        }
        assert!(
            dns1123_label_problem(&"a".repeat(64))
                .unwrap()
                .contains("63")
        );
        let e = validate_label("Bad").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"Bad\" is not a valid DNS-1123 label: it must consist of lower case alphanumeric \
             characters or '-'"
        );
        let c: cni::CniError = e.into();
        assert_eq!(c.code, 7);
    }

    #[test]
    fn subdomains_allow_dots_between_labels() {
        for ok in [
            "vm-a.tenantred.pod16367aacb67",
            "myappstatefulset.safenetwork.eth1",
            "a",
        ] {
            assert_eq!(dns1123_subdomain_problem(ok), None, "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "A.b", "a.-b", "a_b"] {
            assert!(dns1123_subdomain_problem(bad).is_some(), "{bad:?}");
        }
        assert!(dns1123_subdomain_problem(&"a".repeat(254)).is_some());
    }

    #[test]
    fn network_refs_display_as_namespace_slash_name() {
        assert_eq!(
            NetworkRef::new("other-ns", "net-c").to_string(),
            "other-ns/net-c"
        );
    }
}
