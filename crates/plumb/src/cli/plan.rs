//! `plumb plan`: the attachments ADD would make for a pod, and what each delegate would get on
//! stdin, without running anything.

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
