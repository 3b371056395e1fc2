//! ADD (CNI spec 1.1 §2 `ADD`, §3 "Adding an attachment"; multi-net spec §3-§5): wait for the
//! default network to be ready, find the pod, plan its attachments (every check made before
//! anything runs), run them in order with the record written first, write network-status on the
//! pod, and return the default network's result. A status write that fails undoes it all.

use std::time::{Duration, Instant};

use cni::CniResult;
use cni::error::{CniError, ErrorCode};
use cni::skel::CmdArgs;

use super::call::Call;
use super::{Plumb, network_status, who};
use crate::config::Config;
use crate::devices::KubeletDevices;
use crate::execute::Sandbox;
use crate::log::peak_rss_kib;
use crate::multus_cache;
use crate::netns;

/// How long ADD waits for `readinessindicatorfile` (Multus's 45 s), and how often it looks.
const READINESS_TIMEOUT: Duration = Duration::from_secs(45);
const READINESS_POLL: Duration = Duration::from_millis(250);

impl Plumb<'_> {
    pub(super) fn cmd_add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let start = Instant::now();
        let call = self.call(args)?;
        let _turn = call.turn(args, &self.caller, "ADD")?;
        self.not_abandoned(&call, args, "ADD")?;
        let result = self.do_add(&call, args, start.elapsed()).map_err(|e| {
            let e = e.context(who(&call.pod_args, &args.container_id));
            call.log.error(&format!("ADD: {e}"));
            self.nothing_attached(&call, args);
            e
        });
        if call.log.debug_enabled() {
            call.log.debug(&format!(
                "ADD of {} done; peak RSS {} KiB",
                who(&call.pod_args, &args.container_id),
                peak_rss_kib().unwrap_or(0)
            ));
        }
        result
    }

    /// After a failed ADD: what its DEL needs to answer without the API server
    /// ([`crate::execute::Executor::record_nothing_attached`]). Not for a sandbox Multus attached, whose DEL
    /// works from Multus's scratch cache, which a record beside it would pass over.
    fn nothing_attached(&self, call: &Call, args: &CmdArgs) {
        if !matches!(
            multus_cache::find(&call.config.multus_cni_dir, &args.container_id),
            Ok(None)
        ) {
            return;
        }
        if let Err(e) = self
            .executor(call)
            .record_nothing_attached(&call.sandbox(args))
        {
            call.log.error(&format!(
                "ADD: {}: recording that nothing is attached: {e}",
                who(&call.pod_args, &args.container_id)
            ));
        }
    }

    fn do_add(&self, call: &Call, args: &CmdArgs, setup: Duration) -> Result<CniResult, CniError> {
        let start = Instant::now();
        let netns_inode = netns::check(&args.netns)?;
        wait_for_readiness(&call.config)?;
        let pod = call.pod(true)?;
        let t_pod = start.elapsed();
        if let (Some(_), None, Some(_)) = (&call.pod_args, &pod, call.cluster()) {
            // After "pod NS/NAME (container …): ", which ADD's error starts with.
            return Err(CniError::new(
                ErrorCode::UnknownContainer,
                "not found in the Kubernetes API; nothing was attached",
            ));
        }
        let devices = KubeletDevices::new(&*call.kubelet);
        let plan = call
            .plan(pod.as_ref(), &args.ifname, Some(&devices))
            .inspect_err(|e| {
                call.warn_pod(pod.as_ref(), "NoNetworkFound", e);
            })?;
        let t_plan = start.elapsed();
        let exec = self.executor(call);
        let sandbox = Sandbox {
            for_changes: call.change_basis(args, pod.as_ref(), netns_inode),
            ..call.sandbox(args)
        };
        let added = exec
            .add(&sandbox, pod.as_ref(), &plan.attachments)
            .inspect_err(|e| call.warn_pod(pod.as_ref(), "AttachFailed", e))?;
        for a in &added {
            for w in &a.warnings {
                call.log.error(w);
            }
            call.log.verbose(&format!(
                "{}: added {} on {}",
                who(&call.pod_args, &args.container_id),
                a.attachment.network,
                a.attachment.ifname
            ));
        }
        let t_delegates = start.elapsed();
        if let Some((cluster, pod)) = call.pod_to_write(pod.as_ref()) {
            // Every pod, `systemNamespaces` ones too (they only get no `defaultNetworks`):
            // network-status is how users and controllers learn what a pod has (multi-net spec
            // §5). Multus writes it for them too, by accident (docs/multus-behaviour.md §8
            // quirk 1).
            if let Err(e) = cluster.set_network_status(pod, &network_status(&added)) {
                // The pod would run without its status: undo, and let the runtime retry.
                let undo = exec.undo(&sandbox).err();
                call.warn_pod(Some(pod), "AttachFailed", &e);
                return Err(match undo {
                    None => e,
                    Some(u) => e.add_details(format!("and undoing the attachments failed: {u}")),
                });
            }
            if call.config.attachment_events {
                for a in &added {
                    // Multus's wording (docs/multus-behaviour.md §2.14), which tools grep for.
                    let msg = format!(
                        "Add {} [{}] from {}",
                        a.attachment.ifname,
                        a.result
                            .ips
                            .iter()
                            .map(|ip| ip.address.to_string())
                            .collect::<Vec<_>>()
                            .join(" "),
                        a.attachment.network
                    );
                    if let Err(e) = cluster.event(pod, "Normal", "AddedInterface", &msg) {
                        // Best effort, and the pod is up already: an API server that did not
                        // take one event (each try waits up to 5 s for an answer) is not given
                        // the others, which held the ADD 5 s per attachment.
                        call.log.error(&format!(
                            "could not record an event: {e}; the pod's other AddedInterface \
                             events are not sent"
                        ));
                        break;
                    }
                }
            }
        }
        if call.log.debug_enabled() {
            // Where the time went, for an operator chasing slow pod starts.
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let end = start.elapsed();
            call.log.debug(&format!(
                "ADD timings: setup {:.1} ms, pod {:.1} ms, plan {:.1} ms, delegates {:.1} ms, \
                 status {:.1} ms",
                ms(setup),
                ms(t_pod),
                ms(t_plan - t_pod),
                ms(t_delegates - t_plan),
                ms(end - t_delegates)
            ));
        }
        added
            .into_iter()
            .find(|a| a.attachment.is_default)
            .map(|a| a.result)
            .ok_or_else(|| CniError::new(ErrorCode::Internal, "no default network was attached"))
    }
}

fn wait_for_readiness(config: &Config) -> Result<(), CniError> {
    let Some(file) = &config.readiness_indicator_file else {
        return Ok(());
    };
    let start = Instant::now();
    while !file.exists() {
        if start.elapsed() >= READINESS_TIMEOUT {
            return Err(CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "the default network is not ready: readinessindicatorfile {} still missing \
                     after {} s",
                    file.display(),
                    READINESS_TIMEOUT.as_secs()
                ),
            ));
        }
        std::thread::sleep(READINESS_POLL);
    }
    Ok(())
}
