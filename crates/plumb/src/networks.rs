//! Where a node finds delegate configurations (the planner's [`Networks`] seam): NADs from the
//! API server, and configuration files from plumb's `confDir` or a configured path, read as
//! libcni reads them (multi-net spec §3.4.1).

use std::path::{Path, PathBuf};

use cni::NetworkConfigList;
use cni::conf_dir;
use cni::error::{CniError, ErrorCode};
use netattach::{NetworkAttachmentDefinition, NetworkRef};

use crate::cluster::Cluster;
use crate::plan::Networks;

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
