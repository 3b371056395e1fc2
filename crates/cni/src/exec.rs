//! Finding and running a plugin binary: the runtime side of spec §2 "Execution Protocol".
//! [`Exec`] is the seam for every plugin execution (Go `pkg/invoke` `Exec`): [`RawExec`] runs real
//! binaries; tests substitute fakes that record calls. A plugin gets its parameters in `CNI_*`
//! variables, its configuration on stdin, and answers on stdout; stderr is captured.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::child::{Finished, PastMax, Unfinished, kill_group, run_to_end};
use crate::error::{CniError, ErrorCode};
use crate::quote;
use crate::validate;

/// A CNI operation (spec §2 "CNI operations").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Add,
    Check,
    Del,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Check => "CHECK",
            Command::Del => "DEL",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "CHECK" => Command::Check,
            "DEL" => Command::Del,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }
}

/// The `CNI_*` parameters of one execution (spec §2 "Parameters"), set over any inherited from
/// our own environment: plumb itself runs as a plugin with the runtime's `CNI_*` values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginEnv {
    pub command: String,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS`, already joined.
    pub args: String,
    /// `CNI_PATH`, already joined with ':'.
    pub path: String,
}

impl PluginEnv {
    /// The variables in the order the reference library sets them.
    pub fn vars(&self) -> [(&'static str, &str); 6] {
        [
            ("CNI_COMMAND", &self.command),
            ("CNI_CONTAINERID", &self.container_id),
            ("CNI_NETNS", &self.netns),
            ("CNI_ARGS", &self.args),
            ("CNI_IFNAME", &self.ifname),
            ("CNI_PATH", &self.path),
        ]
    }
}

/// What a plugin printed when it succeeded. `stderr` is kept so callers can log it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The side-effect seam: find a plugin and run it.
pub trait Exec: Send + Sync {
    /// The executable for `plugin_type` in the first of `dirs` that has it.
    fn find_in_path(&self, plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf, CniError> {
        find_in_path(plugin_type, dirs)
    }

    /// Runs the plugin at `path` with `env` and `stdin`. A plugin that exits non-zero yields its
    /// decoded error.
    fn exec_plugin(
        &self,
        path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<ExecOutput, CniError>;

    /// Hands `gate` to the next plugin execution, which runs it once the plugin's process has
    /// started and before the plugin is given its stdin: work that must be done before the
    /// plugin acts (making a record of what is about to run durable, say) then overlaps the
    /// plugin's own start-up (a Go plugin takes about 2 ms to read its stdin). If the gate fails, the plugin is
    /// killed before it has read anything and that execution fails with the gate's error.
    /// This default, for executors that start no process, runs the gate at once.
    fn hold_next_stdin(&self, gate: StdinGate) -> Result<(), CniError> {
        gate()
    }

    /// Takes back a gate no execution has run yet (the call ended before starting a plugin).
    fn take_stdin_gate(&self) -> Option<StdinGate> {
        None
    }
}

/// Work a plugin waits for before it is given its stdin: see [`Exec::hold_next_stdin`].
pub type StdinGate = Box<dyn FnOnce() -> Result<(), CniError> + Send>;

/// Finds `plugin_type` in `dirs`. The type is validated first, so it can never name a file
/// outside those directories.
pub fn find_in_path(plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf, CniError> {
    validate::plugin_type(plugin_type)?;
    if dirs.is_empty() {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            format!(
                "cannot find plugin {}: no plugin directories (CNI_PATH is empty)",
                quote::quoted(plugin_type)
            ),
        ));
    }
    for dir in dirs {
        let candidate = dir.join(plugin_type);
        if let Ok(meta) = std::fs::metadata(&candidate)
            && meta.is_file()
            && meta.permissions().mode() & 0o111 != 0
        {
            return Ok(candidate);
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(CniError::new(
        ErrorCode::InvalidConfig,
        format!(
            "failed to find plugin {} in path [{}]",
            quote::quoted(plugin_type),
            searched.join(" ")
        ),
    ))
}

/// Splits `CNI_PATH`-style lists (':'-separated); empty parts are dropped.
pub fn split_path(s: &str) -> Vec<PathBuf> {
    s.split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// How long a plugin may run before [`RawExec`] kills it, unless told otherwise.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs real plugin binaries.
#[derive(Clone, Debug)]
pub struct RawExec {
    /// A plugin still running after this is killed and the call fails with code 11 (try again).
    pub timeout: Duration,
    /// Attempts when the binary is being replaced ("text file busy"), as libcni: 5, 1 s apart.
    pub busy_attempts: u32,
    pub busy_delay: Duration,
    /// Output beyond this many bytes is discarded, so a runaway plugin cannot exhaust memory.
    /// A successful plugin whose stdout went past it fails: its result was cut short.
    pub max_output: usize,
    /// What the next plugin waits for before it gets its stdin ([`Exec::hold_next_stdin`]).
    gate: GateSlot,
}

/// Where [`RawExec`] keeps a gate until its next plugin starts. A clone of the executor starts
/// with none.
#[derive(Default)]
struct GateSlot(Mutex<Option<StdinGate>>);

impl GateSlot {
    fn put(&self, gate: StdinGate) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(gate);
    }

    fn take(&self) -> Option<StdinGate> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Clone for GateSlot {
    fn clone(&self) -> Self {
        GateSlot::default()
    }
}

impl std::fmt::Debug for GateSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.lock().map(|g| g.is_some()).unwrap_or(false);
        f.write_str(if held { "gate held" } else { "no gate" })
    }
}

impl Default for RawExec {
    fn default() -> Self {
        RawExec {
            timeout: PLUGIN_TIMEOUT,
            busy_attempts: 5,
            busy_delay: Duration::from_secs(1),
            max_output: 16 << 20,
            gate: GateSlot::default(),
        }
    }
}

impl RawExec {
    fn spawn(&self, path: &Path, env: &PluginEnv) -> io::Result<std::process::Child> {
        let mut attempt = 1;
        loop {
            let mut cmd = Process::new(path);
            // A process group of its own, led by the plugin: what it starts (an IPAM plugin,
            // a helper) is in it too, and goes with it when it is killed ([`kill_group`]).
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env.vars() {
                cmd.env(k, v);
            }
            // Through `inherit`: a process running several calls gives each call's plugins
            // that call's lock, and no other's.
            match crate::inherit::spawning(|| cmd.spawn()) {
                Err(e)
                    if e.kind() == io::ErrorKind::ExecutableFileBusy
                        && attempt < self.busy_attempts =>
                {
                    attempt += 1;
                    thread::sleep(self.busy_delay);
                }
                other => return other,
            }
        }
    }

    fn run(&self, path: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Finished, CniError> {
        let name = path.display();
        // Any spawn failure comes before the plugin's first instruction (the exec itself
        // failed, or the fork or pipes before it): nothing of it ran.
        let mut child = self.spawn(path, env).map_err(|e| {
            CniError::new(ErrorCode::Io, format!("cannot execute plugin {name}: {e}"))
                .plugin_not_started()
        })?;
        // The plugin starts up while the gate runs; it reads nothing before the gate is done.
        if let Some(gate) = self.take_stdin_gate()
            && let Err(e) = gate()
        {
            kill_group(&mut child);
            return Err(e);
        }
        // The plugin's time starts when it can read its stdin.
        let deadline = Instant::now() + self.timeout;
        run_to_end(
            &mut child,
            stdin,
            deadline,
            self.max_output,
            PastMax::ReadOn,
        )
        .map_err(|e| {
            kill_group(&mut child);
            match e {
                Unfinished::TimedOut => CniError::new(
                    ErrorCode::TryAgainLater,
                    format!(
                        "plugin {name} did not exit within {:?} and was killed",
                        self.timeout
                    ),
                ),
                // Not asked for: the output past the limit is read and dropped.
                Unfinished::PastMax => CniError::new(
                    ErrorCode::Io,
                    format!("plugin {name} wrote more than {} bytes", self.max_output),
                ),
                Unfinished::Io(e) => {
                    CniError::new(ErrorCode::Io, format!("cannot talk to plugin {name}: {e}"))
                }
            }
        })
    }
}

impl Exec for RawExec {
    fn hold_next_stdin(&self, gate: StdinGate) -> Result<(), CniError> {
        self.gate.put(gate);
        Ok(())
    }

    fn take_stdin_gate(&self) -> Option<StdinGate> {
        self.gate.take()
    }

    fn exec_plugin(
        &self,
        path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<ExecOutput, CniError> {
        let f = self.run(path, stdin, env)?;
        // CNI spec §5: the result is the plugin's whole stdout. Cut short it is not the result
        // (what is left may even parse, once trailing garbage is cut away), so refuse it.
        if f.status.success() && f.stdout_cut {
            return Err(CniError::new(
                ErrorCode::Io,
                format!(
                    "plugin {} wrote more than {} bytes on stdout: its result cannot be read",
                    path.display(),
                    self.max_output
                ),
            ));
        }
        if f.status.success() {
            return Ok(ExecOutput {
                stdout: f.stdout,
                stderr: f.stderr,
            });
        }
        if let Some(signal) = f.status.signal() {
            return Err(killed_by(path, signal, &f.stderr));
        }
        Err(plugin_error(&f.status.to_string(), &f.stdout, &f.stderr))
    }
}

/// A plugin killed by a signal (the OOM killer's SIGKILL, most often) did not refuse the
/// request: it is code 11, "try again later", so that the runtime retries, and the signal is
/// named. Whatever it printed before is no answer; its stderr goes in the details.
fn killed_by(path: &Path, signal: i32, stderr: &[u8]) -> CniError {
    let name = nix::sys::signal::Signal::try_from(signal)
        .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string());
    let why = if signal == nix::sys::signal::Signal::SIGKILL as i32 {
        " (the kernel's OOM killer sends it when memory runs out)"
    } else {
        ""
    };
    CniError::new(
        ErrorCode::TryAgainLater,
        format!(
            "plugin {} was killed by {name}{why} before it answered",
            path.display()
        ),
    )
    .with_details(
        quote::cut_start(String::from_utf8_lossy(stderr).trim(), QUOTED_OUTPUT_MAX).into_owned(),
    )
}

/// Plugin output quoted in an error is kept to this many bytes: the error goes back to the
/// runtime (and into its events and logs), and a plugin that failed printing megabytes must not
/// make a megabyte error message.
pub const QUOTED_OUTPUT_MAX: usize = 4096;

/// Decodes a failed plugin's output (libcni `pluginErr`): the error JSON on stdout if there is
/// one; otherwise its stderr is the message. Stderr also fills an empty `details`, because it
/// is usually what explains the failure to an operator. Quoted output is cut to
/// [`QUOTED_OUTPUT_MAX`] (CNI spec §5 "Error": `msg` is a short message).
pub fn plugin_error(status: &str, stdout: &[u8], stderr: &[u8]) -> CniError {
    // Its last lines are what usually says why it failed.
    let stderr_text =
        quote::cut_start(String::from_utf8_lossy(stderr).trim(), QUOTED_OUTPUT_MAX).into_owned();
    let stdout_text = String::from_utf8_lossy(stdout).trim().to_string();
    if stdout_text.is_empty() {
        if stderr_text.is_empty() {
            return CniError::new(
                ErrorCode::Internal,
                format!("plugin failed with no error message ({status})"),
            );
        }
        return CniError::new(ErrorCode::Internal, format!("plugin failed: {stderr_text}"));
    }
    match serde_json::from_str::<CniError>(&stdout_text) {
        Ok(mut e) => {
            if e.code == 0 {
                e.code = ErrorCode::Internal.code();
            }
            if e.msg.is_empty() {
                e.msg = format!("plugin failed without a message ({status})");
            }
            if e.details.is_empty() && !stderr_text.is_empty() {
                e.details = stderr_text;
            }
            e
        }
        Err(perr) => CniError::new(
            ErrorCode::Internal,
            format!(
                "plugin failed ({status}) and its error output is not CNI error JSON ({perr}): {:?}",
                quote::cut(&stdout_text, QUOTED_OUTPUT_MAX)
            ),
        )
        .with_details(stderr_text),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::Arc;

    use super::*;

    /// A throwaway "plugin": a shell script in a temp dir.
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn env(cmd: &str) -> PluginEnv {
        PluginEnv {
            command: cmd.into(),
            container_id: "c1".into(),
            netns: "/var/run/netns/x".into(),
            ifname: "eth0".into(),
            args: "A=1;B=2".into(),
            path: "/opt/cni/bin".into(),
        }
    }

    #[test]
    fn finds_first_executable_and_refuses_escapes() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        fs::write(a.path().join("p"), "not executable").unwrap();
        let want = script(b.path(), "p", "exit 0");
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        assert_eq!(find_in_path("p", &dirs).unwrap(), want);
        let e = find_in_path("missing", &dirs).unwrap_err();
        assert!(e.msg.contains("missing") && e.msg.contains(&b.path().display().to_string()));
        for bad in ["", "../p", "/bin/sh", "x/../p"] {
            assert_eq!(find_in_path(bad, &dirs).unwrap_err().code, 7, "{bad:?}");
        }
        assert!(find_in_path("p", &[]).unwrap_err().msg.contains("CNI_PATH"));
        assert_eq!(
            split_path(":/a::/b:"),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
    }

    #[test]
    fn passes_env_overriding_inherited_and_stdin() {
        let d = tempfile::tempdir().unwrap();
        let p = script(
            d.path(),
            "echo",
            r#"printf '%s|%s|%s|%s|%s|%s|' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_NETNS" "$CNI_IFNAME" "$CNI_ARGS" "$CNI_PATH"; cat; echo log >&2"#,
        );
        let out = RawExec::default()
            .exec_plugin(&p, b"{\"x\":1}", &env("ADD"))
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "ADD|c1|/var/run/netns/x|eth0|A=1;B=2|/opt/cni/bin|{\"x\":1}"
        );
        assert_eq!(out.stderr, b"log\n");
    }

    #[test]
    fn failures_decode_json_or_fall_back_to_stderr() {
        let d = tempfile::tempdir().unwrap();
        let x = RawExec::default();
        let p = script(
            d.path(),
            "json",
            r#"echo '{"cniVersion":"1.0.0","code":7,"msg":"bad subnet","details":"10.0.0.0/31"}'; exit 1"#,
        );
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str(), e.details.as_str()),
            (7, "bad subnet", "10.0.0.0/31")
        );

        let p = script(d.path(), "stderr", "echo 'no such bridge' >&2; exit 2");
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert!(e.msg.contains("no such bridge"), "{e}");

        let p = script(d.path(), "silent", "exit 3");
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert!(
            e.msg.contains("no error message") && e.msg.contains('3'),
            "{e}"
        );

        let p = script(d.path(), "garbage", "echo oops; echo why >&2; exit 1");
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert!(e.msg.contains("oops") && e.details == "why", "{e:?}");

        let p = script(
            d.path(),
            "jsonstderr",
            r#"echo '{"code":11,"msg":"busy"}'; echo detail >&2; exit 1"#,
        );
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert_eq!((e.code, e.details.as_str()), (11, "detail"));
    }

    #[test]
    fn a_plugin_killed_by_a_signal_is_a_transient_failure_naming_the_signal() {
        // The OOM killer's SIGKILL (here the plugin's own): the runtime should retry, not
        // take it for a refusal (999).
        let d = tempfile::tempdir().unwrap();
        let x = RawExec::default();
        let p = script(
            d.path(),
            "oom",
            r#"echo '{"cniVersion":"1.0.0","ips":[' ; echo 'out of memory' >&2; kill -KILL $$"#,
        );
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert_eq!(e.code, 11, "{e:?}");
        assert!(e.msg.contains("killed by SIGKILL"), "{e}");
        assert!(e.msg.contains("OOM killer"), "{e}");
        assert_eq!(e.details, "out of memory");
        let p = script(d.path(), "segv", "kill -SEGV $$");
        let e = x.exec_plugin(&p, b"{}", &env("DEL")).unwrap_err();
        assert_eq!(e.code, 11, "{e:?}");
        assert!(
            e.msg.contains("killed by SIGSEGV before it answered"),
            "{e}"
        );
    }

    #[test]
    fn a_failure_with_huge_output_gives_an_error_of_bounded_size() {
        let d = tempfile::tempdir().unwrap();
        let x = RawExec::default();
        // Not JSON on stdout, 200 kB of it, and 200 kB of logs ending with the reason.
        let p = script(
            d.path(),
            "noisy",
            "head -c 200000 /dev/zero | tr '\\0' x; \
             head -c 200000 /dev/zero | tr '\\0' y >&2; echo ' the reason' >&2; exit 1",
        );
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert!(
            e.msg.len() < 3 * QUOTED_OUTPUT_MAX,
            "msg of {} bytes",
            e.msg.len()
        );
        assert!(
            e.details.len() < 3 * QUOTED_OUTPUT_MAX,
            "details of {} bytes",
            e.details.len()
        );
        assert!(
            e.msg.contains("not CNI error JSON") && e.msg.contains("… (200000 bytes)"),
            "{}",
            &e.msg[..200]
        );
        assert!(
            e.details.ends_with("the reason"),
            "{}",
            &e.details[e.details.len() - 50..]
        );
        // Without stdout, the logs are the message: their end is kept.
        let p = script(
            d.path(),
            "noisy-stderr",
            "head -c 200000 /dev/zero | tr '\\0' y >&2; echo ' the reason' >&2; exit 1",
        );
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert!(
            e.msg.len() < 3 * QUOTED_OUTPUT_MAX,
            "msg of {} bytes",
            e.msg.len()
        );
        assert!(
            e.msg.ends_with("the reason"),
            "{}",
            &e.msg[e.msg.len() - 50..]
        );
        // Multi-byte text is cut on a character boundary.
        assert_eq!(quote::cut("ééé", 3), "é… (6 bytes)");
        assert_eq!(quote::cut_start("ééé", 3), "(6 bytes) …é");
    }

    /// Waits up to 10 s for `path` to exist.
    fn appears(path: &Path) -> bool {
        let t = Instant::now();
        while !path.exists() {
            if t.elapsed() > Duration::from_secs(10) {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn a_gate_runs_while_the_plugin_starts_and_before_it_reads_its_stdin() {
        let d = tempfile::tempdir().unwrap();
        let (started, gate_done) = (d.path().join("started"), d.path().join("gate-done"));
        let p = script(
            d.path(),
            "gated",
            &format!(
                "touch '{s}'; input=$(cat); [ -e '{g}' ] && echo \"after $input\" || echo before",
                s = started.display(),
                g = gate_done.display()
            ),
        );
        let x = RawExec::default();
        let seen_started = Arc::new(Mutex::new(false));
        let seen = Arc::clone(&seen_started);
        x.hold_next_stdin(Box::new(move || {
            // The plugin is already running: the gate's work overlaps its start-up.
            *seen.lock().unwrap() = appears(&started);
            fs::write(&gate_done, "").unwrap();
            Ok(())
        }))
        .unwrap();
        let out = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap();
        assert!(*seen_started.lock().unwrap(), "the plugin had not started");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "after {}");
        // The gate ran once: the next plugin does not wait for anything.
        assert!(x.take_stdin_gate().is_none());
        fs::remove_file(d.path().join("gate-done")).unwrap();
        let out = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "before");
    }

    #[test]
    fn a_failing_gate_stops_the_plugin_before_it_reads_anything() {
        let d = tempfile::tempdir().unwrap();
        let (ran, pid) = (d.path().join("ran"), d.path().join("pid"));
        let p = script(
            d.path(),
            "stopped",
            // The pid file appears whole (renamed), never empty.
            &format!(
                "echo $$ >'{0}.tmp'; mv '{0}.tmp' '{0}'; cat >/dev/null; touch '{1}'",
                pid.display(),
                ran.display()
            ),
        );
        let x = RawExec::default();
        let started = pid.clone();
        x.hold_next_stdin(Box::new(move || {
            // The plugin is running, and waiting for its stdin, when the gate fails.
            assert!(appears(&started));
            Err(CniError::new(ErrorCode::Io, "disk full"))
        }))
        .unwrap();
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (5, "disk full"));
        // Killed and reaped: the process is gone, and it never got as far as acting.
        let pid = fs::read_to_string(&pid).unwrap();
        assert!(!Path::new("/proc").join(pid.trim()).exists(), "pid {pid}");
        thread::sleep(Duration::from_millis(100));
        assert!(!ran.exists());
    }

    #[test]
    fn a_gate_no_plugin_took_can_be_taken_back() {
        let x = RawExec::default();
        x.hold_next_stdin(Box::new(|| Err(CniError::new(ErrorCode::Io, "mine"))))
            .unwrap();
        // A clone starts without it.
        assert!(x.clone().take_stdin_gate().is_none());
        let gate = x.take_stdin_gate().expect("the gate is still held");
        assert_eq!(gate().unwrap_err().msg, "mine");
        assert!(x.take_stdin_gate().is_none());
    }

    /// Runs a script plugin with a 300 ms timeout: its error, and how long the call took.
    fn with_short_timeout(body: &str) -> (CniError, Duration) {
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "slow", body);
        let x = RawExec {
            timeout: Duration::from_millis(300),
            ..RawExec::default()
        };
        let t = Instant::now();
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        (e, t.elapsed())
    }

    #[test]
    fn a_hung_plugin_is_killed_at_the_timeout() {
        let (e, took) = with_short_timeout("sleep 30");
        assert_eq!(e.code, 11, "{e}");
        assert!(e.msg.contains("killed"));
        assert!(took < Duration::from_secs(10));
    }

    #[test]
    fn a_hung_plugin_is_killed_at_the_timeout_with_what_it_started() {
        // The IPAM plugin a delegate waits for is killed with it: left running, it could
        // allocate after the rollback's DEL had released, and its address would leak.
        let d = tempfile::tempdir().unwrap();
        let pid_file = d.path().join("child.pid");
        let (e, _) = with_short_timeout(&format!(
            "sleep 30 & echo $! > {}; wait",
            pid_file.display()
        ));
        assert_eq!(e.code, 11, "{e}");
        let child = fs::read_to_string(&pid_file).unwrap();
        let proc = PathBuf::from(format!("/proc/{}", child.trim()));
        let deadline = Instant::now() + Duration::from_secs(5);
        // Gone, or a zombie until init reaps it.
        while proc.exists()
            && !fs::read_to_string(proc.join("stat")).is_ok_and(|s| s.contains(") Z "))
        {
            assert!(Instant::now() < deadline, "{} still runs", proc.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_plugin_that_closes_its_output_and_hangs_is_killed_at_the_timeout() {
        let (e, took) = with_short_timeout("exec >&- 2>&- <&-; sleep 30");
        assert_eq!(e.code, 11, "{e}");
        assert!(e.msg.contains("did not exit"), "{e}");
        assert!(took < Duration::from_secs(10));
    }

    #[test]
    fn a_plugin_whose_leftover_child_holds_its_output_returns_soon_after_it_exits() {
        let d = tempfile::tempdir().unwrap();
        // The plugin answers and exits; the process it leaves behind keeps stdout open.
        let p = script(d.path(), "daemonizes", "sleep 30 & echo '{\"ok\":1}'");
        let x = RawExec {
            timeout: Duration::from_secs(20),
            ..RawExec::default()
        };
        let t = Instant::now();
        let out = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap();
        assert_eq!(out.stdout, b"{\"ok\":1}\n");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn a_leftover_child_that_keeps_writing_does_not_hide_the_plugins_exit() {
        let d = tempfile::tempdir().unwrap();
        // It writes to the inherited stderr more often than the exit is checked for.
        let p = script(
            d.path(),
            "chatty-daemon",
            "(i=0; while [ $i -lt 200 ]; do echo x >&2; sleep 0.02; i=$((i+1)); done) & \
             echo '{\"ok\":1}'",
        );
        let x = RawExec {
            timeout: Duration::from_secs(3),
            ..RawExec::default()
        };
        let t = Instant::now();
        let out = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap();
        assert_eq!(out.stdout, b"{\"ok\":1}\n");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn a_plugin_that_ignores_stdin_and_floods_output_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let x = RawExec {
            max_output: 1000,
            ..RawExec::default()
        };
        let big = vec![b' '; 1 << 20];
        // A flood of logs on stderr is cut at the limit; the call still succeeds.
        let p = script(
            d.path(),
            "flood-err",
            "head -c 300000 /dev/zero >&2; echo '{}'",
        );
        let out = x.exec_plugin(&p, &big, &env("ADD")).unwrap();
        assert_eq!(out.stdout, b"{}\n");
        assert_eq!(out.stderr.len(), 1000);
        // A flood on stdout is refused rather than cut: what is left is not what it printed.
        let p = script(
            d.path(),
            "flood",
            "head -c 300000 /dev/zero | tr '\\0' x; head -c 300000 /dev/zero >&2",
        );
        let e = x.exec_plugin(&p, &big, &env("ADD")).unwrap_err();
        assert_eq!(e.code, 5, "{e}");
        assert!(e.msg.contains("more than 1000 bytes"), "{e}");
    }

    #[test]
    fn a_result_followed_by_more_than_the_limit_is_not_taken_for_the_result() {
        // Its whole stdout is not a result (trailing garbage): cut at the limit, the
        // garbage would fall away and leave what looks like a valid result.
        let d = tempfile::tempdir().unwrap();
        let p = script(
            d.path(),
            "trailing",
            "echo '{\"cniVersion\":\"1.0.0\"}'; head -c 3000 /dev/zero | tr '\\0' ' '; echo garbage",
        );
        let x = RawExec {
            max_output: 1000,
            ..RawExec::default()
        };
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert_eq!(e.code, 5, "{e}");
        assert!(e.msg.contains("stdout") && e.msg.contains("1000"), "{e}");
    }

    #[test]
    fn a_plugin_that_floods_stderr_before_reading_a_big_stdin_does_not_deadlock() {
        let d = tempfile::tempdir().unwrap();
        // 300 kB of stderr first (more than a pipe holds), then stdin echoed back.
        let p = script(d.path(), "echo-late", "head -c 300000 /dev/zero >&2; cat");
        let big: Vec<u8> = (0..1 << 20).map(|i| b'a' + (i % 26) as u8).collect();
        let out = RawExec::default()
            .exec_plugin(&p, &big, &env("ADD"))
            .unwrap();
        assert_eq!(out.stdout, big);
        assert_eq!(out.stderr.len(), 300000);
    }

    #[test]
    fn a_busy_binary_is_retried_until_it_is_free() {
        // A binary held open for writing (being replaced) cannot be executed: ETXTBSY.
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("busy");
        fs::copy("/bin/true", &p).unwrap();
        let writer = fs::OpenOptions::new().write(true).open(&p).unwrap();
        let x = RawExec {
            busy_attempts: 1,
            ..RawExec::default()
        };
        let e = x.exec_plugin(&p, b"{}", &env("ADD")).unwrap_err();
        assert!(e.msg.to_lowercase().contains("busy"), "{e}");
        let release = thread::spawn(move || {
            thread::sleep(Duration::from_millis(150));
            drop(writer);
        });
        let x = RawExec {
            busy_attempts: 20,
            busy_delay: Duration::from_millis(50),
            ..RawExec::default()
        };
        x.exec_plugin(&p, b"{}", &env("ADD")).unwrap();
        release.join().unwrap();
    }

    #[test]
    fn a_plugin_that_cannot_be_started_says_so() {
        // Found and executable, but its exec fails (here its interpreter is missing): the
        // error is the runtime's usual code 5, marked as nothing having run.
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "noexec", "");
        fs::write(&p, "#!/nonexistent/interp\n").unwrap();
        let e = RawExec::default()
            .exec_plugin(&p, b"{}", &env("ADD"))
            .unwrap_err();
        assert_eq!(e.code, 5, "{e}");
        assert!(
            e.msg
                .starts_with(&format!("cannot execute plugin {}: ", p.display())),
            "{e}"
        );
        assert!(e.not_started(), "{e:?}");
        // One that started and failed is not marked.
        let p = script(d.path(), "fails", "exit 1");
        let e = RawExec::default()
            .exec_plugin(&p, b"{}", &env("ADD"))
            .unwrap_err();
        assert!(!e.not_started(), "{e:?}");
    }

    #[test]
    fn commands_round_trip() {
        for c in [
            Command::Add,
            Command::Check,
            Command::Del,
            Command::Gc,
            Command::Status,
            Command::Version,
        ] {
            assert_eq!(Command::parse(c.as_str()), Some(c));
        }
        assert_eq!(Command::parse("add"), None);
    }
}
