//! The object store: objects as JSON, one global resourceVersion counter bumped by every write
//! (as etcd's revision is), and the history of changes that watches replay from a
//! resourceVersion.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::resources::Resource;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One write, as watches see it.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub res: Resource,
    pub ns: String,
    pub kind: ChangeType,
    /// The object after the write (for a delete: its last state, with the delete's rv).
    pub object: Value,
    /// The object before the write (modify and delete), to tell selector transitions.
    pub old: Option<Value>,
}

type Key = (Resource, String, String);

#[derive(Default)]
pub(crate) struct Store {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    history: Vec<Change>,
    /// Watches from a resourceVersion below this answer 410 Expired (see `compact`).
    floor: u64,
}

impl Store {
    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    pub(crate) fn get(&self, res: Resource, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(res, ns.to_owned(), name.to_owned()))
    }

    /// Objects of one resource, in one namespace or all, ordered by namespace then name.
    pub(crate) fn list(&self, res: Resource, ns: Option<&str>) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|((r, n, _), _)| *r == res && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
            .collect()
    }

    /// Stores `obj` (new or replacing), stamping resourceVersion, kind, apiVersion, namespace (none
    /// for a cluster-scoped resource, whose `ns` is `""`) and, for a new object, uid and
    /// creationTimestamp when missing. Returns the stored object.
    pub(crate) fn write(&mut self, res: Resource, ns: &str, mut obj: Value) -> Value {
        self.rv += 1;
        let key = (res, ns.to_owned(), name_of(&obj).to_owned());
        let old = self.objects.get(&key).cloned();
        set_type_meta(&mut obj, res);
        let meta = metadata_mut(&mut obj);
        if res.is_namespaced() {
            meta.insert("namespace".into(), Value::String(ns.to_owned()));
        } else {
            meta.remove("namespace");
        }
        meta.insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        if old.is_none() {
            if !meta.get("uid").is_some_and(Value::is_string) {
                meta.insert("uid".into(), Value::String(new_uid()));
            }
            if !meta.get("creationTimestamp").is_some_and(Value::is_string) {
                meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
            }
        }
        let kind = if old.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.objects.insert(key, obj.clone());
        self.history.push(Change {
            rv: self.rv,
            res,
            ns: ns.to_owned(),
            kind,
            object: obj.clone(),
            old,
        });
        obj
    }

    pub(crate) fn delete(&mut self, res: Resource, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self
            .objects
            .remove(&(res, ns.to_owned(), name.to_owned()))?;
        self.rv += 1;
        let old = obj.clone();
        metadata_mut(&mut obj).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        self.history.push(Change {
            rv: self.rv,
            res,
            ns: ns.to_owned(),
            kind: ChangeType::Deleted,
            object: obj.clone(),
            old: Some(old),
        });
        Some(obj)
    }

    /// Changes after `rv`, or `Err(oldest)` when `rv` is older than the kept history.
    pub(crate) fn changes_since(&self, rv: u64) -> Result<&[Change], u64> {
        if rv < self.floor {
            return Err(self.floor);
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(&self.history[start..])
    }

    /// Forgets the change history, as etcd compaction does: a watch from any older
    /// resourceVersion then gets `410 Expired`.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }
}

pub(crate) fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(crate) fn resource_version_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `metadata` as a map, created (or replaced when not a map) if needed.
pub(crate) fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(m) = obj else {
        unreachable!("made an object above")
    };
    let meta = m
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let Value::Object(meta) = meta else {
        unreachable!("made an object above")
    };
    meta
}

pub(crate) fn set_type_meta(obj: &mut Value, res: Resource) {
    if let Value::Object(m) = obj {
        m.insert("apiVersion".into(), Value::String(res.api_version()));
        m.insert("kind".into(), Value::String(res.kind().to_owned()));
    }
}

fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

/// A random version-4 UUID, as the API server gives every object.
pub(crate) fn new_uid() -> String {
    let (a, b) = (random_u64(), random_u64());
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// The 5-character suffix `generateName` gets (apiserver `names.SimpleNameGenerator`).
pub(crate) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(r % ALPHABET.len() as u64) as usize] as char;
            r /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Now, in the RFC 3339 form (seconds, UTC) of `metav1.Time`.
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    rfc3339(secs)
}

pub(crate) fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn uids_look_like_uuids() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(u, new_uid());
        assert_eq!(name_suffix().len(), 5);
    }

    #[test]
    fn writes_bump_the_resource_version_and_keep_history() {
        let mut s = Store::default();
        let a = s.write(Resource::Pods, "ns", json!({"metadata": {"name": "a"}}));
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        assert_eq!(a["kind"], "Pod");
        let uid = a["metadata"]["uid"].clone();
        let a2 = s.write(
            Resource::Pods,
            "ns",
            json!({"metadata": {"name": "a", "uid": uid}}),
        );
        assert_eq!(a2["metadata"]["resourceVersion"], "2");
        let gone = s.delete(Resource::Pods, "ns", "a").unwrap();
        assert_eq!(gone["metadata"]["resourceVersion"], "3");
        let kinds: Vec<ChangeType> = s.changes_since(0).unwrap().iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            [ChangeType::Added, ChangeType::Modified, ChangeType::Deleted]
        );
        assert_eq!(s.changes_since(2).unwrap().len(), 1);
        s.compact();
        assert_eq!(s.changes_since(2).unwrap_err(), 3);
        assert!(s.changes_since(3).unwrap().is_empty());
    }

    #[test]
    fn cluster_scoped_objects_have_no_namespace() {
        let mut s = Store::default();
        let pod = s.write(Resource::Pods, "ns", json!({"metadata": {"name": "a"}}));
        assert_eq!(pod["metadata"]["namespace"], "ns");
        let team = s.write(
            Resource::Namespaces,
            "",
            json!({"metadata": {"name": "team-a", "namespace": "stray"}}),
        );
        assert_eq!(team["kind"], "Namespace");
        assert!(team["metadata"].get("namespace").is_none(), "{team}");
        assert_eq!(s.get(Resource::Namespaces, "", "team-a"), Some(&team));
        assert_eq!(s.list(Resource::Namespaces, None), [&team]);
        assert_eq!(s.changes_since(1).unwrap()[0].ns, "");
        assert!(s.delete(Resource::Namespaces, "", "team-a").is_some());
        assert!(s.list(Resource::Namespaces, None).is_empty());
    }
}
