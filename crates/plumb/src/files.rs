//! Files that plumb's configuration names (a kubeconfig, its token file, the log file), opened
//! so that a path naming the wrong thing fails the call with an error rather than holding it:
//! a FIFO waits for its other end, a device like `/dev/zero` never ends, and a huge file read
//! whole could get the plugin killed for its memory, with no error for the runtime.

use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// `O_NONBLOCK`, so that opening a FIFO does not wait for its other end. It changes nothing for
/// a regular file, the only kind used once open.
pub fn nonblocking() -> i32 {
    nix::fcntl::OFlag::O_NONBLOCK.bits()
}

/// The bytes of the regular file `path`, at most `limit` of them. Anything else is refused
/// without waiting or reading on; the error says why, without the path (the caller names it).
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nonblocking())
        .open(path)
        .map_err(|e| e.to_string())?;
    regular(&file)?;
    let mut bytes = Vec::new();
    // One byte past the limit tells "exactly the limit" from "more".
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "larger than {}, more than any file of its kind; not read",
            size(limit)
        ));
    }
    Ok(bytes)
}

/// Whether `file`, once open, is a regular file (it may not be what a check of its path saw).
pub fn regular(file: &File) -> Result<(), String> {
    let kind = file.metadata().map_err(|e| e.to_string())?.file_type();
    if kind.is_file() {
        Ok(())
    } else {
        Err(not_regular(kind))
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
