//! `plumb daemon --uninstall`: takes plumb off the node in the order that loses nothing. First
//! plumb's CNI configuration goes (a daemon wrote it: `conf_writer`), so that new pods get the
//! default network alone; what the pods plumb attached need for their DEL (the binary, the
//! kubeconfig and its token, the records) stays while a record is left or a call runs; then it
//! goes too, and the daemon is ready (`/readyz`), which is how the operator sees the node done.
//!
//! A runtime that runs DEL with the node's configuration of the moment (containerd) no longer
//! calls plumb for those pods: only the default network's plugin. So once a recorded sandbox's
//! network namespace is gone, the daemon runs plumb's DEL for it itself, as the runtime would
//! have, with the configuration it kept when it removed the file: the other networks' addresses
//! are released and the record goes. A runtime that runs DEL with the configuration the sandbox
//! was added with (CRI-O) calls plumb, which removes the record first.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use plumb_engine::record::{Record, RecordStore};

use super::conf_writer::{self, Step};

/// The configuration plumb's DELs run with, kept in the state directory when the file goes (a
/// name no record has: records are `<container ID>.json`).
const KEPT: &str = ".uninstall.conf";

/// A DEL running on a thread of its own: why it failed, once it has.
type Deleting = std::thread::JoinHandle<Result<(), String>>;

/// How long after a failed DEL of a sandbox that is gone it is tried again.
const RETRY: Duration = Duration::from_secs(30);

/// How long such a DEL may run before it is killed (a delegate or an API server that never
/// answers would hold every DEL after it).
const DEL_DEADLINE: Duration = Duration::from_secs(300);

/// The node's files of plumb, and whether they are gone.
pub(super) struct Uninstall {
    conf_dir: PathBuf,
    binary: PathBuf,
    records: RecordStore,
    /// Set once nothing is left: `/readyz` answers 200 from then on.
    pub(super) done: Arc<AtomicBool>,
    /// The last reason for waiting, so that each is said once.
    waiting: Option<String>,
    /// The DEL running for a sandbox that is gone: its container ID, its pod, the thread.
    deleting: Option<(String, String, Deleting)>,
    /// When the DEL of each such sandbox last failed, and why.
    failed: HashMap<String, (Instant, String)>,
}

impl Uninstall {
    pub(super) fn new(conf_dir: PathBuf, bin_dir: &Path, state_dir: PathBuf) -> Uninstall {
        Uninstall {
            conf_dir,
            binary: bin_dir.join("plumb"),
            records: RecordStore::new(state_dir),
            done: Arc::default(),
            waiting: None,
            deleting: None,
            failed: HashMap::new(),
        }
    }

    pub(super) fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// The configuration file it removes.
    pub(super) fn conf(&self) -> PathBuf {
        self.conf_dir.join(conf_writer::OUTPUT)
    }

    /// One look: the configuration removed (again, should something write it back); then, if
    /// no record is left and no call holds a container's lock, the rest removed, `kubeconfig`
    /// (the writer's files) with it. What it did, or why it waits (each reason said once).
    pub(super) fn step(&mut self, kubeconfig: &[PathBuf]) -> Step {
        if self.is_done() {
            return Step::Same;
        }
        let step = match conf_writer::written(&self.conf_dir) {
            Some(list) => self.keep_then_remove(&list),
            None => self.remove_the_rest(kubeconfig),
        };
        step.said_once(&mut self.waiting)
    }

    /// Removes plumb's configuration `list`, a copy of it kept first: the DELs this daemon runs
    /// need it.
    fn keep_then_remove(&self, list: &serde_json::Value) -> Step {
        let kept = conf_writer::plumb_stdin(list)
            .ok_or_else(|| "plumb's configuration names no plumb".to_string())
            .and_then(|stdin| self.keep(&stdin));
        if let Err(why) = kept {
            return Step::Waiting(why);
        }
        match std::fs::remove_file(self.conf()) {
            Ok(()) => Step::Removed("new pods get the default network alone".to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Step::Same,
            Err(e) => Step::Waiting(format!("cannot remove {}: {e}", self.conf().display())),
        }
    }

    /// Keeps `stdin`, plumb's configuration as the runtime gives it, in the state directory,
    /// which must be the one it names: the records waited for are there.
    fn keep(&self, stdin: &serde_json::Value) -> Result<(), String> {
        let dir = self.records.dir();
        if let Some(named) = stdin
            .get("plumbStateDir")
            .and_then(serde_json::Value::as_str)
            && Path::new(named) != dir
        {
            return Err(format!(
                "plumb's configuration keeps its records in {named} (plumbStateDir), not in \
                 --state-dir {}: give --state-dir {named}; the configuration stays until then",
                dir.display()
            ));
        }
        // The DELs run here go to the plugin itself: this daemon serves none.
        let mut stdin = stdin.clone();
        if let Some(keys) = stdin.as_object_mut() {
            keys.remove("plumbDaemonSocket");
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        cni::cache::write_durable(&dir.join(KEPT), stdin.to_string().as_bytes()).map_err(|e| e.msg)
    }

    fn remove_the_rest(&mut self, kubeconfig: &[PathBuf]) -> Step {
        // A configuration no daemon wrote that names plumb would fail every new pod once the
        // binary is gone.
        let naming = conf_writer::naming_plumb(&self.conf_dir);
        if !naming.is_empty() {
            return Step::Waiting(format!(
                "{} in {} name plumb, and no daemon wrote them: remove them (new pods would fail \
                 once plumb's binary is gone)",
                naming.join(", "),
                self.conf_dir.display()
            ));
        }
        match self.still_needed() {
            Ok(None) => {}
            Ok(Some(why)) | Err(why) => return Step::Waiting(why),
        }
        let mut gone = Vec::new();
        let mut failed = Vec::new();
        let mut remove = |path: &Path| match std::fs::remove_file(path) {
            Ok(()) => gone.push(path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failed.push(format!("{}: {e}", path.display())),
        };
        // The binary first, then one more look: an ADD from a configuration the runtime had not
        // reloaded yet may have begun meanwhile (it holds its container's lock).
        remove(&self.binary);
        for file in kubeconfig {
            remove(file);
        }
        // The kubeconfig's own directory (`plumb.d`), if nothing else is in it; never the
        // runtime's configuration directory.
        if let Some(dir) = kubeconfig.first().and_then(|k| k.parent())
            && dir != self.conf_dir
        {
            let _ = std::fs::remove_dir(dir);
        }
        match self.still_needed() {
            Ok(None) => {}
            Ok(Some(why)) | Err(why) => {
                return Step::Waiting(format!("{why} (plumb's binary is removed already)"));
            }
        }
        // Only what plumb keeps there: its records are gone; their locks, the configuration
        // kept, the temporary files of killed writers, the node-wide calls' lock.
        let dir = self.records.dir().to_path_buf();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".lock")
                    || name == KEPT
                    || (name.starts_with('.') && name.contains(".tmp"))
                {
                    remove(&e.path());
                }
            }
        }
        match std::fs::remove_dir(&dir) {
            Ok(()) => gone.push(dir.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failed.push(format!(
                "{} (files that are not plumb's are left in it): {e}",
                dir.display()
            )),
        }
        if !failed.is_empty() {
            return Step::Waiting(format!("cannot remove {}", failed.join(", ")));
        }
        self.done.store(true, Ordering::SeqCst);
        Step::Removed(format!(
            "{} (removed: {})",
            super::serve::UNINSTALLED,
            if gone.is_empty() {
                "nothing, none was there".to_string()
            } else {
                gone.join(", ")
            }
        ))
    }

    /// Why plumb's files are still needed: a record left (a pod attached by plumb, whose DEL
    /// runs the plugin) or a call running (it holds its container's lock); `None`: not. Runs
    /// the DEL of a recorded sandbox whose network namespace is gone, one at a time.
    fn still_needed(&mut self) -> Result<Option<String>, String> {
        let mut last = None;
        if let Some((id, pod, thread)) = self.deleting.take() {
            if !thread.is_finished() {
                self.deleting = Some((id, pod.clone(), thread));
                return Ok(Some(format!(
                    "running the DEL of {pod}, whose sandbox is gone"
                )));
            }
            match thread.join() {
                Ok(Ok(())) => last = Some(format!("ran the DEL of {pod}, whose sandbox was gone")),
                Ok(Err(why)) => {
                    self.failed.insert(id, (Instant::now(), why));
                }
                Err(_) => {
                    self.failed
                        .insert(id, (Instant::now(), "its thread panicked".into()));
                }
            }
        }
        let records = self.records.list().map_err(|e| e.to_string())?;
        if !records.is_empty() {
            let mut pods = Vec::new();
            for id in &records {
                let record = self.records.load(id).ok().flatten();
                let pod = match &record {
                    Some(r) if !r.pod_name.is_empty() => {
                        format!(
                            "{}/{} (container {})",
                            r.pod_namespace,
                            r.pod_name,
                            short(id)
                        )
                    }
                    _ => format!("container {}", short(id)),
                };
                if let Some(r) = record
                    && self.deleting.is_none()
                    && sandbox_gone(&r)
                    && self
                        .failed
                        .get(id)
                        .is_none_or(|(at, _)| at.elapsed() >= RETRY)
                {
                    self.deleting = Some((id.clone(), pod.clone(), self.start_del(r)?));
                }
                pods.push(pod);
            }
            let failed: Vec<String> = (self.failed.iter())
                .filter(|(id, _)| records.contains(id))
                .map(|(id, (_, why))| format!("the DEL of container {} failed: {why}", short(id)))
                .collect();
            return Ok(Some(format!(
                "{} sandboxes attached by plumb are left ({}{}); their DEL needs plumb's \
                 binary, kubeconfig and records, kept until none is left (`plumb status \
                 --node --state-dir {}`){}{}",
                records.len(),
                pods.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                if records.len() > 5 { ", …" } else { "" },
                self.records.dir().display(),
                last.map(|l| format!("; {l}")).unwrap_or_default(),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} (tried again every {} s)",
                        failed.join("; "),
                        RETRY.as_secs()
                    )
                }
            )));
        }
        for id in self.records.locked_ids().map_err(|e| e.to_string())? {
            match plumb_engine::container_lock::try_take_for(&self.records, &id) {
                Ok(Some(_turn)) => {}
                Ok(None) => {
                    return Ok(Some(format!(
                        "a call for container {} is running",
                        short(&id)
                    )));
                }
                Err(e) => return Err(e.msg),
            }
        }
        Ok(None)
    }

    /// Runs plumb's DEL for the sandbox of `record` on a thread: the node's plumb run as the
    /// runtime runs it, with the configuration kept ([`KEPT`]) on stdin. It forwards the call
    /// to this daemon, which serves none, and runs it itself.
    fn start_del(&self, record: Record) -> Result<Deleting, String> {
        let kept = self.records.dir().join(KEPT);
        let stdin = cni::files::read_bounded(&kept, 1 << 20).map_err(|e| {
            format!(
                "cannot read {} (plumb's configuration, kept for the DELs of sandboxes whose \
                 runtime no longer calls plumb): {e}",
                kept.display()
            )
        })?;
        let binary = self.binary.clone();
        std::thread::Builder::new()
            .name("uninstall-del".into())
            .spawn(move || delete(&binary, &stdin, &record))
            .map_err(|e| format!("cannot start a thread: {e}"))
    }
}

/// Whether the sandbox of `record` is gone: its network namespace (the runtime removes it
/// after its DEL), or none was given. Only where this process sees the node's netns paths: the
/// directory the path is in (or `/proc`, for a process's) is there, so that a daemon that does
/// not see them never takes a live pod for gone.
fn sandbox_gone(record: &Record) -> bool {
    let path = Path::new(&record.netns);
    if record.netns.is_empty() {
        return true;
    }
    if std::fs::symlink_metadata(path).is_ok() {
        return false;
    }
    match path.strip_prefix("/proc") {
        Ok(_) => Path::new("/proc/self/ns/net").exists(),
        Err(_) => path.parent().is_some_and(Path::is_dir),
    }
}

/// plumb's DEL of `record`'s sandbox, run from `binary` with `stdin`; why it failed.
fn delete(binary: &Path, stdin: &[u8], record: &Record) -> Result<(), String> {
    let args: Vec<String> = (record.cni_args.iter())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let ifname = (record.attachments.iter())
        .find(|a| a.default)
        .map_or("eth0", |a| a.ifname.as_str());
    let mut child = Command::new(binary)
        .env_clear()
        .env("CNI_COMMAND", "DEL")
        .env("CNI_CONTAINERID", &record.container_id)
        .env("CNI_NETNS", &record.netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_ARGS", args.join(";"))
        .env("CNI_PATH", binary.parent().unwrap_or(Path::new("/")))
        .stdin(Stdio::piped())
        // Not Stdio::null(): that opens /dev/null, which a root without /dev has not.
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin);
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > DEL_DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer in {} s: killed", DEL_DEADLINE.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(e.to_string()),
        }
    };
    // A CNI error is a line or two: the pipes hold it until the plugin has exited.
    let read = |pipe: Option<&mut dyn Read>| {
        let mut bytes = Vec::new();
        if let Some(p) = pipe {
            let _ = p.take(64 << 10).read_to_end(&mut bytes);
        }
        bytes
    };
    let out = std::process::Output {
        status,
        stdout: read(child.stdout.as_mut().map(|p| p as &mut dyn Read)),
        stderr: read(child.stderr.as_mut().map(|p| p as &mut dyn Read)),
    };
    if out.status.success() {
        // The runtime's own result-cache entry for plumb's network, which its DEL would have
        // removed: one that runs DEL with another configuration never will.
        if let Ok(conf) = serde_json::from_slice::<serde_json::Value>(stdin)
            && let Some(network) = conf["name"].as_str()
        {
            let runtime_cache = cni::cache::ResultCache::default();
            let _ = runtime_cache.remove(network, &record.container_id, ifname);
        }
        return Ok(());
    }
    // The CNI error on stdout; without one, what the plugin said on stderr.
    let said = match out.stdout.is_empty() {
        true => &out.stderr,
        false => &out.stdout,
    };
    Err(format!(
        "{} ({})",
        plumb_engine::log::one_line(String::from_utf8_lossy(said).trim()),
        out.status
    ))
}

/// A container ID as the runtime shows it (its first 12 characters).
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
