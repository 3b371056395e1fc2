//! plumb's log: one line per message, `<RFC3339 time> [<level>] <message>`, as Multus writes it
//! (multus-reference §2.15), to `logFile` (appended) and/or stderr (`logToStderr`). A CNI plugin's
//! stderr is captured by the runtime and shown in its own logs, which is where operators look
//! first; the file keeps a history across calls.
//!
//! Logging never fails a CNI call: a log file that cannot be opened or written is reported once
//! on stderr and dropped.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;

use crate::config::{Config, LogLevel};

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
            // 0600, as Multus's log file (lumberjack) is created: the log holds pod and network
            // details and delegates' stderr, which other users of the node need not read.
            match OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
            {
                Ok(f) => Some(Mutex::new(f)),
                Err(e) => {
                    // Not eprintln!, which panics when stderr cannot be written: logging must
                    // never fail the CNI call.
                    let _ = writeln!(
                        std::io::stderr(),
                        "plumb: cannot open logFile {}: {}",
                        path.display(),
                        one_line(&e.to_string())
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

    fn write(&self, level: LogLevel, tag: &str, msg: &str) {
        if level > self.level {
            return;
        }
        let line = format!(
            "{} [{tag}] {}\n",
            k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now()),
            one_line(msg)
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

/// `msg` as one line: messages carry strings from outside (annotations, API answers, a
/// delegate's stderr), and a newline or a terminal escape in them must not split a record or
/// forge one (`\n` would start a line that looks like plumb's own).
fn one_line(msg: &str) -> Cow<'_, str> {
    if !msg.chars().any(|c| c.is_control() && c != '\t') {
        return Cow::Borrowed(msg);
    }
    let mut out = String::with_capacity(msg.len() + 16);
    for c in msg.chars() {
        if c.is_control() && c != '\t' {
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
}
