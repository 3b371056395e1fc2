//! `plumb status`: a pod's network-status as a table, from a pod file or the cluster; or, with
//! `--node`, the sandboxes plumb attached on this node (its records), which their DEL needs.

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
    /// The sandboxes plumb attached on this node and has not detached yet (its records in
    /// `--state-dir`): what an uninstall waits for.
    #[arg(long, conflicts_with_all = ["file", "pod"])]
    pub node: bool,
    /// plumb's state directory (`plumbStateDir`), for `--node`.
    #[arg(long, default_value = paths::STATE_DIR, requires = "node")]
    pub state_dir: PathBuf,
}

/// `plumb status`: a pod's network-status (multi-net spec §5) as a table.
pub fn status(a: &StatusArgs, out: &mut dyn Write) -> Result<(), CniError> {
    if a.node {
        return node(&a.state_dir, out);
    }
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
    table(["NETWORK", "INTERFACE", "IPS", "MAC", ""], rows, out)
}

/// `plumb status --node`: one line per record in `state_dir`: the container, its pod, its
/// network namespace and the attachments its DEL will undo.
fn node(state_dir: &std::path::Path, out: &mut dyn Write) -> Result<(), CniError> {
    if !state_dir.is_dir() {
        return Err(CniError::new(
            ErrorCode::Io,
            format!(
                "no directory {}: give plumb's state directory with --state-dir (in the \
                 DaemonSet's pod, /host/var/lib/plumb)",
                state_dir.display()
            ),
        ));
    }
    let records = plumb_engine::record::RecordStore::new(state_dir);
    let failed = |e: &dyn std::fmt::Display| CniError::new(ErrorCode::Io, e.to_string());
    let ids = records.list().map_err(|e| failed(&e))?;
    let rows: Vec<[String; 4]> = ids
        .iter()
        .map(|id| match records.load(id) {
            Ok(Some(r)) => [
                id.clone(),
                match r.pod_name.is_empty() {
                    true => "-".into(),
                    false => format!("{}/{}", r.pod_namespace, r.pod_name),
                },
                r.netns.clone(),
                (r.attachments.iter())
                    .map(|a| match a.pending {
                        // A change of the running pod did not finish it (`--dynamic`).
                        true => format!("{}:{}(pending)", a.ifname, a.network),
                        false => format!("{}:{}", a.ifname, a.network),
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            ],
            Ok(None) => [id.clone(), "-".into(), "-".into(), "(gone)".into()],
            Err(e) => [
                id.clone(),
                "-".into(),
                "-".into(),
                format!("unreadable: {e}"),
            ],
        })
        .map(|row| row.map(|cell| plumb_engine::log::one_line(&cell).into_owned()))
        .collect();
    table(["CONTAINER", "POD", "NETNS", "ATTACHMENTS"], rows, out)?;
    writeln!(
        out,
        "{} sandboxes attached by plumb in {}",
        ids.len(),
        state_dir.display()
    )
    .map_err(|e| failed(&e))
}

/// `rows` under `header`, in columns.
fn table<const N: usize>(
    header: [&str; N],
    rows: Vec<[String; N]>,
    out: &mut dyn Write,
) -> Result<(), CniError> {
    let widths: Vec<usize> = (0..N)
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
    use plumb_engine::record::{RECORD_VERSION, Record, RecordStore, RecordedAttachment};

    fn attachment(network: &str, ifname: &str, pending: bool) -> RecordedAttachment {
        RecordedAttachment {
            network: network.into(),
            ifname: ifname.into(),
            config: serde_json::json!({"cniVersion": "1.0.0", "name": "n", "plugins": []}),
            network_config: None,
            capability_args: Default::default(),
            default: ifname == "eth0",
            default_route: None,
            device_info_file: None,
            pending,
        }
    }

    #[test]
    fn the_node_list_marks_an_attachment_a_change_did_not_finish() {
        let d = tempfile::tempdir().unwrap();
        RecordStore::new(d.path())
            .save(&Record {
                version: RECORD_VERSION,
                container_id: "c1".into(),
                netns: "/run/netns/p".into(),
                pod_namespace: "default".into(),
                pod_name: "web".into(),
                pod_uid: "u".into(),
                cni_args: Vec::new(),
                attachments: vec![
                    attachment("kube-system/default-net", "eth0", false),
                    attachment("default/net-a", "net1", true),
                ],
                standalone: false,
                for_changes: None,
            })
            .unwrap();
        let mut out = Vec::new();
        super::node(d.path(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("eth0:kube-system/default-net,net1:default/net-a(pending)"),
            "{out}"
        );
        assert!(out.contains("1 sandboxes attached by plumb"), "{out}");
    }
}
