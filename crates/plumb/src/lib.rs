//! plumb, the binary's parts: [`plugin`], the runtime's CNI plugin (thin mode, or forwarded by
//! the [`shim`] to the [`daemon`]), and the subcommands of [`cli`]. The engine (plumb-engine)
//! and how it reaches Kubernetes (plumb-cluster) live in their own crates; docs/architecture.md
//! says which crate holds what.

pub mod cli;
pub mod daemon;
pub mod plugin;
pub mod shim;
