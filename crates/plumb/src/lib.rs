//! plumb: a CNI delegating plugin implementing the Network Plumbing Working Group's
//! multi-network specification. See ../../shared/DESIGN.md for the way of one ADD.
//!
//! - [`cnitool`]: `plumb cni`, an operator's tool that runs a network configuration list
//!   against a network namespace, as the reference `cnitool` does.
//! - [`config`]: plumb's configuration, Multus's keys accepted unchanged.
//! - [`record`]: the attachment records DEL works from.
//! - [`routes`]: `default-route` (spec §4.1.2.1.9) in the pod's netns, over netlink.

pub mod cnitool;
pub mod config;
pub mod record;
pub mod routes;
