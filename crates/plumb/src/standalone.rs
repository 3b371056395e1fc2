//! plumb from the command line, with or without a cluster: `plumb attach` and `plumb detach`
//! attach a network namespace exactly as a pod's sandbox would be attached (same plan, same
//! records, same delegates), and `plumb plan` shows what ADD would do without doing it.
//!
//! NADs come from files (`--nads DIR`, or `plumbNadDir` in the configuration) or from the API
//! (`--kubeconfig`, or `kubeconfig` in the configuration).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use cni::error::{CniError, ErrorCode};
use cni::request::{self, Extra};
use cni::runtime::CniConfig;
use netattach::selection::NETWORKS_ANNOTATION;
use serde_json::{Value, json};

use crate::cluster::KubeCluster;
use crate::cnitool::{derived_container_id, netns_path};
use crate::config::Config;
use crate::container_lock::{self, Turn};
use crate::execute::{Executor, Sandbox};
use crate::networks::NodeNetworks;
use crate::objects::{self, FileNetworks};
use crate::plan::{self, Networks, Plan, Pod};
use crate::plugin::{NetlinkRoutes, network_status};
use crate::record::RecordStore;

/// Where plumb's configuration is read from by default: the file the daemon would install.
pub const DEFAULT_CONFIG: &str = "/etc/cni/net.d/00-plumb.conf";

/// What `plumb daemon --write-config` writes (conf_writer.rs), read when [`DEFAULT_CONFIG`] is
/// not there.
pub const DEFAULT_CONFLIST: &str = "/etc/cni/net.d/00-plumb.conflist";

/// What every standalone command needs to find networks.
#[derive(Debug, clap::Args)]
pub struct Source {
    /// plumb's configuration (the JSON a runtime would give it on stdin).
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// A directory (or file) of NetworkAttachmentDefinitions as YAML or JSON.
    #[arg(long, conflicts_with = "kubeconfig")]
    pub nads: Option<PathBuf>,
    /// Read NADs from this cluster instead.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The network namespace: a name under /var/run/netns, or a path.
    #[arg(long)]
    pub netns: String,
    /// The selection, in either annotation format (`net-a,ns/net-b@eth5` or a JSON list).
    #[arg(long, conflicts_with = "pod")]
    pub networks: Option<String>,
    /// Take the selection (and namespace) from this pod's annotation instead (YAML or JSON).
    #[arg(long)]
    pub pod: Option<PathBuf>,
    /// The namespace the selection's names are relative to (with `--networks`).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// The container ID (default: derived from the namespace path, as cnitool does).
    #[arg(long)]
    pub container_id: Option<String>,
    #[command(flatten)]
    pub source: Source,
}

#[derive(Debug, clap::Args)]
pub struct DetachArgs {
    #[arg(long)]
    pub netns: String,
    #[arg(long)]
    pub container_id: Option<String>,
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The pod (YAML or JSON, as kubectl takes it).
    #[arg(long)]
    pub pod: PathBuf,
    /// The runtime's interface name for the default network.
    #[arg(long, default_value = "eth0")]
    pub ifname: String,
    #[command(flatten)]
    pub source: Source,
}

/// plumb's configuration from `path`: the object a runtime gives plumb on stdin, or a
/// configuration list holding plumb (the daemon writes one), read as the runtime would give
/// its plumb entry. The default path falls back to the daemon's list when missing.
fn read_config(path: &Path) -> Result<Config, CniError> {
    let path = if path == Path::new(DEFAULT_CONFIG)
        && !path.exists()
        && Path::new(DEFAULT_CONFLIST).exists()
    {
        Path::new(DEFAULT_CONFLIST)
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
        Some(list) => crate::conf_writer::plumb_stdin(&list)
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
enum Store {
    Files(FileNetworks),
    Api(Box<KubeCluster>, PathBuf),
    None(PathBuf),
}

impl Store {
    /// `--nads`, else `--kubeconfig`, else the configuration as ADD reads it: its `kubeconfig`,
    /// and `plumbNadDir` only without one (so `plan` shows what ADD would do).
    fn open(config: &Config, source: &Source) -> Result<Store, CniError> {
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

    fn networks(&self) -> Box<dyn Networks + '_> {
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
fn read_pod(file: &Path) -> Result<Pod, CniError> {
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
struct LocalNode {
    cni: CniConfig,
    records: RecordStore,
    device_info: netattach::device_info_files::DeviceInfoDirs,
}

impl LocalNode {
    fn new(config: &Config) -> LocalNode {
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

    /// The sandbox's turn, as the CNI plugin takes it (container_lock.rs): an `attach` and a
    /// `detach` of one namespace, or either and a runtime's call for the same container ID, run
    /// one at a time.
    fn turn(&self, sandbox: &Sandbox) -> Result<Turn, CniError> {
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

    fn executor(&self) -> Executor<'_> {
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
fn sandbox_for(netns: &str, container_id: Option<&str>) -> Sandbox {
    Sandbox {
        container_id: container_id
            .map(str::to_string)
            .unwrap_or_else(|| derived_container_id("plumb", netns)),
        netns: netns.to_string(),
        cni_args: vec![("IgnoreUnknown".into(), "true".into())],
        standalone: true,
    }
}

/// `plumb attach`: prints the network-status of what was attached.
pub fn attach(a: &AttachArgs, out: &mut dyn Write) -> Result<(), CniError> {
    let config = read_config(&a.source.config)?;
    let store = Store::open(&config, &a.source)?;
    let netns = netns_path(&a.netns)?;
    let pod = match &a.pod {
        Some(file) => read_pod(file)?,
        None => Pod {
            namespace: a.namespace.clone(),
            name: "plumb-attach".into(),
            uid: String::new(),
            annotations: BTreeMap::from([(
                NETWORKS_ANNOTATION.to_string(),
                a.networks.clone().unwrap_or_default(),
            )]),
        },
    };
    let plan = plan::plan(&config, Some(&pod), "eth0", &*store.networks(), None)?;
    // Without a kubelet there is no device allocation: running an SR-IOV-style delegate
    // without its device would fail later, less clearly.
    if let Some(a) = plan.attachments.iter().find(|a| a.resource.is_some()) {
        return Err(CniError::new(
            ErrorCode::UnsupportedField,
            format!(
                "network {} is backed by device resource {:?}: plumb attach cannot allocate \
                 devices (the kubelet does, for pods)",
                a.network,
                a.resource.as_deref().unwrap_or_default()
            ),
        ));
    }
    for w in &plan.warnings {
        eprintln!("plumb attach: warning: {w}");
    }
    let node = LocalNode::new(&config);
    let sandbox = sandbox_for(&netns, a.container_id.as_deref());
    let turn = node.turn(&sandbox)?;
    let exec = node.executor();
    let added = match exec.add(&sandbox, Some(&pod), &plan.attachments) {
        Ok(added) => added,
        Err(e) => {
            // No runtime follows a failed attach with DEL: `detach` then says nothing is
            // attached, as it is, and nothing of the sandbox is left, its lock file included.
            if exec.forget_if_nothing_left(&sandbox.container_id) {
                turn.end_for_good();
            }
            return Err(e);
        }
    };
    let status: Value = serde_json::from_str(&network_status(&added))
        .map_err(|e| CniError::new(ErrorCode::Internal, e.to_string()))?;
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&status).unwrap_or_default()
    )
    .map_err(|e| {
        // The attachments are made and recorded: a bare I/O error would read as a failed
        // attach, and the namespace would stay attached with nobody to detach it. The detach
        // named must find this record: the same configuration (its state directory) and ID.
        let mut detach = format!(
            "plumb detach --netns {} --config {}",
            a.netns,
            a.source.config.display()
        );
        if let Some(id) = &a.container_id {
            detach.push_str(&format!(" --container-id {id}"));
        }
        CniError::new(
            ErrorCode::Io,
            format!(
                "{netns} is attached, but its network-status could not be printed: {e}; \
                 `{detach}` undoes it"
            ),
        )
    })
}

/// `plumb detach`: undoes what `plumb attach` recorded.
pub fn detach(a: &DetachArgs) -> Result<(), CniError> {
    let config = read_config(&a.config)?;
    let netns = netns_path(&a.netns)?;
    let node = LocalNode::new(&config);
    let sandbox = sandbox_for(&netns, a.container_id.as_deref());
    let turn = node.turn(&sandbox)?;
    let attached = node.executor().del(&sandbox, &netns)?;
    // Nothing of the sandbox is left (or ever was): neither a record a killed `attach` was
    // writing nor its lock file.
    node.records.remove_staged(&sandbox.container_id);
    turn.end_for_good();
    if attached {
        Ok(())
    } else {
        Err(CniError::new(
            ErrorCode::UnknownContainer,
            format!(
                "nothing is attached to {netns} (no record for container {} in {})",
                sandbox.container_id,
                node.records.dir().display()
            ),
        ))
    }
}

/// What `plumb plan` prints: each attachment, and the exact stdin each of its plugins would get
/// (`prevResult` is only known while ADD runs, so it is left out).
pub fn plan_json(plan: &Plan) -> Result<Value, CniError> {
    let mut attachments = Vec::new();
    for a in &plan.attachments {
        let mut plugins = Vec::new();
        for p in &a.list.plugins {
            let stdin = request::build(
                &a.list.name,
                a.list.cni_version,
                p,
                Extra::Attachment {
                    capability_args: &a.capability_args,
                    prev_result: None,
                },
            )?;
            plugins.push(
                serde_json::from_slice::<Value>(&stdin)
                    .map_err(|e| CniError::new(ErrorCode::Internal, e.to_string()))?,
            );
        }
        attachments.push(json!({
            "network": a.network,
            "interface": a.ifname,
            "default": a.is_default,
            "default-route": a.default_route,
            "device": a.device.as_ref().map(|d| json!({"id": d.id, "resource": d.resource})),
            "plugins": plugins,
        }));
    }
    Ok(json!({"attachments": attachments, "warnings": plan.warnings}))
}

/// `plumb plan`: prints the plan as JSON, or the error ADD would return.
pub fn plan(a: &PlanArgs, out: &mut dyn Write) -> Result<(), CniError> {
    // ADD refuses such a CNI_IFNAME before it plans (code 4): so does `plan`.
    if let Some(why) = cni::validate::interface_name_problem(&a.ifname) {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!("--ifname: invalid interface name {:?}: {why}", a.ifname),
        ));
    }
    let config = read_config(&a.source.config)?;
    let store = Store::open(&config, &a.source)?;
    let pod = read_pod(&a.pod)?;
    let plan = plan::plan(&config, Some(&pod), &a.ifname, &*store.networks(), None)
        .map_err(|e| e.context(format!("pod {}/{}", pod.namespace, pod.name)))?;
    let text = serde_json::to_string_pretty(&plan_json(&plan)?).unwrap_or_default();
    writeln!(out, "{text}").map_err(|e| CniError::new(ErrorCode::Io, e.to_string()))
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// A pod file (YAML or JSON) holding the annotation.
    #[arg(conflicts_with = "pod")]
    pub file: Option<PathBuf>,
    /// A pod in the cluster, as NAMESPACE/NAME.
    #[arg(long)]
    pub pod: Option<String>,
    /// The cluster's kubeconfig (default: plumb's configuration's).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
}

/// `plumb status`: a pod's network-status (multi-net spec §5) as a table.
pub fn status(a: &StatusArgs, out: &mut dyn Write) -> Result<(), CniError> {
    let pod = match (&a.file, &a.pod) {
        (Some(file), _) => read_pod(file)?,
        (None, Some(name)) => {
            let (ns, name) = name.split_once('/').ok_or_else(|| {
                CniError::new(
                    ErrorCode::InvalidConfig,
                    format!("--pod {name:?}: expected NAMESPACE/NAME"),
                )
            })?;
            let kubeconfig = match &a.kubeconfig {
                Some(k) => k.clone(),
                None => read_config(&a.config)?.kubeconfig.ok_or_else(|| {
                    CniError::new(
                        ErrorCode::InvalidConfig,
                        "no --kubeconfig, and plumb's configuration has none",
                    )
                })?,
            };
            let cluster = KubeCluster::from_kubeconfig(&kubeconfig)?;
            crate::cluster::Cluster::pod(&cluster, ns, name, false)?.ok_or_else(|| {
                CniError::new(
                    ErrorCode::UnknownContainer,
                    format!("pod {ns}/{name} not found"),
                )
            })?
        }
        (None, None) => {
            return Err(CniError::new(
                ErrorCode::InvalidConfig,
                "name a pod file or --pod NAMESPACE/NAME",
            ));
        }
    };
    let Some(value) = pod.annotations.get(netattach::NETWORK_STATUS_ANNOTATION) else {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            format!(
                "pod {}/{} has no {:?} annotation (not attached yet, or in a system namespace)",
                pod.namespace,
                pod.name,
                netattach::NETWORK_STATUS_ANNOTATION
            ),
        ));
    };
    let entries = netattach::status::parse(value).map_err(|e| {
        CniError::new(
            ErrorCode::DecodingFailure,
            format!("pod {}/{}: {e}", pod.namespace, pod.name),
        )
    })?;
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|e| {
            [
                e.name.clone(),
                e.interface.clone().unwrap_or_else(|| "-".into()),
                if e.ips.is_empty() {
                    "-".into()
                } else {
                    e.ips.join(",")
                },
                e.mac.clone().unwrap_or_else(|| "-".into()),
                match (&e.default, &e.default_route) {
                    (true, _) => "default".into(),
                    (false, Some(gw)) => format!("default-route via {}", gw.join(",")),
                    (false, None) => "".into(),
                },
            ]
            .map(|cell| crate::log::one_line(&cell).into_owned())
        })
        .collect();
    let header = ["NETWORK", "INTERFACE", "IPS", "MAC", ""];
    let widths: Vec<usize> = (0..5)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in std::iter::once(header.map(String::from)).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    out.write_all(text.as_bytes())
        .map_err(|e| CniError::new(ErrorCode::Io, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: Value) -> Config {
        let mut c = json!({"cniVersion": "1.0.0", "name": "plumb", "type": "plumb",
            "delegates": [{"cniVersion": "1.0.0", "name": "d", "type": "bridge"}]});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        Config::parse(c.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_configuration_list_is_read_as_the_runtime_gives_plumb_its_entry() {
        // What the daemon writes (`00-plumb.conflist`) is what `plan`, `attach` and `status`
        // read on such a node: plumb's entry with the list's name and version.
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("00-plumb.conflist");
        std::fs::write(
            &f,
            json!({"cniVersion": "0.4.0", "name": "plumb-cni-network", "plugins": [
                {"type": "plumb", "logLevel": "debug",
                 "delegates": [{"cniVersion": "0.4.0", "name": "d", "type": "bridge"}]}]})
            .to_string(),
        )
        .unwrap();
        let c = read_config(&f).unwrap();
        assert_eq!(c.delegates[0]["name"], "d");
        assert_eq!(c.cni_version.to_string(), "0.4.0");
        std::fs::write(
            &f,
            json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]})
                .to_string(),
        )
        .unwrap();
        let e = read_config(&f).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("00-plumb.conflist") && e.msg.contains("without a plugin of type"),
            "{e}"
        );
    }

    fn source(kubeconfig: Option<PathBuf>) -> Source {
        Source {
            config: PathBuf::from(DEFAULT_CONFIG),
            nads: None,
            kubeconfig,
        }
    }

    /// The error of opening a store that must be the API's (the kubeconfig is missing).
    fn api_error(config: &Config, source: &Source) -> CniError {
        match Store::open(config, source) {
            Ok(Store::Files(_)) => panic!("NADs read from plumbNadDir's files"),
            Ok(_) => panic!("no error for a missing kubeconfig"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_kubeconfig_wins_over_plumb_nad_dir_as_in_add() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("missing-kubeconfig");
        // `--kubeconfig` on the command line beats the configuration's `plumbNadDir`.
        let c = config(json!({"plumbNadDir": d.path()}));
        let e = api_error(&c, &source(Some(missing.clone())));
        assert!(e.msg.contains("missing-kubeconfig"), "{e}");
        // With both in the configuration, ADD reads the API (plumbNadDir is for plumb without
        // a kubeconfig, configuration.md): `plan` and `attach` must too.
        let c = config(json!({"plumbNadDir": d.path(), "kubeconfig": missing}));
        let e = api_error(&c, &source(None));
        assert!(e.msg.contains("missing-kubeconfig"), "{e}");
    }

    #[test]
    fn status_escapes_what_would_drive_the_terminal() {
        // Anybody who may edit the pod may write its network-status: what it holds must not
        // reach the operator's terminal as control sequences or extra lines.
        let d = tempfile::tempdir().unwrap();
        let pod = d.path().join("pod.json");
        let annotation = json!([
            {"name": "ns/net-a\u{1b}[2K\rns/fake", "interface": "net1\nforged  row",
             "mac": "02:00:00:00:00:01\u{202e}", "default": false}
        ]);
        std::fs::write(
            &pod,
            json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
                "annotations": {"k8s.v1.cni.cncf.io/network-status": annotation.to_string()}}})
            .to_string(),
        )
        .unwrap();
        let args = StatusArgs {
            file: Some(pod),
            pod: None,
            kubeconfig: None,
            config: PathBuf::from(DEFAULT_CONFIG),
        };
        let mut out = Vec::new();
        status(&args, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains(['\u{1b}', '\r', '\u{202e}']), "{text:?}");
        let row = text.lines().nth(1).unwrap();
        assert!(
            row.starts_with("ns/net-a\\u{1b}[2K\\rns/fake  net1\\nforged  row  -  "),
            "{row}"
        );
        assert!(row.ends_with("02:00:00:00:00:01\\u{202e}"), "{row}");
    }
}
