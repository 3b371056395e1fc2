//! STATUS (CNI spec 1.1 §2 `STATUS`): whether the node can attach pods, asked of every network
//! plumb knows of, the default network first.

use cni::error::{CniError, ErrorCode};
use cni::skel::CmdArgs;

use super::Plumb;
use super::known::recorded_sandboxes;
use crate::cluster::STATUS_API_BUDGET;
use crate::container_lock::node_call;
use crate::networks::{NodeNetworks, RecordedNads};

impl Plumb<'_> {
    /// STATUS (CNI 1.1): whether pods can be attached. The cluster-wide default network first
    /// (its readiness file, then its own STATUS), then every other network plumb knows of, the
    /// configured ones and those of recorded pods: a runtime that reports the node ready while
    /// a secondary network's plugin is gone would schedule pods that cannot start. Every
    /// failure is code 50 (51 when a delegate said so), naming the network. Its API time is
    /// [`STATUS_API_BUDGET`], not an ADD's: the runtime asks again in a few seconds.
    pub(super) fn cmd_status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let not_available = |e: CniError| {
            if e.kind() == ErrorCode::LimitedConnectivity {
                e
            } else {
                CniError::new(ErrorCode::NotAvailable, e.to_string())
            }
        };
        let mut call = self.call(args).map_err(not_available)?;
        let _running =
            node_call::begin(&call.records, self.caller.pid(), "STATUS").map_err(not_available)?;
        call.api_budget = STATUS_API_BUDGET;
        if let Some(file) = &call.config.readiness_indicator_file
            && !file.exists()
        {
            return Err(CniError::new(
                ErrorCode::NotAvailable,
                format!(
                    "the default network is not ready: readinessindicatorfile {} is missing",
                    file.display()
                ),
            ));
        }
        // known_networks lists the configured networks first, the default one leading. A record
        // it could not read says nothing of whether pods can be attached: logged at verbose,
        // since STATUS comes every few seconds (GC reports it). NADs that recorded pods
        // attached are read from their records, not from the API server (RecordedNads).
        let (records, mut unreadable) = recorded_sandboxes(&call);
        let fallback = || call.networks();
        let recorded_nads = RecordedNads {
            records: &records,
            fallback: &fallback,
            files: NodeNetworks {
                cluster: None,
                conf_dir: call.config.conf_dir.clone(),
            },
        };
        let (networks, unusable) = self
            .known_networks(&call, &records, &recorded_nads)
            .map_err(not_available)?;
        unreadable.extend(unusable);
        for (_, e) in &unreadable {
            call.log
                .verbose(&format!("STATUS: {e}; its networks are left out"));
        }
        for list in networks {
            // Its errors name the network already.
            call.cni.status_network_list(&list).map_err(not_available)?;
        }
        Ok(())
    }
}
