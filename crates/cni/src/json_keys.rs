//! Keys given twice in a JSON object. serde_json's `Value` keeps the last of two equal keys
//! silently, so a setting given twice (`"namespaceIsolation": true, …, false`) would take effect
//! unseen. This reads the text once more, allocating nothing for the values, and names the first
//! key given twice, compared in any ASCII case (as Go's encoding/json, and so Multus, matches
//! keys), in the objects a caller interprets itself: a delegate's own keys pass unchanged.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Which objects of a document are checked.
#[derive(Clone, Copy, Debug)]
pub enum Checked<'a> {
    /// The document's object, and the objects of its keys named here (in any case).
    Object { nested: &'a [&'a str] },
    /// Each object of the document's list (the selection annotation's elements).
    ListOfObjects,
}

/// The first key given twice in the objects `what` names, as a message naming it; `None` when
/// there is none, or when `json` is not of the shape `what` expects (the caller's own parse
/// reports that).
pub fn duplicate_key(json: &[u8], what: Checked<'_>) -> Option<String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    match what {
        Checked::Object { nested } => Scan { nested, top: true }.deserialize(&mut de),
        Checked::ListOfObjects => de.deserialize_seq(EachObject),
    }
    .ok()
    .flatten()
}

/// The message for keys `first` and `second`, equal in any case, in `inside` (empty: the
/// document's own object).
fn twice(first: &str, second: &str, inside: &str) -> String {
    let within = if inside.is_empty() {
        String::new()
    } else {
        format!(" in {inside:?}")
    };
    if first == second {
        format!("key {first:?} is given twice{within}: keep one")
    } else {
        format!(
            "keys {first:?} and {second:?}{within} are the same key (keys are read in any \
             case): keep one"
        )
    }
}

/// An object's keys checked; with `top`, also those of its keys named in `nested`.
struct Scan<'a> {
    nested: &'a [&'a str],
    top: bool,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen: Vec<String> = Vec::new();
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if found.is_none()
                && let Some(first) = seen.iter().find(|k| k.eq_ignore_ascii_case(&key))
            {
                found = Some(twice(first, &key, ""));
            }
            let inner = if self.top && self.nested.iter().any(|n| n.eq_ignore_ascii_case(&key)) {
                map.next_value_seed(Scan {
                    nested: &[],
                    top: false,
                })?
                .map(|m| format!("{m} (in {key:?})"))
            } else {
                map.next_value::<IgnoredAny>()?;
                None
            };
            found = found.or(inner);
            seen.push(key);
        }
        Ok(found)
    }

    // Anything else holds no object of its own to check.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A list whose objects are each checked (their position said, 1-based).
struct EachObject;

impl<'de> Visitor<'de> for EachObject {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut position = 0;
        while let Some(inner) = seq.next_element_seed(Scan {
            nested: &[],
            top: false,
        })? {
            position += 1;
            if found.is_none() {
                found = inner.map(|m| format!("element {position}: {m}"));
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: Checked<'static> = Checked::Object {
        nested: &["capabilities"],
    };

    #[test]
    fn a_key_given_twice_is_named_in_any_case_where_it_is_interpreted() {
        let found = |json: &str, what| duplicate_key(json.as_bytes(), what);
        assert_eq!(
            found(
                r#"{"a": 1, "namespaceIsolation": true, "namespaceIsolation": false}"#,
                CONFIG
            )
            .unwrap(),
            "key \"namespaceIsolation\" is given twice: keep one"
        );
        let m = found(r#"{"logLevel": "x", "LogLevel": "y"}"#, CONFIG).unwrap();
        assert!(m.contains("\"logLevel\" and \"LogLevel\""), "{m}");
        let m = found(r#"{"capabilities": {"ips": true, "IPs": false}}"#, CONFIG).unwrap();
        assert!(m.contains("(in \"capabilities\")"), "{m}");
        // A delegate's own keys, and objects deeper down, are not plumb's to judge.
        assert_eq!(
            found(
                r#"{"delegates": [{"type": "a", "type": "b"}], "x": {"k": 1, "k": 2}}"#,
                CONFIG
            ),
            None
        );
        assert_eq!(found(r#"{"a": 1, "b": {"a": 2}}"#, CONFIG), None);
        let m = found(
            r#"[{"name": "a"}, {"name": "b", "namespace": "x", "namespace": "y"}]"#,
            Checked::ListOfObjects,
        )
        .unwrap();
        assert_eq!(m, "element 2: key \"namespace\" is given twice: keep one");
        // Not the expected shape, or not JSON: the caller's parse says so.
        assert_eq!(found("[1, 2]", CONFIG), None);
        assert_eq!(found("{\"a\": ", CONFIG), None);
        assert_eq!(found("{\"a\": 1}", Checked::ListOfObjects), None);
        assert_eq!(
            found("[1, {\"a\": 1, \"a\": 2}]", Checked::ListOfObjects).unwrap(),
            "element 2: key \"a\" is given twice: keep one"
        );
    }
}
