//! `labelSelector` and `fieldSelector` query parameters (apimachinery `labels.Parse`,
//! `fields.ParseSelector`). Field selectors are evaluated on any dotted path of the object
//! (the real server allows only a per-resource list, e.g. `metadata.name`, `spec.nodeName`).

use serde_json::Value;

#[derive(Debug, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, PartialEq, Eq)]
enum FieldReq {
    Eq(String, String),
    Ne(String, String),
}

/// A parsed pair of selectors; empty selectors match everything.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Selector {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selector {
    pub(crate) fn parse(label: Option<&str>, field: Option<&str>) -> Result<Selector, String> {
        let mut sel = Selector::default();
        if let Some(label) = label {
            for term in split_top_level(label) {
                sel.labels.push(parse_label_term(term)?);
            }
        }
        if let Some(field) = field {
            for term in field.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                sel.fields.push(parse_field_term(term)?);
            }
        }
        Ok(sel)
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let label = |k: &str| labels.and_then(|m| m.get(k)).and_then(Value::as_str);
        let labels_ok = self.labels.iter().all(|req| match req {
            LabelReq::Eq(k, v) => label(k) == Some(v.as_str()),
            LabelReq::Ne(k, v) => label(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
        });
        labels_ok
            && self.fields.iter().all(|req| match req {
                FieldReq::Eq(path, v) => field_value(obj, path) == *v,
                FieldReq::Ne(path, v) => field_value(obj, path) != *v,
            })
    }
}

/// Splits on commas that are not inside `( … )`.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|t| !t.is_empty()).collect()
}

fn parse_label_term(term: &str) -> Result<LabelReq, String> {
    let bad =
        || format!("unable to parse requirement: found '{term}', expected: key, !key, key=value");
    if let Some(key) = term.strip_prefix('!') {
        return valid_key(key.trim()).map(|k| LabelReq::NotExists(k.to_owned()));
    }
    for (op, ctor) in [
        ("!=", LabelReq::Ne as fn(String, String) -> LabelReq),
        ("==", LabelReq::Eq),
        ("=", LabelReq::Eq),
    ] {
        if let Some((k, v)) = term.split_once(op) {
            return Ok(ctor(valid_key(k.trim())?.to_owned(), v.trim().to_owned()));
        }
    }
    for (op, is_in) in [(" notin ", false), (" in ", true)] {
        if let Some((k, set)) = term.split_once(op) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            let key = valid_key(k.trim())?.to_owned();
            return Ok(if is_in {
                LabelReq::In(key, values)
            } else {
                LabelReq::NotIn(key, values)
            });
        }
    }
    if term.contains(char::is_whitespace) || term.contains(['(', ')']) {
        return Err(bad());
    }
    valid_key(term).map(|k| LabelReq::Exists(k.to_owned()))
}

fn valid_key(key: &str) -> Result<&str, String> {
    let ok = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key)
    } else {
        Err(format!("invalid label key \"{key}\""))
    }
}

fn parse_field_term(term: &str) -> Result<FieldReq, String> {
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(FieldReq::Ne(k.trim().to_owned(), v.trim().to_owned()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(FieldReq::Eq(k.trim().to_owned(), v.trim().to_owned()));
    }
    Err(format!(
        "invalid selector: '{term}'; can't understand '{term}'"
    ))
}

/// The value at a dotted field path, as the string a field selector compares (missing → "").
fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn label_selectors() {
        let pod = json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "front"}}});
        let m = |s: &str| Selector::parse(Some(s), None).unwrap().matches(&pod);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(m("app in (web, db),!missing"));
        assert!(m("app notin (db),tier!=back"));
        assert!(!m("app=db"));
        assert!(!m("missing"));
        assert!(!m("!app"));
        assert!(Selector::parse(Some("a b c"), None).is_err());
    }

    #[test]
    fn prefixed_label_keys() {
        let ns = json!({"metadata": {"name": "team-a",
            "labels": {"plumb.example/dynamic": "true", "kubernetes.io/metadata.name": "team-a"}}});
        let m = |s: &str| Selector::parse(Some(s), None).unwrap().matches(&ns);
        assert!(m("plumb.example/dynamic=true"));
        assert!(m("plumb.example/dynamic in (true,yes)"));
        assert!(m(
            "plumb.example/dynamic,kubernetes.io/metadata.name=team-a"
        ));
        assert!(!m("plumb.example/dynamic=false"));
        assert!(!m("plumb.example/dynamic in (false, no)"));
        assert!(!m("plumb.example/other"));
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        let m = |s: &str| Selector::parse(None, Some(s)).unwrap().matches(&pod);
        assert!(m("metadata.name=a"));
        assert!(m("metadata.name==a,spec.nodeName=n1"));
        assert!(m("metadata.namespace!=other"));
        assert!(!m("spec.nodeName=n2"));
        assert!(m("status.phase="));
        assert!(Selector::parse(None, Some("nonsense")).is_err());
    }
}
