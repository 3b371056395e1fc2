//! Router advertisements in the pod's namespace: once `default-route` has moved the IPv6
//! default route (multi-net spec §4.1.2.1.9, [`super::set_default_route`]), the other interfaces
//! must not take one from the next router advertisement, which the kernel does while
//! `net.ipv6.conf.<link>.accept_ra_defrtr` is 1, its default.

use std::fs::File;
use std::io;
use std::path::Path;

use nix::sched::CloneFlags;

use super::RouteError;

/// What [`write_accept_ra_defrtr`] did: the previous value of each sysctl it changed, and the
/// first failure (the link and why), after which it stopped.
pub(super) type SysctlOutcome = (Vec<(String, String)>, Option<(String, io::Error)>);

/// Sets `net.ipv6.conf.<link>.accept_ra_defrtr` of each link to its value, from a fresh thread
/// that enters the netns (`/proc/sys/net` shows the namespace of the thread that opens it) and
/// ends, as `Netlink::open`'s does. A link without IPv6 (no such file) is skipped.
pub(super) fn write_accept_ra_defrtr(
    netns: &Path,
    values: Vec<(String, String)>,
) -> Result<SysctlOutcome, RouteError> {
    if values.is_empty() {
        return Ok((Vec::new(), None));
    }
    let file = File::open(netns).map_err(|source| RouteError::OpenNetns {
        netns: netns.to_path_buf(),
        source,
    })?;
    let handle = std::thread::Builder::new()
        .name("plumb-netns".into())
        .spawn(move || -> Result<SysctlOutcome, nix::Error> {
            nix::sched::setns(&file, CloneFlags::CLONE_NEWNET)?;
            let mut changed = Vec::new();
            for (link, value) in values {
                // The kernel's names have no '/' and are never "." or "..": the path stays in
                // the link's directory. Checked all the same, as the name came from a dump.
                if link.contains('/') || link == "." || link == ".." {
                    continue;
                }
                let path = format!("/proc/sys/net/ipv6/conf/{link}/accept_ra_defrtr");
                let previous = match std::fs::read_to_string(&path) {
                    Ok(v) => v.trim().to_string(),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Ok((changed, Some((link, e)))),
                };
                if previous == value {
                    continue;
                }
                if let Err(e) = std::fs::write(&path, &value) {
                    return Ok((changed, Some((link, e))));
                }
                changed.push((link, previous));
            }
            Ok((changed, None))
        })
        .map_err(|e| RouteError::Thread {
            netns: netns.to_path_buf(),
            why: e.to_string(),
        })?;
    match handle.join() {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(RouteError::EnterNetns {
            netns: netns.to_path_buf(),
            source: e.into(),
        }),
        Err(_) => Err(RouteError::Thread {
            netns: netns.to_path_buf(),
            why: "it panicked".into(),
        }),
    }
}
