//! Loading network configurations from a directory, as libcni does (`LoadConfList`, `ConfFiles`,
//! `NetworkPluginConfsFromFiles`): `.conflist` files first, then `.conf` and `.json`, each group
//! in file-name order, the first whose `name` matches winning ([`find_network`]). Unlike libcni,
//! a broken file of another network does not stop the search, so one bad file on a node does
//! not break every network.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::{NetworkConfigList, PluginConfig};
use crate::error::{CniError, ErrorCode};
use crate::files;

/// The largest configuration file read: a network configuration is a few KiB, and one that
/// embeds certificates or long lists stays far below this.
pub const MAX_CONF_FILE: u64 = 16 << 20;

/// Files in `dir` with one of `extensions` (without the dot), sorted by name. A missing
/// directory is an error naming it.
pub fn conf_files(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>, CniError> {
    let entries = fs::read_dir(dir).map_err(|e| {
        let why = if e.kind() == io::ErrorKind::NotFound {
            "no such directory".to_string()
        } else {
            e.to_string()
        };
        CniError::new(
            ErrorCode::Io,
            format!(
                "cannot read CNI configuration directory {}: {why}",
                dir.display()
            ),
        )
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| may_be_conf_file(p))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| extensions.contains(&e))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Whether a directory entry is listed as a configuration file. libcni's `ConfFiles` leaves out
/// only directories, so a dangling or unreadable symlink is listed and its read error reported:
/// it must not vanish from the search, nor let the next file pass as the first. Directories (also
/// behind a symlink), FIFOs, sockets and devices are left out; reading a FIFO could block.
fn may_be_conf_file(path: &Path) -> bool {
    match fs::metadata(path) {
        Ok(m) => m.is_file(),
        Err(_) => true,
    }
}

/// The bytes of the configuration file `path`: bounded, and refused at once when it is no
/// regular file (a FIFO named as the cluster network would hold every ADD).
fn read(path: &Path) -> Result<Vec<u8>, CniError> {
    files::read_bounded(path, MAX_CONF_FILE).map_err(|e| {
        CniError::new(
            ErrorCode::Io,
            format!("cannot read {}: {e}", path.display()),
        )
    })
}

/// Parses one file: a `.conflist` as a list, anything else as a single config. Unless
/// `loadOnlyInlinedPlugins` is true, the plugin objects in `.conf` files of the sibling directory
/// named after the network are appended to a list (spec §1 `plugins`).
pub fn load_file(path: &Path) -> Result<NetworkConfigList, CniError> {
    let bytes = read(path)?;
    let is_list = path.extension().is_some_and(|e| e == "conflist");
    let mut list = if is_list {
        NetworkConfigList::from_bytes(&bytes)
    } else {
        NetworkConfigList::from_conf_bytes(&bytes)
    }
    .map_err(|e| e.context(path.display()))?;
    if is_list && !list.load_only_inlined_plugins {
        let dir = path.parent().unwrap_or(Path::new(".")).join(&list.name);
        if dir.is_dir() {
            for f in conf_files(&dir, &["conf"])? {
                let p = PluginConfig::from_bytes(&read(&f)?).map_err(|e| e.context(f.display()))?;
                list.plugins.push(p);
            }
        }
    }
    list.require_plugins()
        .map_err(|e| e.context(path.display()))?;
    Ok(list)
}

/// The networks found in a directory, each with its file, in search order.
pub type Found = Vec<(PathBuf, NetworkConfigList)>;

/// The files searched, in libcni's order: `.conflist` files, then `.conf` and `.json` files, each
/// group by file name.
fn search_order(dir: &Path) -> Result<Vec<PathBuf>, CniError> {
    let mut files = conf_files(dir, &["conflist"])?;
    files.extend(conf_files(dir, &["conf", "json"])?);
    Ok(files)
}

/// Every network in `dir`, in search order, plus the errors of files that could not be loaded.
pub fn load_all(dir: &Path) -> Result<(Found, Vec<CniError>), CniError> {
    let mut found = Vec::new();
    let mut broken = Vec::new();
    for f in search_order(dir)? {
        match load_file(&f) {
            Ok(l) => found.push((f, l)),
            Err(e) => broken.push(e),
        }
    }
    Ok((found, broken))
}

/// The `name` a file declares, if it is a JSON object with a string `name`, however broken the
/// rest of it is.
fn declared_name(path: &Path) -> Option<String> {
    let bytes = files::read_bounded(path, MAX_CONF_FILE).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("name")?.as_str().map(str::to_string)
}

/// The network called `name` in `dir`.
pub fn load_network(dir: &Path, name: &str) -> Result<NetworkConfigList, CniError> {
    find_network(dir, name)?.ok_or_else(|| {
        CniError::new(
            ErrorCode::InvalidConfig,
            format!(
                "no network named {name:?} in CNI configuration directory {}",
                dir.display()
            ),
        )
    })
}

/// The network called `name` in `dir`, `Ok(None)` when there is none. A file declaring `name`
/// that cannot be loaded is its error. Not finding it while some files could not be read is an
/// error naming them: one of them may be the network meant. Unlike libcni, a broken file of
/// another network is skipped rather than ending the search.
pub fn find_network(dir: &Path, name: &str) -> Result<Option<NetworkConfigList>, CniError> {
    let mut broken = Vec::new();
    for f in search_order(dir)? {
        match load_file(&f) {
            Ok(l) if l.name == name => return Ok(Some(l)),
            Ok(_) => {}
            // A broken file of this very network ends the search, as any broken file does in
            // libcni (`LoadConfList`): a later file of the same name must not silently stand in.
            Err(e) if declared_name(&f).as_deref() == Some(name) => return Err(e),
            Err(e) => broken.push(e),
        }
    }
    if broken.is_empty() {
        return Ok(None);
    }
    let why: Vec<String> = broken.iter().map(|e| e.to_string()).collect();
    Err(CniError::new(
        ErrorCode::InvalidConfig,
        format!(
            "no network named {name:?} in CNI configuration directory {} (skipped invalid \
             files: {})",
            dir.display(),
            why.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, content: &str) {
        fs::write(dir.join(name), content).unwrap();
    }

    #[test]
    fn a_configuration_path_that_is_a_fifo_fails_at_once() {
        // `clusterNetwork` may name a file: a FIFO there held every ADD until the runtime gave
        // up, with no error. Now an error naming it, without waiting for a writer.
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("10-net.conflist");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(load_file(&path).map(drop));
        });
        let e = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("load_file waited on the FIFO")
            .unwrap_err();
        assert!(e.msg.contains(&fifo.display().to_string()), "{e}");
        assert!(e.msg.contains("FIFO"), "{e}");
    }

    #[test]
    fn conflists_first_then_confs_each_by_file_name() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "10-a.conf",
            r#"{"cniVersion":"0.4.0","name":"net","type":"from-conf"}"#,
        );
        write(
            d.path(),
            "20-b.conflist",
            r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"from-conflist-20"}]}"#,
        );
        write(
            d.path(),
            "15-c.conflist",
            r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"from-conflist-15"}]}"#,
        );
        write(
            d.path(),
            "05-d.json",
            r#"{"cniVersion":"1.0.0","name":"other","type":"from-json"}"#,
        );
        write(d.path(), "README.md", "ignored");
        let l = load_network(d.path(), "net").unwrap();
        assert_eq!(l.plugins[0].plugin_type, "from-conflist-15");
        let o = load_network(d.path(), "other").unwrap();
        assert_eq!(o.plugins[0].plugin_type, "from-json");
        assert_eq!(o.cni_version.to_string(), "1.0.0");
        let (all, broken) = load_all(d.path()).unwrap();
        assert_eq!(all.len(), 4);
        assert!(broken.is_empty());
    }

    #[test]
    fn a_conf_file_is_found_by_its_json_name_when_no_conflist_has_it() {
        // multi-net spec §3.4.1, third rule: a .config file "whose JSON name key matches" the
        // NAD's name, whatever the file is called, once no .conflist matched.
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "10-other.conflist",
            r#"{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"from-conflist"}]}"#,
        );
        write(
            d.path(),
            "20-macvlan.conf",
            r#"{"cniVersion":"1.0.0","name":"net-c","type":"from-conf"}"#,
        );
        let l = find_network(d.path(), "net-c").unwrap().unwrap();
        assert_eq!(l.plugins[0].plugin_type, "from-conf");
        assert_eq!(find_network(d.path(), "20-macvlan").unwrap(), None);
        assert_eq!(find_network(d.path(), "macvlan").unwrap(), None);
    }

    #[test]
    fn errors_name_the_directory_network_and_broken_files() {
        let e = load_network(Path::new("/nonexistent/plumb"), "x").unwrap_err();
        assert!(
            e.msg.contains("/nonexistent/plumb") && e.msg.contains("no such directory"),
            "{e}"
        );
        let d = tempfile::tempdir().unwrap();
        let e = load_network(d.path(), "x").unwrap_err();
        assert!(e.msg.contains("no network named \"x\""), "{e}");
        write(d.path(), "99-bad.conflist", "{not json");
        write(
            d.path(),
            "10-good.conflist",
            r#"{"name":"good","cniVersion":"1.0.0","plugins":[{"type":"p"}]}"#,
        );
        // The broken file does not stop another network from loading ...
        assert!(load_network(d.path(), "good").is_ok());
        // ... and is named when the network asked for is not found.
        let e = load_network(d.path(), "x").unwrap_err();
        assert!(e.msg.contains("99-bad.conflist"), "{e}");
        let e = find_network(d.path(), "x").unwrap_err();
        assert!(e.msg.contains("99-bad.conflist"), "{e}");
        let clean = tempfile::tempdir().unwrap();
        assert_eq!(find_network(clean.path(), "x").unwrap(), None);
    }

    #[test]
    fn sibling_directory_plugins_are_appended_unless_only_inlined() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("net")).unwrap();
        write(
            &d.path().join("net"),
            "2.conf",
            r#"{"type":"second-sibling"}"#,
        );
        write(
            &d.path().join("net"),
            "1.conf",
            r#"{"type":"first-sibling"}"#,
        );
        write(
            d.path(),
            "a.conflist",
            r#"{"name":"net","cniVersion":"1.1.0","plugins":[{"type":"inline"}]}"#,
        );
        let l = load_network(d.path(), "net").unwrap();
        let types: Vec<_> = l.plugins.iter().map(|p| p.plugin_type.as_str()).collect();
        assert_eq!(types, ["inline", "first-sibling", "second-sibling"]);
        write(
            d.path(),
            "a.conflist",
            r#"{"name":"net","cniVersion":"1.1.0","loadOnlyInlinedPlugins":true,"plugins":[{"type":"inline"}]}"#,
        );
        assert_eq!(load_network(d.path(), "net").unwrap().plugins.len(), 1);
        // A list with no inline plugins takes them all from the directory.
        write(
            d.path(),
            "a.conflist",
            r#"{"name":"net","cniVersion":"1.1.0"}"#,
        );
        assert_eq!(load_network(d.path(), "net").unwrap().plugins.len(), 2);
        fs::remove_dir_all(d.path().join("net")).unwrap();
        let e = load_network(d.path(), "net").unwrap_err();
        assert!(e.msg.contains("no plugin configurations"), "{e}");
    }

    #[test]
    fn a_dangling_symlink_is_a_broken_file_not_an_absent_one() {
        // libcni `ConfFiles` skips only directories: a dangling `*.conflist` symlink is listed and
        // its read error reported. It must not vanish, nor let the next file be taken as "first".
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(d.path().join("gone"), d.path().join("05-a.conflist")).unwrap();
        write(
            d.path(),
            "10-b.conflist",
            r#"{"name":"b","cniVersion":"1.0.0","plugins":[{"type":"p"}]}"#,
        );
        let files = conf_files(d.path(), &["conflist"]).unwrap();
        assert_eq!(files.first(), Some(&d.path().join("05-a.conflist")));
        let e = find_network(d.path(), "a").unwrap_err();
        assert!(e.msg.contains("05-a.conflist"), "{e}");
        assert!(load_network(d.path(), "b").is_ok());
        // Directories, also behind a symlink, are still not configuration files.
        fs::create_dir(d.path().join("sub.conflist")).unwrap();
        std::os::unix::fs::symlink(
            d.path().join("sub.conflist"),
            d.path().join("link.conflist"),
        )
        .unwrap();
        assert_eq!(conf_files(d.path(), &["conflist"]).unwrap().len(), 2);
    }

    #[test]
    fn a_broken_file_of_the_network_asked_for_is_not_passed_over() {
        // The conflist for "net" is invalid (a plugin without "type"). libcni stops there; a
        // lower-priority "net" must not be used in its place.
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "10-net.conflist",
            r#"{"name":"net","cniVersion":"1.0.0","plugins":[{"typo":"bridge"}]}"#,
        );
        write(
            d.path(),
            "20-net.conf",
            r#"{"name":"net","cniVersion":"1.0.0","type":"old-fallback"}"#,
        );
        let e = load_network(d.path(), "net").unwrap_err();
        assert_eq!(e.code, 7, "{e}");
        assert!(e.msg.contains("10-net.conflist"), "{e}");
        let e = find_network(d.path(), "net").unwrap_err();
        assert!(e.msg.contains("10-net.conflist"), "{e}");
        // A broken file of another network is still skipped.
        write(
            d.path(),
            "05-other.conflist",
            r#"{"name":"other","cniVersion":"1.0.0","plugins":[{}]}"#,
        );
        write(
            d.path(),
            "10-net.conflist",
            r#"{"name":"net","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}"#,
        );
        assert_eq!(
            load_network(d.path(), "net").unwrap().plugins[0].plugin_type,
            "bridge"
        );
    }
}
