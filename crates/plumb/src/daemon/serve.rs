//! Serving the shim's calls: each connection on a task of its own, each call (the plugin's
//! environment and stdin) run through the engine on a thread of its own once it has one of the
//! `--max-calls` turns (code 11 after `--max-wait` without one), answered with the plugin's
//! stdout and exit code, and counted in the metrics; a connection closed by the runtime marks its
//! call abandoned. A daemon whose socket was taken over stops accepting and drains its calls.

use plumb_engine::commands::{Caller, Plumb};
use plumb_engine::routes::NetlinkRoutes;

use super::*;

/// How often a serving daemon looks whether its path still names its socket.
pub(super) const WATCH: Duration = Duration::from_secs(1);

/// Serves calls until SIGTERM or SIGINT. Once `socket` no longer names the socket it bound
/// (another daemon took it over), it stops taking calls, finishes those it has, and waits for
/// the signal: it does not exit on its own, or a service manager or the DaemonSet would start
/// it again, and it would take the socket back, for ever in turn. The two daemons never run
/// calls for one container at the same time: each call holds the container's lock, whichever
/// process runs it.
pub(super) async fn serve(
    listener: tokio::net::UnixListener,
    socket: &Path,
    ours: (u64, u64),
    shared: Arc<Shared>,
    mut signals: Signals,
    mut files: NodeFiles,
) -> Result<(), CniError> {
    let mut listener = Some(listener);
    let mut watch = tokio::time::interval(WATCH);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Its first tick comes at once: the configuration is written as soon as it can be.
    let mut conf_watch = tokio::time::interval(WATCH);
    conf_watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stream = tokio::select! {
            () = signals.recv() => break,
            // Also once the socket is lost, unless to another daemon (below): the token copy
            // must go on being renewed while calls run in the plugin.
            _ = conf_watch.tick(), if files.keeps_any() => {
                files.step();
                continue;
            }
            _ = watch.tick(), if listener.is_some() || files.keeps_any() => {
                // Lost already (removed, or replaced by a file), with the files kept here: a
                // daemon started since, whose socket is there now, keeps them from now on.
                if listener.is_none() {
                    if is_socket(socket) {
                        say(format_args!("{} is another daemon's now", socket.display()));
                        files.hand_over();
                    }
                    continue;
                }
                if !is_ours(socket, ours) {
                    let lost = listener.take().expect("watched only while listening");
                    // Removed by hand, or by a daemon that took it over and stopped since. Or
                    // something else put there: no daemon serves on it then, every call runs
                    // in the plugin, and a daemon started refuses the path (`listen`) until it
                    // is removed, which the operator is to read here, not "another daemon".
                    let taken_over = is_socket(socket);
                    let now = match std::fs::symlink_metadata(socket) {
                        Err(_) => "was removed".to_string(),
                        Ok(_) if taken_over => "now belongs to another daemon".to_string(),
                        Ok(m) => format!(
                            "was replaced by a {}, not a socket: calls run in the plugin \
                             itself, and a daemon started refuses the path until it is removed",
                            if m.is_dir() {
                                "directory"
                            } else if m.file_type().is_symlink() {
                                "symbolic link"
                            } else {
                                "file"
                            }
                        ),
                    };
                    say(format_args!(
                        "{} {now}; taking no new calls, finishing the {} \
                         running, then idle until stopped",
                        socket.display(),
                        shared.running.load(Ordering::SeqCst)
                    ));
                    serve_queued(lost, &shared);
                    // The daemon that took the socket keeps the files now; two writers
                    // from two templates would rewrite them in turn. A socket removed or
                    // replaced by something else leaves no other daemon: this one keeps them,
                    // or plumb's configuration would stop following the default network and
                    // the copied token expire.
                    if taken_over {
                        files.hand_over();
                    }
                }
                continue;
            }
            accepted = accept(listener.as_ref()) => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    say(format_args!("accept: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        spawn_connection(stream, &shared);
    }
    say(format_args!("stopping"));
    Ok(())
}

/// The next connection on `listener`; none ever without one.
pub(super) async fn accept(
    listener: Option<&tokio::net::UnixListener>,
) -> std::io::Result<(tokio::net::UnixStream, tokio::net::unix::SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Serves the connections already queued on a listener whose path another daemon took, then
/// closes it. No new one can come (the path names the other socket), but a shim that
/// connected just before the rename would otherwise have its connection reset.
pub(super) fn serve_queued(listener: tokio::net::UnixListener, shared: &Arc<Shared>) {
    // Still non-blocking, as tokio left it: accept until nothing is left.
    let Ok(listener) = listener.into_std() else {
        return;
    };
    while let Ok((stream, _)) = listener.accept() {
        // An accepted socket does not inherit O_NONBLOCK, which tokio needs.
        if stream.set_nonblocking(true).is_ok()
            && let Ok(stream) = tokio::net::UnixStream::from_std(stream)
        {
            spawn_connection(stream, shared);
        }
    }
}

/// Answers the requests of one connection, on a task of its own.
pub(super) fn spawn_connection(stream: tokio::net::UnixStream, shared: &Arc<Shared>) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let peer = stream.peer_cred().ok();
        // A duplicate of the connection, which each call asks whether the plugin closed its
        // end (the engine's `Caller`): hyper notices only when it next reads.
        let connection = std::os::fd::AsFd::as_fd(&stream)
            .try_clone_to_owned()
            .ok()
            .map(Arc::new);
        // The call this connection offered and the daemon acknowledged, run on its `go`.
        let offered: Offered = Arc::default();
        let service = hyper::service::service_fn(move |request| {
            answer(
                request,
                peer,
                connection.clone(),
                Arc::clone(&offered),
                Arc::clone(&shared),
            )
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .await;
    });
}

pub(super) fn reply(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r
}

/// A call read from a connection and acknowledged, not yet run: its `CNI_*` variables and stdin.
type Offered = Arc<std::sync::Mutex<Option<(BTreeMap<String, String>, Vec<u8>)>>>;

/// The answer to one request: a CNI call offered on `POST /cni/offer` is acknowledged (202) as
/// soon as it is read and run on the `POST /cni/go` that follows on the same connection, which
/// the plugin sends only if the acknowledgement came in time (else it runs the call itself, and
/// the daemon never does); `POST /cni` reads and runs a call at once (plugins of earlier
/// versions); `GET /healthz` answers `ok` and a summary; `GET /readyz` whether the caches
/// serve (503 until they do); `GET /caches` the caches' state as JSON.
pub(super) async fn answer(
    request: Request<Incoming>,
    peer: Option<tokio::net::unix::UCred>,
    connection: Option<Arc<std::os::fd::OwnedFd>>,
    offered: Offered,
    shared: Arc<Shared>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let uid = peer.map(|c| c.uid());
    if uid != Some(shared.uid) && uid != Some(0) {
        return Ok(reply(
            StatusCode::FORBIDDEN,
            format!("only uid {} or root may call plumb\n", shared.uid),
        ));
    }
    let path = request.uri().path().to_owned();
    match (request.method().as_str(), path.as_str()) {
        ("GET", "/healthz") => {
            return Ok(reply(
                StatusCode::OK,
                format!(
                    "ok: {} calls running, {} waiting for a turn, {} refused for want of a \
                     turn, {} API clients idle; {}\n",
                    shared.running.load(Ordering::SeqCst),
                    shared.waiting.load(Ordering::SeqCst),
                    shared.refused.load(Ordering::Relaxed),
                    shared.connect.pooled.0.idle(),
                    super::caches::summary(&shared.connect)
                ),
            ));
        }
        ("GET", "/readyz") => {
            let (ready, why) = readiness(&shared);
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            return Ok(reply(status, why));
        }
        ("GET", "/caches") => {
            return Ok(reply(
                StatusCode::OK,
                super::caches::report(&shared.connect),
            ));
        }
        // The plugin runs the call itself on this answer to its offer.
        ("POST", shim::PATH | shim::OFFER_PATH | shim::GO_PATH)
            if let Some(why) = shared.mode.no_calls() =>
        {
            return Ok(reply(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")));
        }
        ("POST", shim::PATH | shim::OFFER_PATH) => plugin_version(&request, &shared),
        ("POST", shim::GO_PATH) => {
            let taken = offered.lock().unwrap_or_else(|p| p.into_inner()).take();
            return Ok(match taken {
                Some((env, stdin)) => run(env, stdin, peer, connection, shared).await,
                None => reply(
                    StatusCode::CONFLICT,
                    "no call was offered on this connection\n".into(),
                ),
            });
        }
        (method, path) => {
            return Ok(reply(
                StatusCode::NOT_FOUND,
                format!("no {method} {}\n", plumb_engine::log::one_line(path)),
            ));
        }
    }
    let body = match Limited::new(request.into_body(), MAX_REQUEST)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(reply(
                StatusCode::BAD_REQUEST,
                format!("the request: {e}\n"),
            ));
        }
    };
    let (env, stdin) = match shim::parse_request(&body) {
        Ok((env, stdin)) => (env, stdin.to_vec()),
        Err(e) => {
            return Ok(reply(
                StatusCode::BAD_REQUEST,
                format!("the request: {e}\n"),
            ));
        }
    };
    if path == shim::OFFER_PATH {
        *offered.lock().unwrap_or_else(|p| p.into_inner()) = Some((env, stdin));
        return Ok(reply(StatusCode::ACCEPTED, String::new()));
    }
    Ok(run(env, stdin, peer, connection, shared).await)
}

/// Whether the daemon is ready (`/readyz` on its socket and on the metrics address), and why:
/// serving, its caches serve; keeping files only, always; uninstalling, once nothing is left.
pub(super) fn readiness(shared: &Shared) -> (bool, String) {
    match &shared.mode {
        Mode::Serve => super::caches::readiness(&shared.connect),
        Mode::FilesOnly => (
            true,
            "ready: keeping the node's files; the plugin runs every call itself (--files-only)\n"
                .to_string(),
        ),
        Mode::Uninstall(done) if done.load(Ordering::SeqCst) => {
            (true, format!("ready: {UNINSTALLED}\n"))
        }
        Mode::Uninstall(_) => (
            false,
            "not ready: uninstalling: pods attached by plumb are left, or plumb's configuration \
             could not be removed (the daemon's log says which)\n"
                .to_string(),
        ),
    }
}

/// What an uninstalling daemon's `/readyz` says once done, which its DaemonSet's probe looks
/// for: a daemon that took its socket over (a pod of plumb's DaemonSet, not deleted yet) is
/// ready too, with other words.
pub const UNINSTALLED: &str = "nothing of plumb is left on the node";

/// Runs the call (`env`, `stdin`) on a blocking thread, answering with what the plugin would
/// print and its exit code.
async fn run(
    env: BTreeMap<String, String>,
    stdin: Vec<u8>,
    peer: Option<tokio::net::unix::UCred>,
    connection: Option<Arc<std::os::fd::OwnedFd>>,
    shared: Arc<Shared>,
) -> Response<Full<Bytes>> {
    // A turn among `--max-calls`, held until the call ends on its thread; none within
    // `--max-wait`: code 11, the runtime tries again later. A shim that goes away meanwhile
    // drops this future, and the call never runs.
    let started = std::time::Instant::now();
    let command = env.get("CNI_COMMAND").cloned().unwrap_or_default();
    let turns = Arc::clone(&shared.turns);
    shared.waiting.fetch_add(1, Ordering::SeqCst);
    let waited = tokio::time::timeout(shared.max_wait, turns.acquire_owned()).await;
    shared.waiting.fetch_sub(1, Ordering::SeqCst);
    let turn = match waited {
        Ok(Ok(turn)) => turn,
        waited => {
            let stopping = matches!(waited, Ok(Err(_)));
            let r = try_again_later(&env, &stdin, &shared, stopping);
            shared.metrics.call(&command, 11, started.elapsed());
            return r;
        }
    };
    // Counted from here until the call itself ends, on its thread: a shim that went away (the
    // runtime killed it) drops this future, not the call.
    let running = Running::start(Arc::clone(&shared));
    // Dropped with this future when the plugin goes away before the answer: the call is told,
    // so that one still waiting for its container's turn is not run (the engine's `Caller`).
    let abandoned = Abandoned::watch();
    let told = Arc::clone(&abandoned.0);
    let ran = tokio::task::spawn_blocking(move || {
        // The plugin that forwarded it (0: a process outside the daemon's PID namespace).
        let caller = peer
            .and_then(|c| c.pid())
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid != 0);
        let out = call(&running.0, &env, &stdin, caller, connection, told);
        drop(running);
        drop(turn);
        out
    })
    .await;
    abandoned.answered();
    let (stdout, code) = ran.unwrap_or_else(|panicked| {
        // The engine does not panic on any input (fuzzed); should it, the runtime gets an error.
        let e = CniError::new(
            ErrorCode::Internal,
            format!("plumb daemon: the call failed unexpectedly: {panicked}"),
        );
        (format!("{}\n", e.to_json()).into_bytes(), 1)
    });
    shared
        .metrics
        .call(&command, cni_code(code, &stdout), started.elapsed());
    let mut r = reply(StatusCode::OK, String::new());
    *r.body_mut() = Full::new(Bytes::from(stdout));
    r.headers_mut()
        .insert(shim::EXIT_CODE_HEADER, http::HeaderValue::from(code));
    r
}

/// The CNI code of a call that exited with `exit` and printed `stdout`: 0 on success, else its
/// error's (`code`), 999 when its output says none.
fn cni_code(exit: i32, stdout: &[u8]) -> u32 {
    if exit == 0 {
        return 0;
    }
    serde_json::from_slice::<serde_json::Value>(stdout)
        .ok()
        .and_then(|v| v["code"].as_u64())
        .and_then(|c| u32::try_from(c).ok())
        .unwrap_or(999)
}

/// The answer to a call that found no turn within `--max-wait`, or that waited for one while
/// the daemon stopped: CNI code 11 (try again later), counted, as the plugin would print it.
fn try_again_later(
    env: &BTreeMap<String, String>,
    stdin: &[u8],
    shared: &Shared,
    stopping: bool,
) -> Response<Full<Bytes>> {
    let refused = shared.refused.fetch_add(1, Ordering::Relaxed) + 1;
    let why = if stopping {
        "plumb daemon: stopping; try again later".to_string()
    } else {
        format!(
            "plumb daemon: {} calls are running already (--max-calls) and this one found no \
             turn within {} s; try again later",
            shared.max_calls,
            shared.max_wait.as_secs()
        )
    };
    let mut e = CniError::new(ErrorCode::TryAgainLater, why);
    e.cni_version = shim::cni_version(stdin);
    let who = env.get("CNI_CONTAINERID").map_or("?", String::as_str);
    let who = cni::quote::cut(&plumb_engine::log::one_line(who), cni::quote::VALUE).into_owned();
    if stopping {
        say(format_args!(
            "refused a call for container {who}: stopping ({refused} refused so far)"
        ));
    } else {
        say(format_args!(
            "refused a call for container {who}: no turn within {} s ({refused} refused so far)",
            shared.max_wait.as_secs()
        ));
    }
    let mut r = reply(StatusCode::OK, format!("{}\n", e.to_json()));
    r.headers_mut()
        .insert(shim::EXIT_CODE_HEADER, http::HeaderValue::from(1));
    r
}

/// Says, once per version, that a call comes from a plugin of another version than the
/// daemon's: the node's `/opt/cni/bin/plumb` and the daemon's image apart, normal during an
/// upgrade, and what an operator looks for when the two behave differently. Calls run as the
/// daemon's version whatever the plugin's.
pub(super) fn plugin_version(request: &Request<Incoming>, shared: &Shared) {
    let theirs = match request.headers().get(shim::VERSION_HEADER) {
        Some(v) => cni::quote::cut(
            &plumb_engine::log::one_line(&String::from_utf8_lossy(v.as_bytes())),
            100,
        )
        .into_owned(),
        None => "unknown (older than the header)".to_string(),
    };
    if theirs == shim::VERSION {
        return;
    }
    // A few are kept: an upgrade brings one, and no caller may grow the set without end.
    let mut seen = shared
        .other_versions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let new = seen.len() < 16 && seen.insert(theirs.clone());
    drop(seen);
    if new {
        say(format_args!(
            "calls come from a plumb plugin of version {theirs}, and this daemon is {}: calls \
             run as the daemon's version; run the same version of both once the upgrade is done",
            shim::VERSION
        ));
    }
}

/// Set to true when dropped before [`Abandoned::answered`]: the request's future was dropped,
/// its plugin gone.
pub(super) struct Abandoned(Arc<AtomicBool>, bool);

impl Abandoned {
    fn watch() -> Abandoned {
        Abandoned(Arc::new(AtomicBool::new(false)), false)
    }

    fn answered(mut self) {
        self.1 = true;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// One call counted in [`Shared::running`] while this lives.
pub(super) struct Running(Arc<Shared>);

impl Running {
    pub(super) fn start(shared: Arc<Shared>) -> Running {
        shared.running.fetch_add(1, Ordering::SeqCst);
        Running(shared)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs one CNI call as thin mode would (after the calls for the same container that came
/// before it, in this process or another: `container_lock`). Its output and exit code.
pub(super) fn call(
    shared: &Shared,
    env: &BTreeMap<String, String>,
    stdin: &[u8],
    caller: Option<u32>,
    connection: Option<Arc<std::os::fd::OwnedFd>>,
    abandoned: Arc<AtomicBool>,
) -> (Vec<u8>, i32) {
    let plugin = Plumb {
        routes: &NetlinkRoutes,
        connect: &shared.connect,
        caller: Caller::Forwarded {
            pid: caller,
            connection,
            abandoned,
        },
    };
    let getenv = |k: &str| env.get(k).cloned();
    let mut stdout = Vec::new();
    let code = cni::skel::dispatch(&plugin, &getenv, &mut &stdin[..], &mut stdout);
    (stdout, code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_calls_code_is_its_errors_or_999() {
        assert_eq!(super::cni_code(0, b""), 0);
        assert_eq!(super::cni_code(1, br#"{"code": 11, "msg": "x"}"#), 11);
        assert_eq!(super::cni_code(1, b"not json"), 999);
    }
}
