//! `plumb validate`: checks NADs and pods in files before they reach a cluster, with the same
//! rules plumb applies at ADD, and one step further than any validator in the field: a pod's
//! selection is checked against the NADs it selects (a pod asking for `ips` on a network none
//! of whose plugins declares the `ips` capability fails at ADD, multi-net spec §4.1.2.1.3.2).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::process::ExitCode;

use netattach::nad::NadConfig;
use netattach::runtime_config::{capability, check_capabilities};
use netattach::selection::{self, NETWORKS_ANNOTATION};
use netattach::{NetworkAttachmentDefinition, NetworkRef};

use plumb_engine::objects::{self, FileObject};
use plumb_engine::plan::{DEFAULT_NETWORK_ANNOTATION, default_network_element, generated_ifname};

/// The interface Kubernetes runtimes (containerd, CRI-O) give a pod's default network.
const KUBERNETES_IFNAME: &str = "eth0";

/// Errors make the command fail; warnings (a capability no convention defines, a selection key
/// the spec does not know) do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem, printed as one line naming the file, the object and the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    /// `FILE (document N): KIND NAMESPACE/NAME`.
    pub object: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{}: {tag}: {}", self.object, self.message)
    }
}

/// The kinds whose pods are made from `spec.template` (CronJob: its job template's), with the
/// path to that template. Most pods are made by one of these, and their annotation is in the
/// template: checking only `Pod` objects passed the manifests people deploy unchecked.
const POD_TEMPLATES: &[(&str, &[&str])] = &[
    ("Deployment", &["spec", "template"]),
    ("StatefulSet", &["spec", "template"]),
    ("DaemonSet", &["spec", "template"]),
    ("ReplicaSet", &["spec", "template"]),
    ("ReplicationController", &["spec", "template"]),
    ("Job", &["spec", "template"]),
    ("CronJob", &["spec", "jobTemplate", "spec", "template"]),
];

/// The pods to check among `objects`: each `Pod`, and for each kind of [`POD_TEMPLATES`] its
/// template's metadata as a pod named and namespaced as the object that makes it (its pods are
/// created in its namespace), shown as that object. A template without annotations selects no
/// network: nothing to check.
fn pods_of(objects: &[FileObject]) -> Vec<FileObject> {
    let mut pods = Vec::new();
    for o in objects {
        if o.kind() == "Pod" {
            pods.push(o.clone());
            continue;
        }
        let Some((_, path)) = POD_TEMPLATES.iter().find(|(k, _)| *k == o.kind()) else {
            continue;
        };
        let template = path.iter().fold(&o.value, |v, key| &v[*key]);
        let annotations = &template["metadata"]["annotations"];
        if annotations.is_null() {
            continue;
        }
        let meta = &o.value["metadata"];
        let mut value = serde_json::json!({
            "kind": o.kind(),
            "metadata": {"name": meta["name"], "annotations": annotations},
        });
        if !meta["namespace"].is_null() {
            value["metadata"]["namespace"] = meta["namespace"].clone();
        }
        pods.push(FileObject {
            file: o.file.clone(),
            document: o.document,
            value,
        });
    }
    pods
}

/// Checks every NAD and pod among `objects`, pods made by a workload's template included; other
/// kinds are ignored.
pub fn validate(objects: &[FileObject]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut nads: BTreeMap<String, NetworkAttachmentDefinition> = BTreeMap::new();
    // Messages made for other callers may start with the object's own name, with its file
    // (`objects`) or without (`netattach`'s errors), or both: not twice.
    let error = |o: &FileObject, message: String| {
        let unnamed = message.strip_prefix(&format!("{o}: ")).unwrap_or(&message);
        let unnamed = unnamed
            .strip_prefix(&format!("{} {}: ", o.kind(), o.qualified_name()))
            .unwrap_or(unnamed);
        Problem {
            severity: Severity::Error,
            object: o.to_string(),
            message: unnamed.to_string(),
        }
    };
    let warning = |o: &FileObject, message: String| Problem {
        severity: Severity::Warning,
        object: o.to_string(),
        message,
    };

    for o in objects
        .iter()
        .filter(|o| o.kind() == netattach::nad::NAD_KIND)
    {
        let nad = match objects::nad_of(o) {
            Ok(n) => n,
            Err(e) => {
                problems.push(error(o, e.msg));
                continue;
            }
        };
        match nad.cni_config() {
            // Each of these says what in spec.config is wrong.
            Err(e) => problems.push(error(o, e.to_string())),
            Ok(NadConfig::OnDisk { name }) => problems.push(warning(
                o,
                format!(
                    "no spec.config: the node must have a configuration file named {name:?} \
                     (multi-net spec §3.4.1)"
                ),
            )),
            Ok(NadConfig::Inline(list)) => {
                for (i, p) in list.plugins.iter().enumerate() {
                    for (cap, on) in &p.capabilities {
                        if *on && !capability::KNOWN.contains(&cap.as_str()) {
                            problems.push(warning(
                                o,
                                format!(
                                    "spec.config plugin {i} ({}): capability {cap:?} is not one \
                                     of the CNI conventions' (a typo?)",
                                    p.plugin_type
                                ),
                            ));
                        }
                    }
                }
            }
        }
        if nads.insert(o.qualified_name(), nad).is_some() {
            problems.push(error(
                o,
                format!(
                    "network-attachment-definition {} is defined more than once",
                    o.qualified_name()
                ),
            ));
        }
    }

    for o in &pods_of(objects) {
        let pod = match objects::pod_of(o) {
            Ok(p) => p,
            Err(e) => {
                problems.push(error(o, e.msg));
                continue;
            }
        };
        // As the planner reads it: an empty value, `[]` or two networks fail ADD too.
        if let Some(v) = pod.annotations.get(DEFAULT_NETWORK_ANNOTATION)
            && let Err(e) = default_network_element(v)
        {
            problems.push(error(
                o,
                format!("annotation {DEFAULT_NETWORK_ANNOTATION:?}: {e}"),
            ));
        }
        let Some(value) = pod.annotations.get(NETWORKS_ANNOTATION) else {
            continue;
        };
        let elements = match selection::parse(value) {
            Ok(e) => e,
            Err(e) => {
                problems.push(error(o, e.to_string()));
                continue;
            }
        };
        problems.extend(
            interface_clashes(&elements)
                .into_iter()
                .map(|message| warning(o, message)),
        );
        for (i, element) in elements.iter().enumerate() {
            let r: NetworkRef = element.network_ref(&pod.namespace);
            for key in element.unknown_keys() {
                problems.push(warning(
                    o,
                    format!(
                        "{NETWORKS_ANNOTATION:?} element {} ({:?}): key {key:?} is not in the \
                         specification and is ignored",
                        i + 1,
                        element.name
                    ),
                ));
            }
            // Kubernetes runtimes give the default network `eth0` (CNI_IFNAME): ADD refuses an
            // element asking for it (multi-net spec §4.1.2.1.5), whatever the configuration.
            if element.interface.as_deref() == Some(KUBERNETES_IFNAME) {
                problems.push(error(
                    o,
                    format!(
                        "{NETWORKS_ANNOTATION:?} element {} ({:?}) asks for interface \
                         {KUBERNETES_IFNAME:?}, which the cluster's default network takes \
                         (Kubernetes runtimes call it with CNI_IFNAME {KUBERNETES_IFNAME}): ADD \
                         refuses it (multi-net spec §4.1.2.1.5)",
                        i + 1,
                        element.name
                    ),
                ));
            }
            let Some(nad) = nads.get(&r.to_string()) else {
                problems.push(error(
                    o,
                    format!(
                        "{NETWORKS_ANNOTATION:?} element {} selects network-attachment-definition \
                         {r}, which is not among the files given",
                        i + 1
                    ),
                ));
                continue;
            };
            if let Ok(NadConfig::Inline(list)) = nad.cni_config()
                && let Err(e) = check_capabilities(&r.to_string(), &list, element)
            {
                problems.push(error(
                    o,
                    format!("{NETWORKS_ANNOTATION:?} element {}: {e}", i + 1),
                ));
            }
        }
    }
    problems
}

/// Elements asking for an interface name that a generated `net<N>` before them takes, named
/// as the planner names them with the default network on `eth0`: ADD refuses a name used twice
/// (multi-net spec §4.1.2.1.5). Reckoned with no `defaultNetworks`, which shift the numbering,
/// so a warning that points to `plumb plan`. (Two elements asking for one name are refused by
/// the annotation's parser already, and `eth0` has its own check.)
fn interface_clashes(elements: &[selection::NetworkSelectionElement]) -> Vec<String> {
    let mut names: Vec<String> = vec![KUBERNETES_IFNAME.to_string()];
    let mut problems = Vec::new();
    for (i, element) in elements.iter().enumerate() {
        let Some(asked) = element.interface.as_deref() else {
            names.push(generated_ifname(
                names.len(),
                names.iter().map(String::as_str),
            ));
            continue;
        };
        let generated_before = names
            .iter()
            .position(|n| n == asked)
            .filter(|&j| j > 0 && elements[j - 1].interface.is_none());
        if let Some(j) = generated_before {
            problems.push(format!(
                "{NETWORKS_ANNOTATION:?} element {} ({:?}) asks for interface {asked:?}, which \
                 element {j} ({:?}) is given when the configuration has no \"defaultNetworks\": \
                 ADD then refuses a name used twice (multi-net spec §4.1.2.1.5); `plumb plan` \
                 with the node's configuration tells for sure",
                i + 1,
                element.name,
                elements[j - 1].name,
            ));
        }
        names.push(asked.to_string());
    }
    problems
}

/// `plumb validate`: every problem on stdout, a count on stderr.
pub fn run(paths: &[std::path::PathBuf]) -> ExitCode {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        let found = match objects::files_of(std::slice::from_ref(path)) {
            Ok(f) => f,
            Err(e) => return super::report("validate", Err(e)),
        };
        // A directory with nothing to check is most likely a mistyped path: it must not pass.
        if found.is_empty() {
            problems.push(Problem {
                severity: Severity::Error,
                object: path.display().to_string(),
                message: "no .yaml, .yml or .json file to check in this directory".into(),
            });
        }
        files.extend(found);
    }
    // A file named twice (a directory and a file in it, overlapping globs) is read once: read
    // twice, each of its NADs would be "defined more than once".
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    // A file that cannot be read is a problem of its own; the others are still checked.
    let mut objects = Vec::new();
    for f in &files {
        match objects::read_file(f) {
            Ok(o) => objects.extend(o),
            Err(e) => {
                // The reader's message names the file too (for callers that name nothing).
                let object = f.display().to_string();
                let message = match e.msg.strip_prefix(&format!("{object}: ")) {
                    Some(rest) => rest.to_string(),
                    None => e.msg,
                };
                problems.push(Problem {
                    severity: Severity::Error,
                    object,
                    message,
                })
            }
        }
    }
    problems.extend(validate(&objects));
    // Not println!, which panics when stdout cannot be written (a closed pipe, a full disk).
    let mut out = std::io::stdout().lock();
    let wrote = problems
        .iter()
        .try_for_each(|p| writeln!(out, "{p}"))
        .and_then(|()| out.flush());
    if let Err(e) = wrote {
        eprintln!("plumb validate: cannot write to stdout: {e}");
        return ExitCode::FAILURE;
    }
    let errors = problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .count();
    eprintln!(
        "plumb validate: {} objects, {errors} errors, {} warnings",
        objects.len(),
        problems.len() - errors
    );
    if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_with_a_long_value_quotes_its_start_not_all_of_it() {
        // A pod with 1 MB annotations and a 1 MB name: its problem line quoted all of it.
        let big = "x".repeat(1 << 20);
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("big.yaml");
        std::fs::write(
            &f,
            format!("kind: Pod\nmetadata: {{name: {big}, annotations: [{big}]}}\n"),
        )
        .unwrap();
        let objects = objects::read_file(&f).unwrap();
        let problems = validate(&objects);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].to_string().len() < 500);
    }
}
