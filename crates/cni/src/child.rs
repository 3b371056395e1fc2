//! A child process seen to its end from the calling thread: its stdin written, its stdout and
//! stderr read with poll(2), both bounded, up to a deadline, then reaped; and killed with what
//! it started when that fails. Plugins (spec §2 "Execution Protocol", `exec::RawExec`)
//! run this way, and so can any helper a runtime starts (plumb's exec credential plugins).

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::process::{Child, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// How a finished child ended, with everything it printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    /// Up to `max_output` bytes.
    pub stdout: Vec<u8>,
    /// Up to `max_output` bytes.
    pub stderr: Vec<u8>,
    /// Its stdout went past `max_output` and `stdout` holds only the first part.
    pub stdout_cut: bool,
}

/// Why a child was not seen to its end. The caller kills it ([`kill_group`]).
#[derive(Debug)]
pub enum Unfinished {
    /// It had not exited by the deadline.
    TimedOut,
    /// Its stdout went past `max_output`, and [`PastMax::GiveUp`] was asked for.
    PastMax,
    /// Its pipes or its status could not be read.
    Io(io::Error),
}

/// What to do with a child whose stdout goes past `max_output`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PastMax {
    /// Read the rest and drop it until the child exits: a plugin is let finish what it does.
    ReadOn,
    /// Stop at once: its answer can no longer be used.
    GiveUp,
}

/// Talks to `child` (spawned with stdout and stderr piped; stdin piped, or null when `stdin` is
/// empty) until it exits: writes `stdin`, reads what it prints, then reaps it, all by
/// `deadline`. On an error the child may still run: the caller kills it with [`kill_group`].
pub fn run_to_end(
    child: &mut Child,
    stdin: &[u8],
    deadline: Instant,
    max_output: usize,
    past_max: PastMax,
) -> Result<Finished, Unfinished> {
    let (mut stdout, stderr) = communicate(child, stdin, deadline, max_output, past_max)?;
    let status = match wait_until(child, deadline) {
        Ok(Some(status)) => status,
        Ok(None) => return Err(Unfinished::TimedOut),
        Err(e) => return Err(Unfinished::Io(e)),
    };
    // One byte past the limit was kept to tell "exactly the limit" from "more".
    let stdout_cut = stdout.len() > max_output;
    stdout.truncate(max_output);
    Ok(Finished {
        status,
        stdout,
        stderr,
        stdout_cut,
    })
}

/// Kills a child that leads its own process group (`process_group(0)`), and every process of
/// that group (what it started, such as the IPAM plugin a plugin was waiting for), and reaps
/// it. Killing the plugin alone left those running: an IPAM plugin that went on to allocate
/// after the rollback's DEL had released would leak its address. The child is not reaped
/// before its group is killed ([`run_to_end`] sees it exit without reaping it), so its pid,
/// which is the group's id, cannot have gone to another process.
pub fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Writes `stdin` to the child and reads its stdout and stderr until both are closed, all
/// at once from this thread with poll(2): a plugin that writes a lot before reading its
/// stdin cannot deadlock against us, and no thread is started (measured: three threads per
/// plugin run were a visible part of plumb's overhead). Output past `max_output` is read and
/// dropped, so the plugin is never blocked on a full pipe, or ends the talk ([`PastMax`]).
fn communicate(
    child: &mut Child,
    stdin: &[u8],
    deadline: Instant,
    max_output: usize,
    past_max: PastMax,
) -> Result<(Vec<u8>, Vec<u8>), Unfinished> {
    let mut pipe_in = child.stdin.take().filter(|_| !stdin.is_empty());
    let mut pipe_out = child.stdout.take();
    let mut pipe_err = child.stderr.take();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut written = 0;
    let mut buf = vec![0u8; 64 << 10];
    // When the plugin itself exited while a process it started still holds its output open.
    // Checked every EXIT_CHECK, however busy the pipes: a leftover process that keeps
    // writing must not hide the plugin's exit until the deadline.
    let mut exited_at: Option<Instant> = None;
    let mut next_exit_check = Instant::now() + EXIT_CHECK;
    while pipe_in.is_some() || pipe_out.is_some() || pipe_err.is_some() {
        let now = Instant::now();
        if exited_at.is_none() && now >= next_exit_check {
            next_exit_check = now + EXIT_CHECK;
            if has_exited(child) {
                exited_at = Some(now);
            }
        }
        let left = deadline.saturating_duration_since(now);
        if exited_at.is_some_and(|t| now - t >= LEFT_BEHIND_GRACE) {
            // What it printed before exiting is all there is.
            break;
        }
        if left.is_zero() {
            return Err(Unfinished::TimedOut);
        }
        let [r_in, r_out, r_err] = {
            let mut fds = Vec::with_capacity(3);
            let mut slots = [None; 3];
            if let Some(p) = &pipe_in {
                slots[0] = Some(fds.len());
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLOUT));
            }
            for (i, p) in [
                (1, pipe_out.as_ref().map(|p| p.as_fd())),
                (2, pipe_err.as_ref().map(|p| p.as_fd())),
            ] {
                if let Some(fd) = p {
                    slots[i] = Some(fds.len());
                    fds.push(PollFd::new(fd, PollFlags::POLLIN));
                }
            }
            // Woken now and then to notice a plugin that exited with its pipes held open.
            let wait = left.min(EXIT_CHECK);
            let ms = i32::try_from(wait.as_millis().max(1)).unwrap_or(i32::MAX);
            match poll(
                &mut fds,
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(Unfinished::Io(io::Error::from(e))),
            }
            slots.map(|slot| {
                slot.and_then(|i| fds[i].revents())
                    .unwrap_or(PollFlags::empty())
            })
        };
        if !r_in.is_empty()
            && let Some(p) = &mut pipe_in
        {
            // POLLOUT promises room for PIPE_BUF bytes: a write of that much never blocks.
            let end = stdin.len().min(written + PIPE_BUF);
            match p.write(&stdin[written..end]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A plugin may exit without reading its stdin: not our error.
                Err(_) => written = stdin.len(),
            }
            if written >= stdin.len() {
                pipe_in = None;
            }
        }
        if !r_out.is_empty()
            && !read_some(
                &mut pipe_out,
                &mut stdout,
                &mut buf,
                max_output.saturating_add(1),
            )
        {
            pipe_out = None;
        }
        if past_max == PastMax::GiveUp && stdout.len() > max_output {
            return Err(Unfinished::PastMax);
        }
        if !r_err.is_empty() && !read_some(&mut pipe_err, &mut stderr, &mut buf, max_output) {
            pipe_err = None;
        }
    }
    Ok((stdout, stderr))
}

/// Whether the child has exited, without reaping it (waitid(2) with `WNOWAIT`): until it is
/// reaped its pid, which is its process group's id, stays its own, so that [`kill_group`] of a
/// child that exited while a process it left behind held its output cannot reach another
/// process that was given the pid meanwhile.
fn has_exited(child: &Child) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let Ok(pid) = i32::try_from(child.id()) else {
        return false;
    };
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(nix::unistd::Pid::from_raw(pid)), flags) {
        Ok(status) => status != WaitStatus::StillAlive,
        // nix cannot name a real-time signal (34 and up): a child killed by one has exited.
        Err(Errno::EINVAL) => true,
        // ECHILD: not ours to wait for (reaped already), as `try_wait` would fail.
        Err(_) => false,
    }
}

/// Bytes that fit in a pipe with one write that never blocks (POSIX PIPE_BUF on Linux).
const PIPE_BUF: usize = 4096;

/// How often a quiet plugin is checked for having exited.
const EXIT_CHECK: Duration = Duration::from_millis(100);

/// How long output is still read after the plugin exited, when a process it left behind holds
/// its pipes open (a daemon it started without closing them).
const LEFT_BEHIND_GRACE: Duration = Duration::from_millis(500);

/// Waits for the child to exit, up to `deadline`; `None` if it is still running then. Its
/// pipes are closed by now, so it is normally exiting already, a few µs from being reapable:
/// the first checks only yield the CPU (a sleep, however short, lasts its 50 µs of timer
/// slack, measured at 80 µs per plugin run), then they back off.
fn wait_until(child: &mut Child, deadline: Instant) -> io::Result<Option<ExitStatus>> {
    let spin_until = Instant::now() + EXITING_SPIN;
    let mut pause = Duration::from_micros(50);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        if now < spin_until {
            thread::yield_now();
            continue;
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// How long [`wait_until`] checks without sleeping.
const EXITING_SPIN: Duration = Duration::from_millis(1);

/// One read from a pipe that poll(2) said is ready, kept up to `max` bytes in all. Returns
/// whether the pipe is still open.
fn read_some<R: Read>(pipe: &mut Option<R>, out: &mut Vec<u8>, buf: &mut [u8], max: usize) -> bool {
    let Some(p) = pipe else {
        return false;
    };
    match p.read(buf) {
        Ok(0) => false,
        Ok(n) => {
            let keep = n.min(max.saturating_sub(out.len()));
            out.extend_from_slice(&buf[..keep]);
            true
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// The state letter of process `pid` in /proc, if it is still there.
    fn state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    /// `script` run by `sh` as a plugin is, leading its own process group, its stdout piped.
    /// It writes the pid of a process it starts in a session of its own, which holds that
    /// stdout, to `holder`; dropped, both are killed.
    struct LeavesAHolder {
        child: Child,
        holder: std::path::PathBuf,
        /// Its group killed and it reaped: its pid may be another process's by now.
        killed: bool,
    }

    impl LeavesAHolder {
        fn start(dir: &std::path::Path, script: &str) -> LeavesAHolder {
            let holder = dir.join("holder.pid");
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(format!(
                "setsid sleep 30 & echo $! > {}; {script}",
                holder.display()
            ));
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            LeavesAHolder {
                child,
                holder,
                killed: false,
            }
        }

        fn kill_group(&mut self) {
            kill_group(&mut self.child);
            self.killed = true;
        }

        /// Waits up to 2 s for the child to be a zombie (exited, not reaped).
        fn zombie_within_2s(&self) -> bool {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if state(self.child.id()) == Some('Z') {
                    return true;
                }
                thread::sleep(Duration::from_millis(10));
            }
            false
        }
    }

    impl Drop for LeavesAHolder {
        fn drop(&mut self) {
            if !self.killed {
                self.kill_group();
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Some(pid) = std::fs::read_to_string(&self.holder)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    return;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
    }

    #[test]
    fn a_child_that_exited_is_not_reaped_before_its_group_is_killed() {
        // It exits at once, leaving the holder with its stdout, so the call runs into its
        // deadline within the grace after the exit. Until kill_group, its pid (its group's
        // id) must stay its own, a zombie: reaped, it could be given to another process,
        // whose group killpg would then kill.
        let d = tempfile::tempdir().unwrap();
        let mut p = LeavesAHolder::start(d.path(), "exit 0");
        let deadline = Instant::now() + LEFT_BEHIND_GRACE / 2 + EXIT_CHECK * 2;
        let r = run_to_end(&mut p.child, &[], deadline, 1 << 10, PastMax::ReadOn);
        assert!(matches!(r, Err(Unfinished::TimedOut)), "{r:?}");
        assert!(
            p.zombie_within_2s(),
            "the child was reaped before its group was killed: {:?}",
            state(p.child.id())
        );
        let pid = p.child.id();
        p.kill_group();
        assert_eq!(state(pid), None, "kill_group reaps it");
    }

    #[test]
    fn a_child_killed_by_a_real_time_signal_is_seen_to_exit() {
        // Killed by signal 34 while the holder keeps its stdout: its answer (none) is all
        // there is once the grace is over, not at the deadline.
        let d = tempfile::tempdir().unwrap();
        let mut p = LeavesAHolder::start(d.path(), "kill -34 $$");
        let started = Instant::now();
        let deadline = started + Duration::from_secs(20);
        let r = run_to_end(&mut p.child, &[], deadline, 1 << 10, PastMax::ReadOn);
        let took = started.elapsed();
        let finished = r.expect("it was seen to exit");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&finished.status),
            Some(34)
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
}
