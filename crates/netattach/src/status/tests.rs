use serde_json::json;

use super::*;
use crate::device_info::PciDevice;

fn result(v: Value) -> CniResult {
    CniResult::from_value(v, Version::V1_0_0).unwrap()
}

fn input<'a>(name: &'a str, r: Option<&'a CniResult>) -> StatusInput<'a> {
    StatusInput {
        name,
        result: r,
        ifname: "net1",
        is_default: false,
        default_route: None,
        device_info: None,
    }
}

fn built(i: &StatusInput<'_>) -> Value {
    serde_json::to_value(build(i)).unwrap()
}

#[test]
fn takes_interface_mac_and_ips_of_the_first_sandbox_interface() {
    let r = result(json!({
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "veth1234", "mac": "aa:aa:aa:aa:aa:aa"},
            {"name": "net1", "mac": "02:11:22:33:44:55", "sandbox": "/var/run/netns/x"},
            {"name": "net1b", "mac": "02:11:22:33:44:56", "sandbox": "/var/run/netns/x"}
        ],
        "ips": [
            {"interface": 0, "address": "10.99.0.1/24"},
            {"interface": 1, "address": "192.0.2.2/24", "gateway": "192.0.2.1"},
            {"address": "10.0.0.9/8"},
            {"interface": 2, "address": "192.0.2.3/24"},
            {"interface": 1, "address": "2001:db8::2234/32"}
        ],
        "dns": {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"], "search": ["eng.example.com", "example.com"], "options": ["ndots:2"]}
    }));
    assert_eq!(
        built(&input("namespace-b/some-network", Some(&r))),
        json!({
            "name": "namespace-b/some-network",
            "interface": "net1",
            "ips": ["192.0.2.2", "2001:db8::2234"],
            "mac": "02:11:22:33:44:55",
            "default": false,
            "dns": {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"], "search": ["eng.example.com", "example.com"]}
        })
    );
}

#[test]
fn a_nameless_sandbox_interface_is_cni_ifname_and_mac_never_stands_alone() {
    // Found by the netattach_status fuzz target: §5.3.4 wants no `mac` without `interface`.
    let r = result(json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "", "mac": "02:00:00:00:00:01", "sandbox": "/var/run/netns/p"}]}));
    let e = build(&input("ns/a", Some(&r)));
    assert_eq!(e.interface.as_deref(), Some("net1"));
    assert_eq!(e.mac.as_deref(), Some("02:00:00:00:00:01"));
    let mut i = input("ns/a", Some(&r));
    i.ifname = "";
    let e = build(&i);
    assert_eq!((e.interface, e.mac), (None, None));
}

#[test]
fn without_a_sandbox_interface_the_unindexed_ips_are_used() {
    let r = result(json!({
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "br0", "mac": "aa:aa:aa:aa:aa:aa"}],
        "ips": [
            {"version": "4", "interface": 0, "address": "10.99.0.1/24"},
            {"version": "4", "address": "10.1.0.5/16"},
            {"version": "6", "address": "fd00::5/64"}
        ]
    }));
    assert_eq!(
        built(&input("ns/n", Some(&r))),
        json!({"name": "ns/n", "ips": ["10.1.0.5", "fd00::5"], "default": false})
    );
}

#[test]
fn pre_0_3_0_results_take_the_interface_from_cni_ifname() {
    for version in ["0.1.0", "0.2.0"] {
        let r = result(json!({
            "cniVersion": version,
            "ip4": {"ip": "10.1.2.3/24", "gateway": "10.1.2.1"},
            "ip6": {"ip": "2001:db8::3/64"},
            "dns": {"domain": "example.com"}
        }));
        assert_eq!(
            built(&input("ns/old", Some(&r))),
            json!({"name": "ns/old", "interface": "net1", "ips": ["10.1.2.3", "2001:db8::3"],
                   "default": false, "dns": {"domain": "example.com"}}),
            "{version}"
        );
    }
}

#[test]
fn no_result_or_an_empty_one_gives_a_minimal_entry() {
    let empty = result(json!({"cniVersion": "1.0.0"}));
    let expected = json!({"name": "ns/n", "default": false});
    assert_eq!(built(&input("ns/n", Some(&empty))), expected);
    assert_eq!(built(&input("ns/n", None)), expected);
    // DNS with only options has nothing the status defines.
    let opts = result(json!({"cniVersion": "1.0.0", "dns": {"options": ["ndots:5"]}}));
    assert_eq!(built(&input("ns/n", Some(&opts))), expected);
}

#[test]
fn default_route_is_reported_only_when_asked() {
    let r = result(json!({
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth5", "mac": "02:11:22:33:44:54", "sandbox": "/x"}],
        "ips": [
            {"interface": 0, "address": "192.0.2.2/24", "gateway": "192.0.2.1"},
            {"interface": 0, "address": "2001:db8::2230/32", "gateway": "2001:db8::1"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0"},
            {"dst": "10.0.0.0/8", "gw": "192.0.2.254"},
            {"dst": "::/0", "gw": "2001:db8::1"},
            {"dst": "::/0", "gw": "2001:db8::2"}
        ]
    }));
    let mut i = input("namespace-a/cluster-wide-default", Some(&r));
    i.is_default = true;
    assert!(built(&i).get("default-route").is_none());
    // Asked with an empty list: the result's own default gateways.
    i.default_route = Some(&[]);
    assert_eq!(
        serde_json::to_string(&build(&i)).unwrap(),
        r#"{"name":"namespace-a/cluster-wide-default","interface":"eth5","ips":["192.0.2.2","2001:db8::2230"],"mac":"02:11:22:33:44:54","default-route":["192.0.2.1","2001:db8::1","2001:db8::2"],"default":true}"#
    );
    // Asked with gateways: those.
    let gws = ["10.0.0.1".parse().unwrap()];
    i.default_route = Some(&gws);
    assert_eq!(built(&i)["default-route"], json!(["10.0.0.1"]));
    // Asked, but nothing to report.
    let mut none = input("ns/n", None);
    none.default_route = Some(&[]);
    assert_eq!(
        built(&none),
        json!({"name": "ns/n", "default-route": [], "default": false})
    );
}

#[test]
fn device_info_is_added_when_given() {
    let info = DeviceInfo::pci(PciDevice {
        pci_address: "0000:18:02.5".into(),
        pf_pci_address: Some("0000:18:00.0".into()),
        ..PciDevice::default()
    });
    let r =
        result(json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/x"}]}));
    let mut i = input("namespace-b/sriov-network_a", Some(&r));
    i.device_info = Some(&info);
    assert_eq!(
        serde_json::to_string(&build(&i)).unwrap(),
        r#"{"name":"namespace-b/sriov-network_a","interface":"net1","default":false,"device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:02.5","pf-pci-address":"0000:18:00.0"}}}"#
    );
}

#[test]
fn the_annotation_is_laid_out_as_multus_writes_it() {
    let a = NetworkStatus {
        name: "cbr0".into(),
        interface: Some("eth0".into()),
        ips: vec!["10.244.0.5".into()],
        default: true,
        ..NetworkStatus::default()
    };
    let b = NetworkStatus {
        name: "ns/b".into(),
        ..NetworkStatus::default()
    };
    assert_eq!(
        to_annotation(&[a.clone(), b.clone()]),
        "[{\n    \"name\": \"cbr0\",\n    \"interface\": \"eth0\",\n    \"ips\": [\n        \"10.244.0.5\"\n    ],\n    \"default\": true\n},{\n    \"name\": \"ns/b\",\n    \"default\": false\n}]"
    );
    assert_eq!(to_annotation(&[]), "[]");
    assert_eq!(
        parse(&to_annotation(&[a.clone(), b.clone()])).unwrap(),
        vec![a, b]
    );
}

#[test]
fn parsing_keeps_unknown_keys_and_values_as_written() {
    let v = r#"[{"name":"cbr0","interface":"eth0","ips":["10.244.0.5/24"],"mac":"x","mtu":1450,"default":true,"dns":{"options":["a"]},"gateway":["10.244.0.1"],"org.x":1}]"#;
    let list = parse(v).unwrap();
    assert_eq!(list[0].ips, ["10.244.0.5/24"]);
    assert_eq!(list[0].extra["mtu"], json!(1450));
    assert_eq!(list[0].extra["gateway"], json!(["10.244.0.1"]));
    assert_eq!(list[0].dns.as_ref().unwrap().extra["options"], json!(["a"]));
    let back: Value = serde_json::from_str(&to_annotation(&list)).unwrap();
    assert_eq!(back, serde_json::from_str::<Value>(v).unwrap());
    // `default` may be left out by other writers.
    assert!(!parse(r#"[{"name":"a"}]"#).unwrap()[0].default);
    assert_eq!(parse("").unwrap(), vec![]);
}

#[test]
fn parse_errors_say_which_entry() {
    for (v, needle) in [
        ("{", "not valid JSON"),
        ("{}", "expected a JSON list"),
        (
            r#"[{"name":"a"},{"interface":"x"}]"#,
            "entry 2: missing field `name`",
        ),
        (r#"[{"name":"a","ips":"1.2.3.4"}]"#, "entry 1: invalid type"),
        (r#"[7]"#, "entry 1: invalid type"),
    ] {
        let e = parse(v).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid \"k8s.v1.cni.cncf.io/network-status\" annotation: ")
                && e.contains(needle),
            "{v}: {e}"
        );
    }
}

#[test]
fn null_lists_and_flags_of_another_writer_read_as_none() {
    // `plumb status` reads what any writer put there; a `null` where a list or a flag belongs
    // must not make every entry unreadable.
    let entries =
        parse(r#"[{"name": "ns/a", "ips": null, "default": null, "mac": null}]"#).unwrap();
    assert_eq!(entries.len(), 1);
    assert!(entries[0].ips.is_empty() && !entries[0].default && entries[0].mac.is_none());
}
