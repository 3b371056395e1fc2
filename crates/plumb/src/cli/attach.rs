//! `plumb attach`: a network namespace attached to networks exactly as a pod's sandbox would be
//! (same plan, same records, same delegates), and its network-status printed.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use cni::error::{CniError, ErrorCode};
use netattach::selection::NETWORKS_ANNOTATION;
use plumb_engine::commands::network_status;
use plumb_engine::plan::{self, Pod};
use serde_json::Value;

use super::cni::netns_path;
use super::local::{LocalNode, Source, Store, read_config, read_pod, sandbox_for};

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
