//! `plumb install`: puts this plumb binary in the runtime's CNI bin directory (the DaemonSet's
//! init container runs it). The copy is written beside the target under a temporary name
//! (`cni::cache::stage`'s, unique even for two installs that are each PID 1), fsynced, run once
//! (`CNI_COMMAND=VERSION` must answer), then renamed over the target and the directory fsynced:
//! the runtime execs either the old binary or the new one, whole, never a part, and the running
//! old one is never opened for writing ("text file busy").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cni::error::{CniError, ErrorCode};
use plumb_engine::paths;

#[derive(clap::Args)]
pub struct InstallArgs {
    /// The runtime's CNI bin directory, as this process sees it (a DaemonSet pod: where it
    /// mounts the node's, say `/host/opt/cni/bin`). Made if missing.
    #[arg(long, default_value = paths::BIN_DIR)]
    pub bin_dir: PathBuf,
    /// The file name to install as (the `type` of plumb's CNI configuration).
    #[arg(long, default_value = "plumb")]
    pub name: String,
}

/// Installs the running binary; says what it did on stdout.
pub fn install(args: &InstallArgs, out: &mut dyn Write) -> Result<(), CniError> {
    cni::validate::plugin_type(&args.name)
        .map_err(|e| e.context(format!("--name {:?}", args.name)))?;
    let exe = Path::new("/proc/self/exe");
    let binary = std::fs::read(exe)
        .map_err(|e| CniError::new(ErrorCode::Io, format!("cannot read {}: {e}", exe.display())))?;
    let target = args.bin_dir.join(&args.name);
    let version = crate::shim::VERSION;
    if std::fs::read(&target).is_ok_and(|there| there == binary) {
        let _ = writeln!(out, "plumb {version} is at {} already", target.display());
        return Ok(());
    }
    std::fs::create_dir_all(&args.bin_dir).map_err(|e| {
        CniError::new(
            ErrorCode::Io,
            format!("cannot make {}: {e}", args.bin_dir.display()),
        )
    })?;
    // What an install killed before its rename left (an hour old: not a live one's).
    for left in
        cni::cache::sweep_staged_beside(&target, plumb_engine::commands::STAGED_FILE_MAX_AGE)?
    {
        let _ = writeln!(
            out,
            "removed {}, left by an install killed before it finished",
            left.display()
        );
    }
    let mut staged = cni::cache::stage_with_mode(&target, &binary, 0o755)?;
    staged.sync_and_close()?;
    if let Err(why) = answers_version(staged.temporary()) {
        // Dropped, the copy is removed.
        return Err(CniError::new(
            ErrorCode::Io,
            format!(
                "the copy {} does not run: {why}; {} is left as it was",
                staged.temporary().display(),
                target.display()
            ),
        ));
    }
    let replaced = target.exists();
    staged.commit_durable()?;
    let _ = writeln!(
        out,
        "installed plumb {version} at {}{}",
        target.display(),
        if replaced {
            ", replacing the file there"
        } else {
            ""
        }
    );
    Ok(())
}

/// Whether `binary` answers a CNI `VERSION` call, as the runtime's first call would be.
fn answers_version(binary: &Path) -> Result<(), String> {
    let out = Command::new(binary)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("its VERSION answer is not JSON ({e}), exit {}", out.status))?;
    if !out.status.success() || !answer["supportedVersions"].is_array() {
        return Err(format!(
            "its VERSION answer has no supportedVersions: {answer}"
        ));
    }
    Ok(())
}
