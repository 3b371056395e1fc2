//! A node-wide call (STATUS, GC: CNI spec 1.1 §2) in progress, marked by a shared `flock` on
//! `<plumbStateDir>/.node-calls.lock`, so that plumb run as a delegate of itself in one fails at
//! once: a network naming plumb as a plugin would otherwise start plumb again and again, each
//! waiting for the next (about 400 processes a second), until the node has none left. ADD, DEL
//! and CHECK find this case through the container's lock ([`crate::container_lock`]).

use std::path::Path;

use cni::error::{CniError, ErrorCode};
use nix::fcntl::FlockArg;

use crate::container_lock::{Turn, acquire, descends_from, holders, is_plumb};
use crate::record::RecordStore;

/// The lock file's name in the state directory: a name no container ID can have (they start
/// with a letter or a digit).
pub const NODE_CALLS_LOCK: &str = ".node-calls.lock";

/// A node-wide call's presence, held while this lives. Nothing ever waits on it.
#[derive(Debug)]
pub struct NodeCall {
    _lock: Turn,
}

/// Marks `command` (STATUS or GC) as running for `requester` (the process the call is for:
/// this one in thin mode, the forwarding plugin in the daemon), or says why it must not run:
/// it is plumb's own delegate in a node-wide call of the same state directory (code 7): the
/// lock is held by plumb running in the requester's ancestry, as `/proc/locks` and
/// `/proc/<pid>/stat` tell.
pub fn begin(
    records: &RecordStore,
    requester: Option<u32>,
    command: &str,
) -> Result<NodeCall, CniError> {
    let path = records.dir().join(NODE_CALLS_LOCK);
    // Alone (the usual case: no other node-wide call), there can be no outer call, and
    // `/proc/locks` need not be read.
    if let Some(lock) = acquire(&path, FlockArg::LockExclusiveNonblock)? {
        lock.relock(FlockArg::LockShared)?;
        return Ok(NodeCall { _lock: lock });
    }
    // On a state file system with no room for the lock file, the calls lock the directory
    // instead (`acquire`): its holders count too. A node-wide call then waits for, and holds
    // back, calls that had no room either, and GC leaves the sandboxes whose lock file it cannot
    // make to the next GC.
    if let Some(requester) = requester
        && let Some(holder) = holders(&path)
            .into_iter()
            .chain(holders(records.dir()))
            .find(|h| is_plumb(*h) && descends_from(requester, *h))
    {
        return Err(nested(&path, holder, command));
    }
    // Beside other node-wide calls. Shared locks never wait for one another; this one waits
    // only for a call that is turning its exclusive try into a shared lock.
    match acquire(&path, FlockArg::LockShared)? {
        Some(lock) => Ok(NodeCall { _lock: lock }),
        None => Err(CniError::new(
            ErrorCode::Internal,
            format!("{}: a blocking lock was not taken", path.display()),
        )),
    }
}

fn nested(path: &Path, holder: u32, command: &str) -> CniError {
    CniError::new(
        ErrorCode::InvalidConfig,
        format!(
            "{command}: plumb is running as a delegate of plumb itself (process {holder}, which \
             started this call's process, holds {}): a network's configuration names plumb as \
             a plugin (a clusterNetwork or defaultNetworks file or directory holding plumb's \
             own configuration, a delegate, a NAD), and each call would start another until the \
             node ran out of processes; remove plumb from that network's plugins",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    #[test]
    fn node_wide_calls_run_side_by_side_and_one_started_by_plumb_itself_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let records = RecordStore::new(dir.path().join("state"));
        // Two calls at once, neither started by plumb (pid 1 stands for a runtime, or for a
        // plugin forwarding to the daemon): both run.
        let first = begin(&records, Some(1), "STATUS").unwrap();
        let second = begin(&records, Some(1), "GC").unwrap();
        // A call whose process descends from a plumb process holding the lock: refused. In
        // this test the holder is the test binary itself (not plumb), and `is_plumb` compares
        // executables, so a child of this process stands for plumb's delegate.
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let e = begin(&records, Some(child.id()), "STATUS").unwrap_err();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(e.kind(), ErrorCode::InvalidConfig);
        assert!(
            e.msg.contains(&format!(
                "STATUS: plumb is running as a delegate of plumb itself (process {}",
                std::process::id()
            )),
            "{e}"
        );
        drop((first, second));
        // No call holds it any more: nobody is refused.
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let alone = begin(&records, Some(child.id()), "GC");
        let _ = child.kill();
        let _ = child.wait();
        alone.unwrap();
    }
}
