//! Attachment records: what plumb did to a pod sandbox, kept on disk so that DEL can always undo
//! what ADD began (multi-net spec §7.2; docs/architecture.md, "The way of one ADD"). One file per
//! sandbox, `<stateDir>/<containerID>.json`, written durably with every planned attachment before
//! the first delegate runs; DEL reads it, so it needs neither the pod, the NADs nor the API server.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The record format this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("attachment record {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "attachment record {path} is corrupt ({why}); plumb will not guess what to delete: \
         inspect the file, then delete the pod's attachments by hand or remove the file"
    )]
    Corrupt { path: PathBuf, why: String },
    #[error(
        "attachment record {path} has format version {found}, this plumb reads version \
         {RECORD_VERSION}"
    )]
    Version { path: PathBuf, found: u64 },
    #[error("invalid container ID for an attachment record: {0}")]
    ContainerId(String),
    #[error(
        "{what}: its configuration nests arrays and objects so deep that the attachment record \
         ({depth} levels) could not be read back, by DEL or GC ({MAX_NESTING} at most)"
    )]
    TooDeep { what: String, depth: usize },
    #[error(
        "{what}: its configuration makes the attachment record {size} bytes, more than DEL and \
         GC read back ({MAX_RECORD} at most)"
    )]
    TooLarge { what: String, size: u64 },
}

impl From<RecordError> for cni::CniError {
    fn from(e: RecordError) -> Self {
        let code = match e {
            RecordError::ContainerId(_) => cni::ErrorCode::InvalidEnvironment,
            RecordError::Corrupt { .. } | RecordError::Version { .. } => {
                cni::ErrorCode::DecodingFailure
            }
            RecordError::Io { .. } => cni::ErrorCode::Io,
            RecordError::TooDeep { .. } | RecordError::TooLarge { .. } => {
                cni::ErrorCode::InvalidConfig
            }
        };
        cni::CniError::new(code, e.to_string())
    }
}

/// Why the bytes of a record file are not a record this plumb reads.
#[derive(Debug)]
pub enum Decoded {
    Corrupt(String),
    /// Another format version than [`RECORD_VERSION`].
    Version(u64),
}

/// A record from the bytes of its file (untrusted: damaged, edited by hand, or written by
/// another plumb version).
pub fn decode(bytes: &[u8]) -> Result<Record, Decoded> {
    let probe: Value =
        serde_json::from_slice(bytes).map_err(|e| Decoded::Corrupt(e.to_string()))?;
    // A file without a format version is not a record of any plumb: corrupt, not "version 0".
    let found = match probe.get("version") {
        Some(v) => v.as_u64().ok_or_else(|| {
            Decoded::Corrupt(format!(
                "its \"version\" is {v}, not a format version number"
            ))
        })?,
        None => return Err(Decoded::Corrupt("it has no format \"version\"".into())),
    };
    if found != u64::from(RECORD_VERSION) {
        return Err(Decoded::Version(found));
    }
    let record: Record =
        serde_json::from_value(probe).map_err(|e| Decoded::Corrupt(e.to_string()))?;
    // Every name plumb records was checked before ADD used it: one that is not a name now was
    // damaged or edited, which is the record's fault, not CNI_IFNAME's (code 4, as the
    // delegates' request would otherwise report it).
    for (i, a) in record.attachments.iter().enumerate() {
        if let Some(why) = cni::validate::interface_name_problem(&a.ifname) {
            return Err(Decoded::Corrupt(format!(
                "attachment {} (network {}) has the interface name {:?}: {why}",
                i + 1,
                a.network,
                a.ifname
            )));
        }
    }
    Ok(record)
}

/// The most arrays and objects nested in one another that [`decode`] reads (serde_json's
/// recursion limit). A delegate configuration read with that same limit nests up to it from
/// its own top; in a record it sits three levels down, so one near the limit was written and
/// then read back as corrupt, failing every DEL of the sandbox (and skipping GC) for good.
const MAX_NESTING: usize = 127;

/// The largest record read: one holds a sandbox's delegate configurations (each a NAD's,
/// which Kubernetes bounds at about 1.5 MiB), a few KiB in practice.
pub const MAX_RECORD: u64 = 64 << 20;

/// How deep arrays and objects nest in the JSON text `bytes`.
fn nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The error for `record`, nested `depth` deep, naming the attachment that makes it so.
fn too_deep(record: &Record, depth: usize) -> RecordError {
    let what = naming(record, nesting);
    RecordError::TooDeep { what, depth }
}

fn too_large(record: &Record, size: usize) -> RecordError {
    let what = naming(record, |bytes| bytes.len());
    RecordError::TooLarge {
        what,
        size: size as u64,
    }
}

/// The attachment of `record` that `measure` (of its JSON) finds largest, for an error: the
/// network to look at.
fn naming(record: &Record, measure: impl Fn(&[u8]) -> usize) -> String {
    let largest = record
        .attachments
        .iter()
        .max_by_key(|a| serde_json::to_vec(a).map_or(0, |bytes| measure(&bytes)));
    match largest {
        Some(a) => format!("network {} interface {}", a.network, a.ifname),
        None => format!("container {}", record.container_id),
    }
}

/// One attachment of the sandbox, with everything DEL needs to undo it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedAttachment {
    /// `namespace/name` of the NAD, or the network name for config-file delegates.
    pub network: String,
    pub ifname: String,
    /// The exact configuration list the delegates were run with.
    pub config: Value,
    /// The network's own configuration list, when the delegates' differs from it by what this
    /// attachment added (its `cni-args`, IPAM claim or device ID): what GC and STATUS run the
    /// network with. Absent in records of plumb before 2026-11-24, which GC and STATUS read
    /// from `config` as they did then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_config: Option<Value>,
    /// Capability arguments given to the delegates.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub capability_args: Map<String, Value>,
    /// The cluster-wide default network.
    #[serde(default)]
    pub default: bool,
    /// The selection element's `default-route` gateways (multi-net spec §4.1.2.1.9), when it
    /// had the key: a change of them is a change of the attachment (`change`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_route: Option<Vec<std::net::IpAddr>>,
    /// The per-attachment device-info file to remove on DEL (device-info spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_info_file: Option<PathBuf>,
    /// Named by a change of the running pod whose ADD of it has not finished (the daemon
    /// stopped, or its rollback failed): the next change attaches it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

/// Everything plumb did to one sandbox.
///
/// Written atomically and durably (temporary file, fsync, rename, directory fsync:
/// [`cni::cache::write_durable`]) with every planned attachment *before* the first delegate reads
/// its configuration (the fsyncs overlap that delegate's start-up: `execute`, `PendingRecord`;
/// when the first attachment has a device plugin's device-info file to copy, before that copy),
/// so a crash or a kill at any point leaves a record that names every delegate and file that may
/// have been acted on (DEL of an attachment that never ran is harmless: DEL is idempotent). A
/// DEL, or a rollback, that undoes only part of it rewrites it with what is left; a failed ADD
/// wholly undone leaves it naming nothing, so the runtime's DEL after it has nothing to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub version: u32,
    pub container_id: String,
    pub netns: String,
    #[serde(default)]
    pub pod_namespace: String,
    #[serde(default)]
    pub pod_name: String,
    #[serde(default)]
    pub pod_uid: String,
    /// CNI_ARGS given to every delegate.
    #[serde(default)]
    pub cni_args: Vec<(String, String)>,
    pub attachments: Vec<RecordedAttachment>,
    /// Made by `plumb attach`, not by a runtime: the runtime's GC, which lists only its own
    /// sandboxes as valid, must leave it and its delegates' addresses alone (`plumb detach`
    /// removes it). Written only when true, so records of the runtime's look as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub standalone: bool,
    /// What a change of the pod's attachments needs (dynamic attachments), recorded by the
    /// ADD of a pod from Kubernetes. Absent in records of plumb before 2026-12-06 and of
    /// sandboxes without a pod: their attachments are not changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_changes: Option<ChangeBasis>,
}

/// What the ADD of a sandbox was given and found, so that a later change of its pod's
/// networks annotation runs its delegates as that ADD would have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeBasis {
    /// The pod's `k8s.v1.cni.cncf.io/networks` annotation the recorded attachments follow
    /// (empty: none): a pod whose annotation is this has nothing to change. `None` while a
    /// change is made, and after one that failed: the next change plans the pod again.
    pub selection: Option<String>,
    /// The inode of the sandbox's network namespace at ADD: a path that names another
    /// namespace now (the sandbox gone, its path reused) is not acted on.
    pub netns_inode: u64,
    /// The network configuration the runtime gave plumb (its `runtimeConfig` included).
    pub config: Value,
    /// `CNI_PATH`.
    #[serde(default)]
    pub cni_path: Vec<PathBuf>,
}

/// The directory of records.
#[derive(Clone, Debug)]
pub struct RecordStore {
    dir: PathBuf,
}

impl RecordStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        RecordStore { dir: dir.into() }
    }

    /// `<dir>/<containerID>.json`; the container ID is validated so the name stays inside.
    pub fn path(&self, container_id: &str) -> Result<PathBuf, RecordError> {
        cni::validate::container_id(container_id).map_err(|e| RecordError::ContainerId(e.msg))?;
        Ok(self.dir.join(format!("{container_id}.json")))
    }

    /// `<dir>/<containerID>.lock`, the container's lock (`container_lock`); the
    /// container ID is validated so the name stays inside. Not `.json`: never listed as a record.
    pub fn lock_path(&self, container_id: &str) -> Result<PathBuf, RecordError> {
        cni::validate::container_id(container_id).map_err(|e| RecordError::ContainerId(e.msg))?;
        Ok(self.dir.join(format!("{container_id}.lock")))
    }

    /// Puts the record in place, durably (replacing the one there, if any).
    pub fn save(&self, record: &Record) -> Result<(), cni::CniError> {
        self.stage(record)?
            .commit_durable()
            .map_err(|e| e.context("attachment record"))
    }

    /// Writes the record beside its place (creating the directory, 0700), for
    /// [`cni::cache::Staged::commit_durable`] to put it there.
    pub fn stage(&self, record: &Record) -> Result<cni::cache::Staged, RecordError> {
        let path = self.path(&record.container_id)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|source| RecordError::Io {
                path: self.dir.clone(),
                source,
            })?;
        let bytes = serde_json::to_vec_pretty(record).expect("a record serialises");
        let depth = nesting(&bytes);
        if depth > MAX_NESTING {
            return Err(too_deep(record, depth));
        }
        // Refused now, before any delegate runs, rather than written and then refused by every
        // DEL (load reads at most MAX_RECORD), which would keep the sandbox for ever.
        if bytes.len() as u64 > MAX_RECORD {
            return Err(too_large(record, bytes.len()));
        }
        cni::cache::stage(&path, &bytes).map_err(|e| RecordError::Io {
            path: path.clone(),
            source: io::Error::other(e.msg),
        })
    }

    /// The record of a sandbox; `Ok(None)` when there is none. An unreadable or corrupt record,
    /// or one of another format `version`, is an error that says so, never a silent "nothing to
    /// delete" (Multus issue #1087: a corrupt cache after a reboot leaked every IP of the pod).
    pub fn load(&self, container_id: &str) -> Result<Option<Record>, RecordError> {
        let path = self.path(container_id)?;
        // Bounded, and an error at once for anything but a regular file (a FIFO would hold DEL).
        let bytes = match cni::files::read_bounded(&path, MAX_RECORD) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(RecordError::Io { path, source }),
        };
        let record = decode(&bytes).map_err(|why| match why {
            Decoded::Corrupt(why) => RecordError::Corrupt {
                path: path.clone(),
                why,
            },
            Decoded::Version(found) => RecordError::Version {
                path: path.clone(),
                found,
            },
        })?;
        // A file that holds another container's record (copied or edited by hand) must not be
        // acted on: DEL would run that container's delegates under this one's ID, then remove or
        // rewrite the other container's record, which is kept by the ID inside.
        if record.container_id != container_id {
            return Err(RecordError::Corrupt {
                path,
                why: format!(
                    "it names container {:?}, not {container_id:?}",
                    record.container_id
                ),
            });
        }
        Ok(Some(record))
    }

    /// Removes a record; a missing one is fine (DEL is idempotent).
    pub fn remove(&self, container_id: &str) -> Result<(), RecordError> {
        let path = self.path(container_id)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(RecordError::Io { path, source }),
        }
    }

    /// Removes what a call killed while it wrote the sandbox's record left under a temporary
    /// name ([`cni::cache::stage`]; GC would remove it only once it is old). For a caller that
    /// holds the container's turn, so that no call is writing one now. Returns the files
    /// removed.
    pub fn remove_staged(&self, container_id: &str) -> Vec<PathBuf> {
        self.path(container_id)
            .map(|path| cni::cache::remove_staged(&path))
            .unwrap_or_default()
    }

    /// The container IDs that have a record (none when the directory does not exist yet).
    pub fn list(&self) -> Result<Vec<String>, RecordError> {
        self.ids_with_suffix(".json")
    }

    /// The container IDs that have a lock file (`container_lock`), with or without a
    /// record (none when the directory does not exist yet).
    pub fn locked_ids(&self) -> Result<Vec<String>, RecordError> {
        self.ids_with_suffix(".lock")
    }

    fn ids_with_suffix(&self, suffix: &str) -> Result<Vec<String>, RecordError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(RecordError::Io {
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let mut ids: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(suffix).map(str::to_string))
            .filter(|id| cni::validate::container_id(id).is_ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_that_is_a_fifo_is_refused_at_once() {
        // DEL reads the record first: a FIFO in its place held the call with no error.
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let path = store.path("abc123").unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(store.load("abc123").map(drop));
        });
        let e = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("load waited on the FIFO")
            .unwrap_err();
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }

    fn record() -> Record {
        Record {
            version: RECORD_VERSION,
            container_id: "abc123".into(),
            netns: "/var/run/netns/p".into(),
            pod_namespace: "default".into(),
            pod_name: "web".into(),
            pod_uid: "u-1".into(),
            cni_args: vec![("K8S_POD_NAME".into(), "web".into())],
            attachments: vec![RecordedAttachment {
                network: "default/net-a".into(),
                ifname: "net1".into(),
                config: json!({"cniVersion": "1.0.0", "name": "net-a", "plugins": [{"type": "bridge"}]}),
                network_config: None,
                capability_args: Map::new(),
                default: false,
                default_route: None,
                device_info_file: None,
                pending: false,
            }],
            standalone: false,
            for_changes: None,
        }
    }

    #[test]
    fn only_a_standalone_record_says_so() {
        // A runtime's record is written as before the field existed; attach's says it is one.
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let mut r = record();
        store.save(&r).unwrap();
        let text = fs::read_to_string(d.path().join("abc123.json")).unwrap();
        assert!(!text.contains("standalone"), "{text}");
        r.standalone = true;
        store.save(&r).unwrap();
        assert!(store.load("abc123").unwrap().unwrap().standalone);
    }

    #[test]
    fn saves_atomically_and_loads_back() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path().join("plumb"));
        assert!(store.load("abc123").unwrap().is_none());
        let mut r = record();
        store.save(&r).unwrap();
        r.attachments[0].ifname = "net2".into();
        store.save(&r).unwrap();
        assert_eq!(store.load("abc123").unwrap().unwrap(), r);
        let mode = fs::metadata(store.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(
            fs::read_dir(store.dir()).unwrap().count(),
            1,
            "no temp file left"
        );
        store.remove("abc123").unwrap();
        store.remove("abc123").unwrap();
        assert!(store.load("abc123").unwrap().is_none());
    }

    /// A delegate configuration list with `levels` arrays and objects nested in one another.
    fn nested_config(levels: usize) -> Value {
        // The list, its plugins and the plugin are three; the rest nest in a key of the plugin.
        let mut text = String::from("1");
        for _ in 0..levels - 3 {
            text = format!("{{\"a\":{text}}}");
        }
        let text = format!(
            "{{\"cniVersion\":\"1.0.0\",\"name\":\"deep\",\"plugins\":[{{\"type\":\"bridge\",\
             \"x\":{text}}}]}}"
        );
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn a_configuration_too_deep_to_read_back_is_refused_before_it_is_recorded() {
        // serde_json reads a NAD's configuration nested up to 127 levels, and a record holds
        // it three levels down: one that deep made a record that ADD wrote and every DEL then
        // refused as corrupt, so the sandbox could never be deleted (and GC skipped the node's
        // networks). Such a record is refused when ADD would write it, before any delegate
        // runs, with code 7 naming the network; what can be read back is written as before.
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let mut r = record();
        r.attachments[0].config = nested_config(127);
        let e = store.save(&r).unwrap_err();
        assert_eq!(e.code, 7, "{e}");
        assert!(
            e.msg.contains("network default/net-a interface net1") && e.msg.contains("130"),
            "{e}"
        );
        assert_eq!(
            fs::read_dir(d.path()).unwrap().count(),
            0,
            "nothing written"
        );
        r.attachments[0].config = nested_config(124);
        store.save(&r).unwrap();
        assert_eq!(store.load("abc123").unwrap().unwrap(), r);
        // Brackets inside strings are not nesting.
        r.attachments[0].config = json!({"cniVersion": "1.0.0", "name": "n",
            "plugins": [{"type": "bridge", "x": "[[[[{{{{\\\"".repeat(100)}]});
        store.save(&r).unwrap();
        assert_eq!(store.load("abc123").unwrap().unwrap(), r);
    }

    #[test]
    fn a_record_too_large_to_read_back_is_refused_before_it_is_recorded() {
        // DEL reads at most MAX_RECORD bytes of a record; ADD wrote larger ones (a huge inline
        // delegate configuration, stored twice per attachment), which every DEL then refused.
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let mut r = record();
        let big = "x".repeat(usize::try_from(MAX_RECORD).unwrap() / 2 + 1);
        r.attachments[0].config = json!({"cniVersion": "1.0.0", "name": "n",
            "plugins": [{"type": "bridge", "x": big}]});
        r.attachments[0].network_config = Some(r.attachments[0].config.clone());
        let e = store.save(&r).unwrap_err();
        assert_eq!(e.code, 7, "{e}");
        assert!(
            e.msg.contains("network default/net-a interface net1") && e.msg.contains("bytes"),
            "{e}"
        );
        assert_eq!(
            fs::read_dir(d.path()).unwrap().count(),
            0,
            "nothing written"
        );
    }

    #[test]
    fn a_recorded_interface_name_that_is_not_one_makes_the_record_corrupt() {
        // Damaged or edited: an error about the record (code 6, naming it and the attachment),
        // not about the runtime's CNI_IFNAME (code 4), which was fine.
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let mut r = record();
        r.attachments[0].ifname = "eth0/../x".into();
        fs::write(
            d.path().join("abc123.json"),
            serde_json::to_vec(&r).unwrap(),
        )
        .unwrap();
        let e: cni::CniError = store.load("abc123").unwrap_err().into();
        assert_eq!(e.code, 6, "{e}");
        assert!(
            e.msg.contains("abc123.json")
                && e.msg.contains("attachment 1 (network default/net-a)")
                && e.msg.contains("\"eth0/../x\""),
            "{e}"
        );
    }

    #[test]
    fn corrupt_and_foreign_versions_are_errors_not_silence() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        fs::write(d.path().join("abc123.json"), "{\"version\":1,").unwrap();
        let e = store.load("abc123").unwrap_err();
        assert!(matches!(e, RecordError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("corrupt"));
        fs::write(d.path().join("abc123.json"), r#"{"version":9}"#).unwrap();
        assert!(matches!(
            store.load("abc123").unwrap_err(),
            RecordError::Version { found: 9, .. }
        ));
        fs::write(
            d.path().join("abc123.json"),
            r#"{"version":1,"attachments":"x"}"#,
        )
        .unwrap();
        assert!(matches!(
            store.load("abc123").unwrap_err(),
            RecordError::Corrupt { .. }
        ));
        // No format version, or one that is not a number: corrupt, never read as "version 0".
        for text in [
            "{}",
            "[]",
            "null",
            r#"{"version":"1"}"#,
            r#"{"version":-1}"#,
        ] {
            fs::write(d.path().join("abc123.json"), text).unwrap();
            let e = store.load("abc123").unwrap_err();
            assert!(matches!(e, RecordError::Corrupt { .. }), "{text}: {e}");
            assert!(e.to_string().contains("version"), "{text}: {e}");
        }
        // A version beyond 32 bits is named as it is.
        fs::write(d.path().join("abc123.json"), r#"{"version":4294967297}"#).unwrap();
        assert!(matches!(
            store.load("abc123").unwrap_err(),
            RecordError::Version {
                found: 4294967297,
                ..
            }
        ));
        let e: cni::CniError = store.load("../etc/passwd").unwrap_err().into();
        assert_eq!(e.code, 4);
    }
}
