//! The `plumb` binary. With `CNI_COMMAND` set it is the runtime's CNI plugin: thin mode
//! (everything in this process), or a shim that forwards the call to `plumb daemon` when the
//! configuration names its socket (`plumbDaemonSocket`). Otherwise it takes subcommands:
//! - `plumb daemon`: serve the shim's calls, keeping API clients between them.
//! - `plumb cni add|check|del|gc|status NETWORK [NETNS]`: run a CNI network from the
//!   configuration directory against a namespace, like the reference `cnitool`.
//! - `plumb attach` / `plumb detach`: attach a namespace to networks as a pod would be.
//! - `plumb plan`: what ADD would do for a pod, without doing it.

use std::io::{Read, Write};
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
    /// Serve CNI calls forwarded by the plugin (when its configuration sets
    /// `plumbDaemonSocket`), keeping the API client and its connection between calls.
    Daemon(plumb::daemon::Args),
    /// Run a CNI network against a network namespace, as the reference cnitool does.
    Cni(plumb::cnitool::Args),
    /// Attach a network namespace to networks exactly as a pod's sandbox would be, and print
    /// its network-status.
    Attach(plumb::standalone::AttachArgs),
    /// Undo what `plumb attach` did to a network namespace.
    Detach(plumb::standalone::DetachArgs),
    /// Print the attachments ADD would make for a pod, and what each delegate would get on
    /// stdin, without running anything.
    Plan(plumb::standalone::PlanArgs),
    /// Check NAD and pod files (YAML or JSON, directories read one level deep): one line per
    /// problem; exit 1 on any error.
    Validate {
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
    },
    /// A pod's network-status as a table, from a pod file or the cluster.
    Status(plumb::standalone::StatusArgs),
}

/// Runs a subcommand's result: errors on stderr, readably, with exit 1.
fn report(what: &str, r: Result<(), cni::CniError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plumb {what}: {e} (CNI error code {})", e.code);
            ExitCode::FAILURE
        }
    }
}

/// `plumb validate`: every problem on stdout, a count on stderr.
fn validate(paths: &[std::path::PathBuf]) -> ExitCode {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        let found = match plumb::objects::files_of(std::slice::from_ref(path)) {
            Ok(f) => f,
            Err(e) => return report("validate", Err(e)),
        };
        // A directory with nothing to check is most likely a mistyped path: it must not pass.
        if found.is_empty() {
            problems.push(plumb::validate::Problem {
                severity: plumb::validate::Severity::Error,
                object: path.display().to_string(),
                message: "no .yaml, .yml or .json file to check in this directory".into(),
            });
        }
        files.extend(found);
    }
    // A file named twice (a directory and a file in it, overlapping globs) is read once: read
    // twice, each of its NADs would be "defined more than once".
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    // A file that cannot be read is a problem of its own; the others are still checked.
    let mut objects = Vec::new();
    for f in &files {
        match plumb::objects::read_file(f) {
            Ok(o) => objects.extend(o),
            Err(e) => {
                // The reader's message names the file too (for callers that name nothing).
                let object = f.display().to_string();
                let message = match e.msg.strip_prefix(&format!("{object}: ")) {
                    Some(rest) => rest.to_string(),
                    None => e.msg,
                };
                problems.push(plumb::validate::Problem {
                    severity: plumb::validate::Severity::Error,
                    object,
                    message,
                })
            }
        }
    }
    problems.extend(plumb::validate::validate(&objects));
    // Not println!, which panics when stdout cannot be written (a closed pipe, a full disk).
    let mut out = std::io::stdout().lock();
    let wrote = problems
        .iter()
        .try_for_each(|p| writeln!(out, "{p}"))
        .and_then(|()| out.flush());
    if let Err(e) = wrote {
        eprintln!("plumb validate: cannot write to stdout: {e}");
        return ExitCode::FAILURE;
    }
    let errors = problems
        .iter()
        .filter(|p| p.severity == plumb::validate::Severity::Error)
        .count();
    eprintln!(
        "plumb validate: {} objects, {errors} errors, {} warnings",
        objects.len(),
        problems.len() - errors
    );
    if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The CNI plugin: the call forwarded to the daemon when the configuration names one that
/// listens, else run here (thin mode). Its exit code.
fn plugin(getenv: &dyn Fn(&str) -> Option<String>) -> i32 {
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut stdin) {
        // As the skeleton reports it.
        let e = cni::CniError::new(
            cni::ErrorCode::Io,
            format!("reading the configuration on stdin: {e}"),
        );
        let _ = writeln!(std::io::stdout(), "{}", e.to_json());
        return 1;
    }
    let mut stdout = std::io::stdout().lock();
    if let Some(socket) = plumb::shim::daemon_socket(&stdin) {
        let env: std::collections::BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("CNI_"))
            .filter_map(|k| getenv(&k).map(|v| (k, v)))
            .collect();
        let slow = |line: &str| plumb::shim::slow(&env, &stdin, line);
        match plumb::shim::forward(&socket, &env, &stdin, &slow) {
            Ok(plumb::shim::Forwarded::Answer { stdout: out, code }) => {
                let wrote = stdout.write_all(&out).and_then(|()| stdout.flush());
                return if wrote.is_ok() { code } else { 1 };
            }
            Ok(plumb::shim::Forwarded::NoDaemon(why)) => {
                if let Ok(config) = plumb::config::Config::parse(&stdin) {
                    plumb::log::Log::from_config(&config)
                        .verbose(&format!("{why}: running the call in this process"));
                }
            }
            Err(e) => {
                let mut e = plumb::shim::failed(e, &env, &stdin);
                e.cni_version = cni_version(&stdin);
                let _ = writeln!(stdout, "{}", e.to_json());
                return 1;
            }
        }
    }
    let plugin = plumb::plugin::Plumb {
        routes: &plumb::plugin::NetlinkRoutes,
        clients: None,
        caller: plumb::plugin::Caller::ThisProcess,
    };
    cni::skel::dispatch(&plugin, getenv, &mut &stdin[..], &mut stdout)
}

/// The `cniVersion` of a configuration, for an error about it (empty when there is none).
fn cni_version(stdin: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
        .unwrap_or_default()
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
        return ExitCode::from(u8::try_from(plugin(&getenv)).unwrap_or(1));
    }
    let cli = Cli::parse();
    match cli.command {
        Cmd::Daemon(a) => report("daemon", plumb::daemon::run(&a)),
        Cmd::Cni(args) => plumb::cnitool::main(args, &getenv),
        Cmd::Attach(a) => report(
            "attach",
            plumb::standalone::attach(&a, &mut std::io::stdout()),
        ),
        Cmd::Detach(a) => report("detach", plumb::standalone::detach(&a)),
        Cmd::Plan(a) => report("plan", plumb::standalone::plan(&a, &mut std::io::stdout())),
        Cmd::Status(a) => report(
            "status",
            plumb::standalone::status(&a, &mut std::io::stdout()),
        ),
        Cmd::Validate { files } => validate(&files),
    }
}
