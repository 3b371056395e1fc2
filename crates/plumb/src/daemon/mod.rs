//! `plumb daemon`: the CNI engine in a long-running process, serving the calls the `plumb` shim
//! forwards (`shim`) over a unix socket (`/run/plumb/plumb.sock`, 0600, root), each run as in
//! thin mode but with its pod and NADs read from watch caches (`caches`), the API client and its
//! connection kept between calls, and its events sent after the answer (docs/daemon.md). A
//! daemon started on a served socket takes it over, as Multus's does (`socket`, `serve`); it can
//! also keep plumb's CNI configuration and a kubeconfig on the node (`conf_writer`,
//! `kubeconfig_writer`), run in the node's root (`host_root`), keep those files only
//! (`--files-only`), take plumb off the node (`uninstall`), or change running pods'
//! attachments as their networks annotation changes (`dynamic`).

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

use plumb_cluster::cached::Cached;
use plumb_engine::paths;

use crate::shim;

mod caches;
pub mod conf_writer;
mod dynamic;
mod host_root;
pub mod kubeconfig_writer;
mod metrics;
pub mod node_token;
mod serve;
mod socket;
mod uninstall;

use conf_writer::{ConfWriter, Step};
use kubeconfig_writer::KubeconfigWriter;
pub use serve::UNINSTALLED;
use serve::*;
use socket::*;
use uninstall::Uninstall;

/// The most of a request the daemon reads: the runtime's configuration and environment.
pub(super) const MAX_REQUEST: usize = 64 << 20;

/// How long a stopping daemon waits for the calls it is running.
pub(super) const DRAIN: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct Args {
    /// The unix socket to listen on (the `plumbDaemonSocket` of plumb's CNI configuration).
    #[arg(long, default_value = paths::DAEMON_SOCKET)]
    pub socket: PathBuf,
    /// Write plumb's CNI configuration, `00-plumb.conflist`, into `--cni-conf-dir` once the
    /// default network's configuration is there, from this template: a JSON object of plumb's
    /// configuration keys (docs/configuration.md), with paths as the runtime sees them. The
    /// daemon fills in the default network (embedded as `delegates`), its capabilities, the
    /// `cniVersion` and `plumbDaemonSocket` (unless given), keeps the file in step with the
    /// default network's and removes it when that is gone (`conf_writer`).
    #[arg(long, value_name = "TEMPLATE")]
    pub write_config: Option<PathBuf>,
    /// The runtime's CNI configuration directory, as this process sees it (with `--host-root`,
    /// the node's path).
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// The file name of the default network's configuration in `--cni-conf-dir`; without it,
    /// the first configuration file there by name, as the runtime would take it without plumb.
    #[arg(long, value_name = "FILE", requires = "write_config")]
    pub primary_config: Option<String>,
    /// Write a kubeconfig for plumb at this path (as this process sees it) from the daemon's
    /// own service account, with its token and CA certificate copied beside it and kept
    /// current as the kubelet rotates them (`kubeconfig_writer`). With `--write-config`, plumb's
    /// configuration is written only once this is.
    #[arg(long, value_name = "PATH")]
    pub write_kubeconfig: Option<PathBuf>,
    /// Where the pod's service account's `token` and `ca.crt` are: the daemon watches with it
    /// in a pod without `--kubeconfig`, and `--write-kubeconfig` copies them (a path in the
    /// daemon's pod, also with `--host-root`).
    #[arg(long, default_value = paths::SERVICE_ACCOUNT_DIR)]
    pub service_account_dir: PathBuf,
    /// How often, in seconds, the token bound to the node that `--write-kubeconfig` keeps is
    /// shown to the API server (a GET of `/version` with it). Refused (401: its Node or service
    /// account deleted and made again, the signing key replaced), a new one is asked for at
    /// once instead of at its next renewal, and one refused twice in a row (a minute apart at
    /// most) is taken off the node for the pod's copy. 0: never.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::daemon::node_token::PROBE_EVERY.as_secs(),
        requires = "write_kubeconfig"
    )]
    pub node_token_check: u64,
    /// The node this daemon runs on, as the kubelet registered it: the pods bound to it are
    /// kept in the daemon's watch cache. Default: `$NODE_NAME`, else the host name.
    #[arg(long, value_name = "NODE")]
    pub node_name: Option<String>,
    /// The kubeconfig the daemon watches pods and NADs with. Default: the pod's service
    /// account when the daemon runs in a pod, else the kubeconfig the first call names.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Keep the NADs of these namespaces only (comma-separated; a NAD elsewhere is read with a
    /// GET when a pod selects it). Default: all namespaces.
    #[arg(long, value_name = "NAMESPACES", value_delimiter = ',')]
    pub nad_namespaces: Vec<String>,
    /// The most calls run at once; more wait for a turn (calls for one container run one at a
    /// time in any case).
    #[arg(long, value_name = "N", default_value_t = MAX_CALLS, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_calls: u32,
    /// How long, in seconds, a call waits for a turn beyond `--max-calls` before it is refused
    /// with CNI code 11 (try again later: the runtime retries the sandbox).
    #[arg(long, value_name = "SECONDS", default_value_t = MAX_WAIT.as_secs())]
    pub max_wait: u64,
    /// Serve Prometheus metrics (`/metrics`), `/healthz` and `/readyz` over HTTP on this
    /// address (say `127.0.0.1:9091`, or `0.0.0.0:9091` for a scraper off the node). Off by
    /// default.
    #[arg(long, value_name = "ADDR")]
    pub metrics_address: Option<std::net::SocketAddr>,
    /// The node's root file system as mounted in the daemon's pod (say `/host`, a hostPath
    /// volume of `/`): the daemon enters it at start (chroot), so that it and the delegates it
    /// runs see the node's files. Every path of a call and of the other flags is then the
    /// node's, but `--write-config`'s template and `--service-account-dir`, which are the pod's.
    #[arg(long, value_name = "PATH")]
    pub host_root: Option<PathBuf>,
    /// Serve no CNI calls: keep the node's files only (`--write-config`, `--write-kubeconfig`),
    /// the configuration written naming no socket, so that the plugin runs every call itself
    /// (thin mode). The socket answers `plumb health` and lets a new daemon take over.
    #[arg(long, conflicts_with = "uninstall")]
    pub files_only: bool,
    /// Take plumb off the node: remove plumb's configuration from `--cni-conf-dir` (new pods
    /// get the default network alone), keep `--write-kubeconfig`'s token current while pods
    /// attached by plumb are left, then remove the binary from `--bin-dir`, the kubeconfig and
    /// `--state-dir`; ready (`/readyz`) once nothing is left. Serves no calls.
    #[arg(long, conflicts_with = "write_config")]
    pub uninstall: bool,
    /// The CNI bin directory plumb's binary is removed from by `--uninstall`.
    #[arg(long, value_name = "DIR", default_value = paths::BIN_DIR, requires = "uninstall")]
    pub bin_dir: PathBuf,
    /// plumb's state directory (its records: `plumbStateDir`): `--dynamic` finds the pods'
    /// sandboxes there; `--uninstall` waits for it to be empty of records and then removes it.
    #[arg(long, value_name = "DIR", default_value = paths::STATE_DIR)]
    pub state_dir: PathBuf,
    /// Change a running pod's attachments when its `k8s.v1.cni.cncf.io/networks` annotation
    /// changes, in the namespaces `--dynamic-namespaces` selects (docs/dynamic-attachments.md).
    #[arg(
        long,
        requires = "dynamic_namespaces",
        conflicts_with_all = ["files_only", "uninstall"]
    )]
    pub dynamic: bool,
    /// The label selector of the namespaces whose pods `--dynamic` changes (say
    /// `plumb.io/dynamic=true`): anyone who may patch a pod there may rewire its networks.
    #[arg(long, value_name = "SELECTOR", requires = "dynamic")]
    pub dynamic_namespaces: Option<String>,
}

/// What the daemon is for.
#[derive(Clone)]
pub(super) enum Mode {
    /// Serving the calls the plugin forwards (the default).
    Serve,
    /// Keeping the node's files only (`--files-only`).
    FilesOnly,
    /// Taking plumb off the node (`--uninstall`); done once the flag is set.
    Uninstall(Arc<AtomicBool>),
}

impl Mode {
    /// Why a forwarded call is refused (the plugin then runs it itself); `None`: served.
    pub(super) fn no_calls(&self) -> Option<&'static str> {
        match self {
            Mode::Serve => None,
            Mode::FilesOnly => Some("this daemon serves no calls (--files-only)"),
            Mode::Uninstall(_) => Some("this daemon serves no calls: it uninstalls plumb"),
        }
    }
}

/// `--max-calls`' default: a burst of pods scheduled onto a node together (a rollout, a node
/// drained elsewhere) runs at once up to this; each call mostly waits on its delegates'
/// processes, and more at once only share the same cores and grow the daemon's threads.
pub const MAX_CALLS: u32 = 32;

/// `--max-wait`'s default: well within the kubelet's two minutes for a sandbox, so that the
/// runtime gets code 11 and retries rather than giving up on the call.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// The files the daemon keeps on the node: a kubeconfig from its service account, and plumb's
/// CNI configuration, each when asked for.
pub(super) struct NodeFiles {
    kubeconfig: Option<KubeconfigWriter>,
    conf: Option<ConfWriter>,
    /// Taking plumb off the node, in place of writing its configuration (`--uninstall`).
    uninstall: Option<Uninstall>,
    /// Whether the uninstall said that another daemon serves on its socket.
    told_of_other: bool,
    /// Whether the kubeconfig has been written (or none is kept): plumb's configuration,
    /// which names it, is written only then, or every ADD would fail on a missing file.
    kubeconfig_ready: bool,
}

impl NodeFiles {
    fn keeps_any(&self) -> bool {
        self.kubeconfig.is_some() || self.conf.is_some() || self.uninstall.is_some()
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
        if let Some(u) = &mut self.uninstall {
            let written = (self.kubeconfig.iter())
                .flat_map(|k| k.outputs())
                .collect::<Vec<_>>();
            match u.step(&written) {
                Step::Same => {}
                Step::Removed(why) if u.is_done() => say(format_args!("uninstall: {why}")),
                Step::Removed(why) => say(format_args!(
                    "uninstall: removed {}: {why}",
                    u.conf().display()
                )),
                Step::Wrote(why) | Step::Waiting(why) => {
                    say(format_args!("uninstall: waiting: {why}"))
                }
            }
            if u.is_done() {
                // Its files are gone: no writing them again.
                self.kubeconfig = None;
            }
        }
    }

    /// Removes the temporary files that writers of them killed before their rename left
    /// (`cni::cache::stage`), an hour old or more: no GC sweeps these directories, and each
    /// such file may hold a copy of the token.
    fn sweep_leftovers(&self) {
        let outputs = (self.kubeconfig.iter().flat_map(|k| k.outputs()))
            .chain(self.conf.iter().map(|c| c.output()));
        for output in outputs {
            match cni::cache::sweep_staged_beside(
                &output,
                plumb_engine::commands::STAGED_FILE_MAX_AGE,
            ) {
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

    /// Stops keeping them: another daemon does now. Not while uninstalling: the daemon that
    /// took the socket (plumb's own DaemonSet, not deleted yet) would write plumb's
    /// configuration again once this one stopped removing it.
    fn hand_over(&mut self) {
        if self.uninstall.is_some() {
            if !std::mem::replace(&mut self.told_of_other, true) {
                say(format_args!(
                    "another daemon serves on the socket; uninstalling goes on (delete plumb's \
                     DaemonSet)"
                ));
            }
            return;
        }
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

/// What every call shares. Calls for different containers run at the same time, each on a
/// thread of its own; calls for the same container one at a time, by the container's lock, which
/// a call in thin mode takes too (`container_lock`). A DEL sent while the daemon still runs its
/// ADD (the runtime gave up waiting and killed the shim) waits for it and undoes all of it, where
/// in thin mode the ADD would have been killed part-way.
pub(super) struct Shared {
    /// The API clients kept between calls, the watch caches of pods and NADs the calls read
    /// first, and the queue of the events they send after their answer.
    connect: Cached,
    running: AtomicUsize,
    /// A turn for each call that runs (`--max-calls`), waited for up to `max_wait`.
    turns: Arc<tokio::sync::Semaphore>,
    max_calls: u32,
    max_wait: Duration,
    /// Calls refused for want of a turn.
    refused: std::sync::atomic::AtomicU64,
    /// Calls waiting for a turn now.
    waiting: AtomicUsize,
    metrics: metrics::Metrics,
    mode: Mode,
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
    // Before the socket is bound: a template with a mistyped key stops the daemon at once. And
    // before the daemon enters the node's root: the template is the pod's file.
    let conf = match &args.write_config {
        Some(template) => Some(ConfWriter::new(
            template,
            args.cni_conf_dir.clone(),
            args.primary_config.clone(),
            (!args.files_only).then_some(args.socket.as_path()),
        )?),
        None => None,
    };
    if args.files_only && args.write_config.is_none() && args.write_kubeconfig.is_none() {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            "--files-only: no file to keep: give --write-config or --write-kubeconfig",
        ));
    }
    let getenv = |v: &str| std::env::var(v).ok();
    // Before anything else reads a file: from here on, every path is the node's.
    let entered = match &args.host_root {
        Some(root) => Some(host_root::enter(
            root,
            &args.service_account_dir,
            args.write_kubeconfig.is_some() || caches::in_a_pod(args, &getenv),
        )?),
        None => None,
    };
    let service_account = (entered.as_ref().and_then(|e| e.service_account_dir()))
        .unwrap_or_else(|| args.service_account_dir.clone());
    if let Some(root) = &args.host_root {
        say(format_args!(
            "entered the node's root {}: every path from here on is the node's",
            root.display()
        ));
    }
    let rt = plumb_cluster::runtime::current_thread()?;
    // Before the daemon's threads and socket: a SIGTERM during start-up is then kept for the
    // serving loop, which stops at once and cleans up, instead of killing the daemon with its
    // socket bound.
    let signals = {
        let _in = rt.enter();
        Signals::register()?
    };
    let kubeconfig = match &args.write_kubeconfig {
        Some(path) => Some(
            KubeconfigWriter::new(path.clone(), service_account.clone(), getenv)?
                .checking_token_every(
                    Some(Duration::from_secs(args.node_token_check)).filter(|d| !d.is_zero()),
                ),
        ),
        None => None,
    };
    let uninstall = args.uninstall.then(|| {
        Uninstall::new(
            args.cni_conf_dir.clone(),
            &args.bin_dir,
            args.state_dir.clone(),
        )
    });
    let mode = match &uninstall {
        Some(u) => Mode::Uninstall(Arc::clone(&u.done)),
        None if args.files_only => Mode::FilesOnly,
        None => Mode::Serve,
    };
    let files = NodeFiles {
        kubeconfig_ready: kubeconfig.is_none(),
        kubeconfig,
        conf,
        uninstall,
        told_of_other: false,
    };
    files.sweep_leftovers();
    // Not the owner of /proc/self, which is root whenever the process is not dumpable.
    let uid = nix::unistd::geteuid().as_raw();
    let metrics = metrics::Metrics::default();
    let shared = Arc::new(Shared {
        connect: caches::connect(
            args,
            mode.no_calls().is_none(),
            &service_account,
            &getenv,
            metrics.delegate_observer(),
        )?,
        metrics,
        mode,
        running: AtomicUsize::new(0),
        turns: Arc::new(tokio::sync::Semaphore::new(args.max_calls as usize)),
        max_calls: args.max_calls,
        max_wait: Duration::from_secs(args.max_wait),
        refused: Default::default(),
        waiting: AtomicUsize::new(0),
        uid,
        other_versions: Default::default(),
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
    if let Some(addr) = args.metrics_address {
        rt.spawn(metrics::serve(addr, Arc::clone(&shared)));
    }
    if args.dynamic {
        dynamic::start(Arc::clone(&shared), args.state_dir.clone())?;
    }
    let served = rt.block_on(serve(
        listener,
        socket,
        ours,
        Arc::clone(&shared),
        signals,
        files,
    ));
    // Calls still waiting for a turn get code 11 at once (the runtime retries them, in the
    // plugin or with the next daemon) rather than starting during the drain or being dropped
    // unanswered at its end.
    shared.turns.close();
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
    drop(entered);
    served
}

/// SIGTERM and SIGINT, registered with tokio (a signal that comes before the serving loop waits
/// for it is kept, not lost).
pub(super) struct Signals {
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
pub(super) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "plumb daemon: {line}");
}

pub(super) fn socket_error(path: &Path, what: &str, e: &dyn std::fmt::Display) -> CniError {
    CniError::new(
        ErrorCode::Io,
        format!("daemon socket {}: {what}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests;
