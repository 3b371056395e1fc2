//! What one CNI call works with, from plumb's configuration and the request: the log, the
//! delegates' runner and result cache, the records, the container's turn, and the API client
//! and kubelet, reached only when the call needs them (DEL from a record never does). It finds
//! the pod (from the runtime's annotations, `PLUMB_NETWORKS`, or the API, multi-net spec §4)
//! and plans its attachments.

use std::sync::Arc;
use std::time::Duration;

use cni::error::{CniError, ErrorCode};
use cni::runtime::CniConfig;
use cni::skel::CmdArgs;
use netattach::device_info_files::DeviceInfoDirs;
use serde_json::Value;

use super::{Caller, POD_ANNOTATIONS_CAPABILITY};
use crate::cluster::{API_BUDGET, Cluster, Connect, annotations_from};
use crate::config::Config;
use crate::execute::Sandbox;
use crate::kubelet::PodResources;
use crate::kubelet_checkpoint::OrCheckpoint;
use crate::log::Log;
use crate::networks::{NodeNetworks, PrefetchedNads};
use crate::plan::{self, Devices, Plan, Pod};
use crate::pod_args::{NETWORKS_ARG, PodArgs};
use crate::record::{ChangeBasis, RecordStore};

/// The longest event message: the kubelet cuts its own events' messages to 1 KiB too, and an
/// event is read in `kubectl describe pod`, where its start says what went wrong.
const MAX_EVENT_MESSAGE: usize = 1 << 10;

/// The most NADs fetched together before planning; any more are asked for as the planner
/// reaches them.
const MAX_PREFETCHED_NADS: usize = 32;

/// Everything one call works with, from the configuration and the request.
pub(super) struct Call<'a> {
    pub(super) config: Config,
    pub(super) log: Arc<Log>,
    pub(super) cni: CniConfig,
    pub(super) records: RecordStore,
    pub(super) device_info: DeviceInfoDirs,
    /// The kubelet, asked only when a network needs a device (no connection before that): its
    /// PodResources API, or its device-manager checkpoint when the API's socket does not exist.
    pub(super) kubelet: Box<dyn PodResources>,
    pub(super) cni_args: Vec<(String, String)>,
    pub(super) pod_args: Option<PodArgs>,
    /// Built on first use: DEL from a record never needs the API, and must work when the
    /// kubeconfig or its token is gone. A kubeconfig that cannot be used is tried once.
    pub(super) cluster: std::cell::OnceCell<Result<Option<Box<dyn Cluster>>, CniError>>,
    /// The API time this call may spend ([`API_BUDGET`]; STATUS:
    /// [`crate::cluster::STATUS_API_BUDGET`]).
    pub(super) api_budget: Duration,
    /// Where the API client comes from (built, or lent by the daemon).
    pub(super) connect: &'a dyn Connect,
}

/// What runs the delegates: plugins from `binDir` then `cni_path`, their results cached under
/// `cache_dir`, their stderr in plumb's log.
pub(super) fn delegates_runner(
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

impl<'a> Call<'a> {
    pub(super) fn new(args: &CmdArgs, connect: &'a dyn Connect) -> Result<Call<'a>, CniError> {
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
        let mut cni = delegates_runner(&config, &args.path, &log, config.cni_dir.clone());
        cni.on_plugin_ran = connect.delegate_observer();
        Ok(Call {
            records: RecordStore::new(config.state_dir.clone()),
            device_info: DeviceInfoDirs::new(config.device_info_dir.clone()),
            kubelet: Box::new(OrCheckpoint::new(
                connect.kubelet(&config.pod_resources_socket),
                &config.pod_resources_socket,
                &config.kubelet_root_dir,
                Arc::clone(&log),
            )),
            config,
            log,
            cni,
            cni_args,
            pod_args,
            cluster: std::cell::OnceCell::new(),
            api_budget: API_BUDGET,
            connect,
        })
    }

    /// The container's turn: held from here to the end of the call, so that its calls run one
    /// at a time whichever process runs them (thin mode, the daemon: `container_lock`).
    pub(super) fn turn(
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
        let taken = match caller {
            Caller::InsteadOfDaemon => crate::container_lock::take_for_within(
                &self.records,
                &args.container_id,
                super::LOCK_WAIT_INSTEAD_OF_DAEMON,
            ),
            Caller::DaemonChange => crate::container_lock::take_for_within(
                &self.records,
                &args.container_id,
                super::LOCK_WAIT_FOR_CHANGE,
            ),
            _ => crate::container_lock::take_for(
                &self.records,
                &args.container_id,
                caller.pid(),
                &say,
            ),
        };
        taken
            .and_then(|mut turn| {
                // The delegates hold the turn with the call, so that one left running by a kill
                // of the process that runs the call still holds back the next call: all the
                // children of a process that runs this call alone, this call's own in the
                // daemon.
                match caller {
                    Caller::ThisProcess | Caller::InsteadOfDaemon => turn.share_with_children(),
                    Caller::Forwarded { .. } | Caller::DaemonChange => {
                        turn.share_with_this_threads_plugins()
                    }
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
    pub(super) fn try_cluster(&self) -> Result<Option<&dyn Cluster>, CniError> {
        let built = self.cluster.get_or_init(|| {
            let Some(k) = &self.config.kubeconfig else {
                return Ok(None);
            };
            self.connect
                .cluster(k, self.api_budget, &self.log)
                .map(Some)
        });
        match built {
            Ok(c) => Ok(c.as_deref()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The API client if it could be built (for events and other best-effort uses).
    pub(super) fn cluster(&self) -> Option<&dyn Cluster> {
        self.try_cluster().ok().flatten()
    }

    /// NADs from the API when plumb has a kubeconfig, else from `plumbNadDir` files.
    pub(super) fn networks(&self) -> Result<Box<dyn crate::plan::Networks + '_>, CniError> {
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
    pub(super) fn prefetched<'n>(
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

    pub(super) fn sandbox(&self, args: &CmdArgs) -> Sandbox {
        Sandbox {
            container_id: args.container_id.clone(),
            netns: args.netns.clone(),
            cni_args: self.cni_args.clone(),
            standalone: false,
            for_changes: None,
        }
    }

    /// What the record of `pod`'s ADD keeps for a later change of its attachments: only for a
    /// pod of the Kubernetes API (named by the runtime, found with plumb's kubeconfig), whose
    /// `k8s.v1.cni.cncf.io/networks` annotation a user can change; not for a selection from
    /// `PLUMB_NETWORKS`. `netns_inode`: the sandbox's netns's, as ADD checked it.
    pub(super) fn change_basis(
        &self,
        args: &CmdArgs,
        pod: Option<&Pod>,
        netns_inode: u64,
    ) -> Option<ChangeBasis> {
        let pod = pod?;
        self.pod_args.as_ref()?;
        self.config.kubeconfig.as_ref()?;
        if cni::args::get(&self.cni_args, NETWORKS_ARG).is_some() {
            return None;
        }
        Some(ChangeBasis {
            selection: Some(pod.selection().to_string()),
            netns_inode,
            config: Value::Object(without_pod_annotations(&args.config)),
            cni_path: args.path.clone(),
        })
    }

    /// The pod this call is for: from the runtime's pod-annotations capability when given,
    /// else from the API (retrying a pod not visible yet when `wait`).
    pub(super) fn pod(&self, wait: bool) -> Result<Option<Pod>, CniError> {
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
        let Some(pod) = cluster.pod_of_sandbox(&pa.namespace, &pa.name, pa.uid.as_deref(), wait)?
        else {
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

    pub(super) fn plan(
        &self,
        pod: Option<&Pod>,
        ifname: &str,
        devices: Option<&dyn Devices>,
    ) -> Result<Plan, CniError> {
        self.plan_from(&*self.pod_networks(pod)?, pod, ifname, devices)
    }

    /// The networks `pod`'s plan is made from, its NADs fetched now ([`Call::prefetched`]).
    pub(super) fn pod_networks(
        &self,
        pod: Option<&Pod>,
    ) -> Result<Box<dyn plan::Networks + '_>, CniError> {
        self.prefetched(pod, self.networks()?)
    }

    /// [`Call::plan`] from `networks`.
    pub(super) fn plan_from(
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
    pub(super) fn pod_to_write<'p>(&self, pod: Option<&'p Pod>) -> Option<(&dyn Cluster, &'p Pod)> {
        self.pod_args.as_ref()?;
        Some((self.cluster()?, pod?))
    }

    /// A Warning event on the pod saying `e`, cut to [`MAX_EVENT_MESSAGE`].
    pub(super) fn warn_pod(&self, pod: Option<&Pod>, reason: &str, e: &CniError) {
        let message = e.to_string();
        let message = cni::quote::cut(&message, MAX_EVENT_MESSAGE);
        if let Some((c, p)) = self.pod_to_write(pod)
            && let Err(ev) = c.event(p, "Warning", reason, &message)
        {
            self.log.error(&format!("could not record an event: {ev}"));
        }
    }
}

/// `config` without the runtime's copy of the pod's annotations (`runtimeConfig`'s
/// [`POD_ANNOTATIONS_CAPABILITY`]): a change plans from the pod as it is then, and every
/// annotation of the pod would make each record larger for nothing.
fn without_pod_annotations(
    config: &serde_json::Map<String, Value>,
) -> serde_json::Map<String, Value> {
    let mut config = config.clone();
    if let Some(Value::Object(rc)) = config.get_mut("runtimeConfig") {
        rc.remove(POD_ANNOTATIONS_CAPABILITY);
    }
    config
}
