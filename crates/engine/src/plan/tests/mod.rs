use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;

/// NADs and configuration files in memory.
#[derive(Default)]
struct Fake {
    nads: BTreeMap<String, NetworkAttachmentDefinition>,
    files: BTreeMap<String, NetworkConfigList>,
    paths: BTreeMap<PathBuf, NetworkConfigList>,
    /// What looking up a configuration file by name fails with (a broken directory).
    conf_error: Option<String>,
}

fn conf(name: &str, plugins: Value) -> NetworkConfigList {
    let v = json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins});
    NetworkConfigList::from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap()
}

impl Fake {
    fn with_nad(mut self, ns: &str, name: &str, config: Option<Value>) -> Self {
        let nad = NetworkAttachmentDefinition::new(ns, name, config.map(|c| c.to_string()));
        self.nads.insert(format!("{ns}/{name}"), nad);
        self
    }

    fn with_bridge_nad(self, ns: &str, name: &str) -> Self {
        self.with_nad(
            ns,
            name,
            Some(json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": name})),
        )
    }

    fn with_file(mut self, list: NetworkConfigList) -> Self {
        self.files.insert(list.name.clone(), list);
        self
    }
}

impl Networks for Fake {
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        Ok(self.nads.get(&r.to_string()).cloned())
    }
    fn conf_by_name(&self, name: &str) -> Result<Option<NetworkConfigList>, CniError> {
        if let Some(e) = &self.conf_error {
            return Err(invalid(e.clone()));
        }
        Ok(self.files.get(name).cloned())
    }
    fn conf_at(&self, path: &Path) -> Result<NetworkConfigList, CniError> {
        self.paths
            .get(path)
            .cloned()
            .ok_or_else(|| invalid(format!("no file {}", path.display())))
    }
}

fn config(extra: Value) -> Config {
    let mut v = json!({"cniVersion": "1.0.0", "name": "plumb", "type": "plumb",
        "clusterNetwork": "default-net", "kubeconfig": "/k"});
    for (k, val) in extra.as_object().unwrap() {
        v[k] = val.clone();
    }
    Config::parse(&serde_json::to_vec(&v).unwrap()).unwrap()
}

fn pod(ns: &str, annotations: &[(&str, &str)]) -> Pod {
    Pod {
        namespace: ns.into(),
        name: "web".into(),
        uid: "u-1".into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// The cluster default network as a NAD in kube-system, plus `net-a` (default), `net-b`
/// (other-ns).
fn cluster() -> Fake {
    Fake::default()
        .with_bridge_nad("kube-system", "default-net")
        .with_bridge_nad("default", "net-a")
        .with_bridge_nad("other-ns", "net-b")
}

fn summary(p: &Plan) -> Vec<(String, String, bool)> {
    p.attachments
        .iter()
        .map(|a| (a.network.clone(), a.ifname.clone(), a.is_default))
        .collect()
}

fn s(network: &str, ifname: &str, default: bool) -> (String, String, bool) {
    (network.into(), ifname.into(), default)
}

#[test]
fn the_issue_example_default_then_each_element_in_order() {
    let pod = pod(
        "default",
        &[(NETWORKS_ANNOTATION, "net-a,other-ns/net-b@mv1")],
    );
    let p = plan(&config(json!({})), Some(&pod), "eth0", &cluster(), None).unwrap();
    assert_eq!(
        summary(&p),
        [
            s("kube-system/default-net", "eth0", true),
            s("default/net-a", "net1", false),
            s("other-ns/net-b", "mv1", false),
        ]
    );
    // The NAD's name is injected into its config (§3.4.2).
    assert_eq!(p.attachments[1].list.name, "net-a");
}

#[test]
fn named_attachments_take_a_number_too_as_in_multus() {
    // docs/multus-behaviour.md §2.5: `macvlan-conf@mv1, ns2/other, macvlan-conf` → mv1, net2, net3.
    let pod = pod(
        "default",
        &[(NETWORKS_ANNOTATION, "net-a@mv1, other-ns/net-b, net-a")],
    );
    let p = plan(&config(json!({})), Some(&pod), "eth0", &cluster(), None).unwrap();
    let names: Vec<&str> = p.attachments.iter().map(|a| a.ifname.as_str()).collect();
    assert_eq!(names, ["eth0", "mv1", "net2", "net3"]);
}

#[test]
fn the_same_network_twice_is_two_attachments() {
    // multi-net spec §4.2.2.
    let pod = pod("default", &[(NETWORKS_ANNOTATION, "net-a,net-a")]);
    let p = plan(&config(json!({})), Some(&pod), "eth0", &cluster(), None).unwrap();
    assert_eq!(
        summary(&p)[1..],
        [
            s("default/net-a", "net1", false),
            s("default/net-a", "net2", false)
        ]
    );
}

#[test]
fn an_interface_name_used_twice_fails_before_anything_runs() {
    for annotation in [
        "net-a@net5,other-ns/net-b@net5",
        "net-a@eth0",
        // net1 is generated for the first, then requested by the second.
        "net-a,other-ns/net-b@net1",
    ] {
        let pod = pod("default", &[(NETWORKS_ANNOTATION, annotation)]);
        let e = plan(&config(json!({})), Some(&pod), "eth0", &cluster(), None).unwrap_err();
        assert_eq!(e.code, 7, "{annotation}: {e}");
        // The annotation parser catches names repeated within the annotation; the planner
        // catches clashes with the default network and generated names.
        assert!(
            e.msg.contains("already used") || e.msg.contains("already requested"),
            "{annotation}: {e}"
        );
    }
}

#[test]
fn a_generated_interface_name_skips_one_an_earlier_element_requested() {
    // multi-net spec §4.2.1: a CNI_IFNAME the delegating plugin generates "must be unique
    // across all attachments"; only a *requested* name already in use fails (§4.1.2.1.5). Here
    // the second element's number (2) is the name the first one asked for: Multus generates
    // `net2` again and fails the pod; the generated name must be another.
    for (annotation, expected) in [
        ("net-a@net2,other-ns/net-b", ["eth0", "net2", "net3"]),
        (
            r#"[{"name":"net-a","interface":"net2"},{"name":"net-b","namespace":"other-ns"}]"#,
            ["eth0", "net2", "net3"],
        ),
    ] {
        let pod = pod("default", &[(NETWORKS_ANNOTATION, annotation)]);
        let p = plan(&config(json!({})), Some(&pod), "eth0", &cluster(), None)
            .unwrap_or_else(|e| panic!("{annotation}: {e}"));
        let names: Vec<&str> = p.attachments.iter().map(|a| a.ifname.as_str()).collect();
        assert_eq!(names, expected, "{annotation}");
    }
    // A generated name also avoids the runtime's own name for the default network.
    let pod = pod("default", &[(NETWORKS_ANNOTATION, "net-a")]);
    let p = plan(&config(json!({})), Some(&pod), "net1", &cluster(), None).unwrap();
    let names: Vec<&str> = p.attachments.iter().map(|a| a.ifname.as_str()).collect();
    assert_eq!(names, ["net1", "net2"]);
}

#[test]
fn an_interface_name_clash_names_both_networks() {
    // The operator must see which earlier attachment holds the name, not only the later one.
    for (annotation, first, second) in [
        (
            "other-ns/net-b@eth0",
            "kube-system/default-net",
            "other-ns/net-b",
        ),
        (
            "net-a,other-ns/net-b@net1",
            "default/net-a",
            "other-ns/net-b",
        ),
    ] {
        let pod = pod("default", &[(NETWORKS_ANNOTATION, annotation)]);
        let e = plan(&config(json!({})), Some(&pod), "eth0", &cluster(), None).unwrap_err();
        assert!(
            e.msg.contains(&format!("already used by network {first}")) && e.msg.contains(second),
            "{annotation}: {e}"
        );
    }
}

#[test]
fn default_networks_come_after_the_default_and_skip_system_namespaces() {
    let fake = cluster().with_bridge_nad("kube-system", "extra");
    let cfg = config(json!({"defaultNetworks": ["extra"]}));
    let p = plan(
        &cfg,
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "net-a")])),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(
        summary(&p),
        [
            s("kube-system/default-net", "eth0", true),
            s("kube-system/extra", "net1", false),
            s("default/net-a", "net2", false),
        ]
    );
    let p = plan(&cfg, Some(&pod("kube-system", &[])), "eth0", &fake, None).unwrap();
    assert_eq!(p.attachments.len(), 1);
}

#[test]
fn the_default_network_annotation_replaces_the_cluster_network() {
    let fake = cluster().with_bridge_nad("kube-system", "alt");
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(DEFAULT_NETWORK_ANNOTATION, "alt")])),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(summary(&p), [s("kube-system/alt", "eth0", true)]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);

    // What the element asks of its attachment does not apply to the default network: warned.
    let p = plan(
        &config(json!({})),
        Some(&pod(
            "default",
            &[(
                DEFAULT_NETWORK_ANNOTATION,
                r#"[{"name":"alt","mac":"02:00:00:00:00:09","deviceID":"0000:18:02.5",
                    "overrides":{}}]"#,
            )],
        )),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    for key in ["\"mac\"", "\"deviceID\"", "\"overrides\""] {
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains(key) && w.contains("ignored")),
            "{key}: {:?}",
            p.warnings
        );
    }
    assert!(p.attachments[0].capability_args.is_empty());

    let e = plan(
        &config(json!({})),
        Some(&pod(
            "default",
            &[(DEFAULT_NETWORK_ANNOTATION, "alt,net-a")],
        )),
        "eth0",
        &fake,
        None,
    )
    .unwrap_err();
    assert!(e.msg.contains("exactly one"), "{e}");

    // A bad value is blamed on this annotation, not on the networks one.
    let e = plan(
        &config(json!({})),
        Some(&pod(
            "default",
            &[(DEFAULT_NETWORK_ANNOTATION, "[{\"nam\": 1}]")],
        )),
        "eth0",
        &fake,
        None,
    )
    .unwrap_err();
    assert!(
        e.msg.contains(DEFAULT_NETWORK_ANNOTATION) && !e.msg.contains(NETWORKS_ANNOTATION),
        "{e}"
    );
}

#[test]
fn an_ipam_claim_in_the_default_network_annotation_is_ignored_with_a_warning() {
    // multi-net spec §8: IPAM claims are "meant exclusively for secondary networks". The second
    // value is the annotation OVN-Kubernetes documents for a VM keeping its address on a primary
    // UDN (KubeVirt's ipam-extensions webhook adds the claim). Multus runs this pod; multi-net
    // spec §4.1.2.1.11 forbids the pair for a secondary attachment, but the default-network
    // annotation is Multus's, and plumb gives the default network neither key: refusing the pod
    // over two ignored keys would break it.
    let fake = cluster().with_bridge_nad("kube-system", "alt");
    for (value, ignored) in [
        (
            r#"[{"name":"alt","ipam-claim-reference":"vm1.alt"}]"#,
            &["\"ipam-claim-reference\""][..],
        ),
        (
            r#"[{"name":"alt","mac":"02:03:04:05:06:07","ipam-claim-reference":"myvm.alt","ips":["10.0.0.5/24"]}]"#,
            &["\"ips\"", "\"ipam-claim-reference\""][..],
        ),
    ] {
        let p = plan(
            &config(json!({})),
            Some(&pod("default", &[(DEFAULT_NETWORK_ANNOTATION, value)])),
            "eth0",
            &fake,
            None,
        )
        .unwrap();
        assert_eq!(summary(&p), [s("kube-system/alt", "eth0", true)]);
        assert!(
            p.warnings
                .iter()
                .any(|w| ignored.iter().all(|k| w.contains(k)) && w.contains("ignored")),
            "{value}: {:?}",
            p.warnings
        );
        let default = &p.attachments[0];
        assert!(default.capability_args.is_empty(), "{value}");
        assert!(
            default
                .list
                .plugins
                .iter()
                .all(|plugin| !plugin.raw.contains_key("args")),
            "{value}: {:?}",
            default.list
        );
    }
    // The same pair in the networks annotation is still refused (§4.1.2.1.11).
    let fake = fake.with_bridge_nad("default", "net-a");
    let e = plan(
        &config(json!({})),
        Some(&pod(
            "default",
            &[(
                NETWORKS_ANNOTATION,
                r#"[{"name":"net-a","ipam-claim-reference":"myvm.net-a","ips":["10.0.0.5/24"]}]"#,
            )],
        )),
        "eth0",
        &fake,
        None,
    )
    .unwrap_err();
    assert!(
        e.msg.contains("cannot be used together with \"ips\""),
        "{e}"
    );
}

#[test]
fn an_empty_default_network_annotation_is_refused_not_ignored() {
    // Multus fails the ADD of a pod whose default-network annotation names nothing; falling
    // back to the cluster network would attach the pod where it did not ask to be.
    for empty in ["", "  ", "\t\n", "[]"] {
        let e = plan(
            &config(json!({})),
            Some(&pod("default", &[(DEFAULT_NETWORK_ANNOTATION, empty)])),
            "eth0",
            &cluster(),
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, 7, "{empty:?}: {e}");
        assert!(
            e.msg.contains(DEFAULT_NETWORK_ANNOTATION) && e.msg.contains("default/web"),
            "{empty:?}: {e}"
        );
    }
}

#[test]
fn namespace_isolation_refuses_with_pod_nad_and_rule() {
    let cfg = config(json!({"namespaceIsolation": true}));
    let e = plan(
        &cfg,
        Some(&pod("tenant", &[(NETWORKS_ANNOTATION, "other-ns/net-b")])),
        "eth0",
        &cluster(),
        None,
    )
    .unwrap_err();
    assert_eq!(e.code, 7);
    assert!(
        e.msg.contains("tenant/web")
            && e.msg.contains("other-ns/net-b")
            && e.msg.contains("namespaceIsolation"),
        "{e}"
    );
    // Its own namespace and the global ones (default: "default") are allowed; the cluster
    // network in kube-system is the administrator's, not the pod's choice.
    let fake = cluster().with_bridge_nad("tenant", "mine");
    let p = plan(
        &cfg,
        Some(&pod(
            "tenant",
            &[(NETWORKS_ANNOTATION, "mine,default/net-a")],
        )),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(p.attachments.len(), 3);
    // Setting globalNamespaces replaces "default".
    let cfg = config(json!({"namespaceIsolation": true, "globalNamespaces": "other-ns"}));
    assert!(
        plan(
            &cfg,
            Some(&pod("tenant", &[(NETWORKS_ANNOTATION, "default/net-a")])),
            "eth0",
            &cluster(),
            None
        )
        .is_err()
    );
    // The default-network override obeys isolation too (Multus lets it through).
    let cfg = config(json!({"namespaceIsolation": true}));
    let fake = cluster().with_bridge_nad("kube-system", "alt");
    let e = plan(
        &cfg,
        Some(&pod("tenant", &[(DEFAULT_NETWORK_ANNOTATION, "alt")])),
        "eth0",
        &fake,
        None,
    )
    .unwrap_err();
    assert!(e.msg.contains("kube-system/alt"), "{e}");
}

#[test]
fn a_missing_nad_names_the_nad_and_the_pod() {
    let e = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "nope")])),
        "eth0",
        &cluster(),
        None,
    )
    .unwrap_err();
    assert!(
        e.msg.contains("default/nope") && e.msg.contains("not found") && e.msg.contains("web"),
        "{e}"
    );
}

#[test]
fn a_nad_without_config_uses_the_file_of_its_name() {
    let fake = cluster()
        .with_nad("default", "ondisk", None)
        .with_file(conf("ondisk", json!([{"type": "macvlan"}])));
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "ondisk")])),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(p.attachments[1].list.plugins[0].plugin_type, "macvlan");

    let fake = cluster().with_nad("default", "ondisk", None);
    let e = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "ondisk")])),
        "eth0",
        &fake,
        None,
    )
    .unwrap_err();
    assert!(e.msg.contains("no spec.config"), "{e}");
}

#[test]
fn spec_config_wins_over_a_file_of_the_nads_name() {
    // multi-net spec §3.4.1: the rules apply "in the listed order"; a NAD with spec.config uses
    // it even when confDir holds a configuration named like the NAD.
    let fake = cluster()
        .with_nad(
            "default",
            "both",
            Some(json!({"cniVersion": "1.0.0", "type": "ipvlan"})),
        )
        .with_file(conf("both", json!([{"type": "macvlan"}])));
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "both")])),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(p.attachments[1].list.plugins.len(), 1);
    assert_eq!(p.attachments[1].list.plugins[0].plugin_type, "ipvlan");
}

#[test]
fn the_cluster_default_network_can_be_selected_again() {
    // multi-net spec §4: the annotation "may be used to select additional attachments to the
    // cluster-wide default network": a second, separate attachment, not the default one.
    let pod = pod(
        "default",
        &[(NETWORKS_ANNOTATION, "kube-system/default-net")],
    );
    let p = plan(&config(json!({})), Some(&pod), "eth0", &cluster(), None).unwrap();
    assert_eq!(
        summary(&p),
        [
            s("kube-system/default-net", "eth0", true),
            s("kube-system/default-net", "net1", false),
        ]
    );
}

#[test]
fn requested_capabilities_must_be_declared_and_reach_runtime_config() {
    let fake = cluster().with_nad(
        "default",
        "static",
        Some(json!({"cniVersion": "1.0.0", "plugins": [
            {"type": "bridge", "ipam": {"type": "static"}, "capabilities": {"ips": true}},
            {"type": "tuning", "capabilities": {"mac": true}}]})),
    );
    let annotation = r#"[{"name":"static","ips":["10.1.1.5/24"],"mac":"02:00:00:00:00:05"}]"#;
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, annotation)])),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(
        Value::Object(p.attachments[1].capability_args.clone()),
        json!({"ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:05"})
    );
    // net-a's bridge declares no "ips": the whole request fails (§4.1.2.1.3.2).
    let e = plan(
        &config(json!({})),
        Some(&pod(
            "default",
            &[(
                NETWORKS_ANNOTATION,
                r#"[{"name":"net-a","ips":["10.1.1.5/24"]}]"#,
            )],
        )),
        "eth0",
        &cluster(),
        None,
    )
    .unwrap_err();
    assert!(
        e.msg.contains("default/net-a") && e.msg.contains("ips"),
        "{e}"
    );
}

#[test]
fn cni_args_and_ipam_claims_reach_args_cni_of_every_plugin() {
    let fake = cluster().with_nad(
        "default",
        "two",
        Some(json!({"cniVersion": "1.0.0", "plugins": [
            {"type": "bridge", "args": {"cni": {"keep": 1, "over": "nad"}}},
            {"type": "tuning"}]})),
    );
    let annotation =
        r#"[{"name":"two","cni-args":{"over":"pod","x":true},"ipam-claim-reference":"claim-1"}]"#;
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, annotation)])),
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    let list = &p.attachments[1].list;
    assert_eq!(
        list.plugins[0].raw["args"]["cni"],
        json!({"keep": 1, "over": "pod", "x": true, "ipam-claim-reference": "claim-1"})
    );
    assert_eq!(
        list.plugins[1].raw["args"]["cni"],
        json!({"over": "pod", "x": true, "ipam-claim-reference": "claim-1"})
    );
    // The network itself, as GC and STATUS run it, is the NAD's: no pod's arguments.
    let network = &p.attachments[1].network_list;
    assert_eq!(
        network.plugins[0].raw["args"]["cni"],
        json!({"keep": 1, "over": "nad"})
    );
    assert!(!network.plugins[1].raw.contains_key("args"));
}

#[test]
fn the_runtimes_runtime_config_goes_to_the_default_network_only() {
    // multi-net spec §7.5.
    let cfg = config(json!({"capabilities": {"portMappings": true},
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}));
    let p = plan(
        &cfg,
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "net-a")])),
        "eth0",
        &cluster(),
        None,
    )
    .unwrap();
    assert!(
        p.attachments[0]
            .capability_args
            .contains_key("portMappings")
    );
    assert!(p.attachments[1].capability_args.is_empty());
}

#[test]
fn default_route_is_carried_to_its_attachment() {
    let annotation = r#"[{"name":"net-a","default-route":["10.9.0.1"]},{"name":"net-b","namespace":"other-ns"}]"#;
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, annotation)])),
        "eth0",
        &cluster(),
        None,
    )
    .unwrap();
    assert_eq!(
        p.attachments[1].default_route,
        Some(vec!["10.9.0.1".parse().unwrap()])
    );
    assert_eq!(p.attachments[2].default_route, None);
    assert_eq!(p.attachments[0].default_route, None);
}

#[test]
fn cluster_network_as_a_file_name_or_a_path() {
    let fake = Fake::default().with_file(conf("k8s-pod-network", json!([{"type": "ptp"}])));
    let p = plan(
        &config(json!({"clusterNetwork": "k8s-pod-network"})),
        None,
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(summary(&p), [s("k8s-pod-network", "eth0", true)]);

    let mut fake = Fake::default();
    fake.paths.insert(
        PathBuf::from("/etc/cni/net.d/10-calico.conflist"),
        conf("calico", json!([{"type": "calico"}])),
    );
    let p = plan(
        &config(json!({"clusterNetwork": "/etc/cni/net.d/10-calico.conflist"})),
        None,
        "eth0",
        &fake,
        None,
    )
    .unwrap();
    assert_eq!(summary(&p), [s("calico", "eth0", true)]);

    let e = plan(
        &config(json!({"clusterNetwork": "nowhere"})),
        None,
        "eth0",
        &Fake::default(),
        None,
    )
    .unwrap_err();
    assert!(
        e.msg.contains("clusterNetwork") && e.msg.contains("nowhere"),
        "{e}"
    );
}

#[test]
fn inline_delegates_without_cluster_network() {
    let cfg = Config::parse(
        &serde_json::to_vec(
            &json!({"cniVersion": "1.0.0", "name": "plumb", "delegates": [
            {"cniVersion": "1.0.0", "name": "first", "type": "bridge"},
            {"cniVersion": "1.0.0", "name": "second", "plugins": [{"type": "macvlan"}]}]}),
        )
        .unwrap(),
    )
    .unwrap();
    let p = plan(&cfg, None, "eth0", &Fake::default(), None).unwrap();
    assert_eq!(
        summary(&p),
        [s("first", "eth0", true), s("second", "net1", false)]
    );
}

#[test]
fn an_invalid_annotation_fails_the_whole_plan() {
    for bad in ["net-a,", r#"[{"name":"net-a","mac":"zz"}]"#, "[{"] {
        let e = plan(
            &config(json!({})),
            Some(&pod("default", &[(NETWORKS_ANNOTATION, bad)])),
            "eth0",
            &cluster(),
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, 7, "{bad}: {e}");
        assert!(e.msg.contains(NETWORKS_ANNOTATION), "{bad}: {e}");
    }
}

#[test]
fn an_empty_annotation_is_no_secondary_network() {
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "  ")])),
        "eth0",
        &cluster(),
        None,
    )
    .unwrap();
    assert_eq!(p.attachments.len(), 1);
}

mod devices;
