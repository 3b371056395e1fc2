//! Plans of device-backed networks (a NAD's `resourceName`, device-info spec 1.1): each
//! attachment of a resource gets its own device, in selection order.

use super::*;

/// Devices per resource, counting how often each resource is asked for.
#[derive(Default)]
struct FakeDevices {
    allocated: BTreeMap<String, Vec<String>>,
    asked: std::cell::RefCell<Vec<String>>,
    fail: bool,
}

impl Devices for FakeDevices {
    /// Resources not in `allocated` are no device plugin's.
    fn allocated(&self, pod: &Pod, resource: &str) -> Result<Option<Vec<String>>, CniError> {
        self.asked
            .borrow_mut()
            .push(format!("{}/{} {resource}", pod.namespace, pod.name));
        if self.fail {
            return Err(CniError::new(ErrorCode::TryAgainLater, "kubelet is down"));
        }
        Ok(self.allocated.get(resource).cloned())
    }
}

fn with_resource(mut fake: Fake, nad: &str, resource: &str) -> Fake {
    let n = fake.nads.get_mut(nad).unwrap();
    n.metadata.annotations = Some(
        [(
            netattach::nad::RESOURCE_NAME_ANNOTATION.to_string(),
            resource.to_string(),
        )]
        .into(),
    );
    fake
}

/// `net-a` and `net-b` backed by `intel.com/sriov`, `kube-system/default-net` not.
fn sriov_cluster() -> Fake {
    let fake = with_resource(cluster(), "default/net-a", "intel.com/sriov");
    with_resource(fake, "other-ns/net-b", "intel.com/sriov")
}

fn devices(resource: &str, ids: &[&str]) -> FakeDevices {
    FakeDevices {
        allocated: [(
            resource.to_string(),
            ids.iter().map(|s| s.to_string()).collect(),
        )]
        .into(),
        ..FakeDevices::default()
    }
}

#[test]
fn attachments_of_one_resource_take_distinct_devices_in_selection_order() {
    let devs = devices(
        "intel.com/sriov",
        &["0000:18:02.2", "0000:18:02.3", "0000:18:02.4"],
    );
    let p = plan(
        &config(json!({})),
        Some(&pod(
            "default",
            &[(NETWORKS_ANNOTATION, "net-a,other-ns/net-b,net-a@sr2")],
        )),
        "eth0",
        &sriov_cluster(),
        Some(&devs),
    )
    .unwrap();
    let ids: Vec<_> = p
        .attachments
        .iter()
        .map(|a| a.device.as_ref().map(|d| d.id.as_str()))
        .collect();
    assert_eq!(
        ids,
        [
            None,
            Some("0000:18:02.2"),
            Some("0000:18:02.3"),
            Some("0000:18:02.4")
        ]
    );
    let a = &p.attachments[2];
    assert_eq!(
        a.device.as_ref().unwrap().resource.as_deref(),
        Some("intel.com/sriov")
    );
    // Every plugin's configuration carries the ID as deviceID and pciBusID, and the runtime
    // config offers it to plugins that declare the capability.
    for plugin in &a.list.plugins {
        assert_eq!(plugin.raw["deviceID"], json!("0000:18:02.3"));
        assert_eq!(plugin.raw["pciBusID"], json!("0000:18:02.3"));
    }
    assert_eq!(a.capability_args["deviceID"], json!("0000:18:02.3"));
    // The network itself, as GC and STATUS run it, has no one pod's device.
    for plugin in &a.network_list.plugins {
        assert!(!plugin.raw.contains_key("deviceID") && !plugin.raw.contains_key("pciBusID"));
    }
    // The default network is not device-backed and untouched.
    assert!(
        !p.attachments[0].list.plugins[0]
            .raw
            .contains_key("deviceID")
    );
    // The kubelet is asked once per resource, not once per attachment.
    assert_eq!(*devs.asked.borrow(), ["default/web intel.com/sriov"]);
}

#[test]
fn too_few_devices_fail_the_plan_counting_every_attachment_of_the_resource() {
    for (ids, allocated) in [
        (
            &["0000:18:02.2"][..],
            "1 device(s) of it to the pod (0000:18:02.2)",
        ),
        (&[][..], "0 device(s) of it to the pod:"),
    ] {
        let devs = devices("intel.com/sriov", ids);
        let e = plan(
            &config(json!({})),
            Some(&pod(
                "default",
                &[(NETWORKS_ANNOTATION, "net-a,other-ns/net-b,net-a@sr3")],
            )),
            "eth0",
            &sriov_cluster(),
            Some(&devs),
        )
        .unwrap_err();
        assert_eq!(e.code, 7, "{e}");
        assert!(
            e.msg.contains(
                "pod default/web has 3 attachment(s) of device resource \"intel.com/sriov\" \
                 (default/net-a, other-ns/net-b, default/net-a)"
            ) && e.msg.contains(allocated),
            "{e}"
        );
    }
}

#[test]
fn a_resource_no_device_plugin_offers_needs_no_device() {
    // KubeVirt's bridge marker: the NAD names a resource that only counts capacity.
    let fake = with_resource(cluster(), "default/net-a", "bridge.network.kubevirt.io/br0");
    let devs = devices("intel.com/sriov", &["0000:18:02.2"]);
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "net-a,net-a@b2")])),
        "eth0",
        &fake,
        Some(&devs),
    )
    .unwrap();
    for a in &p.attachments[1..] {
        assert_eq!(a.device, None);
        assert_eq!(
            a.resource.as_deref(),
            Some("bridge.network.kubevirt.io/br0")
        );
        assert!(!a.list.plugins[0].raw.contains_key("deviceID"));
    }
    assert_eq!(
        p.warnings
            .iter()
            .filter(|w| w.contains("is not offered by a device plugin on this node"))
            .count(),
        1,
        "{:?}",
        p.warnings
    );
}

#[test]
fn a_kubelet_error_fails_the_plan_with_the_resource_named() {
    let devs = FakeDevices {
        fail: true,
        ..FakeDevices::default()
    };
    let e = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "net-a")])),
        "eth0",
        &sriov_cluster(),
        Some(&devs),
    )
    .unwrap_err();
    assert_eq!(e.code, 11, "{e}");
    assert!(
        e.msg.contains("kubelet is down")
            && e.msg.contains(
                "resource \"intel.com/sriov\" (network-attachment-definition default/net-a)"
            ),
        "{e}"
    );
}

#[test]
fn without_a_device_source_device_backed_networks_are_planned_with_a_warning() {
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "net-a")])),
        "eth0",
        &sriov_cluster(),
        None,
    )
    .unwrap();
    assert_eq!(p.attachments[1].device, None);
    assert!(
        !p.attachments[1].list.plugins[0]
            .raw
            .contains_key("deviceID")
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("default/net-a is backed by resource \"intel.com/sriov\"")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn an_element_device_id_reaches_the_runtime_config_only_and_a_resource_wins() {
    let annotation = r#"[{"name": "net-a", "deviceID": "0000:aa:00.1"}]"#;
    // net-a not device-backed: the element's device, in runtimeConfig only (as Multus).
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, annotation)])),
        "eth0",
        &cluster(),
        None,
    )
    .unwrap();
    let a = &p.attachments[1];
    assert_eq!(
        a.device,
        Some(Device {
            id: "0000:aa:00.1".into(),
            resource: None
        })
    );
    assert_eq!(a.capability_args["deviceID"], json!("0000:aa:00.1"));
    assert!(!a.list.plugins[0].raw.contains_key("deviceID"));
    // Device-backed: the kubelet's device wins.
    let devs = devices("intel.com/sriov", &["0000:18:02.2"]);
    let p = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, annotation)])),
        "eth0",
        &sriov_cluster(),
        Some(&devs),
    )
    .unwrap();
    assert_eq!(
        p.attachments[1].capability_args["deviceID"],
        json!("0000:18:02.2")
    );
}

#[test]
fn a_device_backed_default_network_takes_the_first_device() {
    let fake = with_resource(cluster(), "kube-system/default-net", "intel.com/sriov");
    let fake = with_resource(fake, "default/net-a", "intel.com/sriov");
    let devs = devices("intel.com/sriov", &["0000:18:02.2", "0000:18:02.3"]);
    let cfg = config(json!({"runtimeConfig": {"portMappings": []}}));
    let p = plan(
        &cfg,
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "net-a")])),
        "eth0",
        &fake,
        Some(&devs),
    )
    .unwrap();
    let d = &p.attachments[0];
    assert_eq!(d.device.as_ref().unwrap().id, "0000:18:02.2");
    // The runtime's runtimeConfig stays, with the device added.
    assert_eq!(
        Value::Object(d.capability_args.clone()),
        json!({"portMappings": [], "deviceID": "0000:18:02.2"})
    );
    assert_eq!(p.attachments[1].device.as_ref().unwrap().id, "0000:18:02.3");
}

#[test]
fn a_nad_whose_file_cannot_be_looked_up_is_named_with_its_pod() {
    // A NAD without spec.config names a configuration file; when the directory cannot be read
    // through, the error still says which NAD and which pod, not only the file's name.
    let fake = Fake {
        conf_error: Some("no network named \"sriov-a\" (skipped invalid files: 10-x.conf)".into()),
        ..cluster().with_nad("default", "sriov-a", None)
    };
    let e = plan(
        &config(json!({})),
        Some(&pod("default", &[(NETWORKS_ANNOTATION, "sriov-a")])),
        "eth0",
        &fake,
        None,
    )
    .unwrap_err();
    for part in ["default/sriov-a", "pod default/web", "10-x.conf"] {
        assert!(e.msg.contains(part), "{part}: {e}");
    }
}

#[test]
fn the_nads_to_fetch_before_planning_are_those_the_planner_will_ask_for() {
    let cfg = config(json!({}));
    let refs = |annotations: &[(&str, &str)], cfg: &Config| -> Vec<String> {
        nads_to_prefetch(cfg, &pod("tenant", annotations), 4)
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let selecting = |value| [(NETWORKS_ANNOTATION, value)];
    // The cluster network by name first, then the selection in order, each once, at most the
    // cap.
    assert_eq!(
        refs(&selecting("net-a,other-ns/net-b,net-a,x,y"), &cfg),
        [
            "kube-system/default-net",
            "tenant/net-a",
            "other-ns/net-b",
            "tenant/x"
        ]
    );
    assert_eq!(refs(&[], &cfg), ["kube-system/default-net"]);
    // The planner reports an annotation that does not parse: nothing of it to fetch.
    assert_eq!(
        refs(&selecting("[{\"name\":"), &cfg),
        ["kube-system/default-net"]
    );
    assert_eq!(refs(&selecting("  "), &cfg), ["kube-system/default-net"]);
    // A cluster network the pod replaces, or given as a path, is not asked for.
    let replaced = [
        (DEFAULT_NETWORK_ANNOTATION, "other"),
        (NETWORKS_ANNOTATION, "net-a"),
    ];
    assert_eq!(refs(&replaced, &cfg), ["tenant/net-a"]);
    let path = config(json!({"clusterNetwork": "/etc/cni/net.d/10-x.conflist"}));
    assert!(refs(&[], &path).is_empty());
    // With namespace isolation the planner stops at the first NAD the pod may not use, and
    // never asks for it: neither is it fetched, nor anything after it.
    let isolated = config(json!({"namespaceIsolation": true}));
    assert_eq!(
        refs(
            &selecting("net-a,default/g,other-ns/net-b,net-c"),
            &isolated
        ),
        ["kube-system/default-net", "tenant/net-a", "default/g"]
    );
}
