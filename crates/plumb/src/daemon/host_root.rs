//! `plumb daemon --host-root ROOT`: the daemon enters the node's root file system, mounted in its
//! pod at ROOT, before it starts anything (`chroot`), so that it and every delegate it runs see
//! the node's files: `CNI_NETNS`, `binDir` and `CNI_PATH`, the result cache, plumb's records, the
//! device-info files and every file a configuration names mean what they mean on the node, as
//! Multus's `chrootDir` means for its delegates only.
//!
//! The whole daemon enters, not each delegate: a delegate started chrooted needs an unsafe
//! `pre_exec` or a re-exec of plumb per delegate (~1 ms each), and a daemon that looked up files
//! in its pod while its delegates ran on the node would see two file systems (Multus's daemon
//! finds a plugin in its pod that the chrooted delegate then does not find). What the daemon
//! needs of its own pod, the service account's directory, is opened before it enters and read
//! through that open directory afterwards (`/proc/self/fd/N`, in the node's `/proc`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use cni::error::{CniError, ErrorCode};

/// What the daemon keeps of its pod's file system once in the node's root.
pub(super) struct Entered {
    /// The service account's directory, open; `None` when it could not be opened (the daemon
    /// does not need it: it has `--kubeconfig` and writes none).
    service_account: Option<File>,
}

impl Entered {
    /// The path the service account's directory is read at from now on.
    pub(super) fn service_account_dir(&self) -> Option<PathBuf> {
        (self.service_account.as_ref())
            .map(|d| PathBuf::from(format!("/proc/self/fd/{}", d.as_raw_fd())))
    }
}

/// Opens `service_account` (an error if it cannot be and `needs_service_account`), then enters
/// `root`. Called before any thread is started: nothing the daemon reads afterwards is its
/// pod's.
pub(super) fn enter(
    root: &Path,
    service_account: &Path,
    needs_service_account: bool,
) -> Result<Entered, CniError> {
    let failed = |what: String| {
        CniError::new(
            ErrorCode::InvalidConfig,
            format!("--host-root {}: {what}", root.display()),
        )
    };
    // Opened with O_CLOEXEC (std's): the delegates do not inherit the pod's token.
    let service_account = match File::open(service_account) {
        Ok(dir) if dir.metadata().is_ok_and(|m| m.is_dir()) => Some(dir),
        Ok(_) if needs_service_account => {
            return Err(failed(format!(
                "--service-account-dir {} is not a directory",
                service_account.display()
            )));
        }
        Err(e) if needs_service_account => {
            return Err(failed(format!(
                "--service-account-dir {}: {e} (it is opened before the daemon enters the \
                 node's root)",
                service_account.display()
            )));
        }
        _ => None,
    };
    std::os::unix::fs::chroot(root).map_err(|e| failed(format!("cannot enter it: {e}")))?;
    std::env::set_current_dir("/").map_err(|e| failed(format!("cannot enter it: {e}")))?;
    // The node's /proc: the daemon moves between network namespaces through it, reads the
    // service account through it, and the delegates write their sysctls into it.
    if std::fs::metadata("/proc/self/ns/net").is_err() {
        return Err(failed(
            "it has no proc file system at /proc: mount the node's / with its sub-mounts (a \
             hostPath volume does)"
                .to_string(),
        ));
    }
    Ok(Entered { service_account })
}
