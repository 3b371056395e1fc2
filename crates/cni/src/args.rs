//! `CNI_ARGS`: semicolon-separated `KEY=VALUE` pairs (spec §2 "Parameters"; CONVENTIONS.md
//! "CNI_ARGS"). Order is kept: the reference library writes and caches them as an ordered list.

use crate::error::{CniError, ErrorCode};

/// Parses `CNI_ARGS`. An empty string is no pairs; a part without `=` is an error naming it.
pub fn parse(s: &str) -> Result<Vec<(String, String)>, CniError> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(';')
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| {
                    CniError::new(
                        ErrorCode::InvalidEnvironment,
                        format!("CNI_ARGS: {part:?} is not of the form KEY=VALUE"),
                    )
                })
        })
        .collect()
}

/// Writes pairs back as `CNI_ARGS`.
pub fn join(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// The value of `key`, if present. A repeated key reads as its last value, as Go's
/// `types.LoadArgs` assigns each pair in turn (CNI_ARGS, spec §2 "Parameters").
pub fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rfind(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keeps_order_and_round_trips() {
        let s = "IgnoreUnknown=true;K8S_POD_NAMESPACE=default;K8S_POD_NAME=a=b";
        let p = parse(s).unwrap();
        assert_eq!(p[2], ("K8S_POD_NAME".into(), "a=b".into()));
        assert_eq!(join(&p), s);
        assert_eq!(get(&p, "K8S_POD_NAMESPACE"), Some("default"));
        assert!(parse("").unwrap().is_empty());
        assert_eq!(parse("A=1;").unwrap().len(), 1);
    }

    #[test]
    fn a_repeated_key_reads_as_its_last_value() {
        // Go `types.LoadArgs` sets the field once per pair, in order: the last pair wins. Multus
        // (thin) appends its own `CNI_ARGS` after the runtime's, so delegates see repeats.
        let p = parse("IgnoreUnknown=1;K8S_POD_NAME=old;K8S_POD_NAME=new").unwrap();
        assert_eq!(get(&p, "K8S_POD_NAME"), Some("new"));
        assert_eq!(
            join(&p),
            "IgnoreUnknown=1;K8S_POD_NAME=old;K8S_POD_NAME=new"
        );
    }

    #[test]
    fn a_part_without_equals_is_named() {
        let e = parse("A=1;oops").unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("oops"));
    }
}
