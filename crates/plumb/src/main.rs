//! The `plumb` binary. Subcommands:
//! - `plumb cni add|check|del|gc|status NETWORK [NETNS]`: run a CNI network from the
//!   configuration directory against a namespace, like the reference `cnitool`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "plumb",
    version,
    about = "Attach pods to several networks (CNI delegating plugin)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a CNI network against a network namespace, as the reference cnitool does.
    Cni(plumb::cnitool::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Cni(args) => plumb::cnitool::main(args, &|k| std::env::var(k).ok()),
    }
}
