//! What the shim reads to tell whether the daemon is frozen (freezer.rs): `/proc/PID/cgroup`,
//! `/proc/self/mountinfo` and the cgroups' files, none of them the shim's own. The input is the
//! three parts separated by NUL bytes, the files as `PATH=CONTENT` lines. Reading them never
//! panics, and a file named to be written to thaw the daemon is a freezer file of a cgroup
//! under a cgroup mount, never a path that climbs out of one.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use plumb::shim::freezer::frozen_in;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\0');
    let (cgroups, mountinfo, files) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let files: BTreeMap<PathBuf, String> = files
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(p, c)| (PathBuf::from(p), c.to_string()))
        .collect();
    let Some(frozen) = frozen_in(cgroups, mountinfo, |p: &Path| files.get(p).cloned()) else {
        return;
    };
    let mounts: Vec<&str> = mountinfo
        .lines()
        .filter_map(|l| l.split_once(" - ")?.0.split(' ').nth(4))
        .collect();
    for file in &frozen.files {
        assert!(
            !file.components().any(|c| c == Component::ParentDir),
            "{} climbs",
            file.display()
        );
        assert!(
            mounts.iter().any(|m| file.starts_with(m)),
            "{} is under no mount",
            file.display()
        );
        let name = file.file_name().and_then(|n| n.to_str());
        assert!(
            matches!(name, Some("cgroup.freeze" | "freezer.state")),
            "{} is no freezer file",
            file.display()
        );
    }
});
