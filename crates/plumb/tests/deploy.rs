//! The manifests of `deploy/` as `kubectl apply -k` reads them, checked without an API server:
//! the kustomizations are lists of resources only, and every file they list is there; every
//! document parses into its Kubernetes type and serializes back to itself (a misspelt key fails
//! here instead of vanishing); the DaemonSets' commands and probes parse as plumb's own command
//! line and reach the node's paths through the node's root; the ConfigMap's template passes the
//! daemon's own check; the images are the tag of this version; the Containerfile's build stage
//! runs only `scripts/build-static.sh`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Parser;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, PodSpec, ServiceAccount};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The kustomization directories: the whole install, its variants, and the CRDs.
const KUSTOMIZATIONS: [&str; 5] = [
    "deploy",
    "deploy/common",
    "deploy/thin",
    "deploy/uninstall",
    "deploy/crds",
];

/// Files of `deploy/` that no kustomization lists, and why.
const OPT_IN: [&str; 1] = [
    // The node-bound token's grant and admission policy, applied on its own (docs/daemon.md).
    "deploy/node-token.yaml",
];

/// A kustomization as plumb's are written: resources only (no patches, no generators), so that
/// what is applied is what the files say.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Kustomization {
    api_version: String,
    kind: String,
    resources: Vec<String>,
}

fn kustomization(dir: &str) -> Kustomization {
    let path = repo().join(dir).join("kustomization.yaml");
    let objects = plumb_engine::objects::read_file(&path).unwrap();
    assert_eq!(objects.len(), 1, "{}", path.display());
    let k: Kustomization = serde_json::from_value(objects[0].value.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        (k.api_version.as_str(), k.kind.as_str()),
        ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    );
    k
}

/// The files `dir`'s kustomization applies, those of the kustomizations it lists included.
fn applied(dir: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for r in kustomization(dir).resources {
        let path = repo().join(dir).join(&r);
        assert!(path.exists(), "{dir}: {r} is not there");
        if path.is_dir() {
            let sub = path
                .strip_prefix(repo())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            files.extend(applied(&sub));
        } else {
            files.push(path);
        }
    }
    files
}

/// Every document `dir`'s kustomization applies, as JSON.
fn documents(dir: &str) -> Vec<Value> {
    (applied(dir).iter())
        .flat_map(|f| plumb_engine::objects::read_file(f).unwrap())
        .map(|o| o.value)
        .collect()
}

/// `value` parsed as `T` and written back: the same document, or the key that did not survive.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", value["metadata"]["name"]));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back, value,
        "{} {} lost or changed a key in its type",
        value["kind"], value["metadata"]["name"]
    );
}

#[test]
fn every_kustomization_lists_resources_only_and_every_manifest_is_listed() {
    let mut listed = BTreeSet::new();
    for dir in KUSTOMIZATIONS {
        for file in applied(dir) {
            listed.insert(file.canonicalize().unwrap());
        }
    }
    for opt_in in OPT_IN {
        listed.insert(repo().join(opt_in).canonicalize().unwrap());
    }
    let mut all = Vec::new();
    let mut dirs = vec![repo().join("deploy")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml")
                && path.file_name().unwrap() != "kustomization.yaml"
            {
                all.push(path.canonicalize().unwrap());
            }
        }
    }
    let unlisted: Vec<_> = all.iter().filter(|f| !listed.contains(*f)).collect();
    assert!(unlisted.is_empty(), "in no kustomization: {unlisted:?}");
}

#[test]
fn every_document_parses_into_its_kubernetes_type_and_back_unchanged() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mut docs: Vec<Value> = KUSTOMIZATIONS.iter().flat_map(|d| documents(d)).collect();
    for opt_in in OPT_IN {
        docs.extend(
            (plumb_engine::objects::read_file(&repo().join(opt_in)).unwrap())
                .into_iter()
                .map(|o| o.value),
        );
    }
    let mut kinds = BTreeSet::new();
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        kinds.insert(kind.to_string());
        match kind {
            "Namespace" => round_trip::<Namespace>(doc),
            "ServiceAccount" => round_trip::<ServiceAccount>(doc),
            "ConfigMap" => round_trip::<ConfigMap>(doc),
            "ResourceQuota" => round_trip::<k8s_openapi::api::core::v1::ResourceQuota>(doc),
            "DaemonSet" => round_trip::<DaemonSet>(doc),
            "ClusterRole" => round_trip::<ClusterRole>(doc),
            "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(doc),
            "Role" => round_trip::<Role>(doc),
            "RoleBinding" => round_trip::<RoleBinding>(doc),
            "CustomResourceDefinition" => round_trip::<CustomResourceDefinition>(doc),
            "ValidatingAdmissionPolicy" => round_trip::<ValidatingAdmissionPolicy>(doc),
            "ValidatingAdmissionPolicyBinding" => {
                round_trip::<ValidatingAdmissionPolicyBinding>(doc)
            }
            other => panic!(
                "a {other:?} ({}): no type to check it with",
                doc["metadata"]["name"]
            ),
        }
    }
    assert!(kinds.contains("DaemonSet") && kinds.contains("CustomResourceDefinition"));
}

/// plumb's command line, as the binary parses it (its `main.rs` dispatches the same
/// subcommands to these arguments).
#[derive(Parser)]
struct Plumb {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand)]
enum Sub {
    Daemon(Box<plumb::daemon::Args>),
    Install(plumb::cli::install::InstallArgs),
    Health(plumb::cli::health::HealthArgs),
}

/// `container`'s command parsed as plumb's command line (its first word is the binary).
fn command_of(container: &Container) -> Sub {
    let command = container.command.clone().unwrap_or_default();
    assert_eq!(
        command.first().map(String::as_str),
        Some("/plumb"),
        "{}",
        container.name
    );
    Plumb::try_parse_from(&command)
        .unwrap_or_else(|e| panic!("{}: {command:?}: {e}", container.name))
        .command
}

fn daemon_set(dir: &str) -> DaemonSet {
    let docs = documents(dir);
    let ds = (docs.iter())
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap_or_else(|| panic!("{dir}: no DaemonSet"));
    serde_json::from_value(ds.clone()).unwrap()
}

fn pod_spec(ds: &DaemonSet) -> PodSpec {
    ds.spec.clone().unwrap().template.spec.unwrap()
}

/// The daemon's arguments in the DaemonSet of `dir`, and its container.
fn daemon_of(dir: &str) -> (plumb::daemon::Args, Container) {
    let spec = pod_spec(&daemon_set(dir));
    assert_eq!(spec.containers.len(), 1, "{dir}");
    let c = spec.containers[0].clone();
    match command_of(&c) {
        Sub::Daemon(a) => (*a, c),
        _ => panic!("{dir}: the container runs no plumb daemon"),
    }
}

/// Where `container` mounts the node's `/` (a hostPath volume of `/`), with HostToContainer
/// propagation (network namespaces made after the pod started are seen).
fn node_root_in(spec: &PodSpec, container: &Container) -> PathBuf {
    let volumes = spec.volumes.clone().unwrap_or_default();
    let root = (volumes.iter())
        .find(|v| v.host_path.as_ref().is_some_and(|h| h.path == "/"))
        .expect("a hostPath volume of the node's /");
    let mount = (container.volume_mounts.iter().flatten())
        .find(|m| m.name == root.name)
        .unwrap_or_else(|| panic!("{} does not mount the node's /", container.name));
    assert_eq!(
        mount.mount_propagation.as_deref(),
        Some("HostToContainer"),
        "{}",
        container.name
    );
    PathBuf::from(&mount.mount_path)
}

/// `node_path` as a process in the container reaches it through the node's root at `root`.
fn under(root: &Path, node_path: &Path) -> PathBuf {
    root.join(node_path.strip_prefix("/").unwrap())
}

#[test]
fn the_daemon_runs_in_the_nodes_root_and_every_path_it_uses_is_the_nodes() {
    for dir in ["deploy", "deploy/thin", "deploy/uninstall"] {
        let spec = pod_spec(&daemon_set(dir));
        let (args, container) = daemon_of(dir);
        let root = node_root_in(&spec, &container);
        // Entered at start: every default path of plumb (the configuration and bin
        // directories, its state, the CNI cache, netns, the socket, the kubelet's PodResources
        // socket, the device-info files) is the node's, through the one mount of the node's /.
        assert_eq!(args.host_root.as_deref(), Some(root.as_path()), "{dir}");
        // The probes ask the daemon over its socket, as the node has it under the root.
        for (probe, ready) in [
            (container.liveness_probe.clone(), false),
            (container.readiness_probe.clone(), true),
        ] {
            let exec = probe.and_then(|p| p.exec).expect("an exec probe");
            let probe = Container {
                name: format!("{} probe", container.name),
                command: exec.command,
                ..Default::default()
            };
            let Sub::Health(h) = command_of(&probe) else {
                panic!("{dir}: a probe that is not `plumb health`");
            };
            assert_eq!(h.socket, under(&root, &args.socket), "{dir}");
            assert_eq!(h.ready, ready, "{dir}");
            // Ready means done for the uninstall: its own answer, not that of a daemon of
            // plumb's DaemonSet that took the socket over.
            let expect = (ready && args.uninstall).then_some(plumb::daemon::UNINSTALLED);
            assert_eq!(h.expect.as_deref(), expect, "{dir}");
        }
        assert_eq!(spec.host_network, Some(true), "{dir}");
        assert_eq!(
            spec.host_pid,
            Some(true),
            "{dir}: netns paths of /proc/<pid>"
        );
        assert_eq!(spec.service_account_name.as_deref(), Some("plumb"));
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        // Above the daemon's drain of the calls it runs.
        assert!(spec.termination_grace_period_seconds.unwrap() > 60, "{dir}");
        // Every taint tolerated.
        assert!(
            (spec.tolerations.iter().flatten())
                .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()),
            "{dir}"
        );
        let resources = container.resources.clone().expect("resources");
        assert!(
            resources.requests.is_some() && resources.limits.is_some(),
            "{dir}"
        );
        assert!(
            (container.security_context.as_ref()).and_then(|s| s.privileged) == Some(true),
            "{dir}: chroot, network namespaces"
        );
    }
}

#[test]
fn the_init_container_installs_the_binary_into_the_nodes_cni_bin_directory() {
    for dir in ["deploy", "deploy/thin"] {
        let spec = pod_spec(&daemon_set(dir));
        let (args, _) = daemon_of(dir);
        let root = args.host_root.unwrap();
        let init = spec.init_containers.clone().unwrap_or_default();
        assert_eq!(init.len(), 1, "{dir}");
        let Sub::Install(install) = command_of(&init[0]) else {
            panic!("{dir}: the init container does not run `plumb install`");
        };
        assert_eq!(node_root_in(&spec, &init[0]), root);
        assert_eq!(
            install.bin_dir,
            under(&root, Path::new(plumb_engine::paths::BIN_DIR)),
            "{dir}"
        );
        assert_eq!(install.name, "plumb");
    }
}

#[test]
fn a_rollout_never_leaves_a_node_without_a_daemon() {
    for dir in ["deploy", "deploy/thin"] {
        let ds = daemon_set(dir);
        let spec = ds.spec.unwrap();
        // A host-network container's port is a host port: the surge pod would wait, Pending,
        // for the old pod's, which is never deleted before it is ready.
        let pod = spec.template.spec.clone().unwrap();
        assert_eq!(pod.host_network, Some(true));
        for c in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            assert!(c.ports.is_none(), "{dir}: {} declares ports", c.name);
        }
        let rolling = (spec.update_strategy.unwrap().rolling_update).unwrap();
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)), "{dir}");
        assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)), "{dir}");
    }
}

#[test]
fn the_images_are_this_versions_tag() {
    let want = format!("ghcr.io/plumb-cni/plumb:v{}", env!("CARGO_PKG_VERSION"));
    for dir in ["deploy", "deploy/thin", "deploy/uninstall"] {
        let spec = pod_spec(&daemon_set(dir));
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            assert_eq!(c.image.as_deref(), Some(want.as_str()), "{dir}: {}", c.name);
        }
    }
    let image_sh = std::fs::read_to_string(repo().join("scripts/image.sh")).unwrap();
    assert!(image_sh.contains("ghcr.io/plumb-cni/plumb:v$version"));
}

/// The ConfigMap's template file, as the daemon of `dir` reads it at `--write-config`.
fn template_of(dir: &str) -> Vec<u8> {
    let spec = pod_spec(&daemon_set(dir));
    let (args, container) = daemon_of(dir);
    let template = args.write_config.expect("--write-config");
    let mount = (container.volume_mounts.iter().flatten())
        .find(|m| template.starts_with(&m.mount_path))
        .expect("the template's volume mounted");
    let volume = (spec.volumes.iter().flatten())
        .find(|v| v.name == mount.name)
        .unwrap();
    let name = volume
        .config_map
        .as_ref()
        .expect("a ConfigMap volume")
        .name
        .clone();
    let key = template.strip_prefix(&mount.mount_path).unwrap();
    let map = (documents(dir).into_iter())
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{dir}: no ConfigMap {name}"));
    let map: ConfigMap = serde_json::from_value(map).unwrap();
    let data = map.data.unwrap();
    data.get(&*key.to_string_lossy())
        .unwrap_or_else(|| panic!("{dir}: ConfigMap {name} has no {}", key.display()))
        .clone()
        .into_bytes()
}

#[test]
fn the_configmaps_template_passes_the_daemons_own_check() {
    let (args, _) = daemon_of("deploy");
    let (keys, _) =
        plumb::daemon::conf_writer::template_keys(&template_of("deploy"), Some(&args.socket))
            .unwrap();
    // The calls' kubeconfig is the one the daemon keeps.
    assert_eq!(
        keys["kubeconfig"],
        args.write_kubeconfig.unwrap().to_string_lossy().as_ref()
    );
    assert_eq!(
        keys["plumbDaemonSocket"],
        args.socket.to_string_lossy().as_ref()
    );
    // Thin mode: the daemon serves no calls, and the configuration names no socket.
    let (thin, _) = daemon_of("deploy/thin");
    assert!(thin.files_only);
    let (keys, _) =
        plumb::daemon::conf_writer::template_keys(&template_of("deploy/thin"), None).unwrap();
    assert!(!keys.contains_key("plumbDaemonSocket"));
    let (uninstall, _) = daemon_of("deploy/uninstall");
    assert!(uninstall.uninstall && uninstall.write_config.is_none());
    assert_eq!(uninstall.write_kubeconfig, thin.write_kubeconfig);
}

#[test]
fn the_namespace_allows_privileged_pods_and_the_service_account_is_bound() {
    let docs = documents("deploy");
    let ns = (docs.iter()).find(|d| d["kind"] == "Namespace").unwrap();
    assert_eq!(ns["metadata"]["name"], "plumb");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    for d in &docs {
        if d["kind"] != "Namespace" && d["metadata"].get("namespace").is_some() {
            assert_eq!(
                d["metadata"]["namespace"], "plumb",
                "{}",
                d["metadata"]["name"]
            );
        }
    }
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] == "plumb")
    );
    // The calls' rights (`plumb`) and the caches' (`plumb-daemon`), both to its account.
    for role in ["plumb", "plumb-daemon"] {
        let binding = (docs.iter())
            .find(|d| d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == role)
            .unwrap_or_else(|| panic!("no binding of {role}"));
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "plumb", "namespace": "plumb"}])
        );
    }
}

#[test]
fn the_containerfile_builds_with_the_tested_script_from_scratch() {
    let file = std::fs::read_to_string(repo().join("Containerfile")).unwrap();
    let steps: Vec<&str> = (file.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let runs: Vec<&&str> = steps.iter().filter(|l| l.starts_with("RUN ")).collect();
    assert_eq!(runs, [&"RUN ./scripts/build-static.sh /plumb"]);
    let froms: Vec<&&str> = steps.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2);
    assert_eq!(*froms[1], "FROM scratch");
    assert!(steps.contains(&"COPY --from=build /plumb /plumb"));
    assert!(steps.contains(&"ENTRYPOINT [\"/plumb\"]"));
    // The test command runs the script (scripts/test.sh), so that it cannot drift untested.
    let test_sh = std::fs::read_to_string(repo().join("scripts/test.sh")).unwrap();
    assert!(test_sh.contains("./scripts/build-static.sh"));
}

#[test]
fn kubectl_kustomize_renders_the_documents_these_tests_read() {
    // A real kustomize, where the machine has one (kubectl's, v3 or later: directories as
    // resources): the same documents as the files give, none added, none changed.
    let Ok(version) = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
    else {
        eprintln!("no kubectl here: the kustomizations are checked by reading their files only");
        return;
    };
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    if !version.contains("Kustomize Version: v5") && !version.contains("Kustomize Version: v4") {
        eprintln!("kubectl's kustomize is too old to check with: {version}");
        return;
    }
    for dir in KUSTOMIZATIONS {
        let out = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(repo().join(dir))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rendered = std::env::temp_dir().join(format!(
            "plumb-kustomize-{}-{}.yaml",
            std::process::id(),
            dir.replace('/', "-")
        ));
        std::fs::write(&rendered, &out.stdout).unwrap();
        let mut got: Vec<Value> = (plumb_engine::objects::read_file(&rendered).unwrap())
            .into_iter()
            .map(|o| o.value)
            .collect();
        std::fs::remove_file(&rendered).unwrap();
        let mut want = documents(dir);
        let key = |v: &Value| format!("{}/{}", v["kind"], v["metadata"]["name"]);
        got.sort_by_key(key);
        want.sort_by_key(key);
        assert_eq!(got, want, "{dir}: kustomize renders other documents");
    }
}
