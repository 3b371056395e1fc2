//! `plumb plan`: the attachments ADD would make for a pod, and what each delegate would get on
//! stdin, without running anything; with `--record`, also what a change of a running pod's
//! selection to this plan would detach and attach (the engine's `change`).

use std::io::Write;
use std::path::PathBuf;

use cni::error::{CniError, ErrorCode};
use cni::request::{self, Extra};
use plumb_engine::plan::{self, Plan};
use serde_json::{Value, json};

use super::local::{Source, Store, read_config, read_pod};

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
    /// The record of the pod's running sandbox (`<plumbStateDir>/<container ID>.json`): also
    /// print what changing its attachments to this plan would do.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
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
    let mut json = plan_json(&plan)?;
    if let Some(path) = &a.record {
        json["change"] = change_json(path, &plan)?;
    }
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    writeln!(out, "{text}").map_err(|e| CniError::new(ErrorCode::Io, e.to_string()))
}

/// What changing the sandbox recorded in `path` to `plan` would do: the attachments detached
/// (in that order), attached and kept, by network and interface; or why it cannot be done.
fn change_json(path: &std::path::Path, plan: &Plan) -> Result<Value, CniError> {
    let failed = |why: String| {
        CniError::new(
            ErrorCode::InvalidConfig,
            format!("--record {}: {why}", path.display()),
        )
    };
    let bytes = cni::files::read_bounded(path, 16 << 20).map_err(|e| failed(e.to_string()))?;
    let record = plumb_engine::record::decode(&bytes).map_err(|e| {
        failed(match e {
            plumb_engine::record::Decoded::Corrupt(why) => format!("not a record of plumb: {why}"),
            plumb_engine::record::Decoded::Version(v) => {
                format!("a record of format version {v}, which this plumb does not read")
            }
        })
    })?;
    // The pod's interfaces as the record knows them (the netns itself is not looked at).
    let names: Vec<&str> = std::iter::once("lo")
        .chain(record.attachments.iter().map(|r| r.ifname.as_str()))
        .collect();
    let one = |network: &str, ifname: &str| json!({"network": network, "interface": ifname});
    Ok(
        match plumb_engine::change::change(&record.attachments, &plan.attachments, &names) {
            Ok(c) => json!({
                "detach": c.detach.iter()
                    .map(|&i| one(&record.attachments[i].network, &record.attachments[i].ifname))
                    .collect::<Vec<_>>(),
                "attach": c.attach.iter().map(|a| one(&a.network, &a.ifname)).collect::<Vec<_>>(),
                "kept": c.kept.iter()
                    .map(|&i| one(&record.attachments[i].network, &record.attachments[i].ifname))
                    .collect::<Vec<_>>(),
            }),
            Err(why) => json!({"refused": why}),
        },
    )
}
