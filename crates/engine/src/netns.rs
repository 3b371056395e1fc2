//! The network namespace a call names (`CNI_NETNS`, CNI spec 1.1 §2 "Parameters"), checked
//! before ADD or CHECK runs anything: a path that is missing, a FIFO, a plain file or another
//! kind of namespace is refused with an error naming it, where it would otherwise reach the first
//! delegate (and its rollback). Nothing is opened until the path is known to be a namespace file,
//! so a FIFO never blocks the call.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use cni::error::{CniError, ErrorCode};
use nix::errno::Errno;
use nix::sched::{CloneFlags, setns};
use nix::sys::statfs::{NSFS_MAGIC, PROC_SUPER_MAGIC, statfs};

/// Whether `path` is a network namespace: what kind of file it is, `statfs` (a namespace file
/// lives on nsfs, or procfs for `/proc/PID/ns/net` on old kernels), then whether the kernel
/// takes it as a network namespace. Returns its inode, which tells this namespace from one
/// made later at the same path.
pub fn check(path: &str) -> Result<u64, CniError> {
    let refuse = |why: String| {
        CniError::new(
            ErrorCode::InvalidNetNs,
            format!(
                "CNI_NETNS {} {why}, not a network namespace",
                cni::quote::quoted(path)
            ),
        )
    };
    let p = Path::new(path);
    // A symbolic link (`/proc/PID/ns/net`) is judged by what it names.
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => refuse("does not exist".into()),
        _ => refuse(format!("cannot be looked at ({e})")),
    })?;
    let kind = meta.file_type();
    let not_a_file = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_block_device() || kind.is_char_device() {
        Some("a device")
    } else {
        None
    };
    if let Some(what) = not_a_file {
        return Err(refuse(format!("is {what}")));
    }
    let fs_type = statfs(p)
        .map_err(|e| refuse(format!("cannot be looked at ({e})")))?
        .filesystem_type();
    if fs_type != NSFS_MAGIC && fs_type != PROC_SUPER_MAGIC {
        return Err(refuse("is a plain file".into()));
    }
    let file = File::open(p).map_err(|e| refuse(format!("cannot be opened ({e})")))?;
    // The kernel names the kind of a namespace opened through /proc (`uts:[…]`), not of one
    // bind-mounted elsewhere (`/run/netns/NAME`); `setns` takes only a network namespace for
    // CLONE_NEWNET. A thread made for it enters it and ends: nothing runs there.
    let kind = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            let (kind, rest) = l.split_once(':')?;
            rest.starts_with('[').then(|| kind.to_string())
        });
    let entered = std::thread::Builder::new()
        .name("plumb-netns-check".into())
        .spawn(move || setns(&file, CloneFlags::CLONE_NEWNET))
        .map_err(|e| {
            CniError::new(
                ErrorCode::Internal,
                format!(
                    "CNI_NETNS {}: cannot start a thread to check it: {e}",
                    cni::quote::quoted(path)
                ),
            )
        })?
        .join();
    match entered {
        Ok(Ok(())) => Ok(std::os::unix::fs::MetadataExt::ino(&meta)),
        Ok(Err(Errno::EINVAL)) => Err(refuse(match kind {
            Some(kind) if kind != "net" => format!("is a {kind} namespace"),
            None if fs_type == PROC_SUPER_MAGIC => "is no namespace".into(),
            _ => "is a namespace of another kind".into(),
        })),
        Ok(Err(e)) => Err(refuse(format!("cannot be entered ({e})"))),
        Err(_) => Err(CniError::new(
            ErrorCode::Internal,
            format!(
                "CNI_NETNS {}: the thread checking it panicked",
                cni::quote::quoted(path)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(path: &str) -> String {
        let e = check(path).unwrap_err();
        assert_eq!(e.code, 8, "{e}");
        assert!(e.msg.contains(path), "{e}");
        e.msg
    }

    #[test]
    fn only_a_network_namespace_passes() {
        check("/proc/self/ns/net").unwrap();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_str().unwrap().to_string();
        assert!(refused(&format!("{dir}/gone")).contains("does not exist"));
        assert!(refused(&dir).contains("is a directory"));
        let plain = format!("{dir}/plain");
        std::fs::write(&plain, "x").unwrap();
        assert!(refused(&plain).contains("is a plain file"));
        let fifo = format!("{dir}/fifo");
        nix::unistd::mkfifo(fifo.as_str(), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Refused at once: a FIFO opened for reading would wait for a writer for ever.
        assert!(refused(&fifo).contains("is a FIFO"));
        assert!(refused("/proc/self/ns/uts").contains("is a uts namespace"));
        assert!(refused("/proc/self/status").contains("is no namespace"));
        // A network namespace bind-mounted by `ip netns add`, as runtimes make them.
        let ns = testkit::netns::Netns::new();
        check(ns.path().to_str().unwrap()).unwrap();
    }
}
