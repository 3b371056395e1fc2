//! The plugin side of the protocol (spec §2 "Execution Protocol", §5 "Result Types"): what every
//! CNI plugin does before and after its own work, as Go's `pkg/skel` does for Go plugins.
//! [`dispatch`] reads the `CNI_*` variables and the configuration through injected functions, so
//! a plugin's every command is unit-tested without touching the process environment.

use std::io::{Read, Write};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::error::{CniError, ErrorCode};
use crate::exec::{Command, split_path};
use crate::result::CniResult;
use crate::validate;
use crate::version::{self, Version, VersionInfo};

/// Everything a plugin is called with: the `CNI_*` parameters and the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct CmdArgs {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS`, unparsed (see [`crate::args::parse`]).
    pub args: String,
    pub path: Vec<PathBuf>,
    /// The configuration exactly as read from stdin.
    pub stdin: Vec<u8>,
    /// The configuration, decoded.
    pub config: Map<String, Value>,
    /// The configuration's `cniVersion`; results are printed in it.
    pub version: Version,
}

/// A plugin's own work, one method per command. VERSION is answered by [`dispatch`].
pub trait Plugin {
    /// The versions this plugin speaks (its VERSION answer, and what configs may ask for).
    fn supported_versions(&self) -> &[Version];
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError>;
    fn check(&self, args: &CmdArgs) -> Result<(), CniError>;
    fn del(&self, args: &CmdArgs) -> Result<(), CniError>;
    /// GC (spec 1.1): nothing to collect by default.
    fn gc(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
    /// STATUS (spec 1.1): ready by default.
    fn status(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
}

/// Which variables a command requires (Go `pkg/skel`; spec §2 "Parameters"). `CNI_NETNS` is
/// optional for DEL: a runtime deletes after the namespace is gone. `CNI_PATH` is optional for
/// STATUS (spec §2 `STATUS`, "Optional environment parameters"): a runtime may probe without it.
fn required_vars(command: Command) -> &'static [&'static str] {
    match command {
        Command::Add | Command::Check => {
            &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]
        }
        Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
        Command::Gc => &["CNI_PATH"],
        Command::Status | Command::Version => &[],
    }
}

/// The lowest configuration version that has each command (spec §2: CHECK from 0.4.0, GC and
/// STATUS from 1.1.0).
fn minimum_version(command: Command) -> Option<Version> {
    match command {
        Command::Check => Some(Version::V0_4_0),
        Command::Gc | Command::Status => Some(Version::V1_1_0),
        _ => None,
    }
}

/// Runs one invocation of `plugin`: reads the parameters through `getenv` and the configuration
/// from `stdin`, writes the result or the error JSON to `stdout`, and returns the process exit
/// code (0 on success, 1 on error). It:
/// - checks the variables each command requires (spec §2 "Parameters"; the table of
///   `pkg/skel`) *before* the plugin acts, and answers code 4 naming every missing one;
/// - answers VERSION itself (spec §2 "VERSION"), echoing the requested version;
/// - decodes the configuration, refuses a version the plugin does not support (code 1), a
///   CHECK below 0.4.0, a GC or STATUS below 1.1.0, and a config without a valid `name`;
/// - refuses an ADD or DEL whose `CNI_NETNS` is the plugin's own network namespace (code 8);
/// - prints an ADD result converted to the configuration's `cniVersion` (spec §5: "the
///   `cniVersion` of the result must match the one in the configuration");
/// - prints any error as the spec's error JSON on stdout and exits non-zero (spec §5 "Error").
///
/// Unlike Go's skel, which runs the plugin first and only then rejects a `CNI_NETNS` equal to
/// its own namespace, every check here happens before the plugin runs.
pub fn dispatch(
    plugin: &dyn Plugin,
    getenv: &dyn Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
) -> i32 {
    let mut version_hint = String::new();
    let outcome = run(plugin, getenv, stdin, &mut version_hint);
    let (text, code) = match outcome {
        Ok(text) => (text, 0),
        Err(mut e) => {
            // The version in use (spec §5 "Error"), not that of a delegate whose error this is.
            if !version_hint.is_empty() || e.cni_version.is_empty() {
                e.cni_version = version_hint;
            }
            (e.to_json(), 1)
        }
    };
    if text.is_empty() {
        return code; // CHECK, DEL, GC and STATUS print nothing on success.
    }
    // A write failure leaves the runtime with no answer either way; the exit code still tells.
    let wrote = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
    if wrote.is_err() { 1 } else { code }
}

fn run(
    plugin: &dyn Plugin,
    getenv: &dyn Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
    version_hint: &mut String,
) -> Result<String, CniError> {
    let var = |name: &str| getenv(name).unwrap_or_default();
    let command_name = var("CNI_COMMAND");
    let command = match command_name.as_str() {
        "" => {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                "required environment variable CNI_COMMAND is missing",
            ));
        }
        name => Command::parse(name).ok_or_else(|| {
            CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("unknown CNI_COMMAND: {name}"),
            )
        })?,
    };

    let mut bytes = Vec::new();
    stdin.read_to_end(&mut bytes).map_err(|e| {
        CniError::new(
            ErrorCode::Io,
            format!("reading the configuration on stdin: {e}"),
        )
    })?;

    if command == Command::Version {
        return version_answer(plugin, &bytes);
    }

    let missing: Vec<&str> = required_vars(command)
        .iter()
        .copied()
        .filter(|v| var(v).is_empty())
        .collect();
    if !missing.is_empty() {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!(
                "required environment variables missing for {}: {}",
                command.as_str(),
                missing.join(", ")
            ),
        ));
    }

    let config = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            return Err(CniError::new(
                ErrorCode::DecodingFailure,
                "the configuration on stdin is not a JSON object",
            ));
        }
        Err(e) => {
            return Err(CniError::new(
                ErrorCode::DecodingFailure,
                format!("the configuration on stdin is not valid JSON: {e}"),
            ));
        }
    };
    let version = version::version_of(&bytes)?;
    *version_hint = version.to_string();
    if !plugin.supported_versions().contains(&version) {
        let supported: Vec<String> = plugin
            .supported_versions()
            .iter()
            .map(Version::to_string)
            .collect();
        return Err(CniError::new(
            ErrorCode::IncompatibleVersion,
            format!(
                "incompatible CNI versions: config is {version}, plugin supports {}",
                supported.join(", ")
            ),
        ));
    }
    if let Some(min) = minimum_version(command)
        && version < min
    {
        return Err(CniError::new(
            ErrorCode::IncompatibleVersion,
            format!(
                "config version {version} does not allow {} (needs {min} or later)",
                command.as_str()
            ),
        ));
    }
    match config.get("name") {
        Some(Value::String(name)) => validate::network_name(name)?,
        _ => {
            return Err(CniError::new(
                ErrorCode::InvalidConfig,
                "the configuration has no \"name\" string",
            ));
        }
    }

    let args = CmdArgs {
        container_id: var("CNI_CONTAINERID"),
        netns: var("CNI_NETNS"),
        ifname: var("CNI_IFNAME"),
        args: var("CNI_ARGS"),
        path: split_path(&var("CNI_PATH")),
        stdin: bytes,
        config,
        version,
    };
    if matches!(command, Command::Add | Command::Check | Command::Del) {
        validate::container_id(&args.container_id)?;
        validate::interface_name(&args.ifname)?;
    }
    if matches!(command, Command::Add | Command::Del) {
        not_own_netns(&args.netns)?;
    }
    match command {
        Command::Add => plugin.add(&args)?.convert_to(version)?.to_json(),
        Command::Check => plugin.check(&args).map(|()| String::new()),
        Command::Del => plugin.del(&args).map(|()| String::new()),
        Command::Gc => plugin.gc(&args).map(|()| String::new()),
        Command::Status => plugin.status(&args).map(|()| String::new()),
        Command::Version => version_answer(plugin, &args.stdin),
    }
}

/// Go `pkg/skel` refuses an ADD or DEL whose `CNI_NETNS` is the plugin's own network namespace
/// (code 8, `ErrInvalidNetNS`): the plugin runs in the runtime's networking domain (spec §2
/// "Overview"), and acting on "the container's" interfaces there would act on the host's. A
/// netns that cannot be inspected (none given, or already gone for DEL) is left to the plugin.
fn not_own_netns(netns: &str) -> Result<(), CniError> {
    use std::os::unix::fs::MetadataExt;
    if netns.is_empty() {
        return Ok(());
    }
    let id = |p: &str| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    match (id(netns), id("/proc/thread-self/ns/net")) {
        (Some(given), Some(own)) if given == own => Err(CniError::new(
            ErrorCode::InvalidNetNs,
            format!(
                "CNI_NETNS: {netns:?} is the plugin's own network namespace, not a container's"
            ),
        )),
        _ => Ok(()),
    }
}

/// The VERSION answer (spec §5 "Version success"). VERSION needs no configuration; when one is
/// given, its version is echoed.
fn version_answer(plugin: &dyn Plugin, stdin: &[u8]) -> Result<String, CniError> {
    let requested = if stdin.iter().all(u8::is_ascii_whitespace) {
        Version::CURRENT
    } else {
        version::version_of(stdin)?
    };
    let info = VersionInfo::answer(&requested.to_string(), plugin.supported_versions());
    serde_json::to_string(&info)
        .map_err(|e| CniError::new(ErrorCode::Internal, format!("encoding VERSION: {e}")))
}

#[cfg(test)]
mod tests;
