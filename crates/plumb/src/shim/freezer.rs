//! Whether a process is frozen by a cgroup freezer, and which file thaws it: the shim names the
//! daemon's process when the daemon does not answer a call (`shim`), and a frozen task is not in
//! the stopped state (`T`) that SIGSTOP gives, so its state alone would send the operator to
//! restart a daemon that only needs thawing. A paused container (`ctr task pause`, `docker
//! pause`) is frozen this way.

use std::path::{Path, PathBuf};

/// A frozen process's freezers: the cgroups that asked to freeze it, as the files to write and
/// what to write there to thaw it.
#[derive(Debug, PartialEq, Eq)]
pub struct Frozen {
    /// The freezer file of each cgroup that asked, its own and its ancestors', nearest first:
    /// the process thaws once all are written. None when the one that asked is out of this
    /// process's view (above a mount of a subtree, or unreadable).
    pub files: Vec<PathBuf>,
    pub thaw: &'static str,
}

/// Whether process `pid` is frozen, read from `/proc` and the cgroup file systems this process
/// sees. Anything unreadable (no such process, no freezer mounted, another mount namespace's
/// paths) reads as not frozen: the caller then says what the process's state says. Its state
/// alone does not tell: cgroup v2's freezer leaves a frozen task sleeping (`S`), cgroup v1's in
/// `D`, which read as "running … or the daemon stuck" or "waiting on a device".
pub fn frozen(pid: i32) -> Option<Frozen> {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let cgroups = read(Path::new(&format!("/proc/{pid}/cgroup")))?;
    let mounts = read(Path::new("/proc/self/mountinfo"))?;
    frozen_in(&cgroups, &mounts, read)
}

/// The two freezers: cgroup v2's, in every cgroup of the unified hierarchy, and cgroup v1's
/// freezer controller. Kernel documentation: cgroup v2 (`cgroup.freeze`, and `cgroup.events`'
/// `frozen` key, which is 1 also when an ancestor froze the cgroup), cgroup v1's freezer
/// subsystem (`freezer.state`, `freezer.self_freezing`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hierarchy {
    Unified,
    V1Freezer,
}

/// [`frozen`] on the given `/proc/PID/cgroup` and `/proc/self/mountinfo` texts, reading the
/// cgroups' files with `read` (public for the fuzz target, `plumb_freezer`).
pub fn frozen_in(
    cgroups: &str,
    mountinfo: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<Frozen> {
    for (hierarchy, path) in memberships(cgroups) {
        let Some((mountpoint, dir)) = located(mountinfo, hierarchy, path) else {
            continue;
        };
        // What says it is frozen, the file a cgroup asks to freeze with (itself and what is
        // below it), the file to thaw it with, and what to write there.
        let (frozen, asks, control, thaw) = match hierarchy {
            Hierarchy::Unified => (
                read(&dir.join("cgroup.events"))
                    .is_some_and(|e| e.lines().any(|l| l.trim() == "frozen 1")),
                "cgroup.freeze",
                "cgroup.freeze",
                "0",
            ),
            Hierarchy::V1Freezer => (
                read(&dir.join("freezer.state"))
                    .is_some_and(|s| matches!(s.trim(), "FROZEN" | "FREEZING")),
                "freezer.self_freezing",
                "freezer.state",
                "THAWED",
            ),
        };
        // Asked, it is frozen or being frozen (v2's `frozen` key waits for every task to stop;
        // v1 says FREEZING meanwhile).
        let files: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| d.starts_with(&mountpoint))
            .filter(|d| read(&d.join(asks)).is_some_and(|v| v.trim() == "1"))
            .map(|d| d.join(control))
            .collect();
        if frozen || !files.is_empty() {
            return Some(Frozen { files, thaw });
        }
    }
    None
}

/// The cgroups `/proc/PID/cgroup` lists in a hierarchy with a freezer: `0::PATH` (unified)
/// and `N:CONTROLLERS:PATH` where the controllers include `freezer` (v1).
fn memberships(cgroups: &str) -> impl Iterator<Item = (Hierarchy, &str)> {
    cgroups.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let hierarchy = if id == "0" && controllers.is_empty() {
            Hierarchy::Unified
        } else if controllers.split(',').any(|c| c == "freezer") {
            Hierarchy::V1Freezer
        } else {
            return None;
        };
        // A path outside this process's cgroup namespace (`/../…`) is not under any mount.
        let inside = path.starts_with('/') && !path.split('/').any(|c| c == "..");
        inside.then_some((hierarchy, path))
    })
}

/// Where this process sees the cgroup `path` of `hierarchy`: the mount point and the cgroup's
/// directory under it. A mount of a subtree (its root not `/`) holds only the paths under its
/// root.
fn located(mountinfo: &str, hierarchy: Hierarchy, path: &str) -> Option<(PathBuf, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPEROPTIONS
        let (before, after) = line.split_once(" - ")?;
        let mut before = before.split(' ');
        let (root, mountpoint) = (before.nth(3)?, before.next()?);
        let mut after = after.split(' ');
        let (fstype, superoptions) = (after.next()?, after.nth(1)?);
        let wanted = match hierarchy {
            Hierarchy::Unified => fstype == "cgroup2",
            Hierarchy::V1Freezer => {
                fstype == "cgroup" && superoptions.split(',').any(|o| o == "freezer")
            }
        };
        // A mount point with an escaped character (`\040`, a space) is left alone, and one
        // that is not a plain absolute path (the kernel writes none such) is not trusted.
        let plain = mountpoint.starts_with('/')
            && !mountpoint.contains('\\')
            && !mountpoint.split('/').any(|c| c == "..");
        if !wanted || !plain {
            return None;
        }
        let below = if root == "/" {
            path
        } else {
            path.strip_prefix(root)
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))?
        };
        let mountpoint = PathBuf::from(mountpoint);
        let dir = mountpoint.join(below.trim_start_matches('/'));
        Some((mountpoint, dir))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";

    fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> + use<> {
        let map: BTreeMap<PathBuf, String> = entries
            .iter()
            .map(|(p, v)| (PathBuf::from(p), v.to_string()))
            .collect();
        move |p| map.get(p).cloned()
    }

    fn frozen_by(files: &[&str], thaw: &'static str) -> Option<Frozen> {
        Some(Frozen {
            files: files.iter().map(PathBuf::from).collect(),
            thaw,
        })
    }

    #[test]
    fn a_unified_cgroup_frozen_names_every_cgroup_that_asked_nearest_first() {
        let cgroups = "1:cpu:/\n0::/kubepods/pod1/c1\n";
        let c1 = "/sys/fs/cgroup/unified/kubepods/pod1/c1";
        let pod1 = "/sys/fs/cgroup/unified/kubepods/pod1";
        let events = "populated 1\nfrozen 1\n";
        let own = files(&[
            (&format!("{c1}/cgroup.events"), events),
            (&format!("{c1}/cgroup.freeze"), "1\n"),
        ]);
        assert_eq!(
            frozen_in(cgroups, HYBRID, own),
            frozen_by(&[&format!("{c1}/cgroup.freeze")], "0")
        );
        // Frozen by an ancestor, or by it and itself: each must be thawed.
        let ancestor = files(&[
            (&format!("{c1}/cgroup.events"), events),
            (&format!("{c1}/cgroup.freeze"), "0\n"),
            (&format!("{pod1}/cgroup.freeze"), "1\n"),
        ]);
        assert_eq!(
            frozen_in(cgroups, HYBRID, ancestor),
            frozen_by(&[&format!("{pod1}/cgroup.freeze")], "0")
        );
        let both = files(&[
            (&format!("{c1}/cgroup.events"), events),
            (&format!("{c1}/cgroup.freeze"), "1\n"),
            (&format!("{pod1}/cgroup.freeze"), "1\n"),
        ]);
        assert_eq!(
            frozen_in(cgroups, HYBRID, both),
            frozen_by(
                &[
                    &format!("{c1}/cgroup.freeze"),
                    &format!("{pod1}/cgroup.freeze")
                ],
                "0"
            )
        );
        // Asked but not all its tasks stopped yet: being frozen, said as frozen.
        let freezing = files(&[
            (&format!("{c1}/cgroup.events"), "populated 1\nfrozen 0\n"),
            (&format!("{c1}/cgroup.freeze"), "1\n"),
        ]);
        assert_eq!(
            frozen_in(cgroups, HYBRID, freezing),
            frozen_by(&[&format!("{c1}/cgroup.freeze")], "0")
        );
        // Frozen from above what this process can read: frozen, no file to name.
        let unseen = files(&[(&format!("{c1}/cgroup.events"), events)]);
        assert_eq!(frozen_in(cgroups, HYBRID, unseen), frozen_by(&[], "0"));
        let thawed = files(&[
            (&format!("{c1}/cgroup.events"), "populated 1\nfrozen 0\n"),
            (&format!("{c1}/cgroup.freeze"), "0\n"),
        ]);
        assert_eq!(frozen_in(cgroups, HYBRID, thawed), None);
    }

    #[test]
    fn a_v1_freezer_cgroup_frozen_or_freezing_is_frozen() {
        let cgroups = "6:freezer:/docker/abc\n0::/\n";
        for state in ["FROZEN\n", "FREEZING\n"] {
            let read = files(&[
                ("/sys/fs/cgroup/freezer/docker/abc/freezer.state", state),
                (
                    "/sys/fs/cgroup/freezer/docker/abc/freezer.self_freezing",
                    "1\n",
                ),
            ]);
            assert_eq!(
                frozen_in(cgroups, HYBRID, read),
                frozen_by(
                    &["/sys/fs/cgroup/freezer/docker/abc/freezer.state"],
                    "THAWED"
                ),
                "{state}"
            );
        }
        let parent = files(&[
            (
                "/sys/fs/cgroup/freezer/docker/abc/freezer.state",
                "FROZEN\n",
            ),
            (
                "/sys/fs/cgroup/freezer/docker/abc/freezer.self_freezing",
                "0\n",
            ),
            ("/sys/fs/cgroup/freezer/docker/freezer.self_freezing", "1\n"),
        ]);
        assert_eq!(
            frozen_in(cgroups, HYBRID, parent),
            frozen_by(&["/sys/fs/cgroup/freezer/docker/freezer.state"], "THAWED")
        );
        let thawed = files(&[(
            "/sys/fs/cgroup/freezer/docker/abc/freezer.state",
            "THAWED\n",
        )]);
        assert_eq!(frozen_in(cgroups, HYBRID, thawed), None);
    }

    #[test]
    fn paths_outside_a_subtree_mount_and_unreadable_files_read_as_not_frozen() {
        // A container's view: only its own subtree is mounted, at /sys/fs/cgroup.
        let subtree = "50 40 0:38 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        let read = files(&[
            ("/sys/fs/cgroup/c1/cgroup.events", "frozen 1\n"),
            ("/sys/fs/cgroup/c1/cgroup.freeze", "1\n"),
        ]);
        assert_eq!(
            frozen_in("0::/kubepods/pod1/c1\n", subtree, &read),
            frozen_by(&["/sys/fs/cgroup/c1/cgroup.freeze"], "0")
        );
        assert_eq!(frozen_in("0::/kubepods/pod10/c1\n", subtree, &read), None);
        assert_eq!(frozen_in("0::/other\n", subtree, &read), None);
        // Outside this process's cgroup namespace: `..` never climbs to a mount's files.
        let root = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let above = files(&[("/sys/fs/cgroup/c1/cgroup.events", "frozen 1\n")]);
        assert_eq!(frozen_in("0::/../c1\n", root, &above), None);
        // Nor does a mount point that is not a plain absolute path.
        let odd = "41 31 0:38 / /sys/fs/../fs/cgroup rw - cgroup2 cgroup2 rw\n\
                   42 31 0:38 / sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let read_odd = files(&[
            ("/sys/fs/../fs/cgroup/c1/cgroup.events", "frozen 1\n"),
            ("sys/fs/cgroup/c1/cgroup.events", "frozen 1\n"),
        ]);
        assert_eq!(frozen_in("0::/c1\n", odd, read_odd), None);
        // No freezer mounted, not a cgroup file, nothing readable.
        let v1_cpu_only = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(frozen_in("6:freezer:/x\n", v1_cpu_only, &read), None);
        assert_eq!(frozen_in("garbage\n::\n0::relative\n", HYBRID, &read), None);
        assert_eq!(frozen_in("0::/\n", "not mountinfo\n- \n", files(&[])), None);
        assert_eq!(frozen(i32::MAX), None);
    }
}

/// The kernel's freezers on real processes (as root, as CI runs): each hierarchy this machine
/// mounts, a `sleep` moved into a new cgroup of it and frozen.
#[cfg(test)]
mod kernel_tests {
    use std::fs;
    use std::time::{Duration, Instant};

    use super::*;

    /// A `sleep` in a cgroup `dir` of its own; the cgroup is thawed and removed when dropped.
    struct Sleeper {
        child: std::process::Child,
        dir: PathBuf,
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = fs::write(self.dir.join("cgroup.freeze"), "0");
            let _ = fs::write(self.dir.join("freezer.state"), "THAWED");
            let _ = self.child.kill();
            let _ = self.child.wait();
            let deadline = Instant::now() + Duration::from_secs(5);
            while fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// A [`Sleeper`] under `mountpoint`, frozen by writing `freeze` to its `control` file,
    /// once the kernel says `done`.
    fn frozen_sleeper(mountpoint: &Path, control: &str, freeze: &str, done: &str) -> Sleeper {
        let dir = mountpoint.join(format!("plumb-freezer-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let sleeper = Sleeper { child, dir };
        let dir = &sleeper.dir;
        fs::write(dir.join("cgroup.procs"), sleeper.child.id().to_string()).unwrap();
        assert_eq!(frozen(sleeper.child.id() as i32), None, "not frozen yet");
        fs::write(dir.join(control), freeze).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = if control == "cgroup.freeze" {
            "cgroup.events"
        } else {
            "freezer.state"
        };
        while !fs::read_to_string(dir.join(status)).unwrap().contains(done) {
            assert!(Instant::now() < deadline, "{} never froze", dir.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        sleeper
    }

    #[test]
    fn a_process_frozen_by_either_freezer_is_seen_frozen_and_thawed_is_not() {
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mut tried = 0;
        for (hierarchy, control, freeze, done, thaw) in [
            (Hierarchy::Unified, "cgroup.freeze", "1", "frozen 1", "0"),
            (
                Hierarchy::V1Freezer,
                "freezer.state",
                "FROZEN",
                "FROZEN",
                "THAWED",
            ),
        ] {
            // The sleeper's cgroup is made at the hierarchy's root.
            let Some((mountpoint, _)) = located(&mounts, hierarchy, "/") else {
                continue;
            };
            tried += 1;
            let sleeper = frozen_sleeper(&mountpoint, control, freeze, done);
            let pid = sleeper.child.id() as i32;
            assert_eq!(
                frozen(pid),
                Some(Frozen {
                    files: vec![sleeper.dir.join(control)],
                    thaw
                }),
                "{hierarchy:?}"
            );
            fs::write(sleeper.dir.join(control), thaw).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while frozen(pid).is_some() {
                assert!(Instant::now() < deadline, "{hierarchy:?}: still frozen");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert!(tried > 0, "no cgroup freezer mounted: {mounts}");
    }
}
