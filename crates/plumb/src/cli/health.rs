//! `plumb health`: asks `plumb daemon` over its socket whether it is alive (`GET /healthz`) or
//! ready to serve calls from its caches (`GET /readyz`), and exits 0 or 1 with its answer: a
//! DaemonSet's liveness and readiness probes need neither curl nor a metrics address.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use plumb_engine::paths;

#[derive(clap::Args)]
pub struct HealthArgs {
    /// The daemon's socket.
    #[arg(long, default_value = paths::DAEMON_SOCKET)]
    pub socket: PathBuf,
    /// Whether it is ready (its socket bound, the caches it watches with its own identity
    /// synced) rather than alive.
    #[arg(long)]
    pub ready: bool,
    /// Healthy only if the answer also holds this text (the uninstall DaemonSet's probe waits
    /// for its own "nothing of plumb is left on the node", not any daemon's "ready").
    #[arg(long, value_name = "TEXT")]
    pub expect: Option<String>,
    /// How long to wait for the answer, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub timeout: u64,
}

/// The most of an answer read: a line or two.
const MAX_ANSWER: u64 = 64 << 10;

/// Exit 0 when the daemon answers 200, else 1; its answer on stdout, or why on stderr.
pub fn run(args: &HealthArgs) -> ExitCode {
    let path = if args.ready { "/readyz" } else { "/healthz" };
    let timeout = Duration::from_secs(args.timeout.max(1));
    match ask(&args.socket, path, timeout) {
        Ok((200, body))
            if args
                .expect
                .as_ref()
                .is_none_or(|t| body.contains(t.as_str())) =>
        {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprint!("plumb health: {path}: {status}: {body}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "plumb health: no answer from the daemon at {}: {e}",
                args.socket.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// `GET path` on the daemon's socket, within `timeout` for each step: its status and body.
fn ask(socket: &Path, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = std::os::unix::net::UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: plumb\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.take(MAX_ANSWER).read_to_end(&mut answer)?;
    parse(&answer).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not an HTTP answer: {:?}",
                cni::quote::cut(&String::from_utf8_lossy(&answer), cni::quote::VALUE)
            ),
        )
    })
}

/// The status and body of an HTTP/1.1 answer.
fn parse(answer: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    Some((status, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_its_status_and_body_and_anything_else_is_none() {
        assert_eq!(
            parse(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 6\r\n\r\nnot ok"),
            Some((503, "not ok".to_string()))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\n\r\n"),
            Some((200, String::new()))
        );
        assert_eq!(parse(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse(b"HTTP/1.1 2"), None);
    }

    #[test]
    fn no_daemon_is_an_error_naming_nothing_answered() {
        let dir = tempfile::tempdir().unwrap();
        let e = ask(
            &dir.path().join("none.sock"),
            "/healthz",
            Duration::from_secs(1),
        );
        assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }
}
