//! plumb as the runtime's CNI plugin: the [`cni::skel::Plugin`] whose ADD attaches a pod to its
//! networks, DEL detaches it, CHECK checks every attachment, STATUS and GC cover every network
//! plumb knows of (DESIGN.md "The way of one ADD"). The same engine serves thin mode (one
//! process per call) and the daemon (`daemon.rs`), which only adds API clients kept between
//! calls.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni::error::{CniError, ErrorCode, ErrorList};
use cni::request::GcAttachment;
use cni::runtime::CniConfig;
use cni::skel::{CmdArgs, Plugin};
use cni::version::SUPPORTED;
use cni::{CniResult, NetworkConfigList, Version};
use netattach::device_info_files::{self, DeviceInfoDirs};
use netattach::status::{self, StatusInput};
use serde_json::Value;

use crate::client_pool::ClientPool;
use crate::cluster::{API_BUDGET, Cluster, KubeCluster, STATUS_API_BUDGET, annotations_from};
use crate::config::Config;
use crate::devices::KubeletDevices;
use crate::execute::{Added, DefaultRoutes, Executor, Sandbox};
use crate::log::Log;
use crate::multus_cache;
use crate::networks::{NodeNetworks, PrefetchedNads, RecordedNads};
use crate::plan::{self, Devices, Plan, Pod};
use crate::pod_args::PodArgs;
use crate::pod_resources::KubeletPodResources;
use crate::record::{Record, RecordStore};

/// The runtime's capability for handing a plugin the pod's annotations (containerd and CRI-O
/// fill it for plugins that declare it), which spares the pod GET.
pub const POD_ANNOTATIONS_CAPABILITY: &str = "io.kubernetes.cri.pod-annotations";

/// The `CNI_ARGS` key that carries a selection (either annotation format) for runtimes without
/// Kubernetes.
pub const NETWORKS_ARG: &str = "PLUMB_NETWORKS";

/// How long ADD waits for `readinessindicatorfile` (Multus's 45 s), and how often it looks.
const READINESS_TIMEOUT: Duration = Duration::from_secs(45);
const READINESS_POLL: Duration = Duration::from_millis(250);

/// The most NADs fetched together before planning; any more are asked for as the planner
/// reaches them.
const MAX_PREFETCHED_NADS: usize = 32;

/// The plugin. `routes` changes default routes in pod namespaces; `clients` are the daemon's
/// API clients kept between calls (`None` in thin mode: each call builds its own); `caller`,
/// whose call it runs.
pub struct Plumb<'a> {
    pub routes: &'a dyn DefaultRoutes,
    pub clients: Option<Arc<ClientPool>>,
    pub caller: Caller,
}

/// Who a call is for: the process, so that the container lock can tell plumb run as a
/// delegate of itself from a call that waits its turn (container_lock.rs), and in the daemon
/// whether that process is still there.
#[derive(Debug)]
pub enum Caller {
    /// The runtime started this process (thin mode, `plumb attach`/`detach`).
    ThisProcess,
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
            Caller::ThisProcess => Some(std::process::id()),
            Caller::Forwarded { pid, .. } => *pid,
        }
    }

    /// Whether the plugin that forwarded this call went away: the daemon saw its connection
    /// close, or the kernel says the plugin's end is closed. The daemon sees it only when it
    /// next polls the connection, so a call whose turn comes at once (its DEL, sent after the
    /// runtime killed the plugin, already done) could otherwise run first.
    fn abandoned(&self) -> bool {
        match self {
            Caller::ThisProcess => false,
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

/// Everything one call works with, from the configuration and the request.
struct Call {
    config: Config,
    log: Arc<Log>,
    cni: CniConfig,
    records: RecordStore,
    device_info: DeviceInfoDirs,
    /// The kubelet, asked only when a network needs a device (no connection before that).
    kubelet: KubeletPodResources,
    cni_args: Vec<(String, String)>,
    pod_args: Option<PodArgs>,
    /// Built on first use: DEL from a record never needs the API, and must work when the
    /// kubeconfig or its token is gone. A kubeconfig that cannot be used is tried once.
    cluster: std::cell::OnceCell<Result<Option<KubeCluster>, CniError>>,
    /// The API time this call may spend ([`API_BUDGET`]; STATUS: [`STATUS_API_BUDGET`]).
    api_budget: Duration,
    /// Where the API client comes from and goes back to when the call ends (the daemon).
    clients: Option<Arc<ClientPool>>,
}

impl Drop for Call {
    fn drop(&mut self) {
        if let (Some(pool), Some(Ok(Some(cluster)))) = (&self.clients, self.cluster.take()) {
            pool.give(cluster);
        }
    }
}

/// What runs the delegates: plugins from `binDir` then `cni_path`, their results cached under
/// `cache_dir`, their stderr in plumb's log.
fn delegates_runner(
    config: &Config,
    cni_path: &[std::path::PathBuf],
    log: &Arc<Log>,
    cache_dir: std::path::PathBuf,
) -> CniConfig {
    let mut cni = config.delegates_runner(cni_path);
    cni.cache = cni::cache::ResultCache::new(cache_dir);
    let plugin_log = Arc::clone(log);
    cni.on_plugin_stderr = Some(Box::new(move |l| {
        plugin_log.debug(&format!(
            "delegate {} ({}) wrote: {}",
            l.plugin_type,
            l.command.as_str(),
            l.stderr.trim_end()
        ));
    }));
    cni
}

impl Call {
    fn new(args: &CmdArgs) -> Result<Call, CniError> {
        let config = Config::parse(&args.stdin)?;
        let log = Log::from_config(&config);
        for w in &config.warnings {
            log.verbose(w);
        }
        // Said in plumb's log too: the runtime's view of the error is not always at hand.
        let logged = |e: CniError| {
            log.error(&format!("container {}: {e}", args.container_id));
            e
        };
        let cni_args = cni::args::parse(&args.args).map_err(logged)?;
        let pod_args = PodArgs::from_args(&cni_args).map_err(logged)?;
        // One log (one open log file) for plumb's lines and its delegates' stderr.
        let log = Arc::new(log);
        let cni = delegates_runner(&config, &args.path, &log, config.cni_dir.clone());
        Ok(Call {
            records: RecordStore::new(config.state_dir.clone()),
            device_info: DeviceInfoDirs::new(config.device_info_dir.clone()),
            kubelet: KubeletPodResources::new(config.pod_resources_socket.clone()),
            config,
            log,
            cni,
            cni_args,
            pod_args,
            cluster: std::cell::OnceCell::new(),
            api_budget: API_BUDGET,
            clients: None,
        })
    }

    /// The container's turn: held from here to the end of the call, so that its calls run one
    /// at a time whichever process runs them (thin mode, the daemon: container_lock.rs).
    fn turn(
        &self,
        args: &CmdArgs,
        caller: &Caller,
        command: &str,
    ) -> Result<crate::container_lock::Turn, crate::container_lock::NoTurn> {
        use crate::container_lock::Waiting;
        let log = &self.log;
        // Waiting for another call of the container is normal; waiting long is not, and is
        // what an operator looking at a pod stuck in ContainerCreating needs to see.
        let say = |w: Waiting, line: &str| match w {
            Waiting::Begins => log.verbose(&format!("{command}: {line}")),
            Waiting::Long => log.error(&format!("{command}: {line}")),
        };
        crate::container_lock::take_for(&self.records, &args.container_id, caller.pid(), &say)
            .and_then(|mut turn| {
                // The delegates hold the turn with the call, so that one left running by a kill
                // of the process that runs the call still holds back the next call: all the
                // children of a process that runs this call alone, this call's own in the
                // daemon.
                match caller {
                    Caller::ThisProcess => turn.share_with_children(),
                    Caller::Forwarded { .. } => turn.share_with_this_threads_plugins(),
                }
                .map_err(crate::container_lock::NoTurn::Failed)?;
                Ok(turn)
            })
            // Said in plumb's log too (the runtime's copy is not always at hand). Not plumb run
            // as its own delegate: the outer plumb's error says it, with what it was doing.
            .inspect_err(|e| {
                if let crate::container_lock::NoTurn::Failed(e) = e {
                    log.error(&format!("{command}: container {}: {e}", args.container_id))
                }
            })
    }

    /// The API client, when plumb has a kubeconfig. A kubeconfig that cannot be used is an
    /// error the first time the API is needed.
    fn try_cluster(&self) -> Result<Option<&dyn Cluster>, CniError> {
        let built = self.cluster.get_or_init(|| {
            let Some(k) = &self.config.kubeconfig else {
                return Ok(None);
            };
            if let Some(kept) = self
                .clients
                .as_ref()
                .and_then(|p| p.take(k, self.api_budget))
            {
                self.log.debug("API client kept from an earlier call");
                return Ok(Some(kept));
            }
            let start = Instant::now();
            let cluster = KubeCluster::with_budget(k, self.api_budget)?;
            if self.log.debug_enabled() {
                self.log.debug(&format!(
                    "API client from the kubeconfig in {:.1} ms",
                    start.elapsed().as_secs_f64() * 1e3
                ));
            }
            Ok(Some(cluster))
        });
        match built {
            Ok(c) => Ok(c.as_ref().map(|c| c as &dyn Cluster)),
            Err(e) => Err(e.clone()),
        }
    }

    /// The API client if it could be built (for events and other best-effort uses).
    fn cluster(&self) -> Option<&dyn Cluster> {
        self.try_cluster().ok().flatten()
    }

    /// NADs from the API when plumb has a kubeconfig, else from `plumbNadDir` files.
    fn networks(&self) -> Result<Box<dyn crate::plan::Networks + '_>, CniError> {
        let conf_dir = self.config.conf_dir.clone();
        if let Some(cluster) = self.try_cluster()? {
            return Ok(Box::new(NodeNetworks {
                cluster: Some(cluster),
                conf_dir,
            }));
        }
        if let Some(dir) = &self.config.nad_dir {
            return Ok(Box::new(crate::objects::FileNetworks::from_dir(
                dir, conf_dir,
            )?));
        }
        Ok(Box::new(NodeNetworks {
            cluster: None,
            conf_dir,
        }))
    }

    /// `networks` with the NADs the plan of `pod` needs fetched from the API now, together
    /// ([`PrefetchedNads`]); as they are without Kubernetes.
    fn prefetched<'n>(
        &'n self,
        pod: Option<&Pod>,
        networks: Box<dyn crate::plan::Networks + 'n>,
    ) -> Result<Box<dyn crate::plan::Networks + 'n>, CniError> {
        let (Some(pod), Some(cluster)) = (pod, self.try_cluster()?) else {
            return Ok(networks);
        };
        let refs = plan::nads_to_prefetch(&self.config, pod, MAX_PREFETCHED_NADS);
        if refs.is_empty() {
            return Ok(networks);
        }
        Ok(Box::new(PrefetchedNads::new(cluster, &refs, networks)))
    }

    fn sandbox(&self, args: &CmdArgs) -> Sandbox {
        Sandbox {
            container_id: args.container_id.clone(),
            netns: args.netns.clone(),
            cni_args: self.cni_args.clone(),
            standalone: false,
        }
    }

    /// The pod this call is for: from the runtime's pod-annotations capability when given,
    /// else from the API (retrying a pod not visible yet when `wait`).
    fn pod(&self, wait: bool) -> Result<Option<Pod>, CniError> {
        // Without Kubernetes the sandbox still has a name for logs and records.
        let local = |annotations| Pod {
            namespace: self
                .pod_args
                .as_ref()
                .map_or("default".into(), |p| p.namespace.clone()),
            name: self
                .pod_args
                .as_ref()
                .map_or("sandbox".into(), |p| p.name.clone()),
            uid: self
                .pod_args
                .as_ref()
                .and_then(|p| p.uid.clone())
                .unwrap_or_default(),
            annotations,
        };
        if let Some(Value::Object(a)) = self.config.runtime_config.get(POD_ANNOTATIONS_CAPABILITY) {
            return Ok(Some(local(annotations_from(a))));
        }
        if let Some(selection) = cni::args::get(&self.cni_args, NETWORKS_ARG) {
            return Ok(Some(local(
                [(
                    netattach::NETWORKS_ANNOTATION.to_string(),
                    selection.to_string(),
                )]
                .into(),
            )));
        }
        let Some(pa) = &self.pod_args else {
            return Ok(None);
        };
        let Some(cluster) = self.try_cluster()? else {
            return Ok(None);
        };
        let Some(pod) = cluster.pod(&pa.namespace, &pa.name, wait)? else {
            return Ok(None);
        };
        if let Some(uid) = &pa.uid
            && !pod.uid.is_empty()
            && &pod.uid != uid
            && !pod.is_static()
        {
            // Not naming the pod: the call's error and log line start with it ("pod NS/NAME
            // (container …): "), and the operator should read it once.
            return Err(CniError::new(
                ErrorCode::UnknownContainer,
                format!(
                    "the pod was recreated: the runtime asks for UID {uid} but the API server \
                     has UID {}; not attaching the new pod's networks to the old sandbox",
                    pod.uid
                ),
            ));
        }
        Ok(Some(pod))
    }

    fn plan(
        &self,
        pod: Option<&Pod>,
        ifname: &str,
        devices: Option<&dyn Devices>,
    ) -> Result<Plan, CniError> {
        self.plan_from(&*self.pod_networks(pod)?, pod, ifname, devices)
    }

    /// The networks `pod`'s plan is made from, its NADs fetched now ([`Call::prefetched`]).
    fn pod_networks(&self, pod: Option<&Pod>) -> Result<Box<dyn plan::Networks + '_>, CniError> {
        self.prefetched(pod, self.networks()?)
    }

    /// [`Call::plan`] from `networks`.
    fn plan_from(
        &self,
        networks: &dyn plan::Networks,
        pod: Option<&Pod>,
        ifname: &str,
        devices: Option<&dyn Devices>,
    ) -> Result<Plan, CniError> {
        let plan = plan::plan(&self.config, pod, ifname, networks, devices)?;
        for w in &plan.warnings {
            self.log.verbose(w);
        }
        Ok(plan)
    }

    /// The API and the pod to write to (status, events): only a pod the runtime named in
    /// `CNI_ARGS`. Without `K8S_POD_*` the pod is a stand-in named for logs, and writing to it
    /// would touch whatever pod has that name.
    fn pod_to_write<'p>(&self, pod: Option<&'p Pod>) -> Option<(&dyn Cluster, &'p Pod)> {
        self.pod_args.as_ref()?;
        Some((self.cluster()?, pod?))
    }

    fn warn_pod(&self, pod: Option<&Pod>, reason: &str, e: &CniError) {
        if let Some((c, p)) = self.pod_to_write(pod)
            && let Err(ev) = c.event(p, "Warning", reason, &e.to_string())
        {
            self.log.error(&format!("could not record an event: {ev}"));
        }
    }
}

/// A record that could not be read: its container (`None` when the directory itself could not
/// be listed) and why.
type Unreadable = (Option<String>, CniError);

/// How old a temporary file of [`cni::cache::stage`] must be for GC to remove it: far above
/// any CNI call's length (the runtime gives up on a call after a few minutes at most), so a
/// live writer's file is never taken.
pub(crate) const STAGED_FILE_MAX_AGE: Duration = Duration::from_secs(3600);

/// A sweep of one directory's temporary files ([`cni::cache::sweep_staged`] and the like).
type Sweep = fn(&std::path::Path, Duration) -> Result<Vec<std::path::PathBuf>, CniError>;

/// The records of every sandbox plumb holds, and those that could not be read.
fn recorded_sandboxes(call: &Call) -> (Vec<Record>, Vec<Unreadable>) {
    let (mut records, mut unreadable) = (Vec::new(), Vec::new());
    match call.records.list() {
        Ok(ids) => {
            for id in ids {
                match call.records.load(&id) {
                    Ok(Some(r)) => records.push(r),
                    Ok(None) => {}
                    Err(e) => unreadable.push((Some(id), e.into())),
                }
            }
        }
        Err(e) => unreadable.push((None, e.into())),
    }
    (records, unreadable)
}

/// Every attachment plumb knows of, as (network name, container ID, interface): those of the
/// result cache (plumb's delegates, or Multus's before a migration) and those of the records
/// (the cache is not written durably; the records are).
fn attachments_in_use(
    cached: &[cni::cache::CachedAttachment],
    records: &[Record],
) -> BTreeSet<(String, String, String)> {
    let mut in_use: BTreeSet<_> = cached
        .iter()
        .map(|c| {
            let (net, id, ifname) = (&c.network_name, &c.container_id, &c.if_name);
            (net.clone(), id.clone(), ifname.clone())
        })
        .collect();
    for r in records {
        for a in &r.attachments {
            // The list's name, as `recorded_list` would read it (no need to parse it all again:
            // `known_networks` already did, and left out what it could not read).
            if let Some(name) = a.config.get("name").and_then(serde_json::Value::as_str) {
                in_use.insert((name.to_string(), r.container_id.clone(), a.ifname.clone()));
            }
        }
    }
    in_use
}

/// The turn of `id`, a container GC found stale, to delete it; none when a call still runs for
/// it (its lock held), which says it is not gone, or not yet: it is then left alone, in `busy`,
/// its attachments kept as live, for the next GC.
fn stale_turn(
    call: &Call,
    id: &str,
    errors: &mut ErrorList,
    busy: &mut Vec<String>,
) -> Option<crate::container_lock::Turn> {
    match crate::container_lock::try_take_for(&call.records, id) {
        Ok(Some(turn)) => return Some(turn),
        Ok(None) => call
            .log
            .verbose(&format!("GC: {id} has a call running; left to the next GC")),
        Err(e) => errors.push(e.context(format!("GC of stale container {id}"))),
    }
    busy.push(id.to_string());
    None
}

/// `pod` as errors name it.
pub(crate) fn who(pa: &Option<PodArgs>, container_id: &str) -> String {
    match pa {
        Some(p) => format!("pod {p} (container {container_id})"),
        None => format!("container {container_id}"),
    }
}

fn wait_for_readiness(config: &Config) -> Result<(), CniError> {
    let Some(file) = &config.readiness_indicator_file else {
        return Ok(());
    };
    let start = Instant::now();
    while !file.exists() {
        if start.elapsed() >= READINESS_TIMEOUT {
            return Err(CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "the default network is not ready: readinessindicatorfile {} still missing \
                     after {} s",
                    file.display(),
                    READINESS_TIMEOUT.as_secs()
                ),
            ));
        }
        std::thread::sleep(READINESS_POLL);
    }
    Ok(())
}

/// The network-status annotation of what ADD did (multi-net spec §5).
pub fn network_status(added: &[Added]) -> String {
    let entries: Vec<_> = added
        .iter()
        .map(|a| {
            status::build(&StatusInput {
                name: &a.attachment.network,
                result: Some(&a.result),
                ifname: &a.attachment.ifname,
                is_default: a.attachment.is_default,
                default_route: a.attachment.default_route.as_deref(),
                device_info: a.device_info.as_ref(),
            })
        })
        .collect();
    status::to_annotation(&entries)
}

impl Plumb<'_> {
    /// The call `args` asks for, with the daemon's clients when there are.
    fn call(&self, args: &CmdArgs) -> Result<Call, CniError> {
        let mut call = Call::new(args)?;
        call.clients = self.clients.clone();
        Ok(call)
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

    fn do_add(&self, call: &Call, args: &CmdArgs, setup: Duration) -> Result<CniResult, CniError> {
        let start = Instant::now();
        wait_for_readiness(&call.config)?;
        let pod = call.pod(true)?;
        let t_pod = start.elapsed();
        if let (Some(_), None, Some(_)) = (&call.pod_args, &pod, call.cluster()) {
            // After "pod NS/NAME (container …): ", which ADD's error starts with.
            return Err(CniError::new(
                ErrorCode::UnknownContainer,
                "not found in the Kubernetes API; nothing was attached",
            ));
        }
        let devices = KubeletDevices::new(&call.kubelet);
        let plan = call
            .plan(pod.as_ref(), &args.ifname, Some(&devices))
            .inspect_err(|e| {
                call.warn_pod(pod.as_ref(), "NoNetworkFound", e);
            })?;
        let t_plan = start.elapsed();
        let exec = self.executor(call);
        let sandbox = call.sandbox(args);
        let added = exec
            .add(&sandbox, pod.as_ref(), &plan.attachments)
            .inspect_err(|e| call.warn_pod(pod.as_ref(), "AttachFailed", e))?;
        for a in &added {
            for w in &a.warnings {
                call.log.error(w);
            }
            call.log.verbose(&format!(
                "{}: added {} on {}",
                who(&call.pod_args, &args.container_id),
                a.attachment.network,
                a.attachment.ifname
            ));
        }
        let t_delegates = start.elapsed();
        if let Some((cluster, pod)) = call.pod_to_write(pod.as_ref()) {
            // Multus compares the pod's *name* here (multus-reference §8 quirk 1); plumb the
            // namespace, as the key's name says.
            if !call.config.system_namespaces.contains(&pod.namespace)
                && let Err(e) = cluster.set_network_status(pod, &network_status(&added))
            {
                // The pod would run without its status: undo, and let the runtime retry.
                let undo = exec.undo(&sandbox).err();
                call.warn_pod(Some(pod), "AttachFailed", &e);
                return Err(match undo {
                    None => e,
                    Some(u) => e.add_details(format!("and undoing the attachments failed: {u}")),
                });
            }
            if call.config.attachment_events {
                for a in &added {
                    // Multus's wording (multus-reference §2.14), which tools grep for.
                    let msg = format!(
                        "Add {} [{}] from {}",
                        a.attachment.ifname,
                        a.result
                            .ips
                            .iter()
                            .map(|ip| ip.address.to_string())
                            .collect::<Vec<_>>()
                            .join(" "),
                        a.attachment.network
                    );
                    if let Err(e) = cluster.event(pod, "Normal", "AddedInterface", &msg) {
                        // Best effort, and the pod is up already: an API server that did not
                        // take one event (each try waits up to 5 s for an answer) is not given
                        // the others, which held the ADD 5 s per attachment.
                        call.log.error(&format!(
                            "could not record an event: {e}; the pod's other AddedInterface \
                             events are not sent"
                        ));
                        break;
                    }
                }
            }
        }
        if call.log.debug_enabled() {
            // Where the time went, for an operator chasing slow pod starts.
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let end = start.elapsed();
            call.log.debug(&format!(
                "ADD timings: setup {:.1} ms, pod {:.1} ms, plan {:.1} ms, delegates {:.1} ms, \
                 status {:.1} ms",
                ms(setup),
                ms(t_pod),
                ms(t_plan - t_pod),
                ms(t_delegates - t_plan),
                ms(end - t_delegates)
            ));
        }
        added
            .into_iter()
            .find(|a| a.attachment.is_default)
            .map(|a| a.result)
            .ok_or_else(|| CniError::new(ErrorCode::Internal, "no default network was attached"))
    }

    /// DEL of what Multus's scratch cache at `path` names ([`multus_cache`]), the file removed
    /// once every DEL succeeded.
    fn del_from_multus_cache(
        &self,
        call: &Call,
        args: &CmdArgs,
        exec: &Executor<'_>,
        sandbox: &Sandbox,
        path: &std::path::Path,
    ) -> Result<(), CniError> {
        let delegates = multus_cache::load(path, call.config.cni_version)?;
        let attachments =
            multus_cache::attachments(&delegates, &args.ifname, &call.config.runtime_config);
        let warnings = exec
            .del_planned(sandbox, &args.netns, &attachments)
            .map_err(|e| {
                e.context(format!(
                    "DEL from Multus's scratch cache {}",
                    path.display()
                ))
            })?;
        let who = who(&call.pod_args, &args.container_id);
        for w in warnings {
            call.log.error(&format!("{who}: {w}"));
        }
        multus_cache::remove(path)?;
        call.log.verbose(&format!(
            "{who}: deleted from Multus's scratch cache {} ({} networks)",
            path.display(),
            attachments.len()
        ));
        Ok(())
    }

    fn do_del(&self, call: &Call, args: &CmdArgs) -> Result<(), CniError> {
        let sandbox = call.sandbox(args);
        // A sandbox Multus attached before plumb replaced it on this node: Multus's scratch
        // cache names what to delete, and Multus's result cache holds the delegates' results.
        // A record beside that file is what a DEL from it could not finish (del_planned keeps
        // it), for this retry; its results are in Multus's cache too.
        let scratch = multus_cache::find(&call.config.multus_cni_dir, &args.container_id);
        let multus_runner = match &scratch {
            Ok(Some(_)) => Some(delegates_runner(
                &call.config,
                &args.path,
                &call.log,
                call.config.multus_cni_dir.clone(),
            )),
            _ => None,
        };
        let exec = Executor {
            cni: multus_runner.as_ref().unwrap_or(&call.cni),
            ..self.executor(call)
        };
        if exec.del(&sandbox, &args.netns)? {
            if let Ok(Some(path)) = &scratch {
                multus_cache::remove(path)?;
            }
            return Ok(());
        }
        if let Some(path) = scratch? {
            return self.del_from_multus_cache(call, args, &exec, &sandbox, &path);
        }
        // No record: plumb never recorded this sandbox (an ADD that did not reach its first
        // attachment, or a record removed by hand). Undo what planning from the API finds;
        // when the pod or the API is gone there is nothing known to undo, and failing would
        // only block the sandbox's removal (Multus does the same).
        let pod = match call.pod(false) {
            Ok(p) => p,
            Err(e) => {
                call.log.error(&format!(
                    "{}: no attachment record and the pod cannot be read ({e}); nothing to delete",
                    who(&call.pod_args, &args.container_id)
                ));
                return Ok(());
            }
        };
        if call.pod_args.is_some() && pod.is_none() {
            call.log.verbose(&format!(
                "{}: no attachment record and no pod; nothing to delete",
                who(&call.pod_args, &args.container_id)
            ));
            return Ok(());
        }
        // With the pod's devices if the kubelet still has them (host-device needs its device
        // to DEL); else without, and a failed DEL of such an attachment is only logged.
        let devices = KubeletDevices::new(&call.kubelet);
        // The pod's NADs fetched once for both plans: planning again without devices asked the
        // API again for NADs whose GETs had just failed, and a DEL after an ADD that failed on
        // a NAD the API would not give waited twice for it (up to the whole API budget).
        let planned = call.pod_networks(pod.as_ref()).and_then(|networks| {
            call.plan_from(&*networks, pod.as_ref(), &args.ifname, Some(&devices))
                .or_else(|e| {
                    call.log.verbose(&format!(
                        "{}: no attachment record, and the pod's networks cannot be planned \
                         with their devices ({e}): planning DEL without devices",
                        who(&call.pod_args, &args.container_id)
                    ));
                    call.plan_from(&*networks, pod.as_ref(), &args.ifname, None)
                })
        });
        let plan = match planned {
            Ok(p) => p,
            // The same error failed ADD before anything ran: there is nothing to undo.
            Err(e) => {
                call.log.verbose(&format!(
                    "{}: no attachment record and the pod's networks cannot be planned ({e}); \
                     nothing to delete",
                    who(&call.pod_args, &args.container_id)
                ));
                return Ok(());
            }
        };
        for w in exec.del_planned(&sandbox, &args.netns, &plan.attachments)? {
            call.log
                .error(&format!("{}: {w}", who(&call.pod_args, &args.container_id)));
        }
        Ok(())
    }

    /// Every network plumb knows of, each configuration once: the configured ones (found
    /// through `networks`), and those of the `records` (as the network's own configuration,
    /// without what one pod added: its `cni-args`, IPAM claim or device), with the recorded
    /// configurations that could not be read. A record that cannot be read (damaged, or
    /// written by another plumb version) only leaves its networks out: one bad file must not
    /// make STATUS report the node's network down. A network whose configuration changed while pods attached with the old one still
    /// run (its NAD was edited) is listed with each: GC must reach what each of them allocated,
    /// and each is given every live attachment of the network as valid.
    fn known_networks(
        &self,
        call: &Call,
        records: &[Record],
        networks: &dyn plan::Networks,
    ) -> Result<(Vec<NetworkConfigList>, Vec<Unreadable>), CniError> {
        let configured = plan::plan(&call.config, None, "eth0", networks, None)?;
        for w in &configured.warnings {
            call.log.verbose(w);
        }
        let mut lists: Vec<NetworkConfigList> = configured
            .attachments
            .into_iter()
            .map(|a| a.network_list)
            .collect();
        let mut unreadable = Vec::new();
        for r in records {
            for a in &r.attachments {
                match crate::execute::recorded_network_list(a) {
                    Ok(l) => lists.push(l),
                    Err(e) => unreadable.push((
                        Some(r.container_id.clone()),
                        e.context(format!("attachment record of container {}", r.container_id)),
                    )),
                }
            }
        }
        // First occurrence wins the position (the default network stays first).
        let mut out: Vec<NetworkConfigList> = Vec::new();
        for l in lists {
            if !out
                .iter()
                .any(|seen| seen.name == l.name && seen.plugins == l.plugins)
            {
                out.push(l);
            }
        }
        Ok((out, unreadable))
    }

    fn do_gc(&self, call: &Call, args: &CmdArgs) -> Result<(), CniError> {
        // plumb's own valid attachments, as the runtime sees them: one per sandbox. Without a
        // readable list nothing is touched: an empty list would mean "delete every pod".
        let list = args
            .config
            .get("cni.dev/valid-attachments")
            .or_else(|| args.config.get("cni.dev/attachments"))
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::InvalidConfig,
                    "GC without \"cni.dev/valid-attachments\": refusing to guess which \
                     sandboxes are gone",
                )
            })?;
        let valid: Vec<GcAttachment> = serde_json::from_value(list.clone()).map_err(|e| {
            CniError::new(
                ErrorCode::InvalidConfig,
                format!("GC: \"cni.dev/valid-attachments\" is not a list of attachments: {e}"),
            )
        })?;
        let mut live: BTreeSet<String> = valid.into_iter().map(|a| a.container_id).collect();
        let exec = self.executor(call);
        // The DELs of sandboxes Multus attached, with the delegates' results from its cache.
        let multus_runner = delegates_runner(
            &call.config,
            &args.path,
            &call.log,
            call.config.multus_cni_dir.clone(),
        );
        let multus_exec = Executor {
            cni: &multus_runner,
            ..self.executor(call)
        };
        // Every failure is reported, and none stops the rest (CNI spec: GC continues).
        let mut errors = ErrorList::default();
        let mut attached_by_hand = Vec::new();
        let mut busy = Vec::new();
        // Stale sandboxes whose DEL from their record failed: left to the next GC, not tried
        // again from Multus's scratch file, which would run the same DELs again.
        let mut failed = BTreeSet::new();
        match call.records.list() {
            Ok(ids) => {
                for id in ids.iter().filter(|id| !live.contains(id.as_str())) {
                    // What `plumb attach` made is no runtime's: the runtime's list cannot name
                    // it, and only `plumb detach` removes it. An unreadable record goes on to
                    // DEL, which reports it.
                    if let Ok(Some(r)) = call.records.load(id)
                        && r.standalone
                    {
                        call.log.verbose(&format!(
                            "GC: {id} was attached by `plumb attach`; left to `plumb detach`"
                        ));
                        attached_by_hand.push(id.clone());
                        continue;
                    }
                    let Some(turn) = stale_turn(call, id, &mut errors, &mut busy) else {
                        continue;
                    };
                    let stale = Sandbox {
                        container_id: id.clone(),
                        ..Sandbox::default()
                    };
                    // As do_del: a record beside a Multus scratch file is what a DEL from that
                    // file could not finish, and its delegates' results are in Multus's cache.
                    let scratch = multus_cache::find(&call.config.multus_cni_dir, id)
                        .ok()
                        .flatten();
                    let exec = if scratch.is_some() {
                        &multus_exec
                    } else {
                        &exec
                    };
                    let deleted = exec.del(&stale, "").and_then(|_| match &scratch {
                        Some(path) => multus_cache::remove(path),
                        None => Ok(()),
                    });
                    match deleted {
                        Ok(()) => turn.end_for_good(),
                        Err(e) => {
                            errors.push(e.context(format!("GC of stale container {id}")));
                            failed.insert(id.clone());
                        }
                    }
                }
            }
            Err(e) => errors.push(e.into()),
        }
        // Sandboxes Multus attached before plumb replaced it on this node, whose DEL never
        // came (the node went down with them, say) and that the runtime no longer has: DEL
        // from Multus's scratch cache as their DEL would have, so that their addresses go even
        // with delegates that have no GC, and the file with them. One that had a record beside
        // its file (a DEL that stopped part-way) was deleted above, its file with it.
        match multus_cache::list(&call.config.multus_cni_dir) {
            Ok(ids) => {
                for id in ids
                    .iter()
                    .filter(|id| !live.contains(id.as_str()) && !failed.contains(*id))
                {
                    let path = call.config.multus_cni_dir.join(id);
                    // With `cniDir` set, Multus's directory is plumb's own (/var/lib/cni, say),
                    // where a file of another tool's must not fail every GC: what is no scratch
                    // cache (or a broken one, which names no delegate to DEL) is passed over,
                    // logged.
                    if let Err(e) = multus_cache::load(&path, call.config.cni_version) {
                        call.log
                            .verbose(&format!("GC: {id} passed over: {}", e.msg));
                        continue;
                    }
                    let Some(turn) = stale_turn(call, id, &mut errors, &mut busy) else {
                        continue;
                    };
                    // Its DEL may have come between the look above and the turn: it removed
                    // the file, and there is nothing left to do (the turn's lock file aside).
                    if !path.exists() {
                        turn.end_for_good();
                        continue;
                    }
                    let stale = Sandbox {
                        container_id: id.clone(),
                        ..Sandbox::default()
                    };
                    // The runtime's interface name for the first network, where Multus kept
                    // none: every CRI runtime gives `eth0`.
                    let stale_args = CmdArgs {
                        container_id: id.clone(),
                        netns: String::new(),
                        ifname: "eth0".into(),
                        ..args.clone()
                    };
                    match self.del_from_multus_cache(call, &stale_args, &multus_exec, &stale, &path)
                    {
                        Ok(()) => turn.end_for_good(),
                        Err(e) => errors.push(e.context(format!("GC of stale container {id}"))),
                    }
                }
            }
            Err(e) => errors.push(e.context("GC")),
        }
        live.extend(attached_by_hand);
        live.extend(busy);
        match crate::container_lock::sweep_orphans(&call.records) {
            Ok(removed) => {
                for f in removed {
                    call.log.verbose(&format!(
                        "GC: removed {}, the lock file of a container with no record",
                        f.display()
                    ));
                }
            }
            Err(e) => errors.push(e.context("GC")),
        }
        // Temporary files of writers killed between writing and renaming (a record's, a cached
        // result's, a device-info file's): nothing else would ever remove them.
        let device_info_dir = call.device_info.cni_dir();
        for (dir, sweep) in [
            (
                call.records.dir().to_path_buf(),
                cni::cache::sweep_staged as Sweep,
            ),
            (call.cni.cache.results_dir(), cni::cache::sweep_staged),
            (device_info_dir, device_info_files::sweep_temporaries),
        ] {
            match sweep(&dir, STAGED_FILE_MAX_AGE) {
                Ok(removed) => {
                    for f in removed {
                        call.log.verbose(&format!(
                            "GC: removed {}, a temporary file its writer left",
                            f.display()
                        ));
                    }
                }
                Err(e) => errors.push(e.context("GC")),
            }
        }
        // Then each delegate network, with every attachment of a live sandbox as valid.
        // Multus's result cache too, when it is apart from plumb's (no `cniDir`): a pod Multus
        // attached before plumb replaced it is live, and its attachments are there only.
        let multus_cache = (call.config.multus_cni_dir != call.config.cni_dir)
            .then(|| cni::cache::ResultCache::new(&call.config.multus_cni_dir));
        let cached = match call.cni.cache.list(None).and_then(|mut c| {
            if let Some(m) = &multus_cache {
                c.extend(m.list(None)?);
            }
            Ok(c)
        }) {
            Ok(c) => c,
            Err(e) => {
                // Without it a live attachment would look stale, and lose its address.
                errors.push(e.context("GC of the delegate networks skipped"));
                return errors.into_result();
            }
        };
        // The records left now that the stale sandboxes are gone.
        let (records, mut unreadable) = recorded_sandboxes(call);
        let (networks, unusable) = match call
            .networks()
            .and_then(|n| self.known_networks(call, &records, &*n))
        {
            Ok(known) => known,
            Err(e) => {
                errors.push(e.context("GC of the delegate networks skipped"));
                return errors.into_result();
            }
        };
        unreadable.extend(unusable);
        // A stale sandbox's unreadable record was reported by its DEL above, and a directory
        // that cannot be listed by the loop over them. A live sandbox's attachments cannot be
        // told, and would look stale to every network: no network GC.
        let mut live_unknown = false;
        for (id, e) in unreadable {
            match id {
                Some(id) if !live.contains(id.as_str()) => {}
                Some(_) => {
                    live_unknown = true;
                    errors.push(e);
                }
                None => live_unknown = true,
            }
        }
        if live_unknown {
            errors.push(CniError::new(
                ErrorCode::DecodingFailure,
                "GC of the delegate networks skipped: a live sandbox's attachments cannot be \
                 told from its record",
            ));
            return errors.into_result();
        }
        let in_use = attachments_in_use(&cached, &records);
        for list in networks {
            let valid: Vec<GcAttachment> = in_use
                .iter()
                .filter(|(net, id, _)| *net == list.name && live.contains(id.as_str()))
                .map(|(_, id, ifname)| GcAttachment {
                    container_id: id.clone(),
                    ifname: ifname.clone(),
                })
                .collect();
            if let Err(e) = call.cni.gc_network_list(&list, &valid) {
                errors.push(e);
            }
        }
        errors.into_result()
    }
}

impl Plugin for Plumb<'_> {
    fn supported_versions(&self) -> &[Version] {
        &SUPPORTED
    }

    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let start = Instant::now();
        let call = self.call(args)?;
        let _turn = call.turn(args, &self.caller, "ADD")?;
        self.not_abandoned(&call, args, "ADD")?;
        let result = self.do_add(&call, args, start.elapsed()).map_err(|e| {
            let e = e.context(who(&call.pod_args, &args.container_id));
            call.log.error(&format!("ADD: {e}"));
            e
        });
        if call.log.debug_enabled() {
            call.log.debug(&format!(
                "ADD of {} done; peak RSS {} KiB",
                who(&call.pod_args, &args.container_id),
                crate::log::peak_rss_kib().unwrap_or(0)
            ));
        }
        result
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let call = self.call(args)?;
        let turn = match call.turn(args, &self.caller, "DEL") {
            Ok(turn) => turn,
            // plumb run as its own delegate: every ADD of it failed here before doing anything
            // (the same error), so there is nothing to undo, and failing would keep the outer
            // call's record, and the pod, for ever.
            Err(crate::container_lock::NoTurn::Nested(e)) => {
                call.log.error(&format!("DEL: nothing to undo: {e}"));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        self.do_del(&call, args).map_err(|e| {
            let e = e.context(who(&call.pod_args, &args.container_id));
            call.log.error(&format!("DEL: {e}"));
            e
        })?;
        // Nothing is left of the container: neither a record that a killed call was writing
        // (its ADD killed during the record's fsync, say) nor its lock file (container_lock.rs).
        for f in call.records.remove_staged(&args.container_id) {
            call.log.verbose(&format!(
                "DEL: removed {}, a record a killed call was writing",
                f.display()
            ));
        }
        turn.end_for_good();
        // As for ADD: which process ran it (a daemon's log, or the runtime's) shows in whose
        // log the line is.
        call.log.debug(&format!(
            "DEL of {} done",
            who(&call.pod_args, &args.container_id)
        ));
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let call = self.call(args)?;
        let _turn = call.turn(args, &self.caller, "CHECK")?;
        self.not_abandoned(&call, args, "CHECK")?;
        self.executor(&call)
            .check(&call.sandbox(args))
            .map_err(|e| e.context(who(&call.pod_args, &args.container_id)))
    }

    /// STATUS (CNI 1.1): whether pods can be attached. The cluster-wide default network first
    /// (its readiness file, then its own STATUS), then every other network plumb knows of, the
    /// configured ones and those of recorded pods: a runtime that reports the node ready while
    /// a secondary network's plugin is gone would schedule pods that cannot start. Every
    /// failure is code 50 (51 when a delegate said so), naming the network. Its API time is
    /// [`STATUS_API_BUDGET`], not an ADD's: the runtime asks again in a few seconds.
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let not_available = |e: CniError| {
            if e.kind() == ErrorCode::LimitedConnectivity {
                e
            } else {
                CniError::new(ErrorCode::NotAvailable, e.to_string())
            }
        };
        let mut call = self.call(args).map_err(not_available)?;
        let _running = crate::node_call::begin(&call.records, self.caller.pid(), "STATUS")
            .map_err(not_available)?;
        call.api_budget = STATUS_API_BUDGET;
        if let Some(file) = &call.config.readiness_indicator_file
            && !file.exists()
        {
            return Err(CniError::new(
                ErrorCode::NotAvailable,
                format!(
                    "the default network is not ready: readinessindicatorfile {} is missing",
                    file.display()
                ),
            ));
        }
        // known_networks lists the configured networks first, the default one leading. A record
        // it could not read says nothing of whether pods can be attached: logged at verbose,
        // since STATUS comes every few seconds (GC reports it). NADs that recorded pods
        // attached are read from their records, not from the API server (RecordedNads).
        let (records, mut unreadable) = recorded_sandboxes(&call);
        let fallback = || call.networks();
        let recorded_nads = RecordedNads {
            records: &records,
            fallback: &fallback,
            files: NodeNetworks {
                cluster: None,
                conf_dir: call.config.conf_dir.clone(),
            },
        };
        let (networks, unusable) = self
            .known_networks(&call, &records, &recorded_nads)
            .map_err(not_available)?;
        unreadable.extend(unusable);
        for (_, e) in &unreadable {
            call.log
                .verbose(&format!("STATUS: {e}; its networks are left out"));
        }
        for list in networks {
            // Its errors name the network already.
            call.cni.status_network_list(&list).map_err(not_available)?;
        }
        Ok(())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let call = self.call(args)?;
        let _running = crate::node_call::begin(&call.records, self.caller.pid(), "GC")?;
        self.do_gc(&call, args)
    }
}

/// Default routes changed through netlink in the pod's namespace ([`crate::routes`]).
pub struct NetlinkRoutes;

impl DefaultRoutes for NetlinkRoutes {
    fn set_default_route(
        &self,
        netns: &std::path::Path,
        ifname: &str,
        gateways: &[std::net::IpAddr],
    ) -> Result<(), CniError> {
        crate::routes::set_default_route(netns, ifname, gateways).map_err(CniError::from)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use testkit::fake_plugin::FakePlugin;

    use super::*;

    /// plumb's configuration under `dir` (its state, configuration and device-info
    /// directories there, no `cniDir`), of this `cniVersion`, with one delegate network `net-a`
    /// of the recording plugin `plugin`, installed in `dir/bin`.
    fn one_fake_network(dir: &std::path::Path, plugin: &str, version: &str) -> (FakePlugin, Value) {
        let bin = dir.join("bin");
        let fake = FakePlugin::install(&bin, plugin);
        let config = json!({
            "cniVersion": version, "name": "plumb-net", "type": "plumb", "binDir": bin,
            "plumbStateDir": dir.join("state"), "confDir": dir.join("conf"),
            "plumbDeviceInfoDir": dir.join("devinfo"), "logToStderr": false,
            "delegates": [{"cniVersion": version, "name": "net-a", "type": plugin}]
        });
        (fake, config)
    }

    /// A request of `config` for `container_id` in `netns`, interface eth0, as the skeleton
    /// makes it.
    fn request(config: &Value, container_id: &str, netns: &str) -> CmdArgs {
        CmdArgs {
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: "eth0".into(),
            args: String::new(),
            path: Vec::new(),
            stdin: config.to_string().into_bytes(),
            config: config.as_object().unwrap().clone(),
            version: config["cniVersion"].as_str().unwrap().parse().unwrap(),
        }
    }

    /// What Multus left under `multus` of `container_id` attached on eth0 to `net-a` (its
    /// `config`): the scratch cache naming the delegate, as Multus's saveDelegates writes it
    /// (multus_cache's tests show the whole shape), and the delegate's `result` in Multus's
    /// result cache. The scratch file's path.
    fn attached_by_multus(
        multus: &std::path::Path,
        container_id: &str,
        config: &[u8],
        result: Value,
    ) -> std::path::PathBuf {
        std::fs::create_dir_all(multus).unwrap();
        let scratch = multus.join(container_id);
        std::fs::write(
            &scratch,
            json!([{"Name": "net-a", "Bytes": cni::base64::encode(config)}]).to_string(),
        )
        .unwrap();
        cni::cache::ResultCache::new(multus)
            .write(&cni::cache::CachedAttachment {
                container_id: container_id.into(),
                config: config.to_vec(),
                if_name: "eth0".into(),
                network_name: "net-a".into(),
                netns: format!("/var/run/netns/{container_id}"),
                cni_args: Vec::new(),
                capability_args: Default::default(),
                result: Some(result),
            })
            .unwrap();
        scratch
    }

    #[test]
    fn an_add_whose_forwarding_plugin_is_gone_when_its_turn_comes_is_not_run() {
        // The daemon sees the plugin's connection close only when it next reads it: a plugin
        // killed by the runtime, whose ADD then gets its turn at once (the runtime's DEL done
        // already), is told by asking the kernel. Here the daemon's flag is never set.
        let d = tempfile::tempdir().unwrap();
        let (fake, mut config) = one_fake_network(d.path(), "fake-late", "1.0.0");
        config["cniDir"] = json!(d.path().join("cni"));
        let args = |id: &str| request(&config, id, "/proc/self/ns/net");
        let add = |id: &str, connection: &std::os::unix::net::UnixStream| {
            Plumb {
                clients: None,
                routes: &NetlinkRoutes,
                caller: Caller::Forwarded {
                    pid: None,
                    connection: Some(Arc::new(
                        std::os::fd::AsFd::as_fd(connection)
                            .try_clone_to_owned()
                            .unwrap(),
                    )),
                    abandoned: Arc::default(),
                },
            }
            .add(&args(id))
        };
        // The plugin's end open (it waits for the answer, with what it sent unread): run.
        let (daemon_end, mut plugin_end) = std::os::unix::net::UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut plugin_end, b"POST /cni").unwrap();
        add("c-waiting", &daemon_end).unwrap();
        assert_eq!(fake.calls_of("ADD").len(), 1);
        // Its end closed (the plugin killed): not run.
        drop(plugin_end);
        let e = add("c-gone", &daemon_end).unwrap_err();
        assert_eq!(e.code, 11, "{e}");
        assert!(e.msg.contains("the runtime gave up on this ADD"), "{e}");
        assert_eq!(
            fake.calls_of("ADD").len(),
            1,
            "an ADD ran for a plugin gone"
        );
    }

    #[test]
    fn gc_keeps_valid_the_attachments_multus_made_of_a_live_sandbox() {
        // A node moved from Multus with a pod still running: its attachments are in Multus's
        // result cache only, which is apart from plumb's when `cniDir` is not set.
        let d = tempfile::tempdir().unwrap();
        let (fake, mut config) = one_fake_network(d.path(), "fake-gc", "1.1.0");
        config["cni.dev/valid-attachments"] =
            json!([{"containerID": "c-multus", "ifname": "eth0"}]);
        let args = request(&config, "", "");
        let mut call = Call::new(&args).unwrap();
        call.config.cni_dir = d.path().join("cni");
        call.config.multus_cni_dir = d.path().join("multus");
        call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
        let net_a = br#"{"cniVersion":"1.1.0","name":"net-a","type":"fake-gc"}"#;
        cni::cache::ResultCache::new(&call.config.multus_cni_dir)
            .write(&cni::cache::CachedAttachment {
                container_id: "c-multus".into(),
                config: net_a.to_vec(),
                if_name: "eth0".into(),
                network_name: "net-a".into(),
                netns: "/var/run/netns/x".into(),
                cni_args: Vec::new(),
                capability_args: Default::default(),
                result: Some(json!({"cniVersion": "1.1.0"})),
            })
            .unwrap();
        Plumb {
            clients: None,
            routes: &NetlinkRoutes,
            caller: Caller::ThisProcess,
        }
        .do_gc(&call, &args)
        .unwrap();
        let gc = fake.calls_of("GC");
        assert_eq!(gc.len(), 1);
        assert_eq!(
            gc[0].stdin_json()["cni.dev/valid-attachments"],
            json!([{"containerID": "c-multus", "ifname": "eth0"}])
        );
    }

    #[test]
    fn gc_deletes_the_sandboxes_multus_attached_that_the_runtime_no_longer_has() {
        // A node moved from Multus that went down with its pods: their DEL never came, and
        // only Multus's scratch cache says what they were attached to. GC releases them as
        // their DEL would have (a delegate without GC would hold their addresses for ever),
        // and leaves the live one, and what is no scratch cache.
        let d = tempfile::tempdir().unwrap();
        let (fake, mut config) = one_fake_network(d.path(), "fake-gc", "1.1.0");
        config["cni.dev/valid-attachments"] = json!([{"containerID": "c-live", "ifname": "eth0"}]);
        let args = request(&config, "", "");
        let mut call = Call::new(&args).unwrap();
        call.config.cni_dir = d.path().join("cni");
        call.config.multus_cni_dir = d.path().join("multus");
        call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
        let net_a = br#"{"cniVersion":"1.1.0","name":"net-a","type":"fake-gc"}"#;
        let multus = &call.config.multus_cni_dir;
        let results = cni::cache::ResultCache::new(multus);
        for id in ["c-live", "c-gone"] {
            attached_by_multus(
                multus,
                id,
                net_a,
                json!({"cniVersion": "1.1.0", "ips": [{"address": "10.9.0.7/24"}]}),
            );
        }
        std::fs::write(multus.join("notes"), "not a scratch cache").unwrap();
        Plumb {
            clients: None,
            routes: &NetlinkRoutes,
            caller: Caller::ThisProcess,
        }
        .do_gc(&call, &args)
        .unwrap();
        let del = fake.calls_of("DEL");
        assert_eq!(del.len(), 1, "one DEL, of the stale sandbox");
        assert_eq!(del[0].var("CNI_CONTAINERID"), Some("c-gone"));
        assert_eq!(del[0].var("CNI_IFNAME"), Some("eth0"));
        assert_eq!(
            del[0].stdin_json()["prevResult"]["ips"][0]["address"],
            "10.9.0.7/24"
        );
        assert!(
            !multus.join("c-gone").exists(),
            "the stale scratch file is left"
        );
        assert!(results.read("net-a", "c-gone", "eth0").unwrap().is_none());
        assert!(multus.join("c-live").exists() && multus.join("notes").exists());
        assert!(results.read("net-a", "c-live", "eth0").unwrap().is_some());
        let gc = fake.calls_of("GC");
        assert_eq!(
            gc[0].stdin_json()["cni.dev/valid-attachments"],
            json!([{"containerID": "c-live", "ifname": "eth0"}])
        );
        // Nothing of the stale sandbox is left in plumb's state either (its lock).
        let state: Vec<_> = std::fs::read_dir(d.path().join("state"))
            .map(|r| r.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(state.is_empty(), "{state:?}");
    }

    #[test]
    fn gc_finishes_a_del_from_multus_cache_that_stopped_part_way_with_multus_results() {
        // A runtime DEL from Multus's scratch cache that failed leaves a record beside the
        // file. GC, the pod gone, finishes it as the DEL's retry would: the delegate gets
        // Multus's cached result as prevResult, once, and neither file is left.
        let d = tempfile::tempdir().unwrap();
        let (fake, mut config) = one_fake_network(d.path(), "fake-gc", "1.1.0");
        config["cni.dev/valid-attachments"] = json!([]);
        let call_for = |id: &str| {
            let args = request(&config, id, "");
            let mut call = Call::new(&args).unwrap();
            call.config.cni_dir = d.path().join("cni");
            call.config.multus_cni_dir = d.path().join("multus");
            call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
            (args, call)
        };
        let plumb = Plumb {
            clients: None,
            routes: &NetlinkRoutes,
            caller: Caller::ThisProcess,
        };
        let (del_args, del_call) = call_for("c-stuck");
        let net_a = br#"{"cniVersion":"1.1.0","name":"net-a","type":"fake-gc"}"#;
        let result = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.9.0.8/24"}]});
        let scratch =
            attached_by_multus(&d.path().join("multus"), "c-stuck", net_a, result.clone());
        fake.fail("DEL", 11, "try again later");
        plumb.do_del(&del_call, &del_args).unwrap_err();
        assert!(scratch.exists());
        assert!(del_call.records.load("c-stuck").unwrap().is_some());
        // A GC while the delegate still fails: its DEL once, not again from the scratch file.
        let (gc_args, gc_call) = call_for("");
        plumb.do_gc(&gc_call, &gc_args).unwrap_err();
        assert_eq!(
            fake.calls_of("DEL").len(),
            2,
            "the failed DEL, then GC's one"
        );
        assert!(scratch.exists() && gc_call.records.load("c-stuck").unwrap().is_some());
        fake.respond("DEL", "", "", 0);
        plumb.do_gc(&gc_call, &gc_args).unwrap();
        let del = fake.calls_of("DEL");
        assert_eq!(del.len(), 3, "the failed DELs, then the next GC's one");
        assert_eq!(del[2].var("CNI_CONTAINERID"), Some("c-stuck"));
        assert_eq!(del[2].stdin_json()["prevResult"], result);
        assert!(!scratch.exists(), "the scratch file is left");
        assert!(gc_call.records.load("c-stuck").unwrap().is_none());
    }

    /// A call for `container_id` on a node moved from Multus, under `dir`: one delegate network
    /// `net-a` of the recording plugin `fake-del`, plumb's result cache in `dir/cni` and
    /// Multus's caches in `dir/multus` (apart, as when the configuration sets no `cniDir`);
    /// device-info files under `dir/devinfo`.
    fn migration_call(dir: &std::path::Path, container_id: &str) -> (FakePlugin, CmdArgs, Call) {
        let (fake, config) = one_fake_network(dir, "fake-del", "1.0.0");
        let args = request(&config, container_id, "/var/run/netns/gone");
        let mut call = Call::new(&args).unwrap();
        call.config.cni_dir = dir.join("cni");
        call.config.multus_cni_dir = dir.join("multus");
        call.cni = delegates_runner(&call.config, &[], &call.log, call.config.cni_dir.clone());
        (fake, args, call)
    }

    #[test]
    fn del_from_multus_caches_apart_from_plumbs_gives_multus_results_and_clears_them() {
        // The usual migration: Multus's configuration kept, no `cniDir`, so Multus's scratch
        // and result caches (/var/lib/cni/multus) are apart from plumb's result cache
        // (/var/lib/cni). The delegate's DEL gets Multus's cached result as prevResult, and
        // Multus's files go once it succeeded; plumb's cache is not touched.
        let d = tempfile::tempdir().unwrap();
        let (fake, args, call) = migration_call(d.path(), "c-multus");
        let net_a = br#"{"cniVersion":"1.0.0","name":"net-a","type":"fake-del"}"#;
        let result = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/gone"}],
            "ips": [{"address": "10.9.0.7/24", "interface": 0}]});
        let scratch = attached_by_multus(
            &call.config.multus_cni_dir,
            "c-multus",
            net_a,
            result.clone(),
        );
        let multus_results = cni::cache::ResultCache::new(&call.config.multus_cni_dir);
        Plumb {
            clients: None,
            routes: &NetlinkRoutes,
            caller: Caller::ThisProcess,
        }
        .do_del(&call, &args)
        .unwrap();
        let del = fake.calls_of("DEL");
        assert_eq!(del.len(), 1);
        assert_eq!(del[0].var("CNI_IFNAME"), Some("eth0"));
        assert_eq!(del[0].stdin_json()["prevResult"], result);
        assert!(!scratch.exists(), "the scratch file is left");
        assert!(
            multus_results
                .read("net-a", "c-multus", "eth0")
                .unwrap()
                .is_none()
        );
        assert!(!call.config.cni_dir.join("results").exists());
    }

    #[test]
    fn del_from_multus_cache_deletes_the_device_info_files_multus_made() {
        // device-info spec §4.2.1: "When CNI DELETE action is called, the NPWG Implementation
        // must delete the CNI Plugin Device Information File". Multus made one for every
        // delegate with a device ID, named <Name with / as ->-<containerID>_<ifname>
        // (multus-reference.md §2.9), and its scratch cache keeps the device ID.
        let d = tempfile::tempdir().unwrap();
        let devinfo = d.path().join("devinfo");
        let (fake, args, call) = migration_call(d.path(), "0a1b2c3d4e");
        let net_a = br#"{"cniVersion":"1.0.0","name":"net-a","type":"fake-del"}"#;
        let sriov = br#"{"cniVersion":"1.0.0","name":"sriov-net","type":"fake-del","deviceID":"0000:18:02.5","pciBusID":"0000:18:02.5"}"#;
        std::fs::create_dir_all(&call.config.multus_cni_dir).unwrap();
        let scratch = call.config.multus_cni_dir.join("0a1b2c3d4e");
        std::fs::write(
            &scratch,
            json!([
                {"Name": "net-a", "Bytes": cni::base64::encode(net_a)},
                {"Name": "ns1/sriov-net", "Bytes": cni::base64::encode(sriov),
                 "deviceID": "0000:18:02.5", "resourceName": "intel.com/sriov"}
            ])
            .to_string(),
        )
        .unwrap();
        // What Multus's ADD left: the device plugin's file copied for the VF's attachment.
        let cni_dir = devinfo.join("cni");
        std::fs::create_dir_all(&cni_dir).unwrap();
        let multus_file = cni_dir.join("ns1-sriov-net-0a1b2c3d4e_net1");
        std::fs::write(
            &multus_file,
            r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:02.5"}}"#,
        )
        .unwrap();
        let other = cni_dir.join("ns1-sriov-net-c-other_net1");
        std::fs::write(&other, "{}").unwrap();
        Plumb {
            clients: None,
            routes: &NetlinkRoutes,
            caller: Caller::ThisProcess,
        }
        .do_del(&call, &args)
        .unwrap();
        let del = fake.calls_of("DEL");
        assert_eq!(del.len(), 2);
        assert_eq!(del[0].var("CNI_IFNAME"), Some("net1"));
        assert!(!scratch.exists(), "the scratch file is left");
        assert!(
            !multus_file.exists(),
            "Multus's device-info file is left after DEL"
        );
        assert!(other.exists(), "another sandbox's file was deleted");
    }
}
