//! `plumb daemon --uninstall`: takes plumb off the node in the order that loses nothing. First
//! plumb's CNI configuration goes (a daemon wrote it: `conf_writer`), so that new pods get the
//! default network alone; what the pods plumb attached need for their DEL (the binary, the
//! kubeconfig and its token, the records) stays while a record is left or a call runs; then it
//! goes too, and the daemon is ready (`/readyz`), which is how the operator sees the node done.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use plumb_engine::record::RecordStore;

use super::conf_writer::{self, Step};

/// The node's files of plumb, and whether they are gone.
pub(super) struct Uninstall {
    conf_dir: PathBuf,
    binary: PathBuf,
    records: RecordStore,
    /// Set once nothing is left: `/readyz` answers 200 from then on.
    pub(super) done: Arc<AtomicBool>,
    /// The last reason for waiting, so that each is said once.
    waiting: Option<String>,
}

impl Uninstall {
    pub(super) fn new(conf_dir: PathBuf, bin_dir: &Path, state_dir: PathBuf) -> Uninstall {
        Uninstall {
            conf_dir,
            binary: bin_dir.join("plumb"),
            records: RecordStore::new(state_dir),
            done: Arc::default(),
            waiting: None,
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
        let step = match conf_writer::remove_written(&self.conf_dir) {
            Step::Same => self.remove_the_rest(kubeconfig),
            removed_or_not => removed_or_not,
        };
        step.said_once(&mut self.waiting)
    }

    fn remove_the_rest(&mut self, kubeconfig: &[PathBuf]) -> Step {
        match self.still_needed() {
            Ok(None) => {}
            Ok(Some(why)) | Err(why) => return Step::Waiting(why),
        }
        let mut gone = Vec::new();
        let mut failed = Vec::new();
        let mut remove = |path: &Path, dir: bool| {
            let r = if dir {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
            match r {
                Ok(()) => gone.push(path.display().to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => failed.push(format!("{}: {e}", path.display())),
            }
        };
        remove(&self.binary, false);
        for file in kubeconfig {
            remove(file, false);
        }
        remove(self.records.dir(), true);
        // The kubeconfig's directory, if nothing else is in it.
        if let Some(dir) = kubeconfig.first().and_then(|k| k.parent()) {
            let _ = std::fs::remove_dir(dir);
        }
        if !failed.is_empty() {
            return Step::Waiting(format!("cannot remove {}", failed.join(", ")));
        }
        self.done.store(true, Ordering::SeqCst);
        Step::Removed(format!(
            "nothing of plumb is left on the node (removed: {})",
            if gone.is_empty() {
                "nothing, none was there".to_string()
            } else {
                gone.join(", ")
            }
        ))
    }

    /// Why plumb's files are still needed: a record left (a pod attached by plumb, whose DEL
    /// runs the plugin) or a call running (it holds its container's lock); `None`: not.
    fn still_needed(&self) -> Result<Option<String>, String> {
        let records = self.records.list().map_err(|e| e.to_string())?;
        if !records.is_empty() {
            let pods: Vec<String> = (records.iter().take(5))
                .map(|id| match self.records.load(id) {
                    Ok(Some(r)) if !r.pod_name.is_empty() => {
                        format!(
                            "{}/{} (container {})",
                            r.pod_namespace,
                            r.pod_name,
                            short(id)
                        )
                    }
                    _ => format!("container {}", short(id)),
                })
                .collect();
            return Ok(Some(format!(
                "{} sandboxes attached by plumb are left ({}{}); their DEL needs plumb's \
                 binary, kubeconfig and records, kept until none is left (`plumb status \
                 --node`)",
                records.len(),
                pods.join(", "),
                if records.len() > 5 { ", …" } else { "" }
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
}

/// A container ID as the runtime shows it (its first 12 characters).
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
