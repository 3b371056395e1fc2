//! What `plumb attach`, `detach`, `plan` and `status` share: plumb's configuration read from a
//! file, NADs from files (`--nads DIR`, or `plumbNadDir`) or from the API (`--kubeconfig`, or
//! `kubeconfig` in the configuration), a pod from a file, and the node's records and delegates,
//! so that a namespace is attached exactly as a pod's sandbox would be.

use std::path::{Path, PathBuf};

use cni::error::{CniError, ErrorCode};
use cni::runtime::CniConfig;
use plumb_cluster::kube::KubeCluster;
use plumb_engine::config::Config;
use plumb_engine::container_lock::{self, Turn};
use plumb_engine::execute::{Executor, Sandbox};
use plumb_engine::networks::NodeNetworks;
use plumb_engine::objects::{self, FileNetworks};
use plumb_engine::paths;
use plumb_engine::plan::{Networks, Pod};
use plumb_engine::record::RecordStore;
use plumb_engine::routes::NetlinkRoutes;

use super::cni::derived_container_id;

/// What every standalone command needs to find networks.
#[derive(Debug, clap::Args)]
pub struct Source {
    /// plumb's configuration (the JSON a runtime would give it on stdin).
    #[arg(long, default_value = paths::CONFIG)]
    pub config: PathBuf,
    /// A directory (or file) of NetworkAttachmentDefinitions as YAML or JSON.
    #[arg(long, conflicts_with = "kubeconfig")]
    pub nads: Option<PathBuf>,
    /// Read NADs from this cluster instead.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// plumb's configuration from `path`: the object a runtime gives plumb on stdin, or a
/// configuration list holding plumb (the daemon writes one), read as the runtime would give
/// its plumb entry. The default path falls back to the daemon's list when missing.
pub(super) fn read_config(path: &Path) -> Result<Config, CniError> {
    let path = if path == Path::new(paths::CONFIG)
        && !path.exists()
        && Path::new(paths::CONFLIST).exists()
    {
        Path::new(paths::CONFLIST)
    } else {
        path
    };
    let bytes = cni::files::read_bounded(path, cni::conf_dir::MAX_CONF_FILE).map_err(|e| {
        CniError::new(
            ErrorCode::Io,
            format!("plumb configuration {}: {e}", path.display()),
        )
    })?;
    let list = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(|v| v.get("plugins").is_some());
    let bytes = match list {
        None => bytes,
        Some(list) => crate::daemon::conf_writer::plumb_stdin(&list)
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::InvalidConfig,
                    format!(
                        "{}: a configuration list without a plugin of type \"plumb\"",
                        path.display()
                    ),
                )
            })?
            .to_string()
            .into_bytes(),
    };
    Config::parse(&bytes).map_err(|e| e.context(path.display()))
}

/// The NAD store the arguments and configuration choose.
pub(super) enum Store {
    Files(FileNetworks),
    Api(Box<KubeCluster>, PathBuf),
    None(PathBuf),
}

impl Store {
    /// `--nads`, else `--kubeconfig`, else the configuration as ADD reads it: its `kubeconfig`,
    /// and `plumbNadDir` only without one (so `plan` shows what ADD would do).
    pub(super) fn open(config: &Config, source: &Source) -> Result<Store, CniError> {
        let conf_dir = config.conf_dir.clone();
        if let Some(dir) = &source.nads {
            return Ok(Store::Files(FileNetworks::from_dir(dir, conf_dir)?));
        }
        if let Some(k) = source.kubeconfig.as_ref().or(config.kubeconfig.as_ref()) {
            return Ok(Store::Api(
                Box::new(KubeCluster::from_kubeconfig(k)?),
                conf_dir,
            ));
        }
        if let Some(dir) = &config.nad_dir {
            return Ok(Store::Files(FileNetworks::from_dir(dir, conf_dir)?));
        }
        Ok(Store::None(conf_dir))
    }

    pub(super) fn networks(&self) -> Box<dyn Networks + '_> {
        match self {
            Store::Files(f) => Box::new(f),
            Store::Api(c, dir) => Box::new(NodeNetworks {
                cluster: Some(&**c),
                conf_dir: dir.clone(),
            }),
            Store::None(dir) => Box::new(NodeNetworks {
                cluster: None,
                conf_dir: dir.clone(),
            }),
        }
    }
}

/// The first Pod object of a file.
pub(super) fn read_pod(file: &Path) -> Result<Pod, CniError> {
    let objects = objects::read_file(file)?;
    let pod = objects.iter().find(|o| o.kind() == "Pod").ok_or_else(|| {
        CniError::new(
            ErrorCode::InvalidConfig,
            format!("{}: no Pod object in the file", file.display()),
        )
    })?;
    objects::pod_of(pod)
}

/// This machine's delegates, result cache and records, as the configuration places them.
pub(super) struct LocalNode {
    cni: CniConfig,
    pub(super) records: RecordStore,
    device_info: netattach::device_info_files::DeviceInfoDirs,
}

impl LocalNode {
    pub(super) fn new(config: &Config) -> LocalNode {
        let path = cni::exec::split_path(
            &std::env::var("CNI_PATH").unwrap_or_else(|_| "/opt/cni/bin:/usr/lib/cni".into()),
        );
        LocalNode {
            cni: config.delegates_runner(&path),
            records: RecordStore::new(config.state_dir.clone()),
            device_info: netattach::device_info_files::DeviceInfoDirs::new(
                config.device_info_dir.clone(),
            ),
        }
    }

    /// The sandbox's turn, as the CNI plugin takes it (`container_lock`): an `attach` and a
    /// `detach` of one namespace, or either and a runtime's call for the same container ID, run
    /// one at a time.
    pub(super) fn turn(&self, sandbox: &Sandbox) -> Result<Turn, CniError> {
        let turn = container_lock::take_for(
            &self.records,
            &sandbox.container_id,
            Some(std::process::id()),
            &|_, why: &str| eprintln!("plumb: {why}"),
        )
        .map_err(CniError::from)?;
        // As the CNI plugin does in thin mode: a delegate left running by a kill of this
        // process still holds back the next call for the sandbox.
        turn.share_with_children()?;
        Ok(turn)
    }

    pub(super) fn executor(&self) -> Executor<'_> {
        Executor {
            cni: &self.cni,
            records: &self.records,
            routes: &NetlinkRoutes,
            device_info: &self.device_info,
        }
    }
}

/// The sandbox `attach`/`detach` work on: the given container ID, or one derived from the
/// namespace path (so `detach` finds what `attach` recorded).
pub(super) fn sandbox_for(netns: &str, container_id: Option<&str>) -> Sandbox {
    Sandbox {
        container_id: container_id
            .map(str::to_string)
            .unwrap_or_else(|| derived_container_id("plumb", netns)),
        netns: netns.to_string(),
        cni_args: vec![("IgnoreUnknown".into(), "true".into())],
        standalone: true,
        for_changes: None,
    }
}
