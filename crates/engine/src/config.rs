//! plumb's own configuration: the JSON the runtime gives plumb on stdin when it runs as the CNI
//! plugin. Multus's keys are accepted unchanged, with their defaults (docs/multus-behaviour.md
//! §1.1), so a Multus configuration file works as it is; plumb's own keys are prefixed `plumb`.
//! Every key is known: a mistyped one is an error that names it ([`Config::parse`]).

use std::path::PathBuf;

use cni::error::{CniError, ErrorCode};
use cni::json_keys;
use cni::version::Version;
use serde_json::{Map, Value};

use crate::paths;

/// `logLevel`, Multus's levels (docs/multus-behaviour.md §2.15), least verbose first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Panic,
    Error,
    Verbose,
    Debug,
}

/// The parsed configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub cni_version: Version,
    pub name: String,
    pub kubeconfig: Option<PathBuf>,
    /// The cluster-wide default network: a NAD name (in `multus_namespace`), a network name in
    /// `conf_dir`, or a path to a file or directory (docs/multus-behaviour.md §1.1).
    pub cluster_network: Option<String>,
    pub default_networks: Vec<String>,
    /// Inline delegate configs, used only when `cluster_network` is not set; the first is the
    /// default network.
    pub delegates: Vec<Value>,
    pub namespace_isolation: bool,
    /// Namespaces any pod may use NADs from with isolation on. Multus's default is `default`;
    /// setting the key replaces it.
    pub global_namespaces: Vec<String>,
    /// Pods in these namespaces get no `defaultNetworks` (their network-status is written).
    pub system_namespaces: Vec<String>,
    pub multus_namespace: String,
    pub readiness_indicator_file: Option<PathBuf>,
    pub conf_dir: PathBuf,
    pub cni_dir: PathBuf,
    /// Where Multus kept its caches on this node, read by DEL of a sandbox Multus attached
    /// (the `multus_cache` module): `cniDir` when set, else Multus's default.
    pub multus_cni_dir: PathBuf,
    pub bin_dir: PathBuf,
    pub log_file: Option<PathBuf>,
    pub log_level: LogLevel,
    pub log_to_stderr: bool,
    /// Declared capabilities: what the runtime passes in `runtime_config`.
    pub capabilities: Map<String, Value>,
    /// Filled by the runtime from `capabilities` (portMappings, bandwidth, pod annotations, …).
    pub runtime_config: Map<String, Value>,
    /// `plumbStateDir`: attachment records.
    pub state_dir: PathBuf,
    /// `plumbNadDir`: NetworkAttachmentDefinitions as YAML/JSON files, used instead of the API
    /// when there is no `kubeconfig` (plumb without Kubernetes).
    pub nad_dir: Option<PathBuf>,
    /// `plumbAttachmentEvents`: a `Normal AddedInterface` event on the pod for each attachment
    /// (failures always get a `Warning` event).
    pub attachment_events: bool,
    /// `plumbPodResourcesSocket`: the kubelet's PodResources API, asked which devices of a
    /// NAD's `resourceName` the pod was given (docs/multus-behaviour.md §2.9).
    pub pod_resources_socket: PathBuf,
    /// `plumbKubeletRootDir`: the kubelet's root directory, whose device-manager checkpoint
    /// gives the pod's devices when the PodResources socket does not exist
    /// (`kubelet_checkpoint`).
    pub kubelet_root_dir: PathBuf,
    /// `plumbDeviceInfoDir`: the base of the device-info files (device-info spec §4), with
    /// `dp/` and `cni/` under it.
    pub device_info_dir: PathBuf,
    /// Warnings for the caller to log: keys accepted but without effect.
    pub warnings: Vec<String>,
}

/// Keys Multus reads or tolerates that plumb accepts without acting on them, with the reason:
/// the keys Multus itself ignores, and the thick-mode daemon keys that Multus merges into the
/// request. Accepted with a warning the caller logs.
const IGNORED: &[(&str, &str)] = &[
    ("type", "the plugin's own type"),
    (
        "retryDeleteOnError",
        "plumb always keeps its record until every DEL succeeded",
    ),
    ("logOptions", "log rotation is left to the node (logrotate)"),
    ("prevResult", "plumb is not chained after another plugin"),
    (
        "cniConf",
        "written by Multus's thin entrypoint but never read",
    ),
    (
        "defaultnetworkwaitseconds",
        "pre-v4 Multus key, superseded by readinessindicatorfile",
    ),
    (
        "defaultnetworkfile",
        "pre-v4 Multus key, superseded by readinessindicatorfile",
    ),
    (
        "allowTryDeleteOnErr",
        "misspelling of retryDeleteOnError in Multus's docs",
    ),
    (
        "dns",
        "libcni network-config field, unused by a delegating plugin",
    ),
    (
        "ipam",
        "libcni network-config field, unused by a delegating plugin",
    ),
    (
        "args",
        "libcni network-config field, unused by a delegating plugin",
    ),
    // Thick-mode daemon keys that Multus merges into every request (docs/multus-behaviour.md §1.3).
    ("socketDir", "a Multus daemon key"),
    ("chrootDir", "a Multus daemon key"),
    ("metricsPort", "a Multus daemon key"),
    ("enablePprof", "a Multus daemon key"),
    ("connectionLimit", "a Multus daemon key"),
    ("perNodeCertificate", "a Multus daemon key"),
    ("daemonSocketDir", "a Multus shim key"),
    ("multusConfigFile", "a Multus daemon key"),
    ("multusAutoconfigDir", "a Multus daemon key"),
    ("multusMasterCNI", "a Multus daemon key"),
    ("cniConfigDir", "a Multus daemon key"),
    ("forceCNIVersion", "a Multus daemon key"),
    ("overrideNetworkName", "a Multus daemon key"),
];

/// Multus keys plumb does not implement: refused, so nobody believes they are in effect.
const UNSUPPORTED: &[(&str, &str)] = &[(
    "auxiliaryCNIChainName",
    "the auxiliary chain is not implemented; remove the key",
)];

fn invalid(msg: String) -> CniError {
    CniError::new(
        ErrorCode::InvalidConfig,
        format!("plumb configuration: {msg}"),
    )
}

struct Reader<'a> {
    raw: &'a Map<String, Value>,
}

impl Reader<'_> {
    fn string(&self, key: &str) -> Result<Option<String>, CniError> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(invalid(format!("{key:?} must be a string, not {v}"))),
        }
    }

    fn path(&self, key: &str, default: &str) -> Result<PathBuf, CniError> {
        Ok(PathBuf::from(
            self.string(key)?.unwrap_or_else(|| default.into()),
        ))
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, CniError> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(invalid(format!("{key:?} must be true or false, not {v}"))),
        }
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<String>>, CniError> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                    _ => Err(invalid(format!(
                        "{key:?} entry {i} must be a non-empty string, not {v}"
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(invalid(format!(
                "{key:?} must be a list of strings, not {v}"
            ))),
        }
    }

    fn object(&self, key: &str) -> Result<Map<String, Value>, CniError> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(m)) => Ok(m.clone()),
            Some(v) => Err(invalid(format!("{key:?} must be an object, not {v}"))),
        }
    }
}

/// The keys plumb reads. A key neither here nor in [`IGNORED`] is an error that names it,
/// because a silently ignored setting (say `namespaceIsolaton`) is a security hole on a
/// production cluster.
const KNOWN: &[&str] = &[
    "cniVersion",
    "name",
    "kubeconfig",
    "clusterNetwork",
    "defaultNetworks",
    "delegates",
    "namespaceIsolation",
    "globalNamespaces",
    "systemNamespaces",
    "multusNamespace",
    "readinessindicatorfile",
    "confDir",
    "cniDir",
    "binDir",
    "logFile",
    "logLevel",
    "logToStderr",
    "capabilities",
    "runtimeConfig",
    "plumbStateDir",
    "plumbAttachmentEvents",
    "plumbNadDir",
    "plumbDaemonSocket",
    "plumbPodResourcesSocket",
    "plumbKubeletRootDir",
    "plumbDeviceInfoDir",
];

/// `raw` with each key that differs only in case from a Multus key (`readinessIndicatorFile`)
/// renamed to it, with a warning: Multus decodes its configuration with Go's encoding/json, which
/// matches keys in any case, so such a key is in effect with Multus. One key given in two cases
/// is an error naming both (which one Go keeps depends on their order in the file). plumb's own
/// keys are exact (`plumbDaemonSocket` is read by the shim before this parse).
pub fn canonical_keys(
    raw: Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<Map<String, Value>, CniError> {
    let names = || {
        KNOWN
            .iter()
            .copied()
            .filter(|k| !k.starts_with("plumb"))
            .chain(IGNORED.iter().map(|(k, _)| *k))
            .chain(UNSUPPORTED.iter().map(|(k, _)| *k))
    };
    let mut out = Map::new();
    let mut given_as: Vec<(&str, String)> = Vec::new();
    for (key, value) in raw {
        let canonical = names()
            .find(|n| *n == key)
            .or_else(|| names().find(|n| n.eq_ignore_ascii_case(&key)));
        let Some(canonical) = canonical else {
            out.insert(key, value);
            continue;
        };
        if let Some((_, first)) = given_as.iter().find(|(c, _)| *c == canonical) {
            return Err(invalid(format!(
                "keys {first:?} and {key:?} are the same key {canonical:?} (read in any case, \
                 as Multus reads it): keep one"
            )));
        }
        if key != canonical {
            warnings.push(format!(
                "configuration key {key:?} is read as {canonical:?} (Multus reads keys in any \
                 case)"
            ));
        }
        given_as.push((canonical, key));
        out.insert(canonical.to_string(), value);
    }
    Ok(out)
}

impl Config {
    /// Parses the stdin configuration.
    pub fn parse(bytes: &[u8]) -> Result<Config, CniError> {
        let raw = match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return Err(CniError::new(
                    ErrorCode::DecodingFailure,
                    "plumb configuration: not a JSON object",
                ));
            }
            Err(e) => {
                return Err(CniError::new(
                    ErrorCode::DecodingFailure,
                    format!("plumb configuration: invalid JSON: {e}"),
                ));
            }
        };
        // serde_json kept the last of two equal keys: a setting given twice is refused, naming it.
        let checked = json_keys::Checked::Object {
            nested: &["capabilities", "runtimeConfig"],
        };
        if let Some(twice) = json_keys::duplicate_key(bytes, checked) {
            return Err(invalid(format!("plumb configuration: {twice}")));
        }
        let mut warnings = Vec::new();
        let raw = canonical_keys(raw, &mut warnings)?;
        let r = Reader { raw: &raw };
        for key in raw.keys() {
            // Keys the runtime injects (CNI spec §1: `cni.dev/` is reserved; GC's
            // `cni.dev/valid-attachments`) are the request's, not configuration.
            if KNOWN.contains(&key.as_str()) || key.starts_with("cni.dev/") {
                continue;
            }
            if let Some((_, why)) = UNSUPPORTED.iter().find(|(k, _)| k == key) {
                // Unset, as Multus reads an empty one: nothing to refuse.
                if matches!(&raw[key], Value::Null) || raw[key].as_str() == Some("") {
                    continue;
                }
                // CNI spec, error code 2: the message must contain the key and its value (cut
                // short: the value comes from outside and could be of any size).
                let value = raw[key].to_string();
                let value = cni::quote::cut(&value, 2 * cni::quote::VALUE);
                return Err(CniError::new(
                    ErrorCode::UnsupportedField,
                    format!(
                        "plumb configuration: key {key:?} (set to {value}) is not supported: {why}"
                    ),
                ));
            }
            match IGNORED.iter().find(|(k, _)| k == key) {
                Some((_, why)) if *key != "type" => {
                    warnings.push(format!("configuration key {key:?} is ignored: {why}"));
                }
                Some(_) => {}
                None => {
                    return Err(invalid(format!(
                        "unknown key {key:?} (see docs/configuration.md for the keys plumb reads)"
                    )));
                }
            }
        }

        let cni_version = Version::parse(&r.string("cniVersion")?.unwrap_or_default())
            .and_then(Version::require_supported)
            .map_err(|e| invalid(format!("\"cniVersion\": {}", e.msg)))?;
        let name = r.string("name")?.unwrap_or_else(|| "plumb".into());
        cni::validate::network_name(&name).map_err(|e| invalid(e.msg))?;

        let cluster_network = r.string("clusterNetwork")?;
        let delegates = match raw.get("delegates") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(d)) => d.clone(),
            Some(v) => return Err(invalid(format!("\"delegates\" must be a list, not {v}"))),
        };
        for (i, d) in delegates.iter().enumerate() {
            if !d.is_object() {
                return Err(invalid(format!(
                    "\"delegates\" entry {i} must be an object"
                )));
            }
        }
        if cluster_network.is_none() && delegates.is_empty() {
            return Err(invalid(
                "one of \"clusterNetwork\" or \"delegates\" must give the cluster-wide default \
                 network"
                    .into(),
            ));
        }
        if cluster_network.is_some() && !delegates.is_empty() {
            warnings.push(
                "\"delegates\" is ignored because \"clusterNetwork\" is set (as Multus does)"
                    .into(),
            );
        }

        // Multus takes globalNamespaces as one comma-separated string; a list is accepted too.
        // An empty string is unset, as in Multus: it keeps `default`.
        let global_namespaces = match raw.get("globalNamespaces") {
            None | Some(Value::Null) => vec!["default".to_string()],
            Some(Value::String(s)) if s.is_empty() => {
                // plumb read it as "none" before: say that `default` is global again.
                warnings.push(
                    "\"globalNamespaces\" is \"\": unset, as in Multus, so the namespace \
                     \"default\" stays global under namespaceIsolation; [] makes none global"
                        .into(),
                );
                vec!["default".to_string()]
            }
            Some(Value::String(s)) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            Some(Value::Array(_)) => r.strings("globalNamespaces")?.unwrap_or_default(),
            Some(v) => {
                return Err(invalid(format!(
                    "\"globalNamespaces\" must be a comma-separated string, not {v}"
                )));
            }
        };

        let log_level = match r.string("logLevel")?.map(|s| s.to_ascii_lowercase()) {
            None => LogLevel::Panic,
            Some(l) => match l.as_str() {
                "panic" => LogLevel::Panic,
                "error" => LogLevel::Error,
                "verbose" => LogLevel::Verbose,
                "debug" => LogLevel::Debug,
                // Multus warns and keeps its default here; a drop-in must not fail pods over it.
                other => {
                    warnings.push(format!(
                        "\"logLevel\" {other:?} is not one of debug, verbose, error, panic; \
                         using panic"
                    ));
                    LogLevel::Panic
                }
            },
        };

        // `plumbDaemonSocket` is acted on before the configuration is parsed (the binary's `shim`, which
        // reads nothing else); here it is only checked, so that a mistyped one is an error.
        r.string("plumbDaemonSocket")?;
        Ok(Config {
            cni_version,
            name,
            kubeconfig: r.string("kubeconfig")?.map(PathBuf::from),
            cluster_network,
            default_networks: r.strings("defaultNetworks")?.unwrap_or_default(),
            delegates,
            namespace_isolation: r.bool("namespaceIsolation", false)?,
            global_namespaces,
            system_namespaces: r
                .strings("systemNamespaces")?
                .unwrap_or_else(|| vec!["kube-system".into()]),
            multus_namespace: r
                .string("multusNamespace")?
                .unwrap_or_else(|| "kube-system".into()),
            readiness_indicator_file: r.string("readinessindicatorfile")?.map(PathBuf::from),
            conf_dir: r.path("confDir", paths::CONF_DIR)?,
            cni_dir: r.path("cniDir", paths::CNI_DIR)?,
            multus_cni_dir: r.path("cniDir", paths::MULTUS_CNI_DIR)?,
            bin_dir: r.path("binDir", paths::BIN_DIR)?,
            log_file: r.string("logFile")?.map(PathBuf::from),
            log_level,
            log_to_stderr: r.bool("logToStderr", true)?,
            capabilities: r.object("capabilities")?,
            runtime_config: r.object("runtimeConfig")?,
            state_dir: r.path("plumbStateDir", paths::STATE_DIR)?,
            attachment_events: r.bool("plumbAttachmentEvents", false)?,
            nad_dir: r.string("plumbNadDir")?.map(PathBuf::from),
            pod_resources_socket: r.path("plumbPodResourcesSocket", paths::POD_RESOURCES_SOCKET)?,
            kubelet_root_dir: r.path("plumbKubeletRootDir", paths::KUBELET_ROOT_DIR)?,
            device_info_dir: r.path(
                "plumbDeviceInfoDir",
                netattach::device_info_files::DEFAULT_BASE_DIR,
            )?,
            warnings,
        })
    }
}

impl Config {
    /// What runs the delegates: plugins from `binDir`, then `cni_path` (Multus's search
    /// order), the result cache under `cniDir`.
    pub fn delegates_runner(&self, cni_path: &[PathBuf]) -> cni::runtime::CniConfig {
        let mut path = vec![self.bin_dir.clone()];
        // Each directory once: the runtime's CNI_PATH is usually binDir itself
        // (/opt/cni/bin), and a plugin not found is reported with the directories searched.
        for dir in cni_path {
            if !path.contains(dir) {
                path.push(dir.clone());
            }
        }
        cni::runtime::CniConfig::new(path, cni::cache::ResultCache::new(self.cni_dir.clone()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: Value) -> Result<Config, CniError> {
        Config::parse(v.to_string().as_bytes())
    }

    #[test]
    fn a_multus_thick_generated_config_parses_with_multus_defaults() {
        // The shape Multus's config generator writes (docs/multus-behaviour.md §1.5, §3.3).
        let c = parse(json!({
            "cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim",
            "logLevel": "verbose", "logToStderr": true,
            "capabilities": {"portMappings": true, "bandwidth": true},
            "clusterNetwork": "/host/etc/cni/net.d/10-flannel.conflist",
            "daemonSocketDir": "/run/multus/",
            "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig"
        }))
        .unwrap();
        assert_eq!(
            c.cluster_network.as_deref(),
            Some("/host/etc/cni/net.d/10-flannel.conflist")
        );
        assert_eq!(c.log_level, LogLevel::Verbose);
        assert_eq!(c.global_namespaces, ["default"]);
        assert_eq!(c.system_namespaces, ["kube-system"]);
        assert_eq!(c.multus_namespace, "kube-system");
        assert_eq!(c.conf_dir, PathBuf::from(paths::CONF_DIR));
        assert_eq!(c.bin_dir, PathBuf::from(paths::BIN_DIR));
        assert!(!c.namespace_isolation);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("daemonSocketDir"));
    }

    #[test]
    fn global_namespaces_is_a_comma_string_that_replaces_default() {
        let c = parse(json!({"clusterNetwork": "x", "namespaceIsolation": true,
            "globalNamespaces": " ns3, ns4 ,"}))
        .unwrap();
        assert_eq!(c.global_namespaces, ["ns3", "ns4"]);
        assert!(c.namespace_isolation);
    }

    #[test]
    fn a_key_given_twice_is_refused_naming_it() {
        // serde_json keeps the last of two equal keys: isolation was off, silently.
        let e = Config::parse(
            br#"{"clusterNetwork": "x", "namespaceIsolation": true, "namespaceIsolation": false}"#,
        )
        .unwrap_err();
        assert_eq!(e.code, 7, "{e}");
        assert!(
            e.msg.contains("key \"namespaceIsolation\" is given twice"),
            "{e}"
        );
        let e = Config::parse(
            br#"{"clusterNetwork": "x", "capabilities": {"ips": true, "ips": false}}"#,
        )
        .unwrap_err();
        assert!(e.msg.contains("(in \"capabilities\")"), "{e}");
        // A delegate's own keys are its own.
        Config::parse(
            br#"{"delegates": [{"cniVersion": "1.0.0", "name": "n", "type": "a", "type": "b"}]}"#,
        )
        .unwrap();
    }

    #[test]
    fn an_empty_global_namespaces_keeps_the_default_namespace_as_multus_does() {
        // Multus (`LoadNetConf`) replaces its `["default"]` only with a non-empty string; a
        // templated `"globalNamespaces": ""` must not make `default/x` refused under isolation.
        for empty in [json!(""), json!(null)] {
            let c = parse(json!({"clusterNetwork": "x", "namespaceIsolation": true,
                "globalNamespaces": empty}))
            .unwrap();
            assert_eq!(c.global_namespaces, ["default"], "{empty}");
            // Earlier plumb read "" as no global namespace: the widening is not silent.
            assert_eq!(
                c.warnings.iter().any(|w| w.contains("globalNamespaces")),
                empty == json!(""),
                "{empty}: {:?}",
                c.warnings
            );
        }
        // How to have none, as "" gave before.
        let c = parse(json!({"clusterNetwork": "x", "namespaceIsolation": true,
            "globalNamespaces": []}))
        .unwrap();
        assert!(c.global_namespaces.is_empty());
    }

    #[test]
    fn a_key_in_another_case_is_read_as_multus_reads_it() {
        // Multus decodes its configuration with Go's encoding/json, which matches keys in any
        // case: a Helm chart's `readinessIndicatorFile`, Multus docs' `LogLevel` are in effect.
        let c = parse(
            json!({"clusterNetwork": "x", "readinessIndicatorFile": "/run/ready",
            "LogLevel": "debug", "NamespaceIsolation": true, "socketdir": "/run/multus"}),
        )
        .unwrap();
        assert_eq!(
            c.readiness_indicator_file.as_deref(),
            Some(std::path::Path::new("/run/ready"))
        );
        assert_eq!(c.log_level, LogLevel::Debug);
        assert!(c.namespace_isolation);
        for key in [
            "readinessIndicatorFile",
            "LogLevel",
            "NamespaceIsolation",
            "socketdir",
        ] {
            assert!(
                c.warnings.iter().any(|w| w.contains(key)),
                "{key}: {:?}",
                c.warnings
            );
        }
        // Mistyped is still an error, and so is one key given twice in different cases.
        let e = parse(json!({"clusterNetwork": "x", "readinessIndicatorFle": "/a"})).unwrap_err();
        assert!(e.msg.contains("readinessIndicatorFle"), "{e}");
        let e = parse(
            json!({"clusterNetwork": "x", "readinessindicatorfile": "/a",
            "readinessIndicatorFile": "/b"}),
        )
        .unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("readinessindicatorfile") && e.msg.contains("readinessIndicatorFile"),
            "{e}"
        );
        let e = parse(json!({"clusterNetwork": "x", "AuxiliaryCNIChainName": "aux"})).unwrap_err();
        assert_eq!(e.code, 2, "{e}");
        // plumb's own keys are not Multus's: exact, as the shim reads `plumbDaemonSocket`.
        let e = parse(json!({"clusterNetwork": "x", "PlumbDaemonSocket": "/s"})).unwrap_err();
        assert!(e.msg.contains("unknown key \"PlumbDaemonSocket\""), "{e}");
    }

    #[test]
    fn an_empty_auxiliary_chain_name_is_unset_as_in_multus() {
        // Multus adds the auxiliary chain only for a non-empty name; a templated daemon config
        // renders the unset value as "" (merged into every request in thick mode).
        for unset in [json!(""), json!(null)] {
            let c = parse(json!({"clusterNetwork": "x", "auxiliaryCNIChainName": unset}));
            assert!(c.is_ok(), "{unset}: {c:?}");
        }
    }

    #[test]
    fn mistyped_and_unknown_keys_are_errors_naming_the_key() {
        let cases = [
            (
                json!({"clusterNetwork": "x", "namespaceIsolaton": true}),
                "namespaceIsolaton",
            ),
            (
                json!({"clusterNetwork": "x", "namespaceIsolation": "true"}),
                "namespaceIsolation",
            ),
            (
                json!({"clusterNetwork": "x", "defaultNetworks": "a,b"}),
                "defaultNetworks",
            ),
            (
                json!({"clusterNetwork": "x", "defaultNetworks": [""]}),
                "defaultNetworks",
            ),
            (json!({"clusterNetwork": 7}), "clusterNetwork"),
            (
                json!({"clusterNetwork": "x", "plumbDaemonSocket": 7}),
                "plumbDaemonSocket",
            ),
            (
                json!({"clusterNetwork": "x", "cniVersion": "0.5.0"}),
                "cniVersion",
            ),
            (json!({"clusterNetwork": "x", "delegates": {}}), "delegates"),
            (json!({"delegates": [1]}), "delegates"),
            (json!({"name": "x"}), "clusterNetwork"),
        ];
        for (v, key) in cases {
            let e = parse(v.clone()).unwrap_err();
            assert_eq!(e.code, 7, "{v}");
            assert!(e.msg.contains(key), "{v}: {e}");
        }
        let e = parse(json!({"clusterNetwork": "x", "auxiliaryCNIChainName": "aux"})).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.msg.contains("auxiliaryCNIChainName"), "{e}");
        assert!(
            e.msg.contains("\"aux\""),
            "the value is named (CNI spec, code 2): {e}"
        );
        assert_eq!(Config::parse(b"{").unwrap_err().code, 6);
        let c = parse(json!({"clusterNetwork": "x", "logLevel": "info"})).unwrap();
        assert_eq!(c.log_level, LogLevel::Panic);
        assert!(c.warnings[0].contains("info"), "{:?}", c.warnings);
    }

    #[test]
    fn delegates_mode_and_plumb_keys() {
        let c = parse(
            json!({"cniVersion": "1.0.0", "delegates": [{"type": "bridge", "name": "cbr0"}],
            "plumbStateDir": "/tmp/plumb-state", "logLevel": "DEBUG", "retryDeleteOnError": true}),
        )
        .unwrap();
        assert_eq!(c.delegates.len(), 1);
        assert_eq!(c.state_dir, PathBuf::from("/tmp/plumb-state"));
        assert_eq!(c.log_level, LogLevel::Debug);
        assert!(c.warnings.iter().any(|w| w.contains("retryDeleteOnError")));
    }
}
