//! A file descriptor that the plugins one thread starts inherit, and no other process: what a
//! process running several calls at once (plumb's daemon) needs so that each call's plugins
//! hold that call's lock, as a process running one call gets by leaving its lock's descriptor
//! open across `exec` for all its children.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};

/// What the plugins each thread starts inherit, by thread. Also held while a plugin starts, so
/// that no other start sees the duplicate open then.
static INHERITED: Mutex<Option<HashMap<ThreadId, OwnedFd>>> = Mutex::new(None);

fn inherited() -> MutexGuard<'static, Option<HashMap<ThreadId, OwnedFd>>> {
    INHERITED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// While this lives, the plugins that the thread that made it starts through [`spawning`]
/// inherit its descriptor.
#[derive(Debug)]
pub struct Inherited {
    thread: ThreadId,
}

impl Inherited {
    /// The plugins this thread starts from now on inherit a duplicate of `fd` (kept here,
    /// close-on-exec) until the value returned is dropped. One at a time per thread: a second
    /// would replace the first, and the first's drop would then end the second's.
    pub fn new(fd: &impl AsFd) -> io::Result<Inherited> {
        let fd = fd.as_fd().try_clone_to_owned()?;
        let thread = std::thread::current().id();
        match inherited().get_or_insert_with(HashMap::new).entry(thread) {
            Entry::Occupied(_) => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "this thread's plugins inherit another descriptor already",
            )),
            Entry::Vacant(v) => {
                v.insert(fd);
                Ok(Inherited { thread })
            }
        }
    }
}

impl Drop for Inherited {
    fn drop(&mut self) {
        if let Some(map) = inherited().as_mut() {
            map.remove(&self.thread);
        }
    }
}

/// Runs `start` (a plugin's `spawn`), its child inheriting this thread's descriptor if it has
/// one ([`Inherited`]).
///
/// A descriptor is inherited when it lacks `FD_CLOEXEC` at the moment of the `fork` (or
/// `posix_spawn`). So the descriptor is kept close-on-exec; each start makes a duplicate without
/// the flag, starts the plugin, and closes the duplicate, and every start through this function,
/// in every thread, holds one process-wide lock, so that no other plugin starts while a
/// duplicate is open. A process started meanwhile by other code (not through this function)
/// could still inherit one: it would hold that lock while it lives, which delays, never breaks,
/// what the lock guards. plumb starts every process it starts through this function (the
/// delegates, an exec credential plugin).
pub fn spawning<T>(start: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let all = inherited();
    let open = all
        .as_ref()
        .and_then(|map| map.get(&std::thread::current().id()))
        .map(|fd| -> io::Result<OwnedFd> {
            // `try_clone` duplicates close-on-exec; the flag is then cleared on the copy.
            let copy = fd.try_clone()?;
            fcntl(copy.as_fd(), FcntlArg::F_SETFD(FdFlag::empty()))?;
            Ok(copy)
        })
        .transpose()?;
    let started = start();
    // Closed before the next start can begin (the lock is still held): no other child gets it.
    drop(open);
    drop(all);
    started
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// The descriptors `child`'s process has open, by what they name.
    fn open_in(pid: u32) -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|p| p.display().to_string())
            .collect()
    }

    fn start_sleeper() -> std::process::Child {
        spawning(|| {
            Command::new("sleep")
                .arg("5")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
        })
        .unwrap()
    }

    #[test]
    fn only_the_plugins_of_the_thread_that_shares_a_descriptor_inherit_it() {
        let d = tempfile::tempdir().unwrap();
        let lock = std::fs::File::create(d.path().join("c.lock")).unwrap();
        let name = d.path().join("c.lock").display().to_string();
        let shared = Inherited::new(&lock).unwrap();
        let mut mine = start_sleeper();
        // Another thread's plugin, started while this one shares: not it.
        let mut other = std::thread::spawn(start_sleeper).join().unwrap();
        assert!(open_in(mine.id()).contains(&name));
        assert!(!open_in(other.id()).contains(&name));
        // Nor this thread's once the sharing ended; and this process holds no copy but its own.
        drop(shared);
        let mut after = start_sleeper();
        assert!(!open_in(after.id()).contains(&name));
        let ours = open_in(std::process::id());
        assert_eq!(ours.iter().filter(|p| **p == name).count(), 1, "{ours:?}");
        for c in [&mut mine, &mut other, &mut after] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    #[test]
    fn a_thread_shares_one_descriptor_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let first = std::fs::File::create(d.path().join("a.lock")).unwrap();
        let second = std::fs::File::create(d.path().join("b.lock")).unwrap();
        let shared = Inherited::new(&first).unwrap();
        let e = Inherited::new(&second).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        // The first still shared, and a second once it ended.
        let name = d.path().join("a.lock").display().to_string();
        let mut child = start_sleeper();
        assert!(open_in(child.id()).contains(&name));
        drop(shared);
        drop(Inherited::new(&second).unwrap());
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
