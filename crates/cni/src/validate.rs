//! Validation of attachment parameters and names (spec §1 `name`, `type`; spec §3 "Attachment
//! Parameters"; the reference library's `pkg/utils`).
//!
//! Everything here runs before any plugin does: a request that would fail validation must not
//! have side effects first.

use crate::error::{CniError, ErrorCode};

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`: container IDs and network names.
fn is_valid_id(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Container ID: non-empty and `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$` (spec §3). Code 4: it arrives in
/// `CNI_CONTAINERID`.
pub fn container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            "CNI_CONTAINERID: container ID must not be empty",
        ));
    }
    if !is_valid_id(id) {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!(
                "CNI_CONTAINERID: invalid container ID {id:?}: must start with a letter or digit \
                 and contain only letters, digits, '_', '.' and '-'"
            ),
        ));
    }
    Ok(())
}

/// Network name (spec §1 `name`). Code 7: it comes from the configuration.
pub fn network_name(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            "missing network name (key \"name\")",
        ));
    }
    if !is_valid_id(name) {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            format!(
                "invalid network name {name:?} (key \"name\"): must start with a letter or digit \
                 and contain only letters, digits, '_', '.' and '-'"
            ),
        ));
    }
    Ok(())
}

/// Linux interface name rules (the reference `ValidateInterfaceName`): non-empty, at most 15
/// bytes, not "." or "..", no '/', ':' or whitespace; nor NUL, which a C string (the kernel's
/// name, `CNI_IFNAME`) cannot hold. Returns why it is invalid.
pub fn interface_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("interface name must not be empty")
    } else if name.len() > 15 {
        Some("interface name is longer than 15 bytes")
    } else if name == "." || name == ".." {
        Some("interface name must not be '.' or '..'")
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
    {
        Some("interface name must not contain '/', ':', NUL or whitespace")
    } else if name.bytes().any(|b| b == 0xa0) {
        // The kernel's `dev_valid_name` tests each byte with its `isspace`, which takes 0xA0
        // (Latin-1's no-break space) for one: a name whose UTF-8 holds that byte ("à", "Ġ")
        // would pass here and fail at ADD with EINVAL.
        Some("interface name must not contain the byte 0xA0, which the kernel takes for a space")
    } else {
        None
    }
}

/// `CNI_IFNAME`, checked by [`interface_name_problem`]. Code 4.
pub fn interface_name(name: &str) -> Result<(), CniError> {
    match interface_name_problem(name) {
        None => Ok(()),
        Some(why) => Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!("CNI_IFNAME: invalid interface name {name:?}: {why}"),
        )),
    }
}

/// A plugin `type` (spec §1): the name of a binary in `CNI_PATH`. It must not be able to name a
/// file outside those directories, so no '/', '\\', ".." and no NUL. Code 7.
pub fn plugin_type(t: &str) -> Result<(), CniError> {
    let why = if t.is_empty() {
        "must not be empty"
    } else if t.contains('/') || t.contains('\\') {
        "must not contain a path separator"
    } else if t.contains("..") {
        "must not contain '..'"
    } else if t.contains('\0') {
        "must not contain NUL"
    } else if t.len() > 255 {
        // NAME_MAX: no file has a longer name.
        "must be a file name, at most 255 bytes"
    } else {
        return Ok(());
    };
    Err(CniError::new(
        ErrorCode::InvalidConfig,
        format!(
            "invalid plugin type {} (key \"type\"): {why}",
            crate::quote::quoted(t)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names() {
        for ok in ["a", "0", "abc-DEF_1.2", "cnitool-f44a90ca26003b1992e5"] {
            container_id(ok).unwrap();
            network_name(ok).unwrap();
        }
        for bad in ["", "-a", ".a", "_a", "a b", "a/b", "a:b", "ä", "a\n"] {
            assert_eq!(container_id(bad).unwrap_err().code, 4, "{bad:?}");
            assert_eq!(network_name(bad).unwrap_err().code, 7, "{bad:?}");
        }
    }

    #[test]
    fn interface_names() {
        for ok in ["eth0", "net1", "a", "123456789012345", "a.b", "é"] {
            interface_name(ok).unwrap();
        }
        for (bad, why) in [
            ("", "empty"),
            ("1234567890123456", "15"),
            (".", "'.'"),
            ("..", "'..'"),
            ("a/b", "'/'"),
            ("a:b", "':'"),
            ("a b", "whitespace"),
            ("a\tb", "whitespace"),
            ("a\0b", "NUL"),
            ("éééééééé", "15"), // 16 bytes
            ("netà", "0xA0"),   // the kernel refuses it: `ip link add name netà` is EINVAL
        ] {
            let e = interface_name(bad).unwrap_err();
            assert_eq!(e.code, 4);
            assert!(e.msg.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn plugin_types_cannot_escape_cni_path() {
        plugin_type("bridge").unwrap();
        plugin_type("host-local").unwrap();
        for bad in [
            "",
            "../bin/sh",
            "/bin/sh",
            "a/b",
            "..",
            "a..b",
            "a\\b",
            "a\0",
        ] {
            assert_eq!(plugin_type(bad).unwrap_err().code, 7, "{bad:?}");
        }
    }
}
