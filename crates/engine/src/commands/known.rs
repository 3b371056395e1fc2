//! What plumb knows of on the node, for STATUS and GC: the records of every sandbox, and every
//! network, configured or recorded, each configuration once.

use cni::NetworkConfigList;
use cni::error::CniError;

use super::Plumb;
use super::call::Call;
use crate::plan;
use crate::record::Record;

/// A record that could not be read: its container (`None` when the directory itself could not
/// be listed) and why.
pub(super) type Unreadable = (Option<String>, CniError);

/// The records of every sandbox plumb holds, and those that could not be read.
pub(super) fn recorded_sandboxes(call: &Call) -> (Vec<Record>, Vec<Unreadable>) {
    let (mut records, mut unreadable) = (Vec::new(), Vec::new());
    match call.records.list() {
        Ok(ids) => {
            for id in ids {
                match call.records.load(&id) {
                    Ok(Some(r)) => records.push(r),
                    Ok(None) => {}
                    Err(e) => unreadable.push((Some(id), e.into())),
                }
            }
        }
        Err(e) => unreadable.push((None, e.into())),
    }
    (records, unreadable)
}

impl Plumb<'_> {
    /// Every network plumb knows of, each configuration once: the configured ones (found
    /// through `networks`), and those of the `records` (as the network's own configuration,
    /// without what one pod added: its `cni-args`, IPAM claim or device), with the recorded
    /// configurations that could not be read. A record that cannot be read (damaged, or
    /// written by another plumb version) only leaves its networks out: one bad file must not
    /// make STATUS report the node's network down. A network whose configuration changed while pods attached with the old one still
    /// run (its NAD was edited) is listed with each: GC must reach what each of them allocated,
    /// and each is given every live attachment of the network as valid.
    pub(super) fn known_networks(
        &self,
        call: &Call,
        records: &[Record],
        networks: &dyn plan::Networks,
    ) -> Result<(Vec<NetworkConfigList>, Vec<Unreadable>), CniError> {
        let configured = plan::plan(&call.config, None, "eth0", networks, None)?;
        for w in &configured.warnings {
            call.log.verbose(w);
        }
        let mut lists: Vec<NetworkConfigList> = configured
            .attachments
            .into_iter()
            .map(|a| a.network_list)
            .collect();
        let mut unreadable = Vec::new();
        for r in records {
            for a in &r.attachments {
                match crate::execute::recorded_network_list(a) {
                    Ok(l) => lists.push(l),
                    Err(e) => unreadable.push((
                        Some(r.container_id.clone()),
                        e.context(format!("attachment record of container {}", r.container_id)),
                    )),
                }
            }
        }
        // First occurrence wins the position (the default network stays first).
        let mut out: Vec<NetworkConfigList> = Vec::new();
        for l in lists {
            if !out
                .iter()
                .any(|seen| seen.name == l.name && seen.plugins == l.plugins)
            {
                out.push(l);
            }
        }
        Ok((out, unreadable))
    }
}
