//! `plumb daemon`: the CNI engine in a long-running process, serving the calls the `plumb` shim
//! forwards to it (`shim.rs`) over a unix socket (DESIGN.md: daemon socket `/run/plumb/plumb.sock`,
//! 0600, root). Each call runs exactly as in thin mode — the same configuration from the
//! runtime's stdin, the same records, the same delegates — with one difference: the API client
//! and its connection to the API server are kept between calls (`client_pool.rs`), so a call
//! neither parses the kubeconfig nor makes a TCP and TLS handshake: nearly half of what thin
//! mode spends of its own on an ADD (docs/performance.md).
//!
//! NADs and pods are still read from the API on every call (over the open connection), not from
//! watch caches as DESIGN.md plans: a cache can be behind the API (a NAD created just before
//! its pod), and on the measured bench the GETs over an open connection cost little
//! (docs/daemon.md).
//!
//! Calls for different containers run at the same time, each on a thread of its own; calls for
//! the same container one after the other, one at a time, by the container's lock, which a call
//! in thin mode takes too (container_lock.rs). A runtime that gave up waiting on an ADD (and
//! killed the shim) may send the DEL while the daemon still runs that ADD: the DEL then waits
//! for it and undoes all of it, where in thin mode the ADD would have been killed part-way.
//!
//! A daemon started on a socket another daemon serves takes it over, as Multus's does, instead
//! of refusing to start: it binds a socket of its own beside it and renames it onto the path
//! (`listen`). The old daemon sees within a second that the path is no longer its socket,
//! stops taking calls, finishes those it has and waits, idle, to be stopped (`serve`). So a
//! DaemonSet upgrade with `maxSurge` (the new pod started before the old is stopped) works, and
//! the two daemons never run calls for one container at the same time: each call holds the
//! container's lock, whichever process runs it.
//!
//! With `--write-config` it also writes plumb's CNI configuration on the node once the default
//! network's is there, and keeps it in step (conf_writer.rs); with `--write-kubeconfig`, a
//! kubeconfig from its service account, kept current (kubeconfig_writer.rs).

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use cni::error::{CniError, ErrorCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use crate::client_pool::ClientPool;
use crate::conf_writer::{ConfWriter, Step};
use crate::kubeconfig_writer::{KubeconfigWriter, SERVICE_ACCOUNT_DIR};
use crate::plugin::{Caller, NetlinkRoutes, Plumb};
use crate::shim;

/// Where the daemon listens unless told otherwise (DESIGN.md "Paths").
pub const DEFAULT_SOCKET: &str = "/run/plumb/plumb.sock";

/// The most of a request the daemon reads: the runtime's configuration and environment.
const MAX_REQUEST: usize = 64 << 20;

/// How long a stopping daemon waits for the calls it is running.
const DRAIN: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct Args {
    /// The unix socket to listen on (the `plumbDaemonSocket` of plumb's CNI configuration).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Write plumb's CNI configuration, `00-plumb.conflist`, into `--cni-conf-dir` once the
    /// default network's configuration is there, from this template: a JSON object of plumb's
    /// configuration keys (docs/configuration.md), with paths as the runtime sees them. The
    /// daemon fills in the default network (embedded as `delegates`), its capabilities, the
    /// `cniVersion` and `plumbDaemonSocket` (unless given), keeps the file in step with the
    /// default network's and removes it when that is gone (conf_writer.rs).
    #[arg(long, value_name = "TEMPLATE")]
    pub write_config: Option<PathBuf>,
    /// The runtime's CNI configuration directory, as this process sees it (a DaemonSet pod
    /// mounts the node's somewhere like `/host/etc/cni/net.d`).
    #[arg(long, default_value = "/etc/cni/net.d", requires = "write_config")]
    pub cni_conf_dir: PathBuf,
    /// The file name of the default network's configuration in `--cni-conf-dir`; without it,
    /// the first configuration file there by name, as the runtime would take it without plumb.
    #[arg(long, value_name = "FILE", requires = "write_config")]
    pub primary_config: Option<String>,
    /// Write a kubeconfig for plumb at this path (as this process sees it) from the daemon's
    /// own service account, with its token and CA certificate copied beside it and kept
    /// current as the kubelet rotates them (kubeconfig_writer.rs). With `--write-config`, plumb's
    /// configuration is written only once this is.
    #[arg(long, value_name = "PATH")]
    pub write_kubeconfig: Option<PathBuf>,
    /// Where the service account's `token` and `ca.crt` are.
    #[arg(long, default_value = SERVICE_ACCOUNT_DIR, requires = "write_kubeconfig")]
    pub service_account_dir: PathBuf,
    /// How often, in seconds, the token bound to the node that `--write-kubeconfig` keeps is
    /// shown to the API server (a GET of `/version` with it). Refused (401: its Node or service
    /// account deleted and made again, the signing key replaced), a new one is asked for at
    /// once instead of at its next renewal, and one refused twice in a row (a minute apart at
    /// most) is taken off the node for the pod's copy. 0: never.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::node_token::PROBE_EVERY.as_secs(),
        requires = "write_kubeconfig"
    )]
    pub node_token_check: u64,
}

/// The files the daemon keeps on the node: a kubeconfig from its service account, and plumb's
/// CNI configuration, each when asked for.
struct NodeFiles {
    kubeconfig: Option<KubeconfigWriter>,
    conf: Option<ConfWriter>,
    /// Whether the kubeconfig has been written (or none is kept): plumb's configuration,
    /// which names it, is written only then, or every ADD would fail on a missing file.
    kubeconfig_ready: bool,
}

impl NodeFiles {
    fn keeps_any(&self) -> bool {
        self.kubeconfig.is_some() || self.conf.is_some()
    }

    /// One look at each, saying on stderr what changed.
    fn step(&mut self) {
        fn tell(output: &Path, step: Step) {
            match step {
                Step::Same => {}
                Step::Wrote(why) => say(format_args!("wrote {}: {why}", output.display())),
                Step::Removed(why) => say(format_args!("removed {}: {why}", output.display())),
                Step::Waiting(why) => {
                    say(format_args!("not writing {} yet: {why}", output.display()))
                }
            }
        }
        if let Some(k) = &mut self.kubeconfig {
            let step = k.step();
            // Not from `step`: a reason to wait said already comes back as `Step::Same`, and
            // plumb's configuration was written at the second look with no kubeconfig.
            self.kubeconfig_ready |= k.written();
            tell(k.output(), step);
            for note in k.take_notes() {
                say(format_args!("{note}"));
            }
        }
        if let Some(c) = &mut self.conf
            && self.kubeconfig_ready
        {
            let output = c.output();
            tell(&output, c.step());
        }
    }

    /// Removes the temporary files that writers of them killed before their rename left
    /// (`cni::cache::stage`), an hour old or more: no GC sweeps these directories, and each
    /// such file may hold a copy of the token.
    fn sweep_leftovers(&self) {
        let outputs = (self.kubeconfig.iter().flat_map(|k| k.outputs()))
            .chain(self.conf.iter().map(|c| c.output()));
        for output in outputs {
            match cni::cache::sweep_staged_beside(&output, crate::plugin::STAGED_FILE_MAX_AGE) {
                Ok(removed) => {
                    for file in removed {
                        say(format_args!(
                            "removed {}, left by a writer of {} killed before it finished",
                            file.display(),
                            output.display()
                        ));
                    }
                }
                Err(e) => say(format_args!("{}", e.msg)),
            }
        }
    }

    /// Stops keeping them: another daemon does now.
    fn hand_over(&mut self) {
        let outputs = self
            .kubeconfig
            .take()
            .map(|k| k.output().to_path_buf())
            .into_iter()
            .chain(self.conf.take().map(|c| c.output()));
        for output in outputs {
            say(format_args!("no longer keeping {}", output.display()));
        }
    }
}

/// What every call shares.
#[derive(Default)]
struct Shared {
    clients: Arc<ClientPool>,
    running: AtomicUsize,
    /// The uid that may call: the daemon's own (root on a node).
    uid: u32,
    /// The versions of the plugins that forwarded calls, other than the daemon's own, each
    /// said once in the log.
    other_versions: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// Serves calls on `args.socket` until SIGTERM or SIGINT (or until another daemon takes the
/// socket over: `serve`), then stops taking calls, removes the socket if it is still its own
/// and waits for the calls running (up to [`DRAIN`]).
pub fn run(args: &Args) -> Result<(), CniError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CniError::new(ErrorCode::Internal, format!("tokio runtime: {e}")))?;
    // Before anything is made: a SIGTERM during start-up is then kept for the serving loop,
    // which stops at once and cleans up, instead of killing the daemon with its socket bound.
    let signals = {
        let _in = rt.enter();
        Signals::register()?
    };
    // Before the socket is bound: a template with a mistyped key stops the daemon at once.
    let conf = match &args.write_config {
        Some(template) => Some(ConfWriter::new(
            template,
            args.cni_conf_dir.clone(),
            args.primary_config.clone(),
            &args.socket,
        )?),
        None => None,
    };
    let kubeconfig = match &args.write_kubeconfig {
        Some(path) => Some(
            KubeconfigWriter::new(path.clone(), args.service_account_dir.clone(), |v| {
                std::env::var(v).ok()
            })?
            .checking_token_every(
                Some(Duration::from_secs(args.node_token_check)).filter(|d| !d.is_zero()),
            ),
        ),
        None => None,
    };
    let files = NodeFiles {
        kubeconfig_ready: kubeconfig.is_none(),
        kubeconfig,
        conf,
    };
    files.sweep_leftovers();
    // Not the owner of /proc/self, which is root whenever the process is not dumpable.
    let uid = nix::unistd::geteuid().as_raw();
    let shared = Arc::new(Shared {
        uid,
        ..Shared::default()
    });
    let socket = &args.socket;
    // Bound inside the runtime (tokio's listener needs one).
    let (listener, ours, replaced) = rt.block_on(async { listen(socket, uid) })?;
    match replaced {
        Replaced::Nothing => {}
        Replaced::Live => say(format_args!(
            "took over {} from the daemon that served on it",
            socket.display()
        )),
        Replaced::Stale => say(format_args!(
            "replaced the stale socket {} (nothing listened on it)",
            socket.display()
        )),
    }
    say(format_args!(
        "serving CNI calls on {} (plumb {})",
        socket.display(),
        shim::VERSION
    ));
    let served = rt.block_on(serve(
        listener,
        socket,
        ours,
        Arc::clone(&shared),
        signals,
        files,
    ));
    // The socket goes first: a shim that comes now runs its call in thin mode. Only if it is
    // still the one this daemon bound: another daemon may have taken the path over (and serves
    // on it now), or an operator removed it and started one by hand.
    if is_ours(socket, ours) {
        let _ = std::fs::remove_file(socket);
    }
    // The runtime keeps running meanwhile: it writes the answers of the calls that finish.
    let left = rt.block_on(async {
        let started = tokio::time::Instant::now();
        while shared.running.load(Ordering::SeqCst) > 0 && started.elapsed() < DRAIN {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A moment for the last answers to be written.
        tokio::time::sleep(Duration::from_millis(50)).await;
        shared.running.load(Ordering::SeqCst)
    });
    if left > 0 {
        say(format_args!("stopping with {left} calls still running"));
    }
    rt.shutdown_background();
    served
}

/// SIGTERM and SIGINT, registered with tokio (a signal that comes before the serving loop waits
/// for it is kept, not lost).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> Result<Signals, CniError> {
        use tokio::signal::unix::{SignalKind, signal};
        let one = |kind| {
            signal(kind).map_err(|e| CniError::new(ErrorCode::Internal, format!("signals: {e}")))
        };
        Ok(Signals {
            term: one(SignalKind::terminate())?,
            int: one(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// One line of the daemon's own on its stderr. Not `eprintln!`, which panics when stderr cannot
/// be written (a pipe whose reader is gone: a log collector restarted, `plumb daemon 2>&1 |
/// logger` with logger killed): the daemon would die at its next line, which comes when it
/// matters: at SIGTERM, before it drains (the calls it runs get no answer and its socket is
/// left behind), or when another daemon takes its socket over, where it must wait, idle, for
/// SIGTERM (dead, it is restarted and takes the socket back). The calls' own lines are written
/// so already (log.rs).
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "plumb daemon: {line}");
}

fn socket_error(path: &Path, what: &str, e: &dyn std::fmt::Display) -> CniError {
    CniError::new(
        ErrorCode::Io,
        format!("daemon socket {}: {what}: {e}", path.display()),
    )
}

/// The socket's directory, made `0700` if missing. One that exists must be the daemon's own:
/// owned by root or by the daemon's uid and writable by its owner alone, else whoever may write
/// there can put their own socket in place of the daemon's and be sent every CNI call.
fn socket_dir(path: &Path, uid: u32) -> Result<(), CniError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| socket_error(path, what, e);
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("cannot create its directory", &e)),
        Err(e) => Err(fail("its directory", &e)),
        Ok(m) if m.uid() != 0 && m.uid() != uid => Err(fail(
            &format!(
                "its directory {} is owned by uid {}",
                dir.display(),
                m.uid()
            ),
            &format!("it must be owned by root or by uid {uid}, which runs the daemon"),
        )),
        Ok(m) if m.mode() & 0o022 != 0 => Err(fail(
            &format!(
                "its directory {} is writable by others (mode {:o})",
                dir.display(),
                m.mode() & 0o7777
            ),
            &"make it writable by its owner only (chmod go-w) or choose another directory",
        )),
        Ok(_) => Ok(()),
    }
}

/// What was at the socket's path before this daemon's socket replaced it.
enum Replaced {
    Nothing,
    /// A socket a daemon answered on: that daemon stops taking calls once it sees (`serve`).
    Live,
    /// A socket nothing listened on: left by a daemon that is gone.
    Stale,
}

/// The listening socket at `path`, 0600, its (device, inode), and what it replaced.
///
/// Bound under a name of its own in the same directory, then renamed onto `path`: rename(2)
/// replaces atomically, so at every instant the path names a listening socket (a shim never
/// finds nothing there and falls back to thin mode), and two daemons starting together cannot
/// race on a check: the last rename wins, and the other daemon sees it lost the path. This is
/// how a DaemonSet upgrade with `maxSurge` works: the new daemon starts beside the old one and
/// takes its socket, and the old one, no longer reached, finishes its calls and waits to be
/// stopped. Only a socket is ever replaced: any other file at `path` is an error, left alone.
fn listen(
    path: &Path,
    uid: u32,
) -> Result<(tokio::net::UnixListener, (u64, u64), Replaced), CniError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| socket_error(path, what, e);
    // Before anything is made: whoever may write to the directory could rename their own
    // socket onto the path just as this daemon does.
    socket_dir(path, uid)?;
    let replaced = match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(fail(
                "exists and is not a socket",
                &"remove it or choose another path",
            ));
        }
        // Only to say so in the log: the socket is replaced either way.
        Ok(_) => match knock(path) {
            Ok(()) | Err(nix::Error::EAGAIN) => Replaced::Live,
            Err(_) => Replaced::Stale,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Replaced::Nothing,
        Err(e) => return Err(fail("cannot stat it", &e)),
    };
    // Bound under a name nobody else binds. A PID is unique only in its PID namespace: two
    // daemons of a DaemonSet's surge are each PID 1 of their container, and both start on the
    // node at once. The name is never removed before the bind (that could be the other
    // daemon's socket, which its rename would then miss) and bind(2) does not replace a file:
    // a name taken gives way to a random one, as the result cache's temporary files do
    // (cni::cache::stage).
    let (new, listener) = bind_new(path)?;
    let new_fail = |what: &str, e: &dyn std::fmt::Display| {
        socket_error(path, &format!("{what} {}", new.display()), e)
    };
    // Its identity and mode are settled before it takes the path.
    let bound = std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| new_fail("cannot make 0600", &e))
        .and_then(|()| std::fs::symlink_metadata(&new).map_err(|e| new_fail("cannot stat", &e)))
        .and_then(|bound| {
            std::fs::rename(&new, path)
                .map(|()| bound)
                .map_err(|e| new_fail("cannot rename onto it", &e))
        });
    match bound {
        Ok(bound) => Ok((listener, (bound.dev(), bound.ino()), replaced)),
        Err(e) => {
            let _ = std::fs::remove_file(&new);
            Err(e)
        }
    }
}

/// A listening socket beside `path`, at `<path>.<pid>.new`, or at `<path>.<random>.new` when
/// that name is taken by another daemon that is the same PID in its own PID namespace. A name
/// left by a daemon killed between its bind and its rename (nothing listens on it, and it is
/// older than [`LEFTOVER_AGE`]: a daemon binding it now would have just made it) is removed
/// and taken.
fn bind_new(path: &Path) -> Result<(PathBuf, tokio::net::UnixListener), CniError> {
    use std::hash::BuildHasher;

    let named = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{suffix}.new"));
        PathBuf::from(name)
    };
    let pid = named(&std::process::id().to_string());
    if is_leftover(&pid) {
        let _ = std::fs::remove_file(&pid);
    }
    let mut new = pid;
    // Taken eight times over is no coincidence: said, with the names to look at.
    for attempt in 0..8u32 {
        match tokio::net::UnixListener::bind(&new) {
            Ok(listener) => return Ok((new, listener)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                // std's hasher keys come from the OS's random source, per process. Seven hex
                // digits, no longer than a PID's decimal (pid_max is at most 4194304): a path
                // short enough for sockaddr_un with a PID is with these.
                let random = std::hash::RandomState::new().hash_one(attempt) & 0xfff_ffff;
                new = named(&format!("{random:07x}"));
            }
            Err(e) => {
                return Err(socket_error(
                    path,
                    &format!("cannot listen on {}", new.display()),
                    &e,
                ));
            }
        }
    }
    Err(socket_error(
        path,
        "cannot listen beside it",
        &format!(
            "eight names {}.*.new were taken, each by a daemon starting or by a file of that \
             name: look at what made them",
            path.display()
        ),
    ))
}

/// How old a `.new` socket nothing listens on must be to be taken for a killed daemon's.
const LEFTOVER_AGE: Duration = Duration::from_secs(60);

/// Whether `new` is a socket that a daemon killed before its rename left: nothing listens on
/// it, and it was made over [`LEFTOVER_AGE`] ago.
fn is_leftover(new: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(new) else {
        return false;
    };
    let old = (m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > LEFTOVER_AGE);
    m.file_type().is_socket() && old && knock(new) == Err(nix::Error::ECONNREFUSED)
}

/// Connects to the unix socket `path` without waiting: `Ok` when a listener took the
/// connection into its queue, `EAGAIN` when one listens but its queue is full (a wedged
/// daemon that accepts nothing), `ECONNREFUSED` when nothing listens. A blocking connect to a
/// full queue waits for ever, and held the start of the daemon meant to replace a wedged one.
fn knock(path: &Path) -> nix::Result<()> {
    connect_without_waiting(path)
        .map(drop)
        .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(0)))
}

/// A connection to the unix socket `path`, made without waiting ([`knock`]).
fn connect_without_waiting(path: &Path) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket.connect(&socket2::SockAddr::unix(path)?)?;
    Ok(socket)
}

/// Whether `path` still names the socket this daemon bound (device and inode `ours`).
fn is_ours(path: &Path, ours: (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == ours)
}

/// Whether `path` names a socket (another daemon's, once this one's is lost).
fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// How often a serving daemon looks whether its path still names its socket.
const WATCH: Duration = Duration::from_secs(1);

/// Serves calls until SIGTERM or SIGINT. Once `socket` no longer names the socket it bound
/// (another daemon took it over), it stops taking calls, finishes those it has, and waits for
/// the signal: it does not exit on its own, or a service manager or the DaemonSet would start
/// it again, and it would take the socket back, for ever in turn.
async fn serve(
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
async fn accept(
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
fn serve_queued(listener: tokio::net::UnixListener, shared: &Arc<Shared>) {
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
fn spawn_connection(stream: tokio::net::UnixStream, shared: &Arc<Shared>) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let peer = stream.peer_cred().ok();
        // A duplicate of the connection, which each call asks whether the plugin closed its
        // end (plugin.rs): hyper notices only when it next reads.
        let connection = std::os::fd::AsFd::as_fd(&stream)
            .try_clone_to_owned()
            .ok()
            .map(Arc::new);
        let service = hyper::service::service_fn(move |request| {
            answer(request, peer, connection.clone(), Arc::clone(&shared))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .await;
    });
}

fn reply(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r
}

/// The answer to one request: a CNI call on `POST /cni`, `ok` on `GET /healthz`.
async fn answer(
    request: Request<Incoming>,
    peer: Option<tokio::net::unix::UCred>,
    connection: Option<Arc<std::os::fd::OwnedFd>>,
    shared: Arc<Shared>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let uid = peer.map(|c| c.uid());
    if uid != Some(shared.uid) && uid != Some(0) {
        return Ok(reply(
            StatusCode::FORBIDDEN,
            format!("only uid {} or root may call plumb\n", shared.uid),
        ));
    }
    match (request.method().as_str(), request.uri().path()) {
        ("GET", "/healthz") => {
            return Ok(reply(
                StatusCode::OK,
                format!(
                    "ok: {} calls running, {} API clients idle\n",
                    shared.running.load(Ordering::SeqCst),
                    shared.clients.idle()
                ),
            ));
        }
        ("POST", shim::PATH) => plugin_version(&request, &shared),
        (method, path) => {
            return Ok(reply(
                StatusCode::NOT_FOUND,
                format!("no {method} {}\n", crate::log::one_line(path)),
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
    // Counted from here until the call itself ends, on its thread: a shim that went away (the
    // runtime killed it) drops this future, not the call.
    let running = Running::start(Arc::clone(&shared));
    // Dropped with this future when the plugin goes away before the answer: the call is told,
    // so that one still waiting for its container's turn is not run (plugin.rs).
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
    let mut r = reply(StatusCode::OK, String::new());
    *r.body_mut() = Full::new(Bytes::from(stdout));
    r.headers_mut()
        .insert(shim::EXIT_CODE_HEADER, http::HeaderValue::from(code));
    Ok(r)
}

/// Says, once per version, that a call comes from a plugin of another version than the
/// daemon's: the node's `/opt/cni/bin/plumb` and the daemon's image apart, normal during an
/// upgrade, and what an operator looks for when the two behave differently. Calls run as the
/// daemon's version whatever the plugin's.
fn plugin_version(request: &Request<Incoming>, shared: &Shared) {
    let theirs = match request.headers().get(shim::VERSION_HEADER) {
        Some(v) => crate::objects::cut_at(
            &crate::log::one_line(&String::from_utf8_lossy(v.as_bytes())),
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
struct Abandoned(Arc<AtomicBool>, bool);

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
struct Running(Arc<Shared>);

impl Running {
    fn start(shared: Arc<Shared>) -> Running {
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
/// before it, in this process or another: container_lock.rs). Its output and exit code.
fn call(
    shared: &Shared,
    env: &BTreeMap<String, String>,
    stdin: &[u8],
    caller: Option<u32>,
    connection: Option<Arc<std::os::fd::OwnedFd>>,
    abandoned: Arc<AtomicBool>,
) -> (Vec<u8>, i32) {
    let plugin = Plumb {
        routes: &NetlinkRoutes,
        clients: Some(Arc::clone(&shared.clients)),
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
    use super::*;

    /// A directory for the daemon's socket `plumb.sock`, the name `plumb.sock.<pid>.new` a
    /// daemon of this PID binds beside it, and a runtime entered (listen needs one).
    fn beside_a_socket() -> (tempfile::TempDir, PathBuf, PathBuf, tokio::runtime::Runtime) {
        let d = tempfile::tempdir().unwrap();
        let socket = d.path().join("plumb.sock");
        let pid_new = d
            .path()
            .join(format!("plumb.sock.{}.new", std::process::id()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        (d, socket, pid_new, rt)
    }

    /// Dates the file `path` two minutes back, past [`LEFTOVER_AGE`].
    fn made_two_minutes_ago(path: &Path) {
        let aged = std::process::Command::new("touch")
            .args(["-h", "-d", "2 minutes ago"])
            .arg(path)
            .status()
            .unwrap();
        assert!(aged.success());
    }

    /// The names in `dir`.
    fn names_in(dir: &Path) -> Vec<std::ffi::OsString> {
        (std::fs::read_dir(dir).unwrap())
            .map(|e| e.unwrap().file_name())
            .collect()
    }

    #[test]
    fn a_daemon_starting_beside_another_of_the_same_pid_leaves_its_socket_alone() {
        // Two daemons of a DaemonSet's surge, each PID 1 of its container, start at once: the
        // other one has bound `<socket>.<pid>.new` and is about to rename it onto the path.
        // Removing that name made its rename take this daemon's socket, which this daemon then
        // did not find at its own name (its start failed), and the other one served a socket
        // nobody could reach.
        let (d, socket, others, rt) = beside_a_socket();
        let _guard = rt.enter();
        let _other = std::os::unix::net::UnixListener::bind(&others).unwrap();
        let (listener, ours, replaced) = listen(&socket, nix::unistd::geteuid().as_raw()).unwrap();
        assert!(matches!(replaced, Replaced::Nothing));
        assert!(others.exists(), "the other daemon's socket was removed");
        assert!(is_ours(&socket, ours));
        // The socket at the path is this daemon's listener: a call reaches it.
        let _call = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        let accepted = rt.block_on(listener.accept());
        assert!(accepted.is_ok());
        // Nothing of this daemon is left beside the path; the other's rename still works (and
        // then this daemon sees that it lost the path).
        let beside = names_in(d.path());
        assert_eq!(beside.len(), 2, "{beside:?}");
        std::fs::rename(&others, &socket).unwrap();
        assert!(!is_ours(&socket, ours));
    }

    #[test]
    fn a_daemon_whose_queue_is_full_is_found_live_without_waiting() {
        // A wedged daemon accepts nothing, and its socket's queue fills with the shims'
        // connections: a blocking connect to it waited for ever, so the daemon started to
        // replace it never bound its socket.
        let (d, socket, _, _rt) = beside_a_socket();
        let _wedged = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        // The queue filled with connections that stay open (without waiting, as `knock`).
        let mut queued = Vec::new();
        loop {
            match connect_without_waiting(&socket) {
                Ok(s) => queued.push(s),
                Err(e) if e.raw_os_error() == Some(nix::Error::EAGAIN as i32) => break,
                Err(e) => panic!("{e}"),
            }
            assert!(queued.len() < 100_000, "the queue never filled");
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let left = d.path().join("plumb.sock.1.new");
        std::fs::hard_link(&socket, &left).unwrap();
        made_two_minutes_ago(&left);
        std::thread::spawn(move || {
            let _ = tx.send((knock(&socket), is_leftover(&left)));
        });
        let (knocked, leftover) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("waited on the full queue");
        assert_eq!(knocked, Err(nix::Error::EAGAIN));
        assert!(
            !leftover,
            "a socket a daemon listens on was taken for a leftover"
        );
    }

    #[test]
    fn a_socket_a_killed_daemon_left_beside_the_path_is_taken_once_a_minute_old() {
        // A daemon that is PID 1 killed between its bind and its rename left
        // `<socket>.1.new`, which nothing listens on: the next PID-1 daemon takes that name
        // again rather than leaving it there for good. One just made is a daemon starting.
        let (d, socket, left, rt) = beside_a_socket();
        drop(std::os::unix::net::UnixListener::bind(&left).unwrap());
        let _guard = rt.enter();
        let uid = nix::unistd::geteuid().as_raw();
        let (listener, _, _) = listen(&socket, uid).unwrap();
        assert!(
            left.exists(),
            "a socket made just now was taken for a leftover"
        );
        drop(listener);
        std::fs::remove_file(&socket).unwrap();
        made_two_minutes_ago(&left);
        let (_listener, ours, _) = listen(&socket, uid).unwrap();
        assert!(is_ours(&socket, ours));
        assert_eq!(names_in(d.path()), [std::ffi::OsString::from("plumb.sock")]);
    }

    #[test]
    fn plumbs_configuration_waits_for_the_kubeconfig_however_long_that_takes() {
        // The service account's token not there yet (the kubelet has not mounted it): plumb's
        // configuration, which names the kubeconfig, must not be written, or every ADD fails
        // on a missing file, not at the first look only but at every look after it.
        let d = tempfile::tempdir().unwrap();
        let (sa, conf_dir) = (d.path().join("sa"), d.path().join("net.d"));
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::create_dir_all(&conf_dir).unwrap();
        let kubeconfig = conf_dir.join("plumb.d/plumb.kubeconfig");
        let template = d.path().join("template.json");
        std::fs::write(
            &template,
            serde_json::json!({"kubeconfig": kubeconfig}).to_string(),
        )
        .unwrap();
        std::fs::write(
            conf_dir.join("10-bridge.conf"),
            r#"{"cniVersion": "1.0.0", "name": "cbr0", "type": "bridge"}"#,
        )
        .unwrap();
        let env = |v: &str| match v {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let conf = ConfWriter::new(&template, conf_dir.clone(), None, Path::new("/s")).unwrap();
        let written = conf.output();
        let mut files = NodeFiles {
            kubeconfig: Some(KubeconfigWriter::new(kubeconfig.clone(), sa.clone(), env).unwrap()),
            conf: Some(conf),
            kubeconfig_ready: false,
        };
        for _ in 0..3 {
            files.step();
            assert!(!kubeconfig.exists());
            assert!(!written.exists(), "written before the kubeconfig");
        }
        std::fs::write(sa.join("token"), "t").unwrap();
        std::fs::write(sa.join("ca.crt"), "CA").unwrap();
        files.step();
        assert!(kubeconfig.exists() && written.exists());
    }

    #[test]
    fn leftovers_of_killed_writers_of_the_node_files_are_swept_once_an_hour_old() {
        // A daemon killed while it wrote the token copy left `.token.tmpN`; no GC sweeps the
        // configuration directory, so it stayed for ever, a copy of a token on the host.
        let d = tempfile::tempdir().unwrap();
        let (sa, conf_dir) = (d.path().join("sa"), d.path().join("net.d"));
        let plumb_d = conf_dir.join("plumb.d");
        std::fs::create_dir_all(&plumb_d).unwrap();
        let template = d.path().join("template.json");
        std::fs::write(&template, "{}").unwrap();
        let env = |v: &str| match v {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let files = NodeFiles {
            kubeconfig: Some(
                KubeconfigWriter::new(plumb_d.join("plumb.kubeconfig"), sa, env).unwrap(),
            ),
            conf: Some(
                ConfWriter::new(&template, conf_dir.clone(), None, Path::new("/s")).unwrap(),
            ),
            kubeconfig_ready: false,
        };
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        let put = |path: PathBuf, aged: bool| {
            let f = std::fs::File::create(&path).unwrap();
            if aged {
                f.set_modified(old).unwrap();
            }
            path
        };
        let swept = [
            put(plumb_d.join(".token.tmp1"), true),
            put(plumb_d.join(".ca.crt.tmp4242"), true),
            put(plumb_d.join(".plumb.kubeconfig.tmp1"), true),
            put(conf_dir.join(".00-plumb.conflist.tmp3735928559"), true),
        ];
        let kept = [
            // A live writer's, and files of other names.
            put(plumb_d.join(".token.tmp7"), false),
            put(plumb_d.join(".other.tmp1"), true),
            put(conf_dir.join(".10-flannel.conflist.tmp1"), true),
            put(plumb_d.join("token.tmp1"), true),
        ];
        files.sweep_leftovers();
        for f in swept {
            assert!(!f.exists(), "{} left", f.display());
        }
        for f in kept {
            assert!(f.exists(), "{} removed", f.display());
        }
    }
}
