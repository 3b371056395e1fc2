//! plumb as the runtime's CNI plugin: the [`cni::skel::Plugin`] whose ADD attaches a pod to its
//! networks (multi-net spec §3-§5), DEL detaches it, CHECK checks every attachment, STATUS and
//! GC (CNI spec 1.1) cover every network plumb knows of; one file per command. The same engine
//! serves thin mode (one process per call) and the daemon (clients kept between calls: its
//! [`Connect`]).

use std::sync::Arc;

use cni::error::{CniError, ErrorCode};
use cni::skel::{CmdArgs, Plugin};
use cni::version::SUPPORTED;
use cni::{CniResult, Version};
use netattach::status::StatusInput;

use crate::cluster::Connect;
use crate::execute::{Added, Executor};
use crate::pod_args::PodArgs;
use crate::routes::DefaultRoutes;

mod add;
mod call;
mod change;
mod check;
mod del;
mod gc;
mod known;
mod status;

use call::Call;
pub use change::{Changed, Report};
pub use gc::STAGED_FILE_MAX_AGE;

/// How long a call run instead of a daemon that did not acknowledge it waits for its
/// container's turn: the kubelet tries again after code 11, by when the daemon may be back.
pub const LOCK_WAIT_INSTEAD_OF_DAEMON: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a change of a running pod's attachments waits for its container's turn.
pub const LOCK_WAIT_FOR_CHANGE: std::time::Duration = std::time::Duration::from_secs(10);

/// The runtime's capability for handing a plugin the pod's annotations (containerd and CRI-O
/// fill it for plugins that declare it), which spares the pod GET.
pub const POD_ANNOTATIONS_CAPABILITY: &str = netattach::runtime_config::capability::POD_ANNOTATIONS;

/// The plugin. `routes` changes default routes in pod namespaces; `connect` gives each call its
/// API client and kubelet (the daemon's are kept between calls); `caller`, whose call it runs.
pub struct Plumb<'a> {
    pub routes: &'a dyn DefaultRoutes,
    pub connect: &'a dyn Connect,
    pub caller: Caller,
}

/// Who a call is for: the process, so that the container lock can tell plumb run as a
/// delegate of itself from a call that waits its turn (`container_lock`), and in the daemon
/// whether that process is still there.
#[derive(Debug)]
pub enum Caller {
    /// The runtime started this process (thin mode, `plumb attach`/`detach`).
    ThisProcess,
    /// As [`Caller::ThisProcess`], for a call a daemon did not acknowledge: a call that daemon
    /// runs for the container holds its lock for as long as the daemon stays stopped, so the
    /// wait for it is bounded ([`LOCK_WAIT_INSTEAD_OF_DAEMON`], then code 11).
    InsteadOfDaemon,
    /// The daemon changes a running pod's attachments (`--dynamic`): the container's turn is
    /// waited for up to [`LOCK_WAIT_FOR_CHANGE`], then the change is tried again later, so that
    /// one container's long call does not hold back every other pod's change.
    DaemonChange,
    /// The daemon runs it for the plugin process that forwarded it.
    Forwarded {
        /// Its pid (`SO_PEERCRED`), when known.
        pid: Option<u32>,
        /// Its connection (a duplicate of the daemon's descriptor), to ask the kernel whether
        /// the plugin closed it.
        connection: Option<Arc<std::os::fd::OwnedFd>>,
        /// Set when the daemon saw its connection close (the runtime killed it): an ADD or
        /// CHECK whose container's turn had not come then is not run.
        abandoned: Arc<std::sync::atomic::AtomicBool>,
    },
}

impl Caller {
    pub fn pid(&self) -> Option<u32> {
        match self {
            Caller::ThisProcess | Caller::InsteadOfDaemon => Some(std::process::id()),
            Caller::DaemonChange => None,
            Caller::Forwarded { pid, .. } => *pid,
        }
    }

    /// Whether the plugin that forwarded this call went away: the daemon saw its connection
    /// close, or the kernel says the plugin's end is closed. The daemon sees it only when it
    /// next polls the connection, so a call whose turn comes at once (its DEL, sent after the
    /// runtime killed the plugin, already done) could otherwise run first.
    fn abandoned(&self) -> bool {
        match self {
            Caller::ThisProcess | Caller::InsteadOfDaemon | Caller::DaemonChange => false,
            Caller::Forwarded {
                connection,
                abandoned,
                ..
            } => {
                abandoned.load(std::sync::atomic::Ordering::SeqCst)
                    || connection.as_deref().is_some_and(closed_by_peer)
            }
        }
    }
}

/// Whether the other end of connection `fd` (a unix stream socket) is closed: poll(2) says
/// `POLLHUP` once the peer's socket is released. The plugin never closes its end before the
/// answer: it waits to read it.
fn closed_by_peer(fd: &std::os::fd::OwnedFd) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    // No event asked for: POLLHUP and POLLERR are always told.
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::empty())];
    poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// `pod` as errors name it.
pub fn who(pa: &Option<PodArgs>, container_id: &str) -> String {
    match pa {
        Some(p) => format!("pod {p} (container {container_id})"),
        None => format!("container {container_id}"),
    }
}

/// The network-status annotation of what ADD did (multi-net spec §5).
pub fn network_status(added: &[Added]) -> String {
    let entries: Vec<_> = added
        .iter()
        .map(|a| {
            netattach::status::build(&StatusInput {
                name: &a.attachment.network,
                result: Some(&a.result),
                ifname: &a.attachment.ifname,
                is_default: a.attachment.is_default,
                default_route: a.attachment.default_route.as_deref(),
                device_info: a.device_info.as_ref(),
            })
        })
        .collect();
    netattach::status::to_annotation(&entries)
}

impl Plumb<'_> {
    /// The call `args` asks for, with the daemon's clients when there are.
    fn call(&self, args: &CmdArgs) -> Result<Call<'_>, CniError> {
        Call::new(args, self.connect)
    }

    /// An error when the runtime gave up on this call before its turn came (daemon only): an
    /// ADD run now would attach a sandbox the runtime may already have deleted (its DEL, sent
    /// after it killed the plugin, may have had the turn first), and nobody would undo it.
    /// Asked once the turn is this call's: a DEL done before it is done for good.
    fn not_abandoned(&self, call: &Call, args: &CmdArgs, command: &str) -> Result<(), CniError> {
        if !self.caller.abandoned() {
            return Ok(());
        }
        let e = CniError::new(
            ErrorCode::TryAgainLater,
            format!(
                "{}: the runtime gave up on this {command} (the plugin that forwarded it went \
                 away) before its container's turn came; not run",
                who(&call.pod_args, &args.container_id)
            ),
        );
        call.log.error(&e.to_string());
        Err(e)
    }

    fn executor<'c>(&'c self, call: &'c Call) -> Executor<'c> {
        Executor {
            cni: &call.cni,
            records: &call.records,
            routes: self.routes,
            device_info: &call.device_info,
        }
    }
}

impl Plugin for Plumb<'_> {
    fn supported_versions(&self) -> &[Version] {
        &SUPPORTED
    }

    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        self.cmd_add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.cmd_del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.cmd_check(args)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.cmd_status(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.cmd_gc(args)
    }
}

#[cfg(test)]
mod tests;
