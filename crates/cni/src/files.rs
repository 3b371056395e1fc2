//! Files a CNI call is told to read or write (plumb's kubeconfig, its token and certificate
//! files, its log file; configuration files, result-cache entries, attachment records,
//! device-info files), opened so that a path naming the wrong thing fails
//! the call with an error rather than holding it:
//! a FIFO waits for its other end, a device like `/dev/zero` never ends, and a huge file read
//! whole could get the plugin killed for its memory, with no error for the runtime.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// `O_NONBLOCK`, so that opening a FIFO does not wait for its other end. It changes nothing for
/// a regular file, the only kind used once open.
pub fn nonblocking() -> i32 {
    nix::fcntl::OFlag::O_NONBLOCK.bits()
}

/// The bytes of the regular file `path`, at most `limit` of them. Anything else is refused
/// without waiting or reading on, as `InvalidData`; the error says why, without the path (the
/// caller names it). A missing file is `NotFound`, as from `open`.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nonblocking())
        .open(path)?;
    regular(&file)?;
    let mut bytes = Vec::new();
    // One byte past the limit tells "exactly the limit" from "more".
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "larger than {}, more than any file of its kind; not read",
                size(limit)
            ),
        ));
    }
    Ok(bytes)
}

/// Whether the regular file `path` holds exactly `bytes`: whether a file a daemon keeps needs
/// writing again. Read as [`read_bounded`], no further than `bytes` go, so that whatever took
/// its place (a FIFO, a device, a huge file) is found different at once, to be replaced by the
/// caller's atomic rename, and never holds the daemon's loop.
pub fn holds(path: &Path, bytes: &[u8]) -> bool {
    read_bounded(path, bytes.len() as u64).is_ok_and(|held| held == bytes)
}

/// Whether `file`, once open, is a regular file (it may not be what a check of its path saw);
/// `InvalidData` saying what it is otherwise.
pub fn regular(file: &File) -> io::Result<()> {
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            not_regular(kind),
        ))
    }
}

/// The error for a file of `kind` where a regular file was needed.
pub fn not_regular(kind: FileType) -> String {
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "of an unknown kind"
    };
    format!("not a regular file ({what})")
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}
