//! The CNI plugin as a shim: when plumb's configuration names a daemon socket
//! (`plumbDaemonSocket`), the `plumb` the runtime runs forwards the call (its `CNI_*` environment
//! and its stdin) to `plumb daemon` over that socket, in HTTP/1.1 ([`forward`]), and hands the
//! runtime the daemon's answer as its own: the same output, the same exit code
//! (docs/architecture.md). With no daemon listening, the call runs here, in thin mode.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use cni::error::{CniError, ErrorCode};
use http_body_util::{BodyExt, Full, Limited};

pub mod freezer;

/// The configuration key naming the daemon's socket.
pub const SOCKET_KEY: &str = "plumbDaemonSocket";

/// The request's path and the answer's exit-code header. `PATH` takes and runs a call in one
/// request; `OFFER_PATH` takes it and acknowledges it at once, and `GO_PATH`, next on the same
/// connection, runs it.
pub const PATH: &str = "/cni";
pub const OFFER_PATH: &str = "/cni/offer";
pub const GO_PATH: &str = "/cni/go";

/// How long the plugin waits for the daemon to acknowledge a call before it runs the call
/// itself: a daemon that has read the call answers at once, before it queues or runs it.
pub const ACK_WAIT: Duration = Duration::from_secs(5);
pub const EXIT_CODE_HEADER: &str = "plumb-exit-code";
/// The request's header naming the plugin's version: a daemon of another (mid-upgrade, the
/// node's binary and the daemon's image apart) says so in its log.
pub const VERSION_HEADER: &str = "plumb-version";
/// This build's version, as the header gives it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The most of an answer the shim reads: a plugin's output is a result or an error.
const MAX_ANSWER: usize = 16 << 20;

/// How long a call waits for the daemon's answer before it says so, and how often it says so
/// again after that (as a call waiting for its container's turn, `container_lock`). A call
/// takes seconds at most; one the daemon has not answered in this long has a daemon that does
/// not run it (stopped, or stuck), and every call of the node waits with it, or is itself slow
/// (a slow delegate, or its container's turn). Before, nothing was said until the runtime gave
/// up.
const SLOW: Duration = Duration::from_secs(10);
const STILL_SLOW_EVERY: Duration = Duration::from_secs(60);

/// The daemon socket `stdin` (plumb's configuration) names, if any. A configuration that is not
/// JSON names none: thin mode then reports what is wrong with it.
pub fn daemon_socket(stdin: &[u8]) -> Option<PathBuf> {
    #[derive(serde::Deserialize)]
    struct Named {
        #[serde(rename = "plumbDaemonSocket")]
        socket: Option<String>,
    }
    let named: Named = serde_json::from_slice(stdin).ok()?;
    named.socket.filter(|s| !s.is_empty()).map(PathBuf::from)
}

/// What became of a call forwarded to the daemon.
pub enum Forwarded {
    /// The daemon's answer: what to print and the exit code.
    Answer { stdout: Vec<u8>, code: i32 },
    /// Nobody listens on the socket: the call is to run here. Says why. Not an error: in thin
    /// mode, with the same configuration and the same records, so a daemon that is restarting
    /// or crashed never stops pods from starting or stopping (Multus's thick mode fails every
    /// call then).
    NoDaemon(String),
    /// A daemon listens but did not acknowledge the call within [`ACK_WAIT`] (stopped, frozen,
    /// wedged): it never runs the call, which runs here, as with no daemon, said as an error.
    Unacknowledged(String),
}

/// The `cniVersion` of a call's configuration, for an error about the call that the plugin or
/// the daemon answers itself (empty when there is none).
pub fn cni_version(stdin: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The body of a forwarded call: `env` as one line of JSON, then `stdin`.
pub fn request_body(env: &BTreeMap<String, String>, stdin: &[u8]) -> Vec<u8> {
    let mut body = serde_json::to_vec(env).unwrap_or_else(|_| b"{}".to_vec());
    body.push(b'\n');
    body.extend_from_slice(stdin);
    body
}

/// The `CNI_*` variables and the stdin of a forwarded call's body.
pub fn parse_request(body: &[u8]) -> Result<(BTreeMap<String, String>, &[u8]), String> {
    let end = body
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("no newline after the environment")?;
    let env: BTreeMap<String, String> = serde_json::from_slice(&body[..end])
        .map_err(|e| format!("the environment is not a JSON object of strings: {e}"))?;
    if let Some(k) = env.keys().find(|k| !k.starts_with("CNI_")) {
        return Err(format!("{k:?} is not a CNI_ variable"));
    }
    Ok((env, &body[end + 1..]))
}

/// Sends the call (`env`, `stdin`) to the daemon at `socket`. A daemon slow to answer is
/// told to `slow`, with what it is doing ([`SLOW`]).
///
/// The protocol, HTTP/1.1 over the unix socket (so that `curl --unix-socket` can talk to it):
/// `POST /cni/offer`, the body one line of JSON with the `CNI_*` variables, a newline, then the
/// runtime's stdin as it came, the plugin's version in the `plumb-version` header, answered
/// `202 Accepted` as soon as the daemon has read it; then `POST /cni/go` on the same
/// connection, answered with what the plugin prints as the body and its exit code in the
/// `plumb-exit-code` header. Exactly one of the two processes runs a call: the daemon only after
/// `go`, which the plugin sends only once the call was acknowledged within [`ACK_WAIT`]; without
/// that acknowledgement the plugin runs it. (`POST /cni` does both at once, for plugins of
/// earlier versions; a daemon of an earlier version answers the offer 404 and gets that.)
pub fn forward(
    socket: &Path,
    env: &BTreeMap<String, String>,
    stdin: &[u8],
    slow: &dyn Fn(&str),
) -> Result<Forwarded, CniError> {
    let rt = plumb_cluster::runtime::current_thread()?;
    // Once the daemon has the call, its answer is the call's: a connection lost part-way is an
    // error (code 11, the runtime tries again), never a second attempt here that could run
    // beside the daemon's.
    let lost = |e: &dyn std::fmt::Display| {
        CniError::new(
            ErrorCode::TryAgainLater,
            format!(
                "plumb daemon at {}: {e}; the call may have been done in part: the runtime's \
                 retry (or DEL) finishes or undoes it",
                socket.display()
            ),
        )
    };
    rt.block_on(async {
        let stream = match tokio::net::UnixStream::connect(socket).await {
            Ok(s) => s,
            Err(e) if no_daemon(&e) => {
                return Ok(Forwarded::NoDaemon(format!(
                    "no plumb daemon at {}: {e}",
                    socket.display()
                )));
            }
            // A unix socket's listen backlog full: the daemon is there, busy (connect(2)).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(CniError::new(
                    ErrorCode::TryAgainLater,
                    format!(
                        "plumb daemon at {}: too busy to take the call (its listen backlog is \
                         full: {e}); try again later",
                        socket.display()
                    ),
                ));
            }
            Err(e) => {
                return Err(CniError::new(
                    ErrorCode::Io,
                    format!("plumb daemon at {}: cannot connect: {e}", socket.display()),
                ));
            }
        };
        let pid = trusted(socket, &stream)?;
        // Until the daemon acknowledges the call it never runs it: a daemon that does not
        // (stopped, frozen, gone mid-way) leaves the call to this process.
        let unacknowledged = |why: String| {
            Ok(Forwarded::Unacknowledged(format!(
                "plumb daemon at {} ({}) {why}",
                socket.display(),
                process(pid)
            )))
        };
        let (mut sender, connection) =
            match hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await
            {
                Ok(handshake) => handshake,
                Err(e) => return unacknowledged(format!("did not take the call: {e}")),
            };
        let connection = tokio::spawn(connection);
        let body = Bytes::from(request_body(env, stdin));
        let post = |path: &str, body: Bytes| {
            http::Request::post(path)
                .header(http::header::HOST, "plumb")
                .header(VERSION_HEADER, VERSION)
                .body(Full::new(body))
                .map_err(|e| CniError::new(ErrorCode::Internal, e.to_string()))
        };
        let offered = tokio::time::timeout(
            ACK_WAIT,
            sender.send_request(post(OFFER_PATH, body.clone())?),
        )
        .await;
        let request = match offered {
            Err(_) => {
                connection.abort();
                return unacknowledged(format!(
                    "did not acknowledge the call within {} s (stopped, frozen or wedged)",
                    ACK_WAIT.as_secs()
                ));
            }
            Ok(Err(e)) => {
                connection.abort();
                return unacknowledged(format!("did not acknowledge the call: {e}"));
            }
            Ok(Ok(ack)) if ack.status() == http::StatusCode::ACCEPTED => {
                post(GO_PATH, Bytes::new())?
            }
            // A daemon of a version before the acknowledgement: the call in one request.
            Ok(Ok(ack)) if ack.status() == http::StatusCode::NOT_FOUND => post(PATH, body)?,
            // A daemon that serves no calls (`--files-only`, `--uninstall`): never runs it.
            Ok(Ok(no)) if no.status() == http::StatusCode::SERVICE_UNAVAILABLE => {
                let text = text_of(no).await;
                connection.abort();
                return unacknowledged(format!("did not take the call: {text}"));
            }
            Ok(Ok(refused)) => {
                let status = refused.status();
                let text = text_of(refused).await;
                connection.abort();
                return Err(CniError::new(
                    ErrorCode::Internal,
                    format!(
                        "plumb daemon at {}: refused the call ({status}): {text}",
                        socket.display(),
                    ),
                ));
            }
        };
        sender.ready().await.map_err(|e| lost(&e))?;
        let mut sending = std::pin::pin!(sender.send_request(request));
        let (sent, mut said_at) = (tokio::time::Instant::now(), SLOW);
        let answer = loop {
            match tokio::time::timeout_at(sent + said_at, &mut sending).await {
                Ok(answer) => break answer.map_err(|e| lost(&e))?,
                Err(_) => {
                    slow(&format!(
                        "plumb daemon at {} ({}) has not answered the call in {} s; still \
                         waiting",
                        socket.display(),
                        process(pid),
                        said_at.as_secs()
                    ));
                    said_at += STILL_SLOW_EVERY;
                }
            }
        };
        let status = answer.status();
        let code = answer
            .headers()
            .get(EXIT_CODE_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok());
        let body = Limited::new(answer.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| lost(&e))?
            .to_bytes();
        connection.abort();
        match code {
            Some(code) if status == http::StatusCode::OK => Ok(Forwarded::Answer {
                stdout: body.to_vec(),
                code,
            }),
            _ => Err(CniError::new(
                ErrorCode::Internal,
                format!(
                    "plumb daemon at {}: refused the call ({status}): {}",
                    socket.display(),
                    plumb_engine::log::one_line(&String::from_utf8_lossy(&body))
                ),
            )),
        }
    })
}

/// The body of a refusal, bounded, on one line.
async fn text_of(answer: http::Response<hyper::body::Incoming>) -> String {
    let text = Limited::new(answer.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    plumb_engine::log::one_line(&String::from_utf8_lossy(&text)).into_owned()
}

/// A call the daemon did not answer (`forward`'s error: the daemon killed during the call,
/// too busy, not trusted, refusing), as the operator is to read it. Named for the call's pod
/// and container, as every error of a call is once plumb has read its configuration
/// (docs/troubleshooting.md): the runtime shows the message alone, in the pod's event, and a
/// node runs many pods. And, for an ADD or a DEL, said in plumb's log, by the plugin (in
/// `logFile`, and on the runtime's stderr with `logToStderr`): the daemon that would have
/// logged it is gone, or never had the call. Only on this failed path: a forwarded call's
/// success reads nothing more.
pub fn failed(mut e: CniError, env: &BTreeMap<String, String>, stdin: &[u8]) -> CniError {
    let get = |k: &str| env.get(k).map(String::as_str).unwrap_or_default();
    if let Some(who) = who(env) {
        e = e.context(who);
    }
    // CNI spec 1.1 §STATUS defines 50 and 51 for it, and every STATUS failure of plumb's own
    // is 50 (the engine's STATUS, docs/troubleshooting.md): the node's network is not ready while the
    // daemon cannot be asked, whatever the transport said (11, 5, 999).
    if get("CNI_COMMAND") == "STATUS"
        && !matches!(
            e.kind(),
            ErrorCode::NotAvailable | ErrorCode::LimitedConnectivity
        )
    {
        e.code = ErrorCode::NotAvailable.code();
    }
    // As thin mode logs them: failed ADDs and DELs. Not STATUS, which the runtime sends every
    // few seconds, nor CHECK and GC.
    if matches!(get("CNI_COMMAND"), "ADD" | "DEL") {
        log_error(env, stdin, &e.msg);
    }
    e
}

/// [`forward`]'s `slow`: a call the daemon is slow to answer (or did not acknowledge), said in
/// plumb's log by the plugin (the daemon may be stopped or stuck), named for its pod and
/// container.
pub fn slow(env: &BTreeMap<String, String>, stdin: &[u8], line: &str) {
    let line = match who(env) {
        Some(who) => format!("{who}: {line}"),
        None => line.to_string(),
    };
    log_error(env, stdin, &line);
}

/// The call's pod and container, as errors name them; none for a call of the whole node.
fn who(env: &BTreeMap<String, String>) -> Option<String> {
    let get = |k: &str| env.get(k).map(String::as_str).unwrap_or_default();
    let container = get("CNI_CONTAINERID");
    if container.is_empty() {
        return None;
    }
    // A `CNI_ARGS` the daemon would refuse names no pod here: the container alone then.
    let pod = cni::args::parse(get("CNI_ARGS")).ok().and_then(|pairs| {
        plumb_engine::pod_args::PodArgs::from_args(&pairs)
            .ok()
            .flatten()
    });
    Some(plumb_engine::commands::who(&pod, container))
}

/// `line` at `error` in plumb's log as the call's configuration (`stdin`) says, after the
/// call's command.
fn log_error(env: &BTreeMap<String, String>, stdin: &[u8], line: &str) {
    let command = env.get("CNI_COMMAND").map(String::as_str).unwrap_or("?");
    if let Ok(config) = plumb_engine::config::Config::parse(stdin) {
        plumb_engine::log::Log::from_config(&config).error(&format!("{command}: {line}"));
    }
}

/// Whether the process listening on `socket` may be sent the call: it runs as root or as this
/// plugin's own user. Whoever else listens there (the socket's directory left writable, a
/// daemon started by the wrong user) would be handed the pod's configuration and would answer
/// for its networks.
fn trusted(socket: &Path, stream: &tokio::net::UnixStream) -> Result<Option<i32>, CniError> {
    let own = nix::unistd::geteuid().as_raw();
    let untrusted = |what: String| {
        CniError::new(
            ErrorCode::Io,
            format!(
                "plumb daemon at {}: {what}; only a daemon run by root or uid {own} is sent \
                 calls: check who started it and who may write to the socket's directory",
                socket.display()
            ),
        )
    };
    match stream.peer_cred() {
        Ok(peer) if peer.uid() == 0 || peer.uid() == own => Ok(peer.pid()),
        Ok(peer) => Err(untrusted(format!(
            "the process listening runs as uid {}",
            peer.uid()
        ))),
        Err(e) => Err(untrusted(format!(
            "cannot tell who listens (SO_PEERCRED): {e}"
        ))),
    }
}

/// The daemon's process `pid` as a slow call names it: its state, and what to do when it is
/// stopped (SIGSTOP, a debugger) or frozen (its cgroup's freezer: a paused container).
fn process(pid: Option<i32>) -> String {
    let Some(pid) = pid else {
        return "its process unknown".into();
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's name, which ends with the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    // Frozen, a process sleeps (`S`, cgroup v2) or waits (`D`, v1): its state alone would say
    // "running" or "waiting on a device" of a daemon that only needs thawing.
    if !matches!(state, "Z" | "X" | "?")
        && let Some(frozen) = crate::shim::freezer::frozen(pid)
    {
        if frozen.files.is_empty() {
            return format!(
                "process {pid}, frozen: a cgroup freezer out of this process's view holds it (a \
                 paused container, say); resume its container"
            );
        }
        let each: Vec<String> = (frozen.files.iter())
            .map(|f| format!("`echo {} > {}`", frozen.thaw, f.display()))
            .collect();
        return format!(
            "process {pid}, frozen: its cgroup's freezer holds it (a paused container, say); \
             thaw it with {}, or resume its container",
            each.join(" and ")
        );
    }
    match state {
        "T" | "t" => format!(
            "process {pid}, stopped: by SIGSTOP or a debugger; `kill -CONT {pid}` resumes it"
        ),
        "D" => format!("process {pid}, waiting on a device or file system"),
        "Z" | "X" => format!("process {pid}, dead"),
        "?" => format!("process {pid}"),
        // Running: the daemon may well be running the call, which takes its time (a slow
        // delegate or API server, or its container's turn behind such a call); "stuck" alone
        // sent the operator to restart a daemon that was working, cutting its calls.
        _ => format!(
            "process {pid}, running: the call may be slow (a delegate, the API server, or its \
             container's turn behind another call), or the daemon stuck"
        ),
    }
}

/// Whether a failed connect means that no daemon is there (rather than one that cannot be
/// reached, such as a socket plumb may not open).
fn no_daemon(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_socket_is_read_from_the_configuration_and_nothing_else_counts() {
        let named = br#"{"cniVersion":"1.0.0","name":"plumb","type":"plumb","plumbDaemonSocket":"/run/plumb/plumb.sock"}"#;
        assert_eq!(
            daemon_socket(named),
            Some(PathBuf::from("/run/plumb/plumb.sock"))
        );
        assert_eq!(daemon_socket(br#"{"plumbDaemonSocket":""}"#), None);
        assert_eq!(daemon_socket(br#"{"name":"plumb"}"#), None);
        // Not JSON, or the key of another type: thin mode reports the configuration's fault.
        assert_eq!(daemon_socket(b"not json"), None);
        assert_eq!(daemon_socket(br#"{"plumbDaemonSocket":3}"#), None);
    }

    /// A daemon of a version before the acknowledgement, on `socket` (bound before this
    /// returns): `POST /cni/offer` is an unknown path to it (404, with a body), `POST /cni`
    /// runs the call, answering `{"ran": N}` with exit code 0. The requests it was sent.
    fn earlier_daemon(socket: &Path) -> Arc<std::sync::Mutex<Vec<String>>> {
        use http_body_util::BodyExt;
        let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            let rt = plumb_cluster::runtime::current_thread().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener).unwrap();
                while let Ok((stream, _)) = listener.accept().await {
                    let log = Arc::clone(&log);
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(
                            move |r: http::Request<hyper::body::Incoming>| {
                                let log = Arc::clone(&log);
                                async move {
                                    let path = r.uri().path().to_string();
                                    let _ = r.into_body().collect().await;
                                    let mut seen = log.lock().unwrap();
                                    seen.push(path.clone());
                                    let mut answer = http::Response::new(Full::new(Bytes::from(
                                        if path == PATH {
                                            format!("{{\"ran\": {}}}", seen.len())
                                        } else {
                                            format!("no POST {path}\n")
                                        },
                                    )));
                                    if path == PATH {
                                        answer
                                            .headers_mut()
                                            .insert(EXIT_CODE_HEADER, http::HeaderValue::from(0));
                                    } else {
                                        *answer.status_mut() = http::StatusCode::NOT_FOUND;
                                    }
                                    Ok::<_, std::convert::Infallible>(answer)
                                }
                            },
                        );
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        seen
    }

    #[test]
    fn a_daemon_of_an_earlier_version_gets_the_call_in_one_request() {
        // Mid-upgrade, the node's plugin is newer than the daemon: its offer is answered 404,
        // and the call goes as the daemon knows it, on the same connection.
        let d = tempfile::tempdir().unwrap();
        let socket = d.path().join("plumb.sock");
        let seen = earlier_daemon(&socket);
        let env = BTreeMap::from([("CNI_COMMAND".to_string(), "ADD".to_string())]);
        let answer = forward(&socket, &env, b"{}", &|line| panic!("{line}")).unwrap();
        match answer {
            Forwarded::Answer { stdout, code } => {
                assert_eq!(
                    (String::from_utf8_lossy(&stdout).as_ref(), code),
                    ("{\"ran\": 2}", 0)
                );
            }
            _ => panic!("not forwarded"),
        }
        assert_eq!(*seen.lock().unwrap(), [OFFER_PATH, PATH]);
    }

    #[test]
    fn a_request_body_carries_the_environment_and_stdin_byte_for_byte() {
        let env = BTreeMap::from([
            ("CNI_COMMAND".to_string(), "ADD".to_string()),
            (
                "CNI_ARGS".to_string(),
                "K8S_POD_NAME=a\nb;X=\"y\"".to_string(),
            ),
        ]);
        let stdin = b"{\"a\":1}\n\xff trailing";
        let body = request_body(&env, stdin);
        let (back, rest) = parse_request(&body).unwrap();
        assert_eq!(back, env);
        assert_eq!(rest, stdin);
    }

    #[test]
    fn a_request_body_without_its_environment_or_with_other_variables_is_refused() {
        assert!(parse_request(b"{}").unwrap_err().contains("no newline"));
        assert!(
            parse_request(b"[1]\n{}")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(
            parse_request(b"{\"LD_PRELOAD\":\"/x.so\"}\n{}")
                .unwrap_err()
                .contains("\"LD_PRELOAD\" is not a CNI_ variable")
        );
    }
}
