//! The daemon's unix socket: its directory made safe (root's, 0700), and a socket bound beside
//! the path and renamed onto it, so that a daemon started while another serves the path takes
//! it over (a DaemonSet rollout with `maxSurge`), and a killed daemon's leftover is reclaimed.
//! The looks at another daemon's socket never wait on a full queue.

use super::*;

/// The socket's directory, made `0700` if missing. One that exists must be the daemon's own:
/// owned by root or by the daemon's uid and writable by its owner alone, else whoever may write
/// there can put their own socket in place of the daemon's and be sent every CNI call.
pub(super) fn socket_dir(path: &Path, uid: u32) -> Result<(), CniError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| socket_error(path, what, e);
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("cannot create its directory", &e)),
        Err(e) => Err(fail("its directory", &e)),
        Ok(m) if m.uid() != 0 && m.uid() != uid => Err(fail(
            &format!(
                "its directory {} is owned by uid {}",
                dir.display(),
                m.uid()
            ),
            &format!("it must be owned by root or by uid {uid}, which runs the daemon"),
        )),
        Ok(m) if m.mode() & 0o022 != 0 => Err(fail(
            &format!(
                "its directory {} is writable by others (mode {:o})",
                dir.display(),
                m.mode() & 0o7777
            ),
            &"make it writable by its owner only (chmod go-w) or choose another directory",
        )),
        Ok(_) => Ok(()),
    }
}

/// What was at the socket's path before this daemon's socket replaced it.
pub(super) enum Replaced {
    Nothing,
    /// A socket a daemon answered on: that daemon stops taking calls once it sees (`serve`).
    Live,
    /// A socket nothing listened on: left by a daemon that is gone.
    Stale,
}

/// The listening socket at `path`, 0600, its (device, inode), and what it replaced.
///
/// Bound under a name of its own in the same directory, then renamed onto `path`: rename(2)
/// replaces atomically, so at every instant the path names a listening socket (a shim never
/// finds nothing there and falls back to thin mode), and two daemons starting together cannot
/// race on a check: the last rename wins, and the other daemon sees it lost the path. This is
/// how a DaemonSet upgrade with `maxSurge` works: the new daemon starts beside the old one and
/// takes its socket, and the old one, no longer reached, finishes its calls and waits to be
/// stopped. Only a socket is ever replaced: any other file at `path` is an error, left alone.
pub(super) fn listen(
    path: &Path,
    uid: u32,
) -> Result<(tokio::net::UnixListener, (u64, u64), Replaced), CniError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| socket_error(path, what, e);
    // Before anything is made: whoever may write to the directory could rename their own
    // socket onto the path just as this daemon does.
    socket_dir(path, uid)?;
    let replaced = match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(fail(
                "exists and is not a socket",
                &"remove it or choose another path",
            ));
        }
        // Only to say so in the log: the socket is replaced either way.
        Ok(_) => match knock(path) {
            Ok(()) | Err(nix::Error::EAGAIN) => Replaced::Live,
            Err(_) => Replaced::Stale,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Replaced::Nothing,
        Err(e) => return Err(fail("cannot stat it", &e)),
    };
    // Bound under a name nobody else binds. A PID is unique only in its PID namespace: two
    // daemons of a DaemonSet's surge are each PID 1 of their container, and both start on the
    // node at once. The name is never removed before the bind (that could be the other
    // daemon's socket, which its rename would then miss) and bind(2) does not replace a file:
    // a name taken gives way to a random one, as the result cache's temporary files do
    // (cni::cache::stage).
    let (new, listener) = bind_new(path)?;
    let new_fail = |what: &str, e: &dyn std::fmt::Display| {
        socket_error(path, &format!("{what} {}", new.display()), e)
    };
    // Its identity and mode are settled before it takes the path.
    let bound = std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| new_fail("cannot make 0600", &e))
        .and_then(|()| std::fs::symlink_metadata(&new).map_err(|e| new_fail("cannot stat", &e)))
        .and_then(|bound| {
            std::fs::rename(&new, path)
                .map(|()| bound)
                .map_err(|e| new_fail("cannot rename onto it", &e))
        });
    match bound {
        Ok(bound) => Ok((listener, (bound.dev(), bound.ino()), replaced)),
        Err(e) => {
            let _ = std::fs::remove_file(&new);
            Err(e)
        }
    }
}

/// A listening socket beside `path`, at `<path>.<pid>.new`, or at `<path>.<random>.new` when
/// that name is taken by another daemon that is the same PID in its own PID namespace. A name
/// left by a daemon killed between its bind and its rename (nothing listens on it, and it is
/// older than [`LEFTOVER_AGE`]: a daemon binding it now would have just made it) is removed
/// and taken.
pub(super) fn bind_new(path: &Path) -> Result<(PathBuf, tokio::net::UnixListener), CniError> {
    use std::hash::BuildHasher;

    let named = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{suffix}.new"));
        PathBuf::from(name)
    };
    let pid = named(&std::process::id().to_string());
    if is_leftover(&pid) {
        let _ = std::fs::remove_file(&pid);
    }
    let mut new = pid;
    // Taken eight times over is no coincidence: said, with the names to look at.
    for attempt in 0..8u32 {
        match tokio::net::UnixListener::bind(&new) {
            Ok(listener) => return Ok((new, listener)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                // std's hasher keys come from the OS's random source, per process. Seven hex
                // digits, no longer than a PID's decimal (pid_max is at most 4194304): a path
                // short enough for sockaddr_un with a PID is with these.
                let random = std::hash::RandomState::new().hash_one(attempt) & 0xfff_ffff;
                new = named(&format!("{random:07x}"));
            }
            Err(e) => {
                return Err(socket_error(
                    path,
                    &format!("cannot listen on {}", new.display()),
                    &e,
                ));
            }
        }
    }
    Err(socket_error(
        path,
        "cannot listen beside it",
        &format!(
            "eight names {}.*.new were taken, each by a daemon starting or by a file of that \
             name: look at what made them",
            path.display()
        ),
    ))
}

/// How old a `.new` socket nothing listens on must be to be taken for a killed daemon's.
pub(super) const LEFTOVER_AGE: Duration = Duration::from_secs(60);

/// Whether `new` is a socket that a daemon killed before its rename left: nothing listens on
/// it, and it was made over [`LEFTOVER_AGE`] ago.
pub(super) fn is_leftover(new: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(new) else {
        return false;
    };
    let old = (m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > LEFTOVER_AGE);
    m.file_type().is_socket() && old && knock(new) == Err(nix::Error::ECONNREFUSED)
}

/// Connects to the unix socket `path` without waiting: `Ok` when a listener took the
/// connection into its queue, `EAGAIN` when one listens but its queue is full (a wedged
/// daemon that accepts nothing), `ECONNREFUSED` when nothing listens. A blocking connect to a
/// full queue waits for ever, and held the start of the daemon meant to replace a wedged one.
pub(super) fn knock(path: &Path) -> nix::Result<()> {
    connect_without_waiting(path)
        .map(drop)
        .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(0)))
}

/// A connection to the unix socket `path`, made without waiting ([`knock`]).
pub(super) fn connect_without_waiting(path: &Path) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket.connect(&socket2::SockAddr::unix(path)?)?;
    Ok(socket)
}

/// Whether `path` still names the socket this daemon bound (device and inode `ours`).
pub(super) fn is_ours(path: &Path, ours: (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == ours)
}

/// Whether `path` names a socket (another daemon's, once this one's is lost).
pub(super) fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}
