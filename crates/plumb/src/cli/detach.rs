//! `plumb detach`: undo what `plumb attach` did to a network namespace, from its record.

use std::path::PathBuf;

use cni::error::{CniError, ErrorCode};
use plumb_engine::paths;

use super::cni::netns_path;
use super::local::{LocalNode, read_config, sandbox_for};

#[derive(Debug, clap::Args)]
pub struct DetachArgs {
    #[arg(long)]
    pub netns: String,
    #[arg(long)]
    pub container_id: Option<String>,
    #[arg(long, default_value = paths::CONFIG)]
    pub config: PathBuf,
}

/// `plumb detach`: undoes what `plumb attach` recorded.
pub fn detach(a: &DetachArgs) -> Result<(), CniError> {
    let config = read_config(&a.config)?;
    let netns = netns_path(&a.netns)?;
    let node = LocalNode::new(&config);
    let sandbox = sandbox_for(&netns, a.container_id.as_deref());
    let turn = node.turn(&sandbox)?;
    let attached = node.executor().del(&sandbox, &netns)?;
    // Nothing of the sandbox is left (or ever was): neither a record a killed `attach` was
    // writing nor its lock file.
    node.records.remove_staged(&sandbox.container_id);
    turn.end_for_good();
    if attached {
        Ok(())
    } else {
        Err(CniError::new(
            ErrorCode::UnknownContainer,
            format!(
                "nothing is attached to {netns} (no record for container {} in {})",
                sandbox.container_id,
                node.records.dir().display()
            ),
        ))
    }
}
