//! Device information files (device-info spec 1.1.0 §4): where they are, and reading, writing,
//! copying and deleting them; local file I/O only. Device Plugin files (§4.1) are
//! `<base>/dp/<resourceName with "/" as "-">-<deviceID>-device.json`; CNI files (§4.2) are
//! `<base>/cni/<UniqueFileName>`, one per attachment, named as Multus names them, escaped so that
//! none leaves the directory or is shared by two attachments ([`cni_file_name`]).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::device_info::{DeviceInfo, DeviceInfoError};

/// The default base directory (device-info spec §4.1, §4.2).
pub const DEFAULT_BASE_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// The subdirectory of the CNI files (§4.2).
pub const CNI_SUBDIR: &str = "cni";

/// The mode of the device-info files plumb writes: readable by all (what they hold is published
/// in the pod's network-status anyway), writable only by root, whatever the umask of the runtime
/// that started plumb. A world-writable file would let any local user change what plumb reports
/// and what the delegates read.
pub const FILE_MODE: u32 = 0o644;

/// The mode of the device-info directories plumb creates: a world-writable one would let any
/// local user plant files, or links where plumb writes.
pub const DIR_MODE: u32 = 0o755;

/// A device-info file that cannot be used.
#[derive(Debug, Error)]
pub enum DeviceInfoFileError {
    #[error("device-info file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("device-info file {path}: {source}")]
    Invalid {
        path: PathBuf,
        source: DeviceInfoError,
    },
}

impl From<DeviceInfoFileError> for cni::CniError {
    fn from(e: DeviceInfoFileError) -> Self {
        let code = match e {
            DeviceInfoFileError::Io { .. } => cni::ErrorCode::Io,
            DeviceInfoFileError::Invalid { .. } => cni::ErrorCode::InvalidConfig,
        };
        cni::CniError::new(code, e.to_string())
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> DeviceInfoFileError + '_ {
    move |source| DeviceInfoFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Appends `s` to `out`, keeping the bytes `keep` accepts and writing every other byte as `%XX`.
fn escape_into(out: &mut String, s: &str, keep: impl Fn(u8) -> bool) {
    for b in s.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The CNI device-info file name for one attachment (device-info spec §4.2: "unique per network
/// attachment"). For ordinary values it is Multus's name, e.g. `ns1-sriov-net-<id>_net1`:
/// the network with `/` as `-`, `-`, the container ID, `_`, the interface name.
///
/// Whatever the inputs hold, the name has no `/` and is never `.` or `..` (it always contains
/// `-` and `_`), so it stays in its directory. It is unique per attachment: bytes outside
/// `[A-Za-z0-9.-]` in the network (except `/`), outside `[A-Za-z0-9.]` in the container ID and
/// outside `[A-Za-z0-9._-]` in the interface name are written `%XX`, so the first `_` ends the
/// container ID and the last `-` before it starts it; the (container ID, interface name) pair,
/// unique among a pod's attachments, can be read back.
///
/// A name longer than [`MAX_CNI_FILE_NAME`] bytes (a file name may have 255, and writing adds a
/// temporary suffix) keeps its first bytes and ends with a SHA-256 digest of the whole name, so
/// it stays unique instead of failing with ENAMETOOLONG.
pub fn cni_file_name(network: &str, container_id: &str, ifname: &str) -> String {
    let full = full_cni_file_name(network, container_id, ifname);
    if full.len() <= MAX_CNI_FILE_NAME {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    // Every byte of `full` is ASCII (the escaping above), so any cut is a char boundary.
    format!("{}~{hex}", &full[..MAX_CNI_FILE_NAME - 1 - hex.len()])
}

/// The longest CNI device-info file name, in bytes.
pub const MAX_CNI_FILE_NAME: usize = 200;

fn full_cni_file_name(network: &str, container_id: &str, ifname: &str) -> String {
    let mut out = String::with_capacity(network.len() + container_id.len() + ifname.len() + 2);
    for part in network.split('/').enumerate() {
        if part.0 > 0 {
            out.push('-');
        }
        escape_into(&mut out, part.1, |b| {
            b.is_ascii_alphanumeric() || b == b'.' || b == b'-'
        });
    }
    out.push('-');
    escape_into(&mut out, container_id, |b| {
        b.is_ascii_alphanumeric() || b == b'.'
    });
    out.push('_');
    escape_into(&mut out, ifname, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
    });
    out
}

/// The device plugin's file name for a device (device-info spec §4.1): `/` in the resource name
/// becomes `-`; the device ID gets the same treatment so that it cannot name another directory.
pub fn dp_file_name(resource_name: &str, device_id: &str) -> String {
    format!(
        "{}-{}-device.json",
        resource_name.replace('/', "-"),
        device_id.replace('/', "-")
    )
}

/// The device-info directories under one base (configurable for tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfoDirs {
    pub base: PathBuf,
}

impl Default for DeviceInfoDirs {
    fn default() -> Self {
        DeviceInfoDirs::new(DEFAULT_BASE_DIR)
    }
}

impl DeviceInfoDirs {
    pub fn new(base: impl Into<PathBuf>) -> Self {
        DeviceInfoDirs { base: base.into() }
    }

    /// `<base>/dp`.
    pub fn dp_dir(&self) -> PathBuf {
        self.base.join("dp")
    }

    /// `<base>/cni`.
    pub fn cni_dir(&self) -> PathBuf {
        self.base.join(CNI_SUBDIR)
    }

    /// The device plugin's file for `device_id` of `resource_name` (§4.1).
    pub fn dp_path(&self, resource_name: &str, device_id: &str) -> PathBuf {
        self.dp_dir().join(dp_file_name(resource_name, device_id))
    }

    /// The attachment's CNI file (§4.2), the value of `runtimeConfig.CNIDeviceInfoFile` (§5.1).
    pub fn cni_path(&self, network: &str, container_id: &str, ifname: &str) -> PathBuf {
        self.cni_dir()
            .join(cni_file_name(network, container_id, ifname))
    }

    /// Reads a device plugin's file; `None` when there is none (device plugins write one only
    /// for some resources).
    pub fn read_dp(
        &self,
        resource_name: &str,
        device_id: &str,
    ) -> Result<Option<DeviceInfo>, DeviceInfoFileError> {
        read(&self.dp_path(resource_name, device_id))
    }

    /// Copies the device plugin's file for the device into the attachment's CNI file (§4.2.1),
    /// creating the directory. Returns whether there was a file to copy. The copy is checked
    /// first, so an invalid device plugin file fails here rather than in the status.
    pub fn copy_dp_to_cni(
        &self,
        resource_name: &str,
        device_id: &str,
        cni_path: &Path,
    ) -> Result<bool, DeviceInfoFileError> {
        match self.read_dp(resource_name, device_id)? {
            None => Ok(false),
            Some(info) => {
                write(cni_path, &info)?;
                Ok(true)
            }
        }
    }
}

/// The largest device-info file read. A real one is a few hundred bytes; the bound keeps a
/// mistake in the directory (a link to `/dev/zero`, a runaway writer) from exhausting memory.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Reads and checks a device-info file; `None` when it does not exist. Only a regular file of
/// at most [`MAX_FILE_BYTES`] is read, opened without waiting ([`cni::files::read_bounded`]): a
/// FIFO would block the ADD that reads it, even one put there after a check of the path.
pub fn read(path: &Path) -> Result<Option<DeviceInfo>, DeviceInfoFileError> {
    let bytes = match cni::files::read_bounded(path, MAX_FILE_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    DeviceInfo::parse(&bytes)
        .map(Some)
        .map_err(|source| DeviceInfoFileError::Invalid {
            path: path.to_path_buf(),
            source,
        })
}

/// Creates a device-info directory and the missing ones above it, each with [`DIR_MODE`] (or
/// less, as the umask takes away; never more). §4.2.1: the implementation "must create it".
pub fn create_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// Writes a device-info file with [`FILE_MODE`], creating its directory (§4.1.1, §4.2.1,
/// §5.1.2). The content goes to a temporary file in the same directory first and is renamed
/// into place, so a reader never sees half a file. Not fsynced: the file lives as long as the
/// pod's sandbox, which a reboot ends anyway.
pub fn write(path: &Path, info: &DeviceInfo) -> Result<(), DeviceInfoFileError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    create_dir(dir).map_err(io_err(dir))?;
    let file_name = path.file_name().ok_or_else(|| {
        io_err(path)(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path has no file name",
        ))
    })?;
    let tmp = dir.join(temporary_name(file_name));
    let bytes = serde_json::to_vec(info).map_err(|e| io_err(path)(io::Error::other(e)))?;
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&tmp)?;
        // The umask may have taken read bits away, and a temporary file left by a killed
        // process keeps its old mode: set it exactly.
        f.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        f.write_all(&bytes)?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err(path))
}

/// A temporary name for [`write`] to put `file_name`'s content under before renaming it:
/// `.<file_name>.tmp<pid>-<n>`, unique per process and per call, so concurrent writers never
/// share a temporary file.
fn temporary_name(file_name: &std::ffi::OsStr) -> std::ffi::OsString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp{}-{n}", std::process::id()));
    tmp_name
}

/// Whether `name` is one of [`write`]'s temporary names, `.<name>.tmp<pid>-<n>`.
pub fn is_temporary_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix('.')
        .and_then(|n| n.rsplit_once(".tmp"))
        .and_then(|(base, suffix)| Some((base, suffix.split_once('-')?)))
        .is_some_and(|(base, (pid, n))| !base.is_empty() && digits(pid) && digits(n))
}

/// Removes the temporary files [`write`] left in `dir` (a device-info directory) and last
/// wrote more than `older_than` ago: a plumb killed between writing and renaming (kill -9, a
/// node crash) leaves one, and nothing else would ever remove it. Only regular files with
/// [`write`]'s temporary names are touched; a live writer holds its file for microseconds, so
/// an age far above any CNI call's tells them apart (see [`cni::cache::sweep_staged`]). Returns
/// the files removed; a missing directory has none.
pub fn sweep_temporaries(
    dir: &Path,
    older_than: std::time::Duration,
) -> Result<Vec<PathBuf>, cni::CniError> {
    cni::cache::sweep_temporaries(dir, older_than, is_temporary_name)
}

/// Deletes a device-info file (§4.2.1: on DEL). A file that is already gone is not an error, so
/// DEL can be repeated.
pub fn delete(path: &Path) -> Result<(), DeviceInfoFileError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_info::PciDevice;

    #[test]
    fn names_match_multus_for_ordinary_values() {
        assert_eq!(
            cni_file_name("test/sriov-net", "cid123", "net2"),
            "test-sriov-net-cid123_net2"
        );
        assert_eq!(
            dp_file_name("intel.com/sriov_netdevice", "0000:18:02.5"),
            "intel.com-sriov_netdevice-0000:18:02.5-device.json"
        );
        let dirs = DeviceInfoDirs::default();
        assert_eq!(
            dirs.cni_path("ns/n", "c", "net1"),
            Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni/ns-n-c_net1")
        );
        assert_eq!(
            dirs.dp_path("a/b", "1"),
            Path::new("/var/run/k8s.cni.cncf.io/devinfo/dp/a-b-1-device.json")
        );
    }

    #[test]
    fn very_long_names_are_capped_and_stay_apart() {
        let long = "x".repeat(300);
        let a = cni_file_name(&long, "c1", "net1");
        let b = cni_file_name(&long, "c2", "net1");
        assert_eq!(a.len(), MAX_CNI_FILE_NAME);
        assert_ne!(a, b);
        assert!(!a.contains('/'));
        let short = cni_file_name("ns/net", "c1", "net1");
        assert_eq!(short, "ns-net-c1_net1");
        // Writing works with the longest name (temporary suffix included).
        let tmp = tempfile::tempdir().unwrap();
        let dirs = DeviceInfoDirs::new(tmp.path());
        let info: DeviceInfo = serde_json::from_str(
            r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:02.5"}}"#,
        )
        .unwrap();
        let path = dirs.cni_path(&long, &long, "net1");
        write(&path, &info).unwrap();
        assert_eq!(read(&path).unwrap(), Some(info));
    }

    #[test]
    fn hostile_inputs_stay_in_the_directory_and_apart() {
        let dirs = DeviceInfoDirs::new("/base");
        for (net, cid, ifname) in [
            ("..", "..", ".."),
            ("../../etc", "../x", "../../y"),
            ("", "", ""),
            ("a\0b", "c\nd", "e f"),
            ("/", "/", "/"),
        ] {
            let p = dirs.cni_path(net, cid, ifname);
            assert_eq!(p.parent(), Some(Path::new("/base/cni")), "{p:?}");
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(name != "." && name != ".." && !name.contains('/') && !name.contains('\0'));
        }
        // Splits that Multus's naming would merge stay apart.
        assert_ne!(
            cni_file_name("n", "a_b", "c"),
            cni_file_name("n", "a", "b_c")
        );
        assert_ne!(
            cni_file_name("n-a", "b", "c"),
            cni_file_name("n", "a-b", "c")
        );
        assert_eq!(cni_file_name("n", "a_b", "c"), "n-a%5Fb_c");
        let dp = dirs.dp_path("../../x", "../y");
        assert_eq!(dp.parent(), Some(Path::new("/base/dp")));
        for (resource, id) in [
            ("..", ".."),
            ("/", "/"),
            ("a\0b", "c\0d"),
            ("", ""),
            (&"r".repeat(300)[..], &"d/".repeat(200)[..]),
        ] {
            let dp = dirs.dp_path(resource, id);
            assert_eq!(dp.parent(), Some(Path::new("/base/dp")), "{dp:?}");
            assert!(
                dp.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .ends_with("-device.json")
            );
        }
    }

    #[test]
    fn unusable_device_plugin_file_names_are_errors_not_panics() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = DeviceInfoDirs::new(tmp.path());
        fs::create_dir_all(dirs.dp_dir()).unwrap();
        let cni = dirs.cni_path("ns/n", "c", "net1");
        // NUL cannot be in a file name; a name over 255 bytes no device plugin could write.
        for (resource, id) in [("a\0b", "1"), (&"r".repeat(300)[..], "1")] {
            let e = dirs.copy_dp_to_cni(resource, id, &cni).unwrap_err();
            assert_eq!(cni::CniError::from(e).code, 5);
            assert!(!cni.exists());
        }
    }

    #[test]
    fn write_read_copy_delete() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = DeviceInfoDirs::new(tmp.path().join("devinfo"));
        let info = DeviceInfo::pci(PciDevice {
            pci_address: "0000:18:02.5".into(),
            pf_pci_address: Some("0000:18:00.0".into()),
            ..PciDevice::default()
        });
        let dp = dirs.dp_path("intel.com/sriov", "0000:18:02.5");
        let cni = dirs.cni_path("ns1/sriov-net", "cid", "net1");
        assert_eq!(
            dirs.read_dp("intel.com/sriov", "0000:18:02.5").unwrap(),
            None
        );
        assert!(
            !dirs
                .copy_dp_to_cni("intel.com/sriov", "0000:18:02.5", &cni)
                .unwrap()
        );
        assert!(!cni.exists());

        write(&dp, &info).unwrap();
        assert_eq!(read(&dp).unwrap(), Some(info.clone()));
        assert!(
            dirs.copy_dp_to_cni("intel.com/sriov", "0000:18:02.5", &cni)
                .unwrap()
        );
        assert_eq!(read(&cni).unwrap(), Some(info.clone()));
        // Writing again replaces the file (a retried ADD).
        write(&cni, &info).unwrap();
        let names: Vec<_> = fs::read_dir(dirs.cni_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("ns1-sriov-net-cid_net1")]
        );

        delete(&cni).unwrap();
        assert!(!cni.exists());
        delete(&cni).unwrap();

        fs::write(&cni, br#"{"type":"pci","version":"1.1.0"}"#).unwrap();
        let e = read(&cni).unwrap_err();
        assert!(e.to_string().contains("the \"pci\" map is missing"), "{e}");
        assert!(e.to_string().contains("ns1-sriov-net-cid_net1"), "{e}");
        assert_eq!(cni::CniError::from(e).code, 7);
        let e = read(tmp.path()).unwrap_err();
        assert_eq!(cni::CniError::from(e).code, 5);
    }

    #[test]
    fn old_temporary_files_of_killed_writers_are_swept_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = DeviceInfoDirs::new(tmp.path());
        let dir = dirs.cni_dir();
        let info = DeviceInfo::pci(PciDevice::default());
        // A writer killed after writing its temporary file, before the rename: simulated by
        // keeping the name `write` would give and the content it would write.
        write(&dirs.cni_path("ns/n", "c1", "net1"), &info).unwrap();
        let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        let old = |name: &str| {
            let f = fs::File::create(dir.join(name)).unwrap();
            f.set_modified(two_hours_ago).unwrap();
        };
        let killed = temporary_name("ns-n-c2_net1".as_ref())
            .into_string()
            .unwrap();
        old(&killed);
        old(".ns-n-c3_net1.tmp4242-0");
        // Not `write`'s names, or not old, or not a regular file: kept.
        old("ns-n-c4_net1");
        old(".ns-n-c4_net1.tmp4242");
        old(".ns-n-c4_net1.tmp42-");
        old(".ns-n-c4_net1.tmp-1");
        old(".tmp1-1");
        fs::File::create(dir.join(".ns-n-c5_net1.tmp99-1")).unwrap();
        fs::create_dir(dir.join(".ns-n-c6_net1.tmp1-1")).unwrap();
        std::os::unix::fs::symlink("ns-n-c1_net1", dir.join(".ns-n-c7_net1.tmp1-1")).unwrap();

        let removed = sweep_temporaries(&dir, std::time::Duration::from_secs(3600)).unwrap();
        assert_eq!(
            removed,
            [dir.join(&killed), dir.join(".ns-n-c3_net1.tmp4242-0")]
        );
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".ns-n-c4_net1.tmp-1",
                ".ns-n-c4_net1.tmp42-",
                ".ns-n-c4_net1.tmp4242",
                ".ns-n-c5_net1.tmp99-1",
                ".ns-n-c6_net1.tmp1-1",
                ".ns-n-c7_net1.tmp1-1",
                ".tmp1-1",
                "ns-n-c1_net1",
                "ns-n-c4_net1",
            ]
        );
        assert_eq!(
            read(&dirs.cni_path("ns/n", "c1", "net1")).unwrap(),
            Some(info)
        );
        assert!(
            sweep_temporaries(&tmp.path().join("missing"), std::time::Duration::ZERO)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn files_and_directories_are_not_world_writable_whatever_the_umask() {
        // The umask is per process: run this test again in a child started with umask 000,
        // the way a runtime with that umask would start plumb.
        const CHILD: &str = "NETATTACH_TEST_UMASK_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new("sh")
                .args(["-c", "umask 000 && exec \"$0\" \"$@\""])
                .arg(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "device_info_files::tests::files_and_directories_are_not_world_writable_whatever_the_umask",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "{text}");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dirs = DeviceInfoDirs::new(tmp.path().join("devinfo"));
        let cni = dirs.cni_path("ns/n", "c", "net1");
        write(&cni, &DeviceInfo::pci(PciDevice::default())).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&cni), 0o644);
        assert_eq!(mode(&dirs.cni_dir()), 0o755);
        assert_eq!(mode(&dirs.base), 0o755);
        let dp = dirs.dp_dir();
        create_dir(&dp).unwrap();
        assert_eq!(mode(&dp), 0o755);
    }

    #[test]
    fn only_a_regular_file_of_bounded_size_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        // A FIFO is refused without blocking (no writer will ever come).
        let fifo = tmp.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = read(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file") && e.contains("fifo"),
            "{e}"
        );
        // A link to an endless device is refused by type too; an over-long file by size.
        let zero = tmp.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(
            read(&zero)
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        let big = tmp.path().join("big");
        fs::write(&big, vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = read(&big).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        assert_eq!(cni::CniError::from(e).code, 5);
    }
}
