//! A change of a running pod's attachments to follow its `k8s.v1.cni.cncf.io/networks`
//! annotation (dynamic attachments; the multi-net spec leaves how a running pod's attachments
//! change to implementations, its open question 2). The daemon asks for it with the pod as its
//! cache holds it; the change runs as the sandbox's ADD would have (the configuration, CNI_ARGS
//! and CNI_PATH its record keeps), under the container's lock, on the pod as the API server has
//! it then, and network-status is written with every attachment the sandbox has (§5).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cni::error::{CniError, ErrorCode};
use cni::skel::CmdArgs;
use netattach::status::StatusInput;
use serde_json::Value;

use super::call::Call;
use super::{Plumb, who};
use crate::change::change;
use crate::devices::KubeletDevices;
use crate::execute::{Added, Sandbox, recorded_list};
use crate::plan::Pod;
use crate::record::{ChangeBasis, Record, RecordStore, RecordedAttachment};

/// What became of a change.
#[derive(Debug, PartialEq)]
pub enum Changed {
    /// The sandbox's attachments already follow the pod's annotation.
    Nothing,
    /// Not acted on, and why: no longer the sandbox's to change (for the log).
    Skipped(String),
    /// Done: what went and what came, as the event on the pod says.
    Applied {
        detached: Vec<String>,
        attached: Vec<String>,
    },
}

/// Why a change of the pod to the annotation given first did not happen, for the event that
/// says so: `ChangeRefused` (the new selection cannot be planned or changed to: nothing was
/// done) or `ChangeFailed` (running it failed: what it attached was rolled back, the API server
/// did not answer, or network-status could not be written). Whether to send the event.
pub type Report<'r> = &'r dyn Fn(&str, &'static str, &CniError) -> bool;

impl Plumb<'_> {
    /// Changes sandbox `container_id`'s attachments, recorded in `state_dir`, to follow `pod`'s
    /// annotation (as the daemon's cache holds it; under the container's lock the API server's
    /// pod is what is acted on). An error is said on the pod as an event when `report` (given
    /// the event's reason) says so: a change retried with the same failure is said once.
    pub fn cmd_change(
        &self,
        state_dir: &Path,
        container_id: &str,
        pod: &Pod,
        report: Report<'_>,
    ) -> Result<Changed, CniError> {
        let records = RecordStore::new(state_dir);
        let (record, basis) = match recorded(&records, container_id)? {
            Ok(found) => found,
            Err(why) => return Ok(Changed::Skipped(why)),
        };
        if basis.selection.as_deref() == Some(pod.selection()) {
            return Ok(Changed::Nothing);
        }
        let args = add_request(&record, &basis)?;
        let call = self.call(&args)?;
        if call.config.state_dir != state_dir {
            return Ok(Changed::Skipped(format!(
                "the configuration it was attached with keeps its records in plumbStateDir {}, \
                 not in {} (the daemon's --state-dir)",
                call.config.state_dir.display(),
                state_dir.display()
            )));
        }
        let turn = call.turn(&args, &self.caller, "CHANGE")?;
        // Again under the lock: the sandbox's DEL, or another daemon's change, may have come
        // first.
        let (record, basis) = match recorded(&records, container_id)? {
            Ok(found) => found,
            Err(why) => {
                // Its DEL removed the lock file; the one taken here goes too.
                if records.load(container_id)?.is_none() {
                    turn.end_for_good();
                }
                return Ok(Changed::Skipped(why));
            }
        };
        let _turn = turn;
        // The pod as it is now: the cache may be behind (another daemon, during a rollout,
        // may have made a later change already).
        let pod = match call.try_cluster()? {
            Some(cluster) => match cluster.pod_from_api(&pod.namespace, &pod.name)? {
                Some(now) if now.uid == pod.uid => now,
                _ => return Ok(Changed::Skipped("the pod is gone from the API".into())),
            },
            None => pod.clone(),
        };
        let pod = &pod;
        let selection = pod.selection().to_string();
        if basis.selection.as_ref() == Some(&selection) {
            return Ok(Changed::Nothing);
        }
        let ours = std::fs::metadata(&record.netns).is_ok_and(|m| m.ino() == basis.netns_inode);
        if !ours {
            return Ok(Changed::Skipped(format!(
                "its network namespace {} is gone or is no longer the sandbox's",
                record.netns
            )));
        }
        // The event is on the pod, the log line names it, the caller says who too.
        let said = |reason: &'static str, e: CniError| {
            let who = who(&call.pod_args, container_id);
            call.log.error(&format!("{reason}: {who}: {e}"));
            if report(&selection, reason, &e) {
                call.warn_pod(Some(pod), reason, &e);
            }
            e
        };
        let in_netns = self
            .routes
            .interfaces(Path::new(&record.netns))
            .map_err(|e| said("ChangeFailed", e))?;
        // With the kubelet's devices, so that a resource no device plugin offers (a marker) is
        // told from a device plugin's, whose network `change` refuses for a running pod.
        let devices = KubeletDevices::new(&*call.kubelet);
        let plan = call
            .plan(Some(pod), &args.ifname, Some(&devices))
            .map_err(|e| said(refused_or_failed(&e), e))?;
        let names: Vec<&str> = in_netns.iter().map(String::as_str).collect();
        let todo = change(&record.attachments, &plan.attachments, &names).map_err(|why| {
            said(
                "ChangeRefused",
                CniError::new(
                    ErrorCode::InvalidConfig,
                    format!("the new networks annotation is not applied: {why}"),
                ),
            )
        })?;
        let detached: Vec<String> = (todo.detach.iter())
            .map(|&i| &record.attachments[i])
            .map(|a| format!("{} ({})", a.ifname, a.network))
            .collect();
        let write_status = |record: &Record, added: &[Added]| -> Result<(), CniError> {
            let Some((cluster, pod)) = call.pod_to_write(Some(pod)) else {
                return Ok(());
            };
            cluster.set_network_status(pod, &status_of(&call, record, added))
        };
        let sandbox = Sandbox {
            container_id: container_id.to_string(),
            ..Sandbox::default()
        };
        let (added, record) = self
            .executor(&call)
            .apply_change(&sandbox, &todo)
            .map_err(|e| {
                // What was detached before the failure is gone from the pod: its status says so.
                let written = match todo.detach.is_empty() {
                    true => Ok(()),
                    false => (records.load(container_id).map_err(CniError::from))
                        .and_then(|r| write_status(&r.unwrap_or_else(|| record.clone()), &[])),
                };
                let e = match written {
                    Ok(()) => e,
                    Err(w) => {
                        e.add_details(format!("and network-status could not be written: {w}"))
                    }
                };
                said("ChangeFailed", e)
            })?;
        for a in added.iter().flat_map(|a| &a.warnings) {
            call.log.error(a);
        }
        // An annotation only written differently, of a record that followed the last one: the
        // status already says what the pod has.
        if !todo.is_empty() || basis.selection.is_none() {
            write_status(&record, &added).map_err(|e| {
                said(
                    "ChangeFailed",
                    e.context("the change is made, but network-status could not be written"),
                )
            })?;
        }
        // Last: a change whose status could not be written is tried again, and finds the
        // attachments already as they should be.
        records.save(&Record {
            for_changes: Some(ChangeBasis {
                selection: Some(selection),
                ..basis
            }),
            ..record
        })?;
        if todo.is_empty() {
            return Ok(Changed::Nothing);
        }
        let attached: Vec<String> = added.iter().map(describe_added).collect();
        let message = changed_message(&detached, &attached);
        call.log
            .verbose(&format!("{}: {message}", who(&call.pod_args, container_id)));
        if let Some((cluster, pod)) = call.pod_to_write(Some(pod))
            && let Err(e) = cluster.event(pod, "Normal", "AttachmentsChanged", &message)
        {
            call.log.error(&format!("could not record an event: {e}"));
        }
        Ok(Changed::Applied { detached, attached })
    }
}

/// The sandbox's record and what it keeps for changes, or why there is nothing to change.
fn recorded(
    records: &RecordStore,
    container_id: &str,
) -> Result<Result<(Record, ChangeBasis), String>, CniError> {
    let Some(record) = records.load(container_id)? else {
        return Ok(Err("it has no attachment record (deleted)".into()));
    };
    if record.standalone {
        return Ok(Err("it was attached by `plumb attach`".into()));
    }
    match record.for_changes.clone() {
        Some(basis) => Ok(Ok((record, basis))),
        None => Ok(Err(
            "its record keeps nothing to change it with (attached by a plumb before dynamic \
             attachments, or without a pod of the API): recreate the pod to change its networks"
                .into(),
        )),
    }
}

/// The ADD request the sandbox was attached with, as its record keeps it.
fn add_request(record: &Record, basis: &ChangeBasis) -> Result<CmdArgs, CniError> {
    let bad = |why: &str| {
        CniError::new(
            ErrorCode::DecodingFailure,
            format!(
                "attachment record of container {}: the configuration kept for changes {why}",
                record.container_id
            ),
        )
    };
    let Value::Object(config) = &basis.config else {
        return Err(bad("is not a JSON object"));
    };
    let stdin = serde_json::to_vec(&basis.config).map_err(|e| bad(&e.to_string()))?;
    let version = cni::version::version_of(&stdin)?;
    // The runtime's interface name is the default network's.
    let ifname = (record.attachments.iter())
        .find(|a| a.default)
        .map_or("eth0", |a| a.ifname.as_str());
    Ok(CmdArgs {
        container_id: record.container_id.clone(),
        netns: record.netns.clone(),
        ifname: ifname.to_string(),
        args: cni::args::join(&record.cni_args),
        path: basis.cni_path.clone(),
        stdin,
        config: config.clone(),
        version,
    })
}

/// `net2 [10.1.2.3] (ns/name)`.
fn describe_added(a: &Added) -> String {
    let ips: Vec<String> = (a.result.ips.iter())
        .map(|ip| ip.address.to_string())
        .collect();
    format!(
        "{} [{}] ({})",
        a.attachment.ifname,
        ips.join(" "),
        a.attachment.network
    )
}

fn changed_message(detached: &[String], attached: &[String]) -> String {
    let mut parts = Vec::new();
    if !detached.is_empty() {
        parts.push(format!("detached {}", detached.join(", ")));
    }
    if !attached.is_empty() {
        parts.push(format!("attached {}", attached.join(", ")));
    }
    format!("networks annotation changed: {}", parts.join("; "))
}

/// network-status (multi-net spec §5) of `record`'s attachments, as the change left them: the
/// results of those just added, the others' from the result cache. Every recorded attachment,
/// also one with no interface in the netns (a device bound to a userspace driver).
fn status_of(call: &Call, record: &Record, added: &[Added]) -> String {
    let entries: Vec<_> = (record.attachments.iter())
        .map(|a| {
            let new = added.iter().find(|n| n.attachment.ifname == a.ifname);
            let cached = match new {
                Some(_) => None,
                None => cached_result(call, record, a),
            };
            let device_info = match new {
                Some(n) => n.device_info.clone(),
                None => (a.device_info_file.as_deref())
                    .and_then(|f| netattach::device_info_files::read(f).ok().flatten()),
            };
            netattach::status::build(&StatusInput {
                name: &a.network,
                result: new.map(|n| &n.result).or(cached.as_ref()),
                ifname: &a.ifname,
                is_default: a.default,
                default_route: a.default_route.as_deref(),
                device_info: device_info.as_ref(),
            })
        })
        .collect();
    netattach::status::to_annotation(&entries)
}

/// The result the attachment's ADD cached (in the version of its configuration).
fn cached_result(call: &Call, record: &Record, a: &RecordedAttachment) -> Option<cni::CniResult> {
    let list = recorded_list(a).ok()?;
    (call.cni.cache)
        .cached_result(
            &list.name,
            &record.container_id,
            &a.ifname,
            list.cni_version,
        )
        .ok()
        .flatten()
}

/// The event's reason for a plan that failed: refused when the new selection itself is at
/// fault, failed when the API server or the node could not answer (tried again).
fn refused_or_failed(e: &CniError) -> &'static str {
    match e.kind() {
        ErrorCode::TryAgainLater | ErrorCode::Io | ErrorCode::Internal => "ChangeFailed",
        _ => "ChangeRefused",
    }
}
