//! `plumb cni`: run a network configuration list against a network namespace, the way the
//! reference `cnitool` does, for operators checking a network by hand. It reads cnitool's
//! environment and derives cnitool's container ID ([`container_id_for`]), so either tool can
//! delete what the other added.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cni::cache::{DEFAULT_CACHE_DIR, ResultCache};
use cni::error::{CniError, ErrorCode};
use cni::request::GcAttachment;
use cni::runtime::{CniConfig, RuntimeConf};
use cni::{args, conf_dir, exec};
use sha2::{Digest, Sha512};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    Add,
    Check,
    Del,
    Gc,
    Status,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The operation.
    #[arg(value_enum)]
    pub op: Op,
    /// The network's `name` in the configuration directory (NETCONFPATH).
    pub network: String,
    /// The network namespace: a path, or a name under /var/run/netns. Needed for add, check, del.
    pub netns: Option<String>,
    /// gc: an attachment to keep, as CONTAINERID/IFNAME (repeatable). Every other cached
    /// attachment of the network is deleted.
    #[arg(long = "keep", value_name = "CONTAINERID/IFNAME")]
    pub keep: Vec<String>,
}

/// cnitool's container ID for a netns path.
pub fn container_id_for(netns_path: &str) -> String {
    derived_container_id("cnitool", netns_path)
}

/// `<prefix>-` and the first 20 hex digits of the SHA-512 of the namespace path: the same
/// namespace always gets the same container ID, so a later DEL finds what ADD did.
pub fn derived_container_id(prefix: &str, netns_path: &str) -> String {
    let digest = Sha512::digest(netns_path.as_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{hex}")
}

/// A namespace argument as an absolute path: a name (no '/', a convenience cnitool lacks) is one
/// made by `ip netns add`, under `/var/run/netns`. A path is cleaned lexically as cnitool's
/// `filepath.Abs` cleans it (no `.`, `..`, repeated or trailing `/`), so the same namespace
/// always gets cnitool's container ID.
pub fn netns_path(arg: &str) -> Result<String, CniError> {
    if arg.is_empty() {
        return Err(usage(
            "the network namespace is empty: give a path or a name under /var/run/netns",
        ));
    }
    let p = if arg.contains('/') {
        std::path::absolute(Path::new(arg)).map_err(|e| {
            CniError::new(ErrorCode::InvalidEnvironment, format!("netns {arg:?}: {e}"))
        })?
    } else {
        PathBuf::from("/var/run/netns").join(arg)
    };
    // `components` already drops `.`, repeated and trailing separators; `..` removes the
    // element before it, and stays at the root (Go's `filepath.Clean`).
    let mut clean = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            c => clean.push(c),
        }
    }
    Ok(clean.display().to_string())
}

fn usage(msg: &str) -> CniError {
    CniError::new(ErrorCode::InvalidEnvironment, msg)
}

/// Runs the command; what it prints goes to `out`. Errors are returned for the caller to print.
///
/// Environment, as cnitool reads it: `NETCONFPATH` (default `/etc/cni/net.d`), `CNI_PATH`,
/// `CNI_ARGS`, `CAP_ARGS` (capability arguments as a JSON object), `CNI_IFNAME` (default `eth0`),
/// and plumb's own `CNI_CACHE_DIR` (default `/var/lib/cni`, libcni's).
pub fn run(
    a: &Args,
    getenv: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn std::io::Write,
) -> Result<(), CniError> {
    let env = |k: &str| getenv(k).filter(|v| !v.is_empty());
    let netdir = env("NETCONFPATH").unwrap_or_else(|| "/etc/cni/net.d".into());
    let list = conf_dir::load_network(Path::new(&netdir), &a.network)?;
    let path = exec::split_path(&env("CNI_PATH").unwrap_or_default());
    let cache = ResultCache::new(env("CNI_CACHE_DIR").unwrap_or_else(|| DEFAULT_CACHE_DIR.into()));
    let mut cni = CniConfig::new(path, cache);
    cni.on_plugin_stderr = Some(Box::new(|log| {
        eprintln!(
            "plugin {} ({}): {}",
            log.plugin_type,
            log.command.as_str(),
            log.stderr.trim_end()
        );
    }));

    match a.op {
        // libcni (and so cnitool) answers success without asking any plugin: for an operator
        // that reads as "ready". STATUS exists from CNI 1.1.0 (spec §2 "STATUS").
        Op::Status if list.cni_version < cni::Version::V1_1_0 => {
            return Err(CniError::new(
                ErrorCode::IncompatibleVersion,
                format!(
                    "network {:?} has cniVersion {}: STATUS exists from CNI 1.1.0, no plugin \
                     was asked",
                    list.name, list.cni_version
                ),
            ));
        }
        Op::Status => return cni.status_network_list(&list),
        Op::Gc => {
            let keep = a
                .keep
                .iter()
                .map(|k| {
                    k.split_once('/')
                        .map(|(c, i)| GcAttachment {
                            container_id: c.into(),
                            ifname: i.into(),
                        })
                        .ok_or_else(|| usage(&format!("--keep {k:?}: expected CONTAINERID/IFNAME")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return cni.gc_network_list(&list, &keep);
        }
        Op::Add | Op::Check | Op::Del => {}
    }

    let netns_arg = a.netns.as_deref().ok_or_else(|| {
        usage("a network namespace (path or name) is required for add, check and del")
    })?;
    let netns = netns_path(netns_arg)?;
    let capability_args = match env("CAP_ARGS") {
        None => Default::default(),
        Some(s) => match serde_json::from_str::<serde_json::Value>(&s) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) => return Err(usage("CAP_ARGS must be a JSON object")),
            Err(e) => return Err(usage(&format!("CAP_ARGS is not valid JSON: {e}"))),
        },
    };
    let rt = RuntimeConf {
        container_id: container_id_for(&netns),
        netns,
        ifname: env("CNI_IFNAME").unwrap_or_else(|| "eth0".into()),
        args: args::parse(&env("CNI_ARGS").unwrap_or_default())?,
        capability_args,
    };
    match a.op {
        Op::Add => {
            let result = cni.add_network_list(&list, &rt)?;
            writeln!(out, "{}", result.to_json_pretty()?)
                .map_err(|e| CniError::new(ErrorCode::Io, format!("cannot print result: {e}")))
        }
        Op::Check => cni.check_network_list(&list, &rt),
        Op::Del => cni.del_network_list(&list, &rt),
        Op::Gc | Op::Status => unreachable!("handled above"),
    }
}

/// `plumb cni`: prints the result on stdout, an error readably on stderr, exit 1 on error.
pub fn main(a: Args, getenv: &dyn Fn(&str) -> Option<String>) -> ExitCode {
    match run(&a, getenv, &mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "plumb cni {}: {e} (CNI error code {})",
                format!("{:?}", a.op).to_lowercase(),
                e.code
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_id_matches_cnitool() {
        // The ID in crates/cni/tests/fixtures/libcni, which cnitool derived from this path.
        assert_eq!(
            container_id_for("/var/run/netns/fixture"),
            "cnitool-f44a90ca26003b1992e5"
        );
    }

    #[test]
    fn netns_names_and_paths() {
        assert_eq!(netns_path("blue").unwrap(), "/var/run/netns/blue");
        assert_eq!(netns_path("/proc/1/ns/net").unwrap(), "/proc/1/ns/net");
        assert!(netns_path("./x").unwrap().starts_with('/'));
        // An empty argument (an unset shell variable in quotes) is no namespace, not
        // `/var/run/netns` itself.
        let e = netns_path("").unwrap_err();
        assert_eq!(e.kind(), ErrorCode::InvalidEnvironment);
        assert!(e.msg.contains("empty"), "{e}");
    }

    fn env(dir: &Path) -> impl Fn(&str) -> Option<String> + use<> {
        let netconf = dir.display().to_string();
        move |k: &str| (k == "NETCONFPATH").then(|| netconf.clone())
    }

    #[test]
    fn status_of_a_configuration_without_status_says_so() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("10-old.conflist"),
            r#"{"cniVersion": "1.0.0", "name": "old", "plugins": [{"type": "bridge"}]}"#,
        )
        .unwrap();
        let a = Args {
            op: Op::Status,
            network: "old".into(),
            netns: None,
            keep: vec![],
        };
        // Nothing can be asked: an exit status 0 would read as "the network is ready".
        let e = run(&a, &env(d.path()), &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), ErrorCode::IncompatibleVersion);
        assert!(e.msg.contains("old") && e.msg.contains("1.0.0"), "{e}");
    }

    #[test]
    fn netns_paths_are_cleaned_as_cnitool_cleans_them() {
        // cnitool takes `filepath.Abs`, which cleans the path: the same namespace written with a
        // trailing slash, `.` or `..` must get the same container ID as cnitool gives it.
        for arg in [
            "/var/run/netns/fixture/",
            "/var/run/netns//fixture",
            "/var/run/netns/./fixture",
            "/var/run/../run/netns/fixture",
            "/../var/run/netns/fixture",
        ] {
            let path = netns_path(arg).unwrap();
            assert_eq!(path, "/var/run/netns/fixture", "{arg}");
            assert_eq!(container_id_for(&path), "cnitool-f44a90ca26003b1992e5");
        }
    }
}
