//! plumb's own CNI configuration on the node, `00-plumb.conflist`, written by `plumb daemon
//! --write-config` once the default network is ready and kept in step with it: Multus's
//! auto-configuration (docs/multus-behaviour.md §1.5, §3.3; docs/architecture.md "Paths"). The
//! default network's configuration, the first file of the runtime's directory by name, as the
//! runtime itself would choose it, is embedded as plumb's `delegates[0]`, its plugins'
//! capabilities declared as plumb's (CNI spec §3 "Deriving runtimeConfig").

use std::path::{Path, PathBuf};

use cni::error::{CniError, ErrorCode};
use netattach::runtime_config::capability;
use serde_json::{Map, Value, json};

use plumb_engine::config::Config;

/// The file written, first by name, so that the runtime takes it before the default network's.
pub const OUTPUT: &str = "00-plumb.conflist";

/// The name of the network in the file (Multus's is `multus-cni-network`).
pub const NETWORK_NAME: &str = "plumb-cni-network";

/// The keys the daemon fills in itself: a template that gives one would be overridden.
const FILLED: &[&str] = &[
    "type",
    "name",
    "cniVersion",
    "clusterNetwork",
    "delegates",
    "plugins",
];

/// The plugins whose configuration is never the default network's (plumb's own and Multus's:
/// plumb would call itself, or Multus, for every pod), such as an old hand-written
/// `00-plumb.conf` or a `00-multus.conf` left from a migration.
const NOT_A_DEFAULT_NETWORK: &[&str] = &["plumb", "multus", "multus-shim"];

/// The largest configuration file read: the runtime's are a few KiB.
const MAX_CONF_FILE: u64 = 1 << 20;

/// What [`ConfWriter::step`] did.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Nothing changed.
    Same,
    /// The file was written, for the reason given.
    Wrote(String),
    /// The file was removed, for the reason given.
    Removed(String),
    /// Nothing can be written yet, for the reason given (said once until it changes).
    Waiting(String),
}

impl Step {
    /// This step as a writer looking every second says it: a reason to wait once, until
    /// another comes or the wait ends (`Same` meanwhile). `waiting` is the reason said last.
    pub fn said_once(self, waiting: &mut Option<String>) -> Step {
        match self {
            Step::Waiting(why) if waiting.as_ref() == Some(&why) => Step::Same,
            Step::Waiting(why) => {
                *waiting = Some(why.clone());
                Step::Waiting(why)
            }
            // Removed for want of what it was written for: waiting for it now, said already.
            Step::Removed(why) => {
                *waiting = Some(why.clone());
                Step::Removed(why)
            }
            other => {
                *waiting = None;
                other
            }
        }
    }
}

/// Writes and keeps `00-plumb.conflist` in a runtime's configuration directory. The file stays
/// when the daemon stops: the plugin then runs its calls itself (docs/daemon.md), where
/// Multus's thick daemon deletes its file and pods start on the default network alone
/// (docs/multus-behaviour.md §5.2, Multus issue #1527).
#[derive(Debug)]
pub struct ConfWriter {
    /// The runtime's configuration directory as the daemon sees it.
    dir: PathBuf,
    /// The file name of the default network's configuration, when told.
    primary: Option<String>,
    /// plumb's configuration keys, as the plugin will see them.
    template: Map<String, Value>,
    /// The template's `readinessindicatorfile`: the default network is ready once it is there.
    ready_when: Option<PathBuf>,
    /// The last reason for waiting, so that each is said once.
    waiting: Option<String>,
}

impl ConfWriter {
    /// A writer into `dir` from the template file `template` (plumb's configuration keys but
    /// those the daemon fills in, paths as the runtime and the plugin see them). The
    /// template's `plumbDaemonSocket` defaults to `socket`, the daemon's own (none: the daemon
    /// serves no calls).
    pub fn new(
        template: &Path,
        dir: PathBuf,
        primary: Option<String>,
        socket: Option<&Path>,
    ) -> Result<ConfWriter, CniError> {
        let at = |msg: String| {
            CniError::new(
                ErrorCode::InvalidConfig,
                format!("--write-config {}: {msg}", template.display()),
            )
        };
        if let Some(p) = &primary
            && (p.is_empty() || p.contains('/'))
        {
            return Err(at(format!(
                "--primary-config {p:?} must be a file name in {}",
                dir.display()
            )));
        }
        let bytes = cni::files::read_bounded(template, MAX_CONF_FILE)
            .map_err(|e| CniError::new(ErrorCode::Io, format!("{}: {e}", template.display())))?;
        // What the fuzz target plumb_default_network_conf checks, the same function.
        let (keys, ready_when) = template_keys(&bytes, socket).map_err(at)?;
        Ok(ConfWriter {
            dir,
            primary,
            template: keys,
            ready_when,
            waiting: None,
        })
    }

    /// The file written.
    pub fn output(&self) -> PathBuf {
        self.dir.join(OUTPUT)
    }

    /// One look at the directory: writes the file when the default network's configuration
    /// is there and the file does not hold what it should, removes it when that
    /// configuration is gone. So the file exists exactly while the default network's does: the
    /// runtime does not take the node for ready before it is (docs/multus-behaviour.md §5.4),
    /// and a default network that removes its configuration to take the node out (on its own
    /// shutdown, say) still does.
    pub fn step(&mut self) -> Step {
        let step = match self.default_network() {
            // The template says when the default network is ready: until then its
            // configuration may be there (Flannel's, say, before flanneld has its subnet), and
            // written, the node would look ready while every ADD waited 45 s for the file and
            // failed (Multus's thin installer does so: docs/multus-behaviour.md §3.3, #1306). Read
            // where the plugin reads it, since the daemon runs the calls with the node's view.
            // A file written already is kept, as for a default network that cannot be read.
            Ok(Found::Conf(..)) if self.ready_when.as_ref().is_some_and(|file| !file.exists()) => {
                Step::Waiting(format!(
                    "the default network is not ready: readinessindicatorfile {} is missing",
                    self.ready_when.as_ref().expect("checked").display()
                ))
            }
            Ok(Found::Conf(name, conf, skipped)) => self.write(&name, &conf, &skipped),
            Ok(Found::None(skipped)) => self.remove(&skipped),
            Err(why) => Step::Waiting(why),
        };
        step.said_once(&mut self.waiting)
    }

    /// The default network's configuration file, or none; an error saying why the one there
    /// cannot be read (it may be half written: the next look reads it again, and no later file
    /// is taken in its place).
    fn default_network(&self) -> Result<Found, String> {
        let names = match &self.primary {
            Some(p) => vec![p.clone()],
            None => self.candidates()?,
        };
        let mut skipped = Vec::new();
        for name in names {
            let path = self.dir.join(&name);
            let bytes = match cni::files::read_bounded(&path, MAX_CONF_FILE) {
                Ok(b) => b,
                // Gone since it was listed; but a link to nothing is there, and the runtime
                // would fail on it as well.
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && std::fs::symlink_metadata(&path).is_err() =>
                {
                    continue;
                }
                Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
            };
            let conf: Value = match serde_json::from_slice(&bytes) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => return Err(format!("{}: not a JSON object", path.display())),
                Err(e) => return Err(format!("{}: invalid JSON: {e}", path.display())),
            };
            let kind = plugin_type(&conf);
            if NOT_A_DEFAULT_NETWORK.contains(&kind) {
                if self.primary.is_some() {
                    return Err(format!(
                        "{}: a configuration of {kind:?}, not of a default network",
                        path.display()
                    ));
                }
                skipped.push(Skipped {
                    name,
                    kind: kind.to_string(),
                });
                continue;
            }
            if let Some(why) = unusable(&conf) {
                return Err(format!("{}: {why}", path.display()));
            }
            return Ok(Found::Conf(name, conf, skipped));
        }
        Ok(Found::None(skipped))
    }

    /// The directory's configuration files by name, without this writer's own file (its
    /// temporary file, `.00-plumb.conflist.tmp<pid>`, has none of the extensions).
    fn candidates(&self) -> Result<Vec<String>, String> {
        Ok(conf_files(&self.dir)?
            .into_iter()
            .filter(|n| n != OUTPUT)
            .collect())
    }

    /// Writes the file for the default network `conf` (read from `name`) unless it holds that
    /// already. The reason said warns of a configuration `skipped` that the runtime takes
    /// before plumb's (one that sorts before it by name).
    fn write(&self, name: &str, conf: &Value, skipped: &[Skipped]) -> Step {
        let list = conflist(&self.template, conf);
        let mut bytes = serde_json::to_vec_pretty(&list).expect("JSON values serialize");
        bytes.push(b'\n');
        let path = self.output();
        if cni::files::holds(&path, &bytes) {
            return Step::Same;
        }
        let changed = path.symlink_metadata().is_ok();
        // A `00-multus.conf` left by a migration comes first by name: the runtime would go
        // on calling Multus and never read this file.
        let first: Vec<String> = skipped
            .iter()
            .filter(|s| s.name.as_str() < OUTPUT)
            .map(|s| format!("{} ({:?})", s.name, s.kind))
            .collect();
        let warning = if first.is_empty() && name < OUTPUT {
            // The default network's own file sorts first (a `00-calico.conflist`): the
            // runtime takes it and never reads plumb's, and pods got the default network alone
            // while the daemon said only that it wrote plumb's.
            format!(
                "; but the runtime takes {name} itself first, which sorts before it by name: \
                 plumb is not called until the default network's file is named to sort after it"
            )
        } else if first.is_empty() {
            String::new()
        } else {
            format!(
                "; but the runtime takes {} first, which sorts before it by name: remove it \
                 for plumb's to be used",
                first.join(", ")
            )
        };
        // Durable: a node that loses power just after must not come back with a half-written
        // file that the runtime takes for plumb's.
        match cni::cache::write_durable(&path, &bytes) {
            Ok(()) => Step::Wrote(format!(
                "the default network is {name} ({}){}{warning}",
                conf["name"].as_str().unwrap_or("unnamed"),
                if changed { ", changed" } else { "" }
            )),
            // The error names the file already.
            Err(e) => Step::Waiting(e.msg),
        }
    }

    /// Removes the file if it is one a daemon wrote (an operator's own file of that name is
    /// left alone). The reason said names the configurations `skipped`.
    fn remove(&self, skipped: &[Skipped]) -> Step {
        let path = self.output();
        let none = format!(
            "no configuration of a default network in {}{}{}",
            self.dir.display(),
            match &self.primary {
                Some(p) => format!(" (--primary-config {p})"),
                None => String::new(),
            },
            skipped
                .iter()
                .map(|s| format!(
                    "; {} is one of {:?}, not of a default network",
                    s.name, s.kind
                ))
                .collect::<String>()
        );
        let Ok(bytes) = cni::files::read_bounded(&path, MAX_CONF_FILE) else {
            return Step::Waiting(none);
        };
        if !written_by_a_daemon(&bytes) {
            return Step::Waiting(none);
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Step::Removed(none),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Step::Waiting(none),
            Err(e) => Step::Waiting(format!("cannot remove {}: {e}", path.display())),
        }
    }
}

/// Whether `bytes`, the content of [`OUTPUT`], are plumb's configuration as a daemon writes it
/// (an operator's own file of that name is not).
fn written_by_a_daemon(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes)
        .is_ok_and(|v| v["name"] == NETWORK_NAME && plugin_type(&v) == "plumb")
}

/// plumb's configuration list in `dir`, if a daemon wrote it.
pub fn written(dir: &Path) -> Option<Value> {
    let bytes = cni::files::read_bounded(&dir.join(OUTPUT), MAX_CONF_FILE).ok()?;
    written_by_a_daemon(&bytes).then(|| serde_json::from_slice(&bytes).ok())?
}

/// The configuration files of `dir` by name, as a runtime lists and orders them (libcni's
/// `ConfFiles`: every entry that is not a directory, a link included, whose extension is
/// `.conf`, `.conflist` or `.json`); none when `dir` does not exist.
fn conf_files(dir: &Path) -> Result<Vec<String>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            // The entry's own type, a link's not followed, as libcni's `IsDir`.
            (!e.file_type().ok()?.is_dir()).then_some(e.file_name().into_string().ok()?)
        })
        .filter(|n| {
            [".conf", ".conflist", ".json"]
                .iter()
                .any(|ext| n.ends_with(ext))
        })
        .collect();
    names.sort();
    Ok(names)
}

/// The configuration files of `dir` whose plugin is plumb, other than one a daemon wrote.
pub fn naming_plumb(dir: &Path) -> Vec<String> {
    (conf_files(dir).unwrap_or_default().into_iter())
        .filter(|n| {
            let Ok(bytes) = cni::files::read_bounded(&dir.join(n), MAX_CONF_FILE) else {
                return false;
            };
            serde_json::from_slice::<Value>(&bytes).is_ok_and(|v| {
                plugins(&v).iter().any(|p| p["type"] == "plumb")
                    && !(n == OUTPUT && written_by_a_daemon(&bytes))
            })
        })
        .collect()
}

/// What a look at the directory found.
enum Found {
    /// The default network's configuration: its file's name, its JSON, and the files before
    /// it that were skipped.
    Conf(String, Value, Vec<Skipped>),
    /// None, and the files skipped.
    None(Vec<Skipped>),
}

/// A configuration file not taken for the default network's: plumb's or Multus's own.
struct Skipped {
    name: String,
    /// Its plugin's type.
    kind: String,
}

/// The template's keys from the file's `bytes`, as the plugin will read them, and its
/// `readinessindicatorfile`; or what is wrong with it. Its `plumbDaemonSocket` defaults to
/// `socket`, the daemon's own; with none (`--files-only`: the plugin runs every call), it must
/// give none.
pub fn template_keys(
    bytes: &[u8],
    socket: Option<&Path>,
) -> Result<(Map<String, Value>, Option<PathBuf>), String> {
    let keys = template_object(bytes)?;
    checked_template(keys, socket)
}

/// The template file's `bytes` as an object whose keys are spelled as plumb spells them, none
/// of them one the daemon fills in. The plugin reads Multus's keys in any case
/// (the engine's `config::canonical_keys`), so a key is judged by its canonical name here too: a
/// `ClusterNetwork` would otherwise pass and override the default network in every ADD, and a
/// `Capabilities` would sit beside the one the daemon writes, failing every ADD.
fn template_object(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let keys = match serde_json::from_slice(bytes) {
        Ok(Value::Object(m)) => m,
        Ok(other) => {
            let other = cni::quote::cut(&other.to_string(), cni::quote::VALUE).into_owned();
            return Err(format!("not a JSON object but {other}"));
        }
        Err(e) => return Err(format!("invalid JSON: {e}")),
    };
    // As the plugin reads it (the engine's `Config::parse`): a key given twice is refused.
    let checked = cni::json_keys::Checked::Object {
        nested: &["capabilities", "runtimeConfig"],
    };
    if let Some(twice) = cni::json_keys::duplicate_key(bytes, checked) {
        return Err(twice);
    }
    let given: Vec<String> = keys.keys().cloned().collect();
    // The warnings (a key read in another case) are not said: the file is written with the
    // canonical names, so the plugin reads it without them.
    let keys = plumb_engine::config::canonical_keys(keys, &mut Vec::new()).map_err(|e| e.msg)?;
    if let Some(k) = FILLED.iter().find(|k| keys.contains_key(**k)) {
        let instead = match *k {
            "clusterNetwork" | "delegates" => {
                " (--primary-config names the default network's file)"
            }
            _ => "",
        };
        let as_given =
            given
                .iter()
                .find(|g| g.eq_ignore_ascii_case(k))
                .map_or(String::new(), |g| {
                    if g == k {
                        String::new()
                    } else {
                        format!(" (given as {g:?})")
                    }
                });
        return Err(format!(
            "{k:?}{as_given} is filled in by the daemon from the default network's \
             configuration; remove it{instead}"
        ));
    }
    if let Some(Value::Object(caps)) = keys.get("capabilities") {
        for given in caps.keys() {
            if let Some(known) = capability::KNOWN
                .iter()
                .find(|k| k.eq_ignore_ascii_case(given) && *k != given)
            {
                return Err(format!(
                    "capability {given:?}: runtimes match capability names exactly, so they \
                     would pass nothing for it; write {known:?}"
                ));
            }
        }
    }
    Ok(keys)
}

/// The template's `keys` read now as the plugin will read them, with a default network
/// standing in for the node's: a key mistyped fails here, once, not in every ADD.
fn checked_template(
    mut keys: Map<String, Value>,
    socket: Option<&Path>,
) -> Result<(Map<String, Value>, Option<PathBuf>), String> {
    match socket {
        Some(socket) => {
            keys.entry("plumbDaemonSocket")
                .or_insert_with(|| json!(socket));
        }
        None if keys.contains_key("plumbDaemonSocket") => {
            return Err(
                "\"plumbDaemonSocket\": this daemon serves no calls (--files-only), \
                        so the plugin must run them itself; remove it"
                    .to_string(),
            );
        }
        None => {}
    }
    let probe = json!({"cniVersion": "1.0.0", "name": "probe", "type": "probe"});
    let list = json!({"cniVersion": "1.0.0", "name": NETWORK_NAME,
                      "plugins": [plugin_entry(&keys, &probe)]});
    let stdin = plumb_stdin(&list).expect("the list has plumb's entry");
    let config = Config::parse(stdin.to_string().as_bytes()).map_err(|e| e.msg)?;
    Ok((keys, config.readiness_indicator_file))
}

/// plumb's entry in the list: the template's keys, the default network embedded as
/// `delegates[0]` (so the file holds no path of the daemon's own view), and the capabilities of
/// its plugins declared as plumb's, so that the runtime passes their arguments (CNI spec §3
/// "Deriving runtimeConfig"; the template's own say first, so one can be turned off). The
/// plugin reads capability names in any case and refuses two that differ only by case, so a
/// template's key and a plugin's that differ only by case are one key, the template's.
fn plugin_entry(template: &Map<String, Value>, conf: &Value) -> Value {
    let mut entry = template.clone();
    let mut caps = match template.get("capabilities") {
        Some(Value::Object(c)) => c.clone(),
        _ => Map::new(),
    };
    for plugin in plugins(conf) {
        if let Some(Value::Object(c)) = plugin.get("capabilities") {
            for (k, v) in c {
                if v == &Value::Bool(true) && !caps.keys().any(|c| c.eq_ignore_ascii_case(k)) {
                    caps.insert(k.clone(), Value::Bool(true));
                }
            }
        }
    }
    if !caps.is_empty() {
        entry.insert("capabilities".into(), Value::Object(caps));
    }
    entry.insert("type".into(), json!("plumb"));
    entry.insert("delegates".into(), json!([conf]));
    Value::Object(entry)
}

/// plumb's configuration list from the `template` keys for the default network `conf`, whose
/// `cniVersion` is the list's.
pub fn conflist(template: &Map<String, Value>, conf: &Value) -> Value {
    json!({
        "cniVersion": conf["cniVersion"],
        "name": NETWORK_NAME,
        "plugins": [plugin_entry(template, conf)],
    })
}

/// Why the plugin could not take `conf` as its default network, if it could not: it must
/// have a `cniVersion` that plumb answers in (the list's is the default network's), and read as
/// every ADD reads `delegates[0]` (the engine's `plan`). A configuration that fails so (half written, or
/// broken) is waited for rather than written: written, the node would look ready to the
/// runtime, which without plumb would not take it either, and every pod's ADD would fail.
pub fn unusable(conf: &Value) -> Option<String> {
    if !conf["cniVersion"].is_string() {
        return Some("no \"cniVersion\"".into());
    }
    let list = cni::NetworkConfigList::from_any_bytes(conf.to_string().as_bytes())
        .and_then(|l| l.require_plugins());
    if let Err(e) = list {
        return Some(e.msg);
    }
    let stdin = plumb_stdin(&conflist(&Map::new(), conf)).expect("the list has plumb's entry");
    Config::parse(stdin.to_string().as_bytes())
        .err()
        .map(|e| e.msg)
}

/// What a runtime gives plumb on stdin from the configuration list `list`: its (first) plugin
/// of type `plumb`, with the list's `name` and `cniVersion` (CNI spec §3 "Execution of
/// Network Configurations"); none when it has no such plugin.
pub fn plumb_stdin(list: &Value) -> Option<Value> {
    let mut entry = list["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["type"] == "plumb")?
        .clone();
    entry["name"] = list["name"].clone();
    entry["cniVersion"] = list["cniVersion"].clone();
    Some(entry)
}

/// The plugins of a configuration: a list's, or the one it is.
fn plugins(conf: &Value) -> Vec<&Value> {
    match conf.get("plugins") {
        Some(Value::Array(p)) => p.iter().collect(),
        _ => vec![conf],
    }
}

/// The type of a configuration's (first) plugin, `""` when it has none.
fn plugin_type(conf: &Value) -> &str {
    plugins(conf)
        .first()
        .and_then(|p| p["type"].as_str())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer into a fresh directory from `template`, and the directory.
    fn writer(template: Value, primary: Option<&str>) -> (ConfWriter, tempfile::TempDir) {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("template.json");
        std::fs::write(&t, template.to_string()).unwrap();
        let dir = d.path().join("net.d");
        std::fs::create_dir(&dir).unwrap();
        let w = ConfWriter::new(
            &t,
            dir,
            primary.map(str::to_string),
            Some(Path::new("/run/plumb/plumb.sock")),
        )
        .unwrap();
        (w, d)
    }

    fn put(w: &ConfWriter, name: &str, conf: &Value) {
        std::fs::write(w.dir.join(name), conf.to_string()).unwrap();
    }

    fn written(w: &ConfWriter) -> Value {
        serde_json::from_slice(&std::fs::read(w.output()).unwrap()).unwrap()
    }

    fn bridge(name: &str, version: &str) -> Value {
        json!({"cniVersion": version, "name": name, "type": "bridge", "bridge": "cni0"})
    }

    #[test]
    fn a_fifo_in_place_of_plumbs_file_is_replaced_without_waiting() {
        // Looked at every second on the daemon's serving thread: a FIFO read there held every
        // call the daemon served.
        let (mut w, _d) = writer(json!({}), None);
        put(&w, "10-bridge.conf", &bridge("cbr0", "1.0.0"));
        nix::unistd::mkfifo(&w.output(), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let step = w.step();
            let _ = tx.send((step, written(&w)));
        });
        let (step, conf) = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the step waited on a FIFO");
        assert!(
            matches!(&step, Step::Wrote(why) if why.ends_with("(cbr0), changed")),
            "{step:?}"
        );
        assert_eq!(conf["name"], NETWORK_NAME);
    }

    #[test]
    fn the_file_follows_the_default_networks_configuration() {
        let (mut w, _d) = writer(json!({"kubeconfig": "/etc/cni/net.d/plumb.d/k"}), None);
        // Nothing to write yet: said once, not every second.
        assert!(matches!(w.step(), Step::Waiting(why) if why.contains("no configuration")));
        assert_eq!(w.step(), Step::Same);
        assert!(!w.output().exists());

        let flannel = json!({"cniVersion": "0.4.0", "name": "cbr0", "plugins": [
            {"type": "flannel", "delegate": {"isDefaultGateway": true}},
            {"type": "portmap", "capabilities": {"portMappings": true, "other": false}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}]});
        put(&w, "10-flannel.conflist", &flannel);
        assert!(
            matches!(w.step(), Step::Wrote(why) if why == "the default network is 10-flannel.conflist (cbr0)")
        );
        let conf = written(&w);
        assert_eq!(conf["cniVersion"], "0.4.0");
        assert_eq!(conf["name"], NETWORK_NAME);
        assert_eq!(
            conf["plugins"],
            json!([{"type": "plumb", "kubeconfig": "/etc/cni/net.d/plumb.d/k",
                    "plumbDaemonSocket": "/run/plumb/plumb.sock",
                    "capabilities": {"portMappings": true, "bandwidth": true},
                    "delegates": [flannel]}])
        );
        // Only the default network's own configuration file by name: a later one, or one
        // that is not a configuration, is not it.
        put(&w, "20-other.conf", &bridge("other", "1.0.0"));
        std::fs::write(w.dir.join("05-notes.txt"), "not a configuration").unwrap();
        assert_eq!(w.step(), Step::Same);
        assert_eq!(written(&w)["plugins"][0]["delegates"], json!([flannel]));

        // Changed: written again. An earlier file comes: it is the runtime's first, so the
        // default network now.
        put(&w, "10-flannel.conflist", &bridge("cbr0", "1.0.0"));
        assert!(matches!(w.step(), Step::Wrote(why) if why.ends_with("(cbr0), changed")));
        assert_eq!(written(&w)["cniVersion"], "1.0.0");
        assert!(written(&w)["plugins"][0].get("capabilities").is_none());
        put(
            &w,
            "05-calico.conflist",
            &bridge("k8s-pod-network", "1.0.0"),
        );
        assert!(matches!(w.step(), Step::Wrote(why) if why.contains("05-calico.conflist")));

        // Gone, and so is plumb's; the other file is the default network then.
        std::fs::remove_file(w.dir.join("05-calico.conflist")).unwrap();
        std::fs::remove_file(w.dir.join("10-flannel.conflist")).unwrap();
        assert!(matches!(w.step(), Step::Wrote(why) if why.contains("20-other.conf")));
        std::fs::remove_file(w.dir.join("20-other.conf")).unwrap();
        assert!(matches!(w.step(), Step::Removed(why) if why.contains("no configuration")));
        assert!(!w.output().exists());
        assert_eq!(w.step(), Step::Same);
    }

    #[test]
    fn plumbs_and_multus_configurations_are_never_the_default_network() {
        let (mut w, _d) = writer(json!({}), None);
        put(
            &w,
            "00-multus.conf",
            &json!({"cniVersion": "0.3.1", "name": "multus-cni-network",
            "type": "multus", "delegates": [bridge("cbr0", "0.3.1")]}),
        );
        put(
            &w,
            "01-plumb.conf",
            &json!({"cniVersion": "1.0.0", "name": "p", "type": "plumb"}),
        );
        // Only those: no default network, and each said why it is not one.
        let Step::Waiting(why) = w.step() else {
            panic!("written")
        };
        assert!(
            why.contains("00-multus.conf is one of \"multus\"")
                && why.contains("01-plumb.conf is one of \"plumb\""),
            "{why}"
        );
        // The runtime takes 00-multus.conf before 00-plumb.conflist: the operator is told.
        put(&w, "10-bridge.conf", &bridge("cbr0", "1.0.0"));
        let Step::Wrote(why) = w.step() else {
            panic!("not written")
        };
        assert!(
            why.starts_with(
                "the default network is 10-bridge.conf (cbr0); but the runtime \
                             takes 00-multus.conf (\"multus\") first"
            ) && !why.contains("01-plumb.conf"),
            "{why}"
        );
        assert_eq!(written(&w)["plugins"][0]["delegates"][0]["name"], "cbr0");
    }

    #[test]
    fn a_first_configuration_that_cannot_be_read_is_waited_for_not_passed_over() {
        // Half written by its plugin, or broken: the runtime would not pass over it either,
        // and plumb must not delegate to the next file meanwhile.
        let (mut w, _d) = writer(json!({}), None);
        put(&w, "10-b.conf", &bridge("b", "1.0.0"));
        std::fs::write(w.dir.join("05-a.conf"), "{\"cniVersion\": \"1.0").unwrap();
        let Step::Waiting(why) = w.step() else {
            panic!("written")
        };
        assert!(why.contains("05-a.conf: invalid JSON"), "{why}");
        assert!(!w.output().exists());
        put(&w, "05-a.conf", &json!({"name": "a", "type": "bridge"}));
        assert!(
            matches!(w.step(), Step::Waiting(why) if why.contains("05-a.conf: no \"cniVersion\""))
        );
        // Nor one that every ADD would refuse: a version plumb does not answer in, a list
        // without a name or without plugins.
        for (broken, said) in [
            (bridge("a", "9.9.9"), "no supported CNI version"),
            (
                json!({"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}]}),
                "name",
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "a", "plugins": []}),
                "plugins",
            ),
        ] {
            put(&w, "05-a.conf", &broken);
            let step = w.step();
            assert!(
                matches!(&step, Step::Waiting(why) if why.contains("05-a.conf: ") && why.contains(said)),
                "{broken}: {step:?}"
            );
            assert!(!w.output().exists());
        }
        put(&w, "05-a.conf", &bridge("a", "1.0.0"));
        assert!(matches!(w.step(), Step::Wrote(why) if why.contains("05-a.conf (a)")));
    }

    #[test]
    fn the_default_network_is_the_file_libcni_would_take_a_hidden_one_or_a_link_too() {
        // libcni's ConfFiles lists every entry but directories: a hidden file is a
        // configuration like any other, and a link to nothing is one the runtime fails on.
        let (mut w, _d) = writer(json!({}), None);
        put(&w, "10-b.conf", &bridge("b", "1.0.0"));
        put(&w, ".05-hidden.conf", &bridge("hidden", "1.0.0"));
        std::fs::create_dir(w.dir.join("01-dir.conf")).unwrap();
        assert!(matches!(w.step(), Step::Wrote(why) if why.contains(".05-hidden.conf (hidden)")));
        std::os::unix::fs::symlink(w.dir.join("gone.conf"), w.dir.join(".01-link.conf")).unwrap();
        assert!(
            matches!(w.step(), Step::Waiting(why) if why.contains(".01-link.conf: ")),
            "a link to nothing passed over"
        );
    }

    #[test]
    fn primary_config_names_the_default_networks_file() {
        let (mut w, _d) = writer(json!({}), Some("20-b.conf"));
        put(&w, "10-a.conf", &bridge("a", "1.0.0"));
        assert!(
            matches!(w.step(), Step::Waiting(why) if why.contains("(--primary-config 20-b.conf)"))
        );
        put(&w, "20-b.conf", &bridge("b", "1.0.0"));
        assert!(matches!(w.step(), Step::Wrote(why) if why.contains("20-b.conf (b)")));
        put(
            &w,
            "20-b.conf",
            &json!({"cniVersion": "1.0.0", "name": "m", "type": "multus"}),
        );
        assert!(matches!(w.step(), Step::Waiting(why) if why.contains("not of a default network")));
    }

    #[test]
    fn a_default_network_not_ready_by_the_templates_readiness_file_is_waited_for() {
        // Multus's thin installer wrote its file whatever the readiness indicator said
        // (docs/multus-behaviour.md §3.3, #1306): the node looked ready, and every ADD waited 45 s
        // for the file and failed. The file is written once the readiness file is there.
        let d = tempfile::tempdir().unwrap();
        let ready = d.path().join("subnet.env");
        let (mut w, _d) = writer(json!({"readinessindicatorfile": ready}), None);
        put(&w, "10-flannel.conf", &bridge("cbr0", "1.0.0"));
        let step = w.step();
        assert!(
            matches!(&step, Step::Waiting(why) if why.contains("not ready")
                && why.contains(&ready.display().to_string())),
            "{step:?}"
        );
        assert!(!w.output().exists());
        assert_eq!(w.step(), Step::Same);
        std::fs::write(&ready, "FLANNEL_NETWORK=10.244.0.0/16").unwrap();
        assert!(matches!(w.step(), Step::Wrote(why) if why.contains("10-flannel.conf")));
        assert!(w.output().exists());
    }

    #[test]
    fn a_default_network_that_sorts_before_plumbs_file_is_said() {
        // The runtime takes the first file by name: this one, never plumb's.
        let (mut w, _d) = writer(json!({}), None);
        put(
            &w,
            "00-calico.conflist",
            &bridge("k8s-pod-network", "1.0.0"),
        );
        let Step::Wrote(why) = w.step() else {
            panic!("not written")
        };
        assert!(
            why.ends_with(
                "; but the runtime takes 00-calico.conflist itself first, which sorts before \
                 it by name: plumb is not called until the default network's file is named to \
                 sort after it"
            ),
            "{why}"
        );
    }

    #[test]
    fn an_operators_own_file_of_that_name_is_never_removed() {
        let (mut w, _d) = writer(json!({}), None);
        let mine = json!({"cniVersion": "1.0.0", "name": "mine", "plugins": [{"type": "plumb"}]});
        put(&w, OUTPUT, &mine);
        assert!(matches!(w.step(), Step::Waiting(_)));
        assert_eq!(written(&w), mine);
    }

    #[test]
    fn the_template_is_read_as_the_plugin_reads_it_when_the_daemon_starts() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t.json");
        let refused = |template: &str| {
            std::fs::write(&t, template).unwrap();
            let e = ConfWriter::new(&t, d.path().into(), None, Some(Path::new("/s"))).unwrap_err();
            assert_eq!(e.code, 7, "{e}");
            assert!(e.msg.contains("t.json"), "{e}");
            e.msg
        };
        assert!(refused(r#"{"kubeconfg": "/k"}"#).contains("unknown key \"kubeconfg\""));
        assert!(refused(r#"{"logLevel": 5}"#).contains("\"logLevel\" must be a string"));
        assert!(refused("[1]").contains("not a JSON object"));
        assert!(refused("{").contains("invalid JSON"));
        let e = refused(r#"{"clusterNetwork": "cbr0"}"#);
        assert!(e.contains("\"clusterNetwork\" is filled in") && e.contains("--primary-config"));
        assert!(refused(r#"{"type": "plumb"}"#).contains("\"type\" is filled in"));
        std::fs::write(&t, "{}").unwrap();
        let e = ConfWriter::new(
            &t,
            d.path().into(),
            Some("a/b".into()),
            Some(Path::new("/s")),
        );
        assert!(e.unwrap_err().msg.contains("must be a file name"));

        // A template's own socket (the path as the node sees it, where the daemon's differs
        // in its container) and capabilities are kept: one set false stays off.
        let (mut w, _d) = writer(
            json!({"plumbDaemonSocket": "/run/plumb/host.sock",
                   "capabilities": {"portMappings": false, "io.kubernetes.cri.pod-annotations": true}}),
            None,
        );
        put(
            &w,
            "10-a.conflist",
            &json!({"cniVersion": "1.0.0", "name": "a", "plugins": [
            {"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}]}),
        );
        assert!(matches!(w.step(), Step::Wrote(_)));
        let plumb = &written(&w)["plugins"][0];
        assert_eq!(plumb["plumbDaemonSocket"], "/run/plumb/host.sock");
        assert_eq!(
            plumb["capabilities"],
            json!({"portMappings": false, "io.kubernetes.cri.pod-annotations": true})
        );
        // What was written is a configuration the plugin reads, as the runtime gives it.
        let stdin = plumb_stdin(&written(&w)).unwrap();
        assert_eq!(stdin["name"], NETWORK_NAME);
        let config = Config::parse(stdin.to_string().as_bytes()).unwrap();
        assert_eq!(config.delegates.len(), 1);
    }

    #[test]
    fn a_template_key_in_another_case_is_judged_and_written_as_the_plugin_reads_it() {
        // The plugin reads Multus's keys in any case. `ClusterNetwork` passed the check and
        // overrode the default network in every ADD; `Capabilities` sat beside the lowercase
        // key the daemon writes, and every ADD failed on the two.
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t.json");
        std::fs::write(&t, r#"{"ClusterNetwork": "cbr0"}"#).unwrap();
        let e = ConfWriter::new(&t, d.path().into(), None, Some(Path::new("/s"))).unwrap_err();
        assert!(
            e.msg
                .contains("\"clusterNetwork\" (given as \"ClusterNetwork\") is filled in"),
            "{e}"
        );
        std::fs::write(&t, r#"{"capabilities": {}, "Capabilities": {}}"#).unwrap();
        let e = ConfWriter::new(&t, d.path().into(), None, Some(Path::new("/s"))).unwrap_err();
        assert!(e.msg.contains("are the same key"), "{e}");
        // The same key twice: serde_json kept the last silently, and isolation was off.
        std::fs::write(
            &t,
            r#"{"namespaceIsolation": true, "logLevel": "error", "namespaceIsolation": false}"#,
        )
        .unwrap();
        let e = ConfWriter::new(&t, d.path().into(), None, Some(Path::new("/s"))).unwrap_err();
        assert!(
            e.msg.contains("key \"namespaceIsolation\" is given twice"),
            "{e}"
        );

        let (mut w, _d) = writer(
            json!({"Capabilities": {"portMappings": false}, "LogLevel": "error"}),
            None,
        );
        put(
            &w,
            "10-a.conflist",
            &json!({"cniVersion": "1.0.0", "name": "a", "plugins": [
            {"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}]}),
        );
        assert!(matches!(w.step(), Step::Wrote(_)));
        let plumb = &written(&w)["plugins"][0];
        assert_eq!(
            plumb["capabilities"],
            json!({"portMappings": false, "bandwidth": true})
        );
        assert_eq!(plumb["logLevel"], "error");
        assert!(plumb.get("Capabilities").is_none() && plumb.get("LogLevel").is_none());
        let stdin = plumb_stdin(&written(&w)).unwrap();
        let config = Config::parse(stdin.to_string().as_bytes()).unwrap();
        assert_eq!(config.warnings, Vec::<String>::new());

        // A capability of the conventions in another case: runtimes would pass nothing for it.
        std::fs::write(&t, r#"{"capabilities": {"portmappings": true}}"#).unwrap();
        let e = ConfWriter::new(&t, d.path().into(), None, Some(Path::new("/s"))).unwrap_err();
        assert!(
            e.msg
                .contains("capability \"portmappings\": runtimes match capability names exactly"),
            "{e}"
        );
        assert!(e.msg.contains("write \"portMappings\""), "{e}");

        // A capability the template turns off in another case than the plugins declare it: one
        // key, the template's. Written beside the plugins' own, every ADD failed on the two.
        let (mut w, _d) = writer(json!({"capabilities": {"MyCap": false}}), None);
        put(
            &w,
            "10-a.conflist",
            &json!({"cniVersion": "1.0.0", "name": "a", "plugins": [
            {"type": "bridge"}, {"type": "portmap", "capabilities": {"mycap": true}},
            {"type": "tuning", "capabilities": {"MYCAP": true, "mac": true}}]}),
        );
        assert!(matches!(w.step(), Step::Wrote(_)));
        let plumb = &written(&w)["plugins"][0];
        assert_eq!(plumb["capabilities"], json!({"MyCap": false, "mac": true}));
        let stdin = plumb_stdin(&written(&w)).unwrap();
        Config::parse(stdin.to_string().as_bytes()).unwrap();
    }
}
