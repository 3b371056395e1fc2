//! DEL (CNI spec 1.1 §2 `DEL`, §3 "Deleting an attachment"; multi-net spec §7.2): undo every
//! attachment of the sandbox's record, in reverse, past failures; for a sandbox Multus attached,
//! from Multus's scratch cache; with no record, what planning from the pod finds. A DEL never
//! fails for a pod or NAD that is gone: that would only block the sandbox's removal.

use cni::error::CniError;
use cni::skel::CmdArgs;

use super::call::{Call, delegates_runner};
use super::{Plumb, who};
use crate::container_lock::NoTurn;
use crate::devices::KubeletDevices;
use crate::execute::{Executor, Sandbox};
use crate::multus_cache;

impl Plumb<'_> {
    pub(super) fn cmd_del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let call = self.call(args)?;
        let turn = match call.turn(args, &self.caller, "DEL") {
            Ok(turn) => turn,
            // plumb run as its own delegate: every ADD of it failed here before doing anything
            // (the same error), so there is nothing to undo, and failing would keep the outer
            // call's record, and the pod, for ever.
            Err(NoTurn::Nested(e)) => {
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
        // (its ADD killed during the record's fsync, say) nor its lock file (`container_lock`).
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

    pub(super) fn do_del(&self, call: &Call, args: &CmdArgs) -> Result<(), CniError> {
        let sandbox = call.sandbox(args);
        // A sandbox Multus attached before plumb replaced it on this node: Multus's scratch
        // cache names what to delete, and Multus's result cache holds the delegates' results.
        // A record beside that file is what a DEL from it could not finish (del_planned keeps
        // it), for this retry; its results are in Multus's cache too.
        let scratch = multus_cache::find(&call.config.multus_cni_dir, &args.container_id);
        let multus_runner = match &scratch {
            Ok(Some(_)) => {
                let mut runner = delegates_runner(
                    &call.config,
                    &args.path,
                    &call.log,
                    call.config.multus_cni_dir.clone(),
                );
                runner.on_plugin_ran = call.cni.on_plugin_ran.clone();
                Some(runner)
            }
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
        let devices = KubeletDevices::new(&*call.kubelet);
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

    /// DEL of what Multus's scratch cache at `path` names ([`multus_cache`]), the file removed
    /// once every DEL succeeded.
    pub(super) fn del_from_multus_cache(
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
}
