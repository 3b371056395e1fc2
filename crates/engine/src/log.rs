//! plumb's log: one line per message, `<RFC3339 time> [<level>] <message>`, as Multus writes it
//! (docs/multus-behaviour.md §2.15), to `logFile` (appended) and/or stderr (`logToStderr`).
//! Logging never fails (nor holds) a CNI call: a log file that cannot be opened or written, or
//! that is not a regular file (a FIFO nobody reads would block the call), is reported once on
//! stderr and dropped.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

use crate::config::{Config, LogLevel};
use cni::files;

/// Where a call's lines go: stderr, which the runtime captures and shows in its own logs (where
/// operators look first), and the log file, which keeps a history across calls.
pub struct Log {
    level: LogLevel,
    stderr: bool,
    file: Option<Mutex<File>>,
}

impl Log {
    /// A log that writes nothing (before the configuration is read, and in tests).
    pub fn off() -> Log {
        Log {
            level: LogLevel::Panic,
            stderr: false,
            file: None,
        }
    }

    pub fn from_config(config: &Config) -> Log {
        let file = config.log_file.as_ref().and_then(|path| {
            match open_log_file(path) {
                Ok(f) => Some(Mutex::new(f)),
                Err(e) => {
                    // Not eprintln!, which panics when stderr cannot be written: logging must
                    // never fail the CNI call.
                    let _ = writeln!(
                        std::io::stderr(),
                        "plumb: cannot open logFile {}: {}",
                        path.display(),
                        one_line(&e)
                    );
                    None
                }
            }
        });
        Log {
            level: config.log_level,
            stderr: config.log_to_stderr,
            file,
        }
    }

    /// Writes `msg` as one line, cut to [`MAX_LINE`]: what it quotes from outside is bounded
    /// where it is quoted, and this bounds what no quote did.
    fn write(&self, level: LogLevel, tag: &str, msg: &str) {
        if level > self.level {
            return;
        }
        let line = format!(
            "{} [{tag}] {}\n",
            k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now()),
            one_line(&cni::quote::cut(msg, MAX_LINE))
        );
        if self.stderr {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        if let Some(f) = &self.file
            && let Ok(mut f) = f.lock()
        {
            let _ = f.write_all(line.as_bytes());
        }
    }

    pub fn error(&self, msg: &str) {
        self.write(LogLevel::Error, "error", msg);
    }

    pub fn verbose(&self, msg: &str) {
        self.write(LogLevel::Verbose, "verbose", msg);
    }

    pub fn debug(&self, msg: &str) {
        self.write(LogLevel::Debug, "debug", msg);
    }

    /// Whether debug lines are written (to skip work done only for them).
    pub fn debug_enabled(&self) -> bool {
        self.level >= LogLevel::Debug
    }
}

/// The longest message a log line holds (the line says how long the message was).
pub const MAX_LINE: usize = 8 << 10;

/// The log file at `path`, opened for appending (created 0600, as Multus's log file
/// (lumberjack) is: the log holds pod and network details and delegates' stderr, which other
/// users of the node need not read). Only a regular file is a log file: opening a FIFO for
/// writing waits for a reader, and writing to one waits for room once the pipe is full, either
/// holding the CNI call while nobody reads; a device or a socket keeps no history either.
fn open_log_file(path: &Path) -> Result<File, String> {
    // Looked at before it is opened, so that the error says what it is.
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        return Err(files::not_regular(meta.file_type()));
    }
    // And checked again once open, without waiting: something else may be there by now.
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(files::nonblocking())
        .open(path)
        .map_err(|e| e.to_string())?;
    files::regular(&file).map_err(|e| e.to_string())?;
    Ok(file)
}

/// `msg` as one line, safe to show on a terminal: messages and the annotations `plumb status`
/// prints carry strings from outside (annotations, API answers, a delegate's stderr), and a
/// newline or a terminal escape in them must not split a record or a row or forge one (`\n`
/// would start a line that looks like plumb's own), nor a bidirectional override reorder what
/// the operator reads. Those are written as escapes (`\n`, `\u{1b}`, `\u{202e}`).
pub fn one_line(msg: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !msg.chars().any(unsafe_char) {
        return Cow::Borrowed(msg);
    }
    let mut out = String::with_capacity(msg.len() + 16);
    for c in msg.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// This process's peak resident set size in KiB (`VmHWM`), for the debug log of a call.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_to(path: &std::path::Path) -> Log {
        let config = serde_json::json!({"cniVersion": "1.0.0", "name": "plumb",
            "clusterNetwork": "default-net", "logFile": path, "logLevel": "debug",
            "logToStderr": false});
        Log::from_config(&Config::parse(&serde_json::to_vec(&config).unwrap()).unwrap())
    }

    #[test]
    fn a_message_cannot_forge_or_split_lines() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("plumb.log");
        let log = log_to(&path);
        // An annotation, a NAD name or a delegate's stderr can carry newlines and escapes.
        log.error("pod ns/p: bad value \"x\n2020-01-01T00:00:00Z [error] forged\r\x1b[2J\"");
        log.verbose("next");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text:?}");
        assert!(
            lines[0].ends_with(
                "[error] pod ns/p: bad value \"x\\n2020-01-01T00:00:00Z [error] forged\\r\\u{1b}[2J\""
            ),
            "{text:?}"
        );
        assert!(lines[1].ends_with("[verbose] next"), "{text:?}");
    }

    #[test]
    fn a_new_log_file_is_readable_by_root_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("plumb.log");
        log_to(&path).error("x");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }

    #[test]
    fn a_log_file_that_is_no_regular_file_is_not_used_and_does_not_block() {
        // A FIFO nobody reads (or a device) as logFile: opening it for writing would wait for a
        // reader, and writing could wait for room, holding the CNI call forever. It is refused
        // as a log file that cannot be opened is: the call goes on without it.
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("plumb.log");
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let log = log_to(&path);
            log.error("x");
            let _ = tx.send(log.file.is_none());
        });
        let unused = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("opening a FIFO as logFile blocked the call");
        assert!(unused, "a FIFO was taken as the log file");
        // With a reader, opening it would succeed: it is still no log file (a slow or stopped
        // reader would block every write once the pipe is full).
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&fifo)
            .unwrap();
        assert!(log_to(&fifo).file.is_none());
        drop(reader);
    }
}
