//! The four PATCH bodies the API server takes: `application/merge-patch+json` (RFC 7386, exactly),
//! `application/strategic-merge-patch+json` and `application/apply-patch+yaml` (server-side
//! apply), both simplified ([`strategic`], [`apply`]), and `application/json-patch+json` (RFC
//! 6902: add, remove, replace, move, copy, test).

use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` header (parameters such as `; charset=utf-8` ignored).
    pub(crate) fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        unreachable!("made an object above")
    };
    for (k, v) in patch {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Strategic merge patch, simplified: built-in types only (custom resources answer 415 as the
/// real server does); maps merge as in RFC 7386; the directives `$patch: replace`, `$patch:
/// delete` (on maps) and `$deleteFromPrimitiveList/<field>` are honoured;
/// `$setElementOrder/<field>` and `$retainKeys` are accepted and ignored. **Simplification:**
/// lists are replaced whole — there is no merging of list items by their `patchMergeKey` (e.g.
/// containers by name). plumb patches annotations (maps), where both agree.
pub(crate) fn strategic(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(patch) = patch else {
        return Err("strategic merge patch must be a JSON object".to_owned());
    };
    if let Some(directive) = patch.get("$patch") {
        match directive.as_str() {
            Some("replace") => {
                *target = strip_directives(&Value::Object(patch.clone()));
                return Ok(());
            }
            Some("delete") => {
                *target = Value::Object(Map::new());
                return Ok(());
            }
            Some("merge") => {}
            _ => return Err(format!("Unknown patch type: {directive}")),
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        unreachable!("made an object above")
    };
    for (k, v) in patch {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(remove) = v else {
                return Err(format!("invalid $deleteFromPrimitiveList for {field}"));
            };
            if let Some(Value::Array(list)) = t.get_mut(field) {
                list.retain(|item| !remove.contains(item));
            }
            continue;
        }
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(inner)
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                t.remove(k);
            }
            Value::Object(_) => strategic(t.entry(k.clone()).or_insert(Value::Null), v)?,
            other => {
                t.insert(k.clone(), strip_directives(other));
            }
        }
    }
    Ok(())
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Server-side apply, simplified: the body must be JSON (a subset of YAML), the applied fields
/// are merged into the live object (maps recursively, lists and scalars replaced, nulls
/// ignored); there are no `managedFields`, so fields a manager stops applying are not removed
/// and no apply conflicts (409) are ever reported.
pub(crate) fn apply(target: &mut Value, applied: &Value) {
    let Value::Object(applied) = applied else {
        *target = applied.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        unreachable!("made an object above")
    };
    for (k, v) in applied {
        match v {
            Value::Null => {}
            Value::Object(_) => apply(t.entry(k.clone()).or_insert(Value::Null), v),
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

/// Why a JSON patch was refused: a document that does not decode is a 400, a patch that does
/// not apply is a 422 (apiserver `jsonPatcher.applyJSPatch`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum JsonPatchError {
    Decode(String),
    Apply(String),
}

/// Every failure after decoding is one of applying (the `?`s inside `json_patch`).
impl From<String> for JsonPatchError {
    fn from(message: String) -> Self {
        JsonPatchError::Apply(message)
    }
}

/// RFC 6902 JSON patch. The target is only changed when every operation applies.
pub(crate) fn json_patch(target: &mut Value, ops: &Value) -> Result<(), JsonPatchError> {
    let Value::Array(ops) = ops else {
        return Err(JsonPatchError::Decode(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".to_owned(),
        ));
    };
    let mut doc = target.clone();
    for op in ops {
        let Value::Object(op) = op else {
            return Err(JsonPatchError::Decode(
                "json patch operation must be an object".to_owned(),
            ));
        };
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op.get("path").and_then(Value::as_str);
        let Some(path) = path else {
            return Err(JsonPatchError::Apply(format!(
                "{kind} operation missing path"
            )));
        };
        let path = parse_pointer(path).map_err(JsonPatchError::Apply)?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| JsonPatchError::Apply(format!("{kind} operation missing value")))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| JsonPatchError::Apply(format!("{kind} operation missing from")))
                .and_then(|f| parse_pointer(f).map_err(JsonPatchError::Apply))
        };
        match kind {
            "add" => add(&mut doc, &path, value()?),
            "remove" => remove(&mut doc, &path).map(drop),
            "replace" => {
                remove(&mut doc, &path).map_err(|_| {
                    format!(
                        "replace operation does not apply: doc is missing key: {}",
                        show(&path)
                    )
                })?;
                add(&mut doc, &path, value()?)
            }
            "move" => {
                let from = from()?;
                let v = remove(&mut doc, &from)?;
                add(&mut doc, &path, v)
            }
            "copy" => {
                let from = from()?;
                let v = lookup(&doc, &from).cloned().ok_or_else(|| {
                    format!(
                        "copy operation does not apply: doc is missing from path: {}",
                        show(&from)
                    )
                })?;
                add(&mut doc, &path, v)
            }
            "test" => {
                let expected = value()?;
                match lookup(&doc, &path) {
                    Some(actual) if *actual == expected => Ok(()),
                    None if expected.is_null() => Ok(()),
                    _ => Err(format!("testing value {} failed: test failed", show(&path))),
                }
            }
            other => Err(format!("Unexpected kind: {other}")),
        }
        .map_err(JsonPatchError::Apply)?;
    }
    *target = doc;
    Ok(())
}

fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer: {p:?}"));
    };
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn show(path: &[String]) -> String {
    path.iter()
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn array_index(token: &str, len: usize, allow_end: bool) -> Option<usize> {
    if allow_end && token == "-" {
        return Some(len);
    }
    if token.is_empty()
        || (token.len() > 1 && token.starts_with('0'))
        || !token.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let i: usize = token.parse().ok()?;
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    (i <= max && (allow_end || len > 0)).then_some(i)
}

fn lookup<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for token in path {
        cur = match cur {
            Value::Object(m) => m.get(token)?,
            Value::Array(a) => a.get(array_index(token, a.len(), false)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, path: &[String], op: &str) -> Result<&'a mut Value, String> {
    let missing = || {
        format!(
            "{op} operation does not apply: doc is missing path: \"{}\"",
            show(path)
        )
    };
    let mut cur = doc;
    for token in &path[..path.len() - 1] {
        cur = match cur {
            Value::Object(m) => m.get_mut(token).ok_or_else(missing)?,
            Value::Array(a) => {
                let i = array_index(token, a.len(), false).ok_or_else(missing)?;
                &mut a[i]
            }
            _ => return Err(missing()),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some(last) = path.last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, path, "add")? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), true).ok_or_else(|| {
                format!(
                    "add operation does not apply: index out of range: {}",
                    show(path)
                )
            })?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!(
            "add operation does not apply: doc is missing path: \"{}\"",
            show(path)
        )),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let missing = || {
        format!(
            "Unable to remove nonexistent key: {}: missing value",
            show(path)
        )
    };
    let Some(last) = path.last() else {
        return Ok(std::mem::take(doc));
    };
    match parent_mut(doc, path, "remove").map_err(|_| missing())? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i = array_index(last, a.len(), false).ok_or_else(missing)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_patch_rfc7386_examples() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [{"b": "c"}]});
        merge(&mut t, &json!({"a": [1]}));
        assert_eq!(t, json!({"a": [1]}));
        let mut t = json!(["a", "b"]);
        merge(&mut t, &json!({"a": "b"}));
        assert_eq!(t, json!({"a": "b"}));
    }

    #[test]
    fn strategic_merge_maps_and_directives() {
        let mut t = json!({"metadata": {"annotations": {"a": "1", "b": "2"}, "labels": {"x": "y"}},
                           "spec": {"list": [1, 2, 3]}});
        strategic(
            &mut t,
            &json!({"metadata": {"annotations": {"a": null, "c": "3"}, "labels": {"$patch": "replace", "n": "m"}},
                    "spec": {"$deleteFromPrimitiveList/list": [2], "$setElementOrder/list": [1, 3]}}),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"annotations": {"b": "2", "c": "3"}, "labels": {"n": "m"}},
                   "spec": {"list": [1, 3]}})
        );
        strategic(
            &mut t,
            &json!({"metadata": {"labels": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert!(t["metadata"].get("labels").is_none());
    }

    #[test]
    fn json_patch_operations() {
        let mut t = json!({"metadata": {"annotations": {"a": "1"}}, "list": [1, 2]});
        json_patch(
            &mut t,
            &json!([
                {"op": "test", "path": "/metadata/annotations/a", "value": "1"},
                {"op": "add", "path": "/metadata/annotations/k8s.v1.cni.cncf.io~1network-status", "value": "[]"},
                {"op": "replace", "path": "/metadata/annotations/a", "value": "2"},
                {"op": "add", "path": "/list/-", "value": 3},
                {"op": "add", "path": "/list/0", "value": 0},
                {"op": "remove", "path": "/list/1"},
                {"op": "copy", "from": "/list", "path": "/copy"},
                {"op": "move", "from": "/copy", "path": "/moved"},
            ]),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"annotations": {"a": "2", "k8s.v1.cni.cncf.io/network-status": "[]"}},
                   "list": [0, 2, 3], "moved": [0, 2, 3]})
        );
    }

    #[test]
    fn json_patch_failures_leave_the_target_alone() {
        let before = json!({"a": {"b": 1}});
        let mut t = before.clone();
        let err = json_patch(
            &mut t,
            &json!([{"op": "replace", "path": "/a/b", "value": 2}, {"op": "test", "path": "/a/b", "value": 1}]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            JsonPatchError::Apply("testing value /a/b failed: test failed".into())
        );
        assert_eq!(t, before);
        assert!(matches!(
            json_patch(&mut t, &json!({"op": "add"})),
            Err(JsonPatchError::Decode(_))
        ));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])),
            Err(JsonPatchError::Apply(_))
        ));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "add", "path": "/x/y", "value": 1}])),
            Err(JsonPatchError::Apply(_))
        ));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "frobnicate", "path": "/a"}])),
            Err(JsonPatchError::Apply(_))
        ));
    }

    #[test]
    fn apply_merges_and_ignores_nulls() {
        let mut t = json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"x": [1]}});
        apply(
            &mut t,
            &json!({"metadata": {"labels": {"b": "2"}, "annotations": null}, "spec": {"x": [2]}}),
        );
        assert_eq!(
            t,
            json!({"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}, "spec": {"x": [2]}})
        );
    }
}
