//! The `plumb` binary. With `CNI_COMMAND` set it is the runtime's CNI plugin (thin mode:
//! everything in this process); otherwise it takes subcommands:
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
    let getenv = |k: &str| std::env::var(k).ok();
    if std::env::var_os("CNI_COMMAND").is_some() {
        let plugin = plumb::plugin::Plumb {
            routes: &plumb::plugin::NetlinkRoutes,
        };
        let code = cni::skel::dispatch(
            &plugin,
            &getenv,
            &mut std::io::stdin().lock(),
            &mut std::io::stdout().lock(),
        );
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse();
    match cli.command {
        Cmd::Cni(args) => plumb::cnitool::main(args, &getenv),
    }
}
