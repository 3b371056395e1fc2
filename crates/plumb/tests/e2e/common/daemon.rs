//! `plumb daemon` run by a test: started on a socket, its stderr read as it comes (so a test can
//! wait for a line), stopped with SIGTERM or killed with SIGKILL.

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `plumb daemon` on `socket`; killed (SIGKILL) when dropped if still running.
pub struct Daemon {
    child: Option<Child>,
    /// What it wrote on stderr so far (read as it comes, so a test can wait for a line).
    stderr: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    pub fn start(socket: &Path) -> Daemon {
        Daemon::start_as(socket, None)
    }

    /// [`Daemon::start`], run as `uid` when given. Returns once `socket` names a socket the
    /// daemon listens on: not the one that was there before, which it replaces.
    pub fn start_as(socket: &Path, uid: Option<u32>) -> Daemon {
        Daemon::start_with(socket, uid, &[], &[])
    }

    /// [`Daemon::start_as`], with `more` arguments and `env` in its environment.
    pub fn start_with(
        socket: &Path,
        uid: Option<u32>,
        more: &[&std::ffi::OsStr],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut command = Command::new(env!("CARGO_BIN_EXE_plumb"));
        command
            .args(["daemon", "--socket"])
            .arg(socket)
            .args(more)
            // Not this machine's cluster, if the tests run in a pod: the stand-in's.
            .env_remove("KUBERNETES_SERVICE_HOST")
            .envs(env.iter().copied());
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        Daemon::start_command(command, socket)
    }

    /// `command`, a daemon (or a command that execs one), started; returns once `socket` (as
    /// this process sees it) names a socket the daemon listens on, not the one that was there
    /// before.
    pub fn start_command(mut command: Command, socket: &Path) -> Daemon {
        let before = fs::symlink_metadata(socket)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let reader = {
            let (mut from, to) = (child.stderr.take().unwrap(), Arc::clone(&stderr));
            std::thread::spawn(move || {
                let mut buf = [0; 4096];
                while let Ok(n @ 1..) = from.read(&mut buf) {
                    to.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            })
        };
        let mut daemon = Daemon {
            child: Some(child),
            stderr,
            reader: Some(reader),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = fs::symlink_metadata(socket)
                .ok()
                .map(|m| (m.dev(), m.ino()));
            if now.is_some()
                && now != before
                && std::os::unix::net::UnixStream::connect(socket).is_ok()
            {
                return daemon;
            }
            assert!(daemon.alive(), "plumb daemon exited: {}", daemon.said());
            assert!(Instant::now() < deadline, "plumb daemon did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// What it wrote on stderr so far.
    pub fn said(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (10 s at most) for it to write `line` on stderr; all it wrote.
    pub fn wait_for(&self, line: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = self.said();
            if said.contains(line) {
                return said;
            }
            assert!(Instant::now() < deadline, "no {line:?} in: {said}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (10 s at most) for it to write `line` once more than `before` times; all it wrote.
    pub fn wait_for_more(&self, line: &str, before: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = self.said();
            if said.matches(line).count() > before {
                return said;
            }
            assert!(Instant::now() < deadline, "no new {line:?} in: {said}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then its exit status and what it wrote on stderr.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let pid = child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = child.wait().unwrap();
        self.reader.take().unwrap().join().unwrap();
        (status, self.said())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A listener on a socket whose backlog (0) one queued connection fills, and that never
/// accepts: as a daemon swamped with calls looks to the next plugin. Closed when dropped.
pub struct Busy {
    _listener: tokio::net::UnixListener,
    _queued: std::os::unix::net::UnixStream,
    _rt: tokio::runtime::Runtime,
}

impl Busy {
    pub fn on(socket: &Path) -> Busy {
        let rt = plumb_cluster::runtime::current_thread().unwrap();
        let listener = rt.block_on(async {
            let s = tokio::net::UnixSocket::new_stream().unwrap();
            s.bind(socket).unwrap();
            s.listen(0).unwrap()
        });
        let queued = std::os::unix::net::UnixStream::connect(socket).unwrap();
        Busy {
            _listener: listener,
            _queued: queued,
            _rt: rt,
        }
    }
}

/// Whether the plugin's call went to a daemon (it did not run the call itself).
pub fn forwarded(out: &std::process::Output) -> bool {
    !String::from_utf8_lossy(&out.stderr).contains("running the call in this process")
}
