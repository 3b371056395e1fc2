//! One CNI call at a time per container, whichever process runs it (CNI spec 1.1 §3, "must not
//! invoke parallel operations for the same container"; multi-net spec §7.3): every ADD, DEL and
//! CHECK holds an exclusive `flock` on `<plumbStateDir>/<containerID>.lock` from start to end, in
//! thin mode and in the daemon alike, so that a DEL never runs beside its ADD. A call that waits
//! says so, naming the holder ([`Waiting`]); one nested in plumb itself fails ([`NoTurn::Nested`]).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use cni::error::{CniError, ErrorCode};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};

use crate::record::RecordStore;

pub mod node_call;

/// A container's turn: its lock, held while this lives.
///
/// `flock`s taken through separate `open()`s exclude each other even within one process
/// (flock(2)), so the daemon needs no lock of its own; the kernel releases one when its holder
/// dies, so a killed call never leaves its container locked.
#[derive(Debug)]
pub struct Turn {
    /// While the turn is shared with this thread's plugins
    /// ([`Turn::share_with_this_threads_plugins`]). First, so that it ends before the lock is
    /// released.
    shared: Option<cni::inherit::Inherited>,
    _lock: Flock<File>,
    /// The lock file; `None` when the state directory was locked instead (no room for it).
    path: Option<PathBuf>,
}

/// Why a call did not get its container's turn.
#[derive(Debug)]
pub enum NoTurn {
    /// The lock's holder is the process the call is for, or one of its ancestors: plumb runs as
    /// a delegate of plumb itself for the same container. Waiting would never end.
    Nested(CniError),
    /// The lock file could not be made, opened or locked.
    Failed(CniError),
}

impl From<NoTurn> for CniError {
    fn from(e: NoTurn) -> CniError {
        match e {
            NoTurn::Nested(e) | NoTurn::Failed(e) => e,
        }
    }
}

/// How long a call waits for its container's turn before it says so as an error, and then how
/// often it says it again: a call for the same container that runs this long is stuck (a
/// delegate that does not return), and every later call for the container waits behind it.
const LONG_WAIT: Duration = Duration::from_secs(10);
const STILL_WAITING_EVERY: Duration = Duration::from_secs(60);

/// What a call waiting for its container's turn says ([`take_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Once, when it starts to wait: another call for the container is running (normal: a DEL
    /// sent while its ADD still runs).
    Begins,
    /// After [`LONG_WAIT`], and every [`STILL_WAITING_EVERY`] after that: something is stuck.
    Long,
}

/// The turn of container `id`: its lock file beside its record in `records`' directory, taken
/// as [`take`] does. A call that has to wait is given to `say`, with a line naming the process
/// that holds the lock: once when it begins to wait, then as [`Waiting::Long`] while the wait
/// goes on (from a thread of its own, as the waiting one is blocked in `flock`).
///
/// Taken by every ADD, DEL and CHECK from the start of its handling to its end: during a
/// daemon's drain (its socket gone, new calls run in thin mode) or a restart, a call in a plugin
/// process and one in the daemon for the same container would otherwise run side by side, and a
/// DEL that ran beside its ADD would find nothing to undo while the ADD went on to attach the
/// pod (a leak).
pub fn take_for(
    records: &RecordStore,
    id: &str,
    requester: Option<u32>,
    say: &(dyn Fn(Waiting, &str) + Sync),
) -> Result<Turn, NoTurn> {
    let path = records
        .lock_path(id)
        .map_err(|e| NoTurn::Failed(e.into()))?;
    take(&path, requester, |report| {
        let held = format!("{} holds {}", who_holds(report.holders), path.display());
        match report.waited {
            None => say(
                Waiting::Begins,
                &format!(
                    "container {id}: another call for it is running ({held}): waiting for it to end"
                ),
            ),
            Some(waited) => {
                let mut line = format!(
                    "container {id}: still waiting after {} s for the call running for it to end \
                     ({held}",
                    waited.as_secs()
                );
                if !report.left.is_empty() {
                    line.push_str(&format!(
                        "; that process is gone, and the lock is held by what it started: {}",
                        who_holds(report.left)
                    ));
                }
                for k in report.killed {
                    line.push_str(&format!("; {k}"));
                }
                line.push_str("); every later call for this container waits behind it");
                say(Waiting::Long, &line);
            }
        }
    })
}

/// The turn of container `id`, as [`take_for`] takes it, but waiting at most `within`: then an
/// error to retry (code 11) naming who holds it. For a call run instead of a daemon that did not
/// acknowledge it, whose call for the container may hold the lock as long as it stays stopped.
pub fn take_for_within(records: &RecordStore, id: &str, within: Duration) -> Result<Turn, NoTurn> {
    let path = records
        .lock_path(id)
        .map_err(|e| NoTurn::Failed(e.into()))?;
    let deadline = Instant::now() + within;
    loop {
        if let Some(turn) =
            acquire(&path, FlockArg::LockExclusiveNonblock).map_err(NoTurn::Failed)?
        {
            return Ok(turn);
        }
        if Instant::now() >= deadline {
            return Err(NoTurn::Failed(CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "container {id}: another call for it has been running for over {} s ({} \
                     holds {}; a plumb daemon that did not take this call may be running it): \
                     try again later",
                    within.as_secs(),
                    who_holds(&holders(&path)),
                    path.display()
                ),
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a call waiting for a lock is told ([`take`]).
struct Report<'a> {
    /// The processes `/proc/locks` names as holding it.
    holders: &'a [u32],
    /// `None` when the wait begins; then how long it has lasted.
    waited: Option<Duration>,
    /// When a holder is gone, the processes left holding the lock ([`left_holding`]).
    left: &'a [u32],
    /// What was killed for running too long ([`end_overdue`]).
    killed: &'a [String],
}

/// When a holder is gone, who holds its lock now: a call's delegates share its turn
/// ([`Turn::share_with_children`]), so a delegate left running when its plumb was killed holds
/// the lock that `/proc/locks` still names the dead process for. Found by looking through every
/// process's open files, which only a wait that goes on long does. Empty while every holder
/// lives.
fn left_holding(path: &Path, holders: &[u32]) -> Vec<u32> {
    if holders
        .iter()
        .all(|pid| Path::new(&format!("/proc/{pid}")).exists())
    {
        return Vec::new();
    }
    let Ok(file) = fs::metadata(path).map(|m| (m.dev(), m.ino())) else {
        return Vec::new();
    };
    let Ok(processes) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let waiting: Vec<u32> = flocks_on(file.1)
        .into_iter()
        .filter_map(|(pid, waits)| waits.then_some(pid))
        .collect();
    processes
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        // This process has it open to wait for it, as have the other calls waiting; and any
        // plumb (a daemon, another call) may have it open on its way to waiting: only what
        // plumb started holds a lock for it, and nothing of plumb itself is ever killed.
        .filter(|pid| *pid != std::process::id() && !waiting.contains(pid) && !is_plumb(*pid))
        .filter(|pid| {
            fs::read_dir(format!("/proc/{pid}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|fd| fs::metadata(fd.path()).is_ok_and(|m| (m.dev(), m.ino()) == file))
        })
        .collect()
}

/// Kills those of `left` (processes holding a lock for a plumb that is gone: [`left_holding`])
/// that have run longer than `limit`, each with its process group when it leads one (every
/// plugin plumb starts does, and its IPAM plugin is in it): plumb would have killed them at
/// its plugin timeout had it lived, and one that never ends would otherwise hold back every
/// call for its container for ever. What it killed, for the log.
fn end_overdue(left: &[u32], limit: Duration) -> Vec<String> {
    let mut killed = Vec::new();
    for &pid in left {
        let Some((age, group)) = age_and_group(pid) else {
            continue;
        };
        if age <= limit {
            continue;
        }
        let name = who_holds(&[pid]);
        let Ok(raw) = i32::try_from(pid) else {
            continue;
        };
        let target = nix::unistd::Pid::from_raw(raw);
        let sent = if group == pid {
            nix::sys::signal::killpg(target, nix::sys::signal::Signal::SIGKILL)
        } else {
            nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL)
        };
        if sent.is_ok() {
            killed.push(format!(
                "killed {name}{}, which had run {} s, longer than plumb lets a plugin run ({} s)",
                if group == pid { " with its group" } else { "" },
                age.as_secs(),
                limit.as_secs()
            ));
        }
    }
    killed
}

/// How long process `pid` has run, and its process group (`/proc/<pid>/stat`).
fn age_and_group(pid: u32) -> Option<(Duration, u32)> {
    // The kernel counts a process's start in USER_HZ, which is 100 on every architecture.
    const USER_HZ: f64 = 100.0;
    // state ppid pgrp … starttime
    let fields = stat_fields(pid)?;
    let group = fields.get(2)?.parse().ok()?;
    let started = fields.get(19)?.parse::<f64>().ok()? / USER_HZ;
    let uptime: f64 = fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((Duration::from_secs_f64((uptime - started).max(0.0)), group))
}

/// The processes in `holders` for a log line: "process 42 (plumb)", "this process".
fn who_holds(holders: &[u32]) -> String {
    if holders.is_empty() {
        return "a process /proc/locks does not name".into();
    }
    let names: Vec<String> = holders
        .iter()
        .map(|&pid| {
            if pid == std::process::id() {
                return "this process (another of its calls)".into();
            }
            match fs::read_to_string(format!("/proc/{pid}/comm")) {
                Ok(comm) => format!("process {pid} ({})", comm.trim_end()),
                Err(_) => format!("process {pid}"),
            }
        })
        .collect();
    names.join(", ")
}

/// The turn of container `id` if nobody holds it, else `None` at once (GC: a container with a
/// call running is not stale).
pub fn try_take_for(records: &RecordStore, id: &str) -> Result<Option<Turn>, CniError> {
    acquire(&records.lock_path(id)?, FlockArg::LockExclusiveNonblock)
}

/// Waits for the lock at `path` (a validated container ID's lock file) and takes it, creating
/// its directory (0700, as the records') and the file as needed. If another call holds it,
/// `waiting` is told ([`Report`]) once when the wait begins, then after [`LONG_WAIT`] and every
/// [`STILL_WAITING_EVERY`] after that. Meanwhile, every [`LONG_WAIT`], processes left holding
/// the lock by a holder that is gone are killed once they have run longer than a plugin may
/// ([`end_overdue`]).
///
/// `requester` is the process the call is for: this one in thin mode, the plugin that forwarded
/// it in the daemon (`None`: not known). When the lock's holder is that process or one of its
/// ancestors, plumb was run as a delegate of itself for the same container (a network's
/// configuration names plumb), and waiting would never end: the outer call waits for the
/// delegate, which waits for the outer call. That is [`NoTurn::Nested`] at once (code 7).
fn take(
    path: &Path,
    requester: Option<u32>,
    waiting: impl Fn(&Report) + Sync,
) -> Result<Turn, NoTurn> {
    let mut first = true;
    loop {
        if let Some(turn) =
            acquire(path, FlockArg::LockExclusiveNonblock).map_err(NoTurn::Failed)?
        {
            return Ok(turn);
        }
        let holding = holders(path);
        // Only before the first wait: after one, the requester (a forwarding plugin the
        // runtime may have killed meanwhile) may be gone and its pid someone else's.
        if let Some(requester) = requester.filter(|_| first)
            && let Some(holder) = holding
                .iter()
                .copied()
                .find(|h| is_plumb(*h) && descends_from(requester, *h))
        {
            return Err(NoTurn::Nested(CniError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "container lock {}: held by process {holder}, which started this call's \
                     process: plumb is running as a delegate of plumb itself for the same \
                     container (a network's configuration names plumb as a plugin), and would \
                     wait for itself for ever; remove plumb from that network's plugins",
                    path.display()
                ),
            )));
        }
        if first {
            first = false;
            waiting(&Report {
                holders: &holding,
                waited: None,
                left: &[],
                killed: &[],
            });
        }
        // flock(2) has no timeout: a watcher beside the wait says when it goes on too long.
        let (done, ended) = mpsc::channel::<()>();
        let acquired = std::thread::scope(|scope| {
            let waiting = &waiting;
            scope.spawn(move || {
                let started = Instant::now();
                let mut next_report = LONG_WAIT;
                while let Err(RecvTimeoutError::Timeout) = ended.recv_timeout(LONG_WAIT) {
                    // Asked again: the call it waited for may have ended, and another come
                    // before this one.
                    let holders = holders(path);
                    let left = left_holding(path, &holders);
                    let killed = end_overdue(&left, cni::exec::PLUGIN_TIMEOUT);
                    let waited = started.elapsed();
                    if waited >= next_report || !killed.is_empty() {
                        waiting(&Report {
                            holders: &holders,
                            waited: Some(waited),
                            left: &left,
                            killed: &killed,
                        });
                        next_report = waited + STILL_WAITING_EVERY;
                    }
                }
            });
            let acquired = acquire(path, FlockArg::LockExclusive);
            drop(done);
            acquired
        });
        if let Some(turn) = acquired.map_err(NoTurn::Failed)? {
            return Ok(turn);
        }
    }
}

/// The processes holding a `flock` on a file with the inode number of the file at `path`, as
/// `/proc/locks` lists them (only asked when a call has to wait, so its size does not matter).
/// The inode alone: the device `/proc/locks` prints is the superblock's, which is not the one
/// `stat` gives on btrfs or overlayfs. [`is_plumb`] then keeps locks on other file systems out.
pub(crate) fn holders(path: &Path) -> Vec<u32> {
    let Ok(m) = fs::symlink_metadata(path) else {
        return Vec::new();
    };
    flocks_on(m.ino())
        .into_iter()
        .filter(|&(_, waiting)| !waiting)
        .map(|(pid, _)| pid)
        .collect()
}

/// The `flock`s `/proc/locks` lists on a file with inode number `ino`: the pid of each holder
/// and waiter, and whether it waits.
fn flocks_on(ino: u64) -> Vec<(u32, bool)> {
    let Ok(locks) = fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    let ino = ino.to_string();
    locks
        .lines()
        .filter_map(|l| {
            // "1: FLOCK  ADVISORY  WRITE 4242 fe:00:10185010 0 EOF"; a waiter's: "1: -> FLOCK …".
            let mut f = l.split_whitespace().skip(1).peekable();
            let waiting = f.next_if_eq(&"->").is_some();
            let f: Vec<&str> = f.collect();
            let same_inode = f.get(4)?.rsplit(':').next() == Some(ino.as_str());
            (f.first() == Some(&"FLOCK") && same_inode)
                .then(|| Some((f.get(3)?.parse().ok()?, waiting)))
                .flatten()
        })
        .collect()
}

/// The fields of `/proc/<pid>/stat` after the command name ("pid (comm) state ppid pgrp …":
/// the name may hold spaces and parentheses, so after the last ')'), from the state on.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// Whether process `pid` runs the same executable as this one (plumb): only plumb holds
/// container locks, and an ancestor that is not plumb (the runtime, holding a lock of its own
/// on a file that happens to have the same inode number elsewhere) is no sign of nesting.
pub(crate) fn is_plumb(pid: u32) -> bool {
    let exe = |p: &str| fs::metadata(p).map(|m| (m.dev(), m.ino()));
    match (exe(&format!("/proc/{pid}/exe")), exe("/proc/self/exe")) {
        (Ok(theirs), Ok(ours)) => theirs == ours,
        _ => false,
    }
}

/// Whether `process` is `ancestor` or one of its descendants (walking at most 64 parents).
pub(crate) fn descends_from(process: u32, ancestor: u32) -> bool {
    let mut p = process;
    for _ in 0..64 {
        if p == ancestor {
            return true;
        }
        let Some(parent) = stat_fields(p).and_then(|f| f.get(1)?.parse().ok()) else {
            return false;
        };
        if parent == 0 || parent == p {
            return false;
        }
        p = parent;
    }
    false
}

/// The lock at `path` taken `how`; `None` when a non-blocking `how` finds it held.
pub(crate) fn acquire(path: &Path, how: FlockArg) -> Result<Option<Turn>, CniError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        CniError::new(
            ErrorCode::Io,
            format!("container lock {}: {what}: {e}", path.display()),
        )
    };
    // O_NOFOLLOW: a symlink planted in the state directory is not followed to lock (and
    // create) a file elsewhere.
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(path)
    };
    loop {
        let opened = match open() {
            // The state directory is made (0700, as the records') only when missing: not one
            // mkdir more on every call.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent() {
                    fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)
                        .map_err(|e| fail("cannot create its directory", &e))?;
                }
                open()
            }
            opened => opened,
        };
        let (mut file, locked) = match opened {
            Ok(file) => (file, path),
            // No room for a new file (out of blocks, inodes or quota): the call must not fail
            // for that, or a DEL on a full node (where the kubelet evicts pods to make room)
            // would keep its pod for ever. It takes turns on the state directory instead, with
            // every other call that finds no room either.
            Err(e)
                if [Errno::ENOSPC, Errno::EDQUOT]
                    .iter()
                    .any(|c| e.raw_os_error() == Some(*c as i32)) =>
            {
                let dir = path.parent().unwrap_or(Path::new("."));
                let file = File::open(dir)
                    .map_err(|e| fail("no room to create it, and its directory", &e))?;
                (file, dir)
            }
            Err(e) => return Err(fail("cannot open it", &e)),
        };
        let lock = loop {
            match Flock::lock(file, how) {
                Ok(lock) => break lock,
                Err((_, Errno::EWOULDBLOCK)) => return Ok(None),
                Err((f, Errno::EINTR)) => file = f,
                Err((_, e)) => return Err(fail("cannot lock it", &e)),
            }
        };
        let held = lock.metadata().map_err(|e| fail("cannot stat it", &e))?;
        match fs::symlink_metadata(locked) {
            Ok(now) if (now.dev(), now.ino()) == (held.dev(), held.ino()) => {
                return Ok(Some(Turn {
                    shared: None,
                    _lock: lock,
                    // The lock file, to remove at the container's end; never the directory.
                    path: (locked == path).then(|| path.to_path_buf()),
                }));
            }
            // Removed (or replaced) by the DEL that held it before (`Turn::end_for_good`):
            // opened just before that, the file locked is an inode nobody else can find (the
            // unlink race), so the taker starts again on the file the path names now.
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail("cannot stat it", &e)),
        }
    }
}

/// Removes the lock files of containers that have no record and no call running (GC): a DEL
/// killed between removing the record and removing the lock file leaves one, and nothing else
/// would. Whether a record exists is asked with the lock held, so an ADD cannot write one
/// meanwhile. Returns the files removed.
pub fn sweep_orphans(records: &RecordStore) -> Result<Vec<PathBuf>, CniError> {
    let mut removed = Vec::new();
    for id in records.locked_ids()? {
        let Some(turn) = try_take_for(records, &id)? else {
            continue;
        };
        match fs::symlink_metadata(records.path(&id)?) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                removed.extend(turn.path.clone());
                turn.end_for_good();
            }
            _ => {}
        }
    }
    Ok(removed)
}

impl Turn {
    /// Shares the turn with the processes this one starts from now on (the delegates, and the
    /// IPAM plugins they start in turn): the lock is then released only when the last of them
    /// has exited, not when this process does. The runtime kills a plugin whose deadline
    /// passed, and sends DEL at once; the delegate the plugin was running went on and finished
    /// its ADD after that DEL, which had found the lock free and undone the record, so the
    /// interface and address it made were left to nobody. Now the DEL waits for it, then
    /// undoes it too.
    ///
    /// Only in a process that runs one call (thin mode, `plumb attach`): in the daemon, every
    /// call's delegates would inherit the locks of the calls running beside it (the daemon
    /// uses [`Turn::share_with_this_threads_plugins`]).
    pub fn share_with_children(&self) -> Result<(), CniError> {
        use std::os::fd::AsFd;
        nix::fcntl::fcntl(
            self._lock.as_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .map(drop)
        .map_err(|e| {
            CniError::new(
                ErrorCode::Io,
                format!("container lock: cannot share it with the delegates: {e}"),
            )
        })
    }

    /// [`Turn::share_with_children`] for a process that runs several calls at once (the
    /// daemon): only the plugins this thread starts while the turn lives, this call's
    /// delegates, share it (cni::inherit). The daemon killed (SIGKILL, the OOM killer) while a
    /// delegate ran left that delegate running with no lock: the runtime's DEL, run at once in
    /// the plugin, undid the record, and the delegate's interface and address, made after,
    /// were left to nobody. Now that DEL waits for it, then undoes it too.
    pub fn share_with_this_threads_plugins(&mut self) -> Result<(), CniError> {
        let shared = cni::inherit::Inherited::new(&*self._lock).map_err(|e| {
            CniError::new(
                ErrorCode::Io,
                format!("container lock: cannot share it with the delegates: {e}"),
            )
        })?;
        self.shared = Some(shared);
        Ok(())
    }

    /// Turns the lock into another kind (`flock(2)`: not atomically; for [`node_call`],
    /// whose lock nothing waits on).
    pub(crate) fn relock(&self, how: FlockArg) -> Result<(), CniError> {
        self._lock.relock(how).map_err(|e| {
            CniError::new(
                ErrorCode::Io,
                format!("lock {}: cannot change it: {e}", self.path_shown()),
            )
        })
    }

    fn path_shown(&self) -> String {
        self.path.as_deref().map_or_else(
            || "on the state directory".into(),
            |p| p.display().to_string(),
        )
    }

    /// Ends the turn of a container that is gone (a successful DEL): its lock file is removed
    /// while still held, so a call waiting on it starts again on a new file (`acquire` checks
    /// that the path still names the inode it locked). Removed so that the state directory does
    /// not keep a file for every sandbox the node ever ran: nothing else would remove them (GC
    /// works from the records).
    pub fn end_for_good(self) {
        if let Some(path) = &self.path {
            let _ = fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_process_left_holding_a_lock_is_killed_with_its_group_once_it_ran_too_long() {
        // A delegate of a plumb that was killed (its process group's leader, as every plugin
        // plumb starts is), with what it started: older than the limit, both are killed;
        // younger, neither.
        use std::os::unix::process::CommandExt;
        let mut delegate = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = delegate.id();
        std::thread::sleep(Duration::from_millis(200));
        let in_group = |group: u32| {
            fs::read_dir("/proc")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&p| age_and_group(p).is_some_and(|(_, g)| g == group))
                .count()
        };
        assert_eq!(in_group(pid), 2, "the shell and its sleep");
        assert!(end_overdue(&[pid], Duration::from_secs(3600)).is_empty());
        assert!(delegate.try_wait().unwrap().is_none(), "killed too young");
        let killed = end_overdue(&[pid], Duration::ZERO);
        assert_eq!(killed.len(), 1, "{killed:?}");
        assert!(
            killed[0].contains(&format!("process {pid} (sh) with its group")),
            "{killed:?}"
        );
        delegate.wait().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // The sleep goes too (a zombie until init reaps it counts as gone).
        while fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .any(|p| {
                age_and_group(p).is_some_and(|(_, g)| g == pid)
                    && !fs::read_to_string(format!("/proc/{p}/stat"))
                        .is_ok_and(|s| s.contains(") Z "))
            })
        {
            assert!(std::time::Instant::now() < deadline, "the sleep still runs");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_second_taker_waits_for_the_first_even_when_the_file_is_removed_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/c1.lock");
        let first = take(&path, None, |_| panic!("nobody holds it")).unwrap();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let path = path.clone();
            let waited = tx.clone();
            std::thread::spawn(move || {
                let second = take(&path, None, move |_| waited.send("waits").unwrap()).unwrap();
                tx.send("took it").unwrap();
                second
            })
        };
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("waits"));
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the second took the lock while the first held it"
        );
        first.end_for_good();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("took it"));
        let second = waiter.join().unwrap();
        // It holds the file the path names now, not the removed one: a third must wait for it.
        let held = second._lock.metadata().unwrap();
        let named = fs::metadata(&path).unwrap();
        assert_eq!((held.dev(), held.ino()), (named.dev(), named.ino()));
        assert!(
            Flock::lock(File::open(&path).unwrap(), FlockArg::LockExclusiveNonblock).is_err(),
            "the path's lock is held"
        );
    }

    #[test]
    fn a_call_whose_own_ancestor_holds_the_lock_fails_at_once_instead_of_waiting_for_ever() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c2.lock");
        assert!(holders(&path).is_empty(), "no file, no holder");
        let held = take(&path, None, |_| panic!("nobody holds it")).unwrap();
        let me = std::process::id();
        assert_eq!(holders(&path), [me], "/proc/locks names the holder");
        // A child of the holder (plumb run as its delegate) would wait on its parent for ever.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(descends_from(child.id(), me));
        assert!(!descends_from(me, child.id()));
        assert!(is_plumb(me) && !is_plumb(child.id()), "by executable");
        let Err(NoTurn::Nested(e)) = take(&path, Some(child.id()), |_| panic!("it must not wait"))
        else {
            panic!("taken, or failed otherwise");
        };
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(e.code, ErrorCode::InvalidConfig.code(), "{e}");
        assert!(
            e.msg.contains(&format!("held by process {me}"))
                && e.msg.contains("delegate of plumb itself"),
            "{e}"
        );
        drop(held);
        assert!(holders(&path).is_empty(), "released");
    }
}
