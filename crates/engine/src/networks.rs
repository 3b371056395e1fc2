//! Where a node finds delegate configurations (the planner's [`Networks`] seam): NADs from the
//! API server, and configuration files from plumb's `confDir` or a configured path, read as
//! libcni reads them (multi-net spec §3.4.1). For STATUS, NADs that recorded pods attached
//! come from their records ([`RecordedNads`]). The NADs a pod selects are fetched together
//! before planning ([`PrefetchedNads`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cni::NetworkConfigList;
use cni::conf_dir;
use cni::error::{CniError, ErrorCode};
use netattach::{NetworkAttachmentDefinition, NetworkRef};

use crate::cluster::Cluster;
use crate::execute::recorded_network_list;
use crate::plan::Networks;
use crate::record::Record;

/// NADs from `cluster` (none without Kubernetes), files from `conf_dir`.
pub struct NodeNetworks<'a> {
    pub cluster: Option<&'a dyn Cluster>,
    pub conf_dir: PathBuf,
}

impl Networks for NodeNetworks<'_> {
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        match self.cluster {
            Some(c) => c.nad(r),
            None => Ok(None),
        }
    }

    fn conf_by_name(&self, name: &str) -> Result<Option<NetworkConfigList>, CniError> {
        if !self.conf_dir.is_dir() {
            return Ok(None);
        }
        conf_dir::find_network(&self.conf_dir, name)
    }

    fn conf_at(&self, path: &Path) -> Result<NetworkConfigList, CniError> {
        if path.is_dir() {
            let files = conf_dir::conf_files(path, &["conflist", "conf", "json"])?;
            let first = files.first().ok_or_else(|| {
                CniError::new(
                    ErrorCode::InvalidConfig,
                    format!("no CNI configuration file in {}", path.display()),
                )
            })?;
            return conf_dir::load_file(first);
        }
        conf_dir::load_file(path)
    }
}

/// NADs fetched before planning, in front of `rest`: the planner asks for NADs one at a time,
/// and asked of the API one at a time each is a round trip; fetched together
/// ([`Cluster::nads`]) they share one. Each fetched NAD answers as `rest` would have: found,
/// missing, or the error of its GET, which surfaces only if the planner asks for it (one it
/// refuses, or never reaches, fails nothing). Any other NAD is asked of `rest`.
pub struct PrefetchedNads<'a> {
    nads: BTreeMap<NetworkRef, Result<Option<NetworkAttachmentDefinition>, CniError>>,
    rest: Box<dyn Networks + 'a>,
}

impl<'a> PrefetchedNads<'a> {
    /// `refs` fetched from `cluster` now.
    pub fn new(
        cluster: &dyn Cluster,
        refs: &[NetworkRef],
        rest: Box<dyn Networks + 'a>,
    ) -> PrefetchedNads<'a> {
        let nads = refs.iter().cloned().zip(cluster.nads(refs)).collect();
        PrefetchedNads { nads, rest }
    }
}

impl Networks for PrefetchedNads<'_> {
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        match self.nads.get(r) {
            Some(fetched) => fetched.clone(),
            None => self.rest.nad(r),
        }
    }

    fn conf_by_name(&self, name: &str) -> Result<Option<NetworkConfigList>, CniError> {
        self.rest.conf_by_name(name)
    }

    fn conf_at(&self, path: &Path) -> Result<NetworkConfigList, CniError> {
        self.rest.conf_at(path)
    }
}

/// NADs for STATUS, which the runtime asks every few seconds on every node (with containerd,
/// at each of the kubelet's runtime-status polls): a NAD that a recorded pod attached is read
/// from its record, as the network's own configuration that ADD got from the API, so that a
/// node with pods asks the API server nothing. An API outage or throttling then does not mark
/// every node's network not ready, and thousands of nodes do not each open a TLS connection to
/// the API server every few seconds. A NAD no record names comes from `fallback` (the API, or
/// `plumbNadDir`), which is built only then; a name that recorded pods got from a configuration
/// file is taken to be no NAD. Files are read as ADD reads them.
///
/// What it cannot see: a NAD edited (or made) since the last ADD on the node is checked as it
/// was until the next ADD records the new configuration (which STATUS then checks too).
pub struct RecordedNads<'a> {
    pub records: &'a [Record],
    pub fallback: &'a dyn Fn() -> Result<Box<dyn Networks + 'a>, CniError>,
    pub files: NodeNetworks<'a>,
}

impl Networks for RecordedNads<'_> {
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        let qualified = r.to_string();
        let mut attachments = self.records.iter().flat_map(|rec| &rec.attachments);
        let recorded = attachments
            .clone()
            .filter(|a| a.network == qualified)
            // An unreadable one is reported by STATUS's reading of every record.
            .find_map(|a| recorded_network_list(a).ok());
        if let Some(list) = recorded {
            return Ok(Some(NetworkAttachmentDefinition::new(
                &r.namespace,
                &r.name,
                Some(String::from_utf8_lossy(&list.bytes).into_owned()),
            )));
        }
        // A configured name that recorded pods got from a file (a network named without a
        // namespace) was no NAD at their ADD: the usual `clusterNetwork` naming the primary
        // plugin's configuration file would otherwise ask the API server for it every time.
        if attachments.any(|a| a.network == r.name) {
            return Ok(None);
        }
        (self.fallback)()?.nad(r)
    }

    fn conf_by_name(&self, name: &str) -> Result<Option<NetworkConfigList>, CniError> {
        self.files.conf_by_name(name)
    }

    fn conf_at(&self, path: &Path) -> Result<NetworkConfigList, CniError> {
        self.files.conf_at(path)
    }
}
