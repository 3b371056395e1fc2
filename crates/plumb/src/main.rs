//! The `plumb` binary: it only dispatches. With `CNI_COMMAND` set it is the runtime's CNI plugin
//! ([`plumb::plugin`]); otherwise it takes subcommands ([`plumb::cli`], [`plumb::daemon`]).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use plumb::cli;

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
    /// Serve CNI calls forwarded by the plugin (when its configuration sets
    /// `plumbDaemonSocket`), with the node's pods and the NADs in watch caches.
    Daemon(plumb::daemon::Args),
    /// Ask `plumb daemon` over its socket whether it is alive, or with `--ready` ready; exit 0
    /// or 1 (for probes).
    Health(cli::health::HealthArgs),
    /// Put this binary in the runtime's CNI bin directory, atomically (a DaemonSet's init
    /// container runs it).
    Install(cli::install::InstallArgs),
    /// Run a CNI network against a network namespace, as the reference cnitool does.
    Cni(cli::cni::Args),
    /// Attach a network namespace to networks exactly as a pod's sandbox would be, and print
    /// its network-status.
    Attach(cli::attach::AttachArgs),
    /// Undo what `plumb attach` did to a network namespace.
    Detach(cli::detach::DetachArgs),
    /// Print the attachments ADD would make for a pod, and what each delegate would get on
    /// stdin, without running anything.
    Plan(cli::plan::PlanArgs),
    /// Check NAD and pod files (YAML or JSON, directories read one level deep): one line per
    /// problem; exit 1 on any error.
    Validate {
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
    },
    /// A pod's network-status as a table, from a pod file or the cluster.
    Status(cli::status::StatusArgs),
}

fn main() -> ExitCode {
    // A value that is not UTF-8 is passed on with its bad bytes replaced, so that the error
    // it leads to (an invalid container ID, a netns that cannot be opened) shows it, rather
    // than a "missing variable" for a variable that is set.
    let getenv = |k: &str| {
        std::env::var_os(k).map(|v| {
            v.into_string()
                .unwrap_or_else(|v| v.to_string_lossy().into_owned())
        })
    };
    if std::env::var_os("CNI_COMMAND").is_some() {
        return ExitCode::from(u8::try_from(plumb::plugin::run(&getenv)).unwrap_or(1));
    }
    match Cli::parse().command {
        Cmd::Daemon(a) => cli::report("daemon", plumb::daemon::run(&a)),
        Cmd::Health(a) => cli::health::run(&a),
        Cmd::Install(a) => {
            cli::report("install", cli::install::install(&a, &mut std::io::stdout()))
        }
        Cmd::Cni(args) => cli::cni::main(args, &getenv),
        Cmd::Attach(a) => cli::report("attach", cli::attach::attach(&a, &mut std::io::stdout())),
        Cmd::Detach(a) => cli::report("detach", cli::detach::detach(&a)),
        Cmd::Plan(a) => cli::report("plan", cli::plan::plan(&a, &mut std::io::stdout())),
        Cmd::Status(a) => cli::report("status", cli::status::status(&a, &mut std::io::stdout())),
        Cmd::Validate { files } => cli::validate::run(&files),
    }
}
