//! `plumb status`: a pod's network-status as a table, from a pod file or the cluster.

use std::io::Write;
use std::path::PathBuf;

use cni::error::{CniError, ErrorCode};
use plumb_cluster::kube::KubeCluster;
use plumb_engine::paths;

use super::local::{read_config, read_pod};

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
    #[arg(long, default_value = paths::CONFIG)]
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
            plumb_engine::cluster::Cluster::pod(&cluster, ns, name, false)?.ok_or_else(|| {
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
            .map(|cell| plumb_engine::log::one_line(&cell).into_owned())
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
