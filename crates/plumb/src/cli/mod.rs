//! plumb's subcommands other than the daemon, one file each: `plumb attach`, `detach`, `plan`
//! and `status` (a namespace or a pod as the plugin would see it, with or without a cluster),
//! `plumb validate` (NADs and pods checked before they reach a cluster), `plumb health` (the
//! daemon asked whether it is alive or ready), `plumb install` (the binary put in the CNI bin
//! directory) and `plumb cni` (a network configuration run by
//! hand, as the reference `cnitool` does).

use std::process::ExitCode;

pub mod attach;
pub mod cni;
pub mod detach;
pub mod health;
pub mod install;
mod local;
pub mod plan;
pub mod status;
pub mod validate;

#[cfg(test)]
mod tests;

/// Runs a subcommand's result: errors on stderr, readably, with exit 1.
pub fn report(what: &str, r: Result<(), ::cni::CniError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plumb {what}: {e} (CNI error code {})", e.code);
            ExitCode::FAILURE
        }
    }
}
