use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn err(value: &str) -> String {
    match parse(value) {
        Ok(v) => panic!("{value:?} was accepted: {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn one(v: Value) -> NetworkSelectionElement {
    let list = parse(&json!([v]).to_string()).unwrap();
    assert_eq!(list.len(), 1);
    list.into_iter().next().unwrap()
}

const PREFIX: &str = "invalid \"k8s.v1.cni.cncf.io/networks\" annotation: ";

#[test]
fn empty_annotations_select_nothing() {
    for v in ["", "   ", "\n\t"] {
        assert_eq!(parse(v).unwrap(), Vec::new());
    }
    assert_eq!(parse("[]").unwrap(), Vec::new());
}

#[test]
fn an_annotation_selects_at_most_max_elements_networks_in_either_format() {
    let comma = |n: usize| vec!["net-a"; n].join(",");
    let json = |n: usize| json!(vec![json!({"name": "net-a"}); n]).to_string();
    for value in [comma(MAX_ELEMENTS), json(MAX_ELEMENTS)] {
        assert_eq!(parse(&value).unwrap().len(), MAX_ELEMENTS);
    }
    for value in [comma(MAX_ELEMENTS + 1), json(MAX_ELEMENTS + 1)] {
        assert_eq!(
            err(&value),
            format!("{PREFIX}it selects 257 networks; a pod may be attached to at most 256")
        );
    }
}

#[test]
fn comma_format_reads_names_namespaces_and_interfaces() {
    let list = parse(" net-a ,other-ns / net-c@ net1 , net-a@eth_2,x ").unwrap();
    let got: Vec<(Option<&str>, &str, Option<&str>)> = list
        .iter()
        .map(|e| {
            (
                e.namespace.as_deref(),
                e.name.as_str(),
                e.interface.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (None, "net-a", None),
            (Some("other-ns"), "net-c", Some("net1")),
            (None, "net-a", Some("eth_2")),
            (None, "x", None),
        ]
    );
    assert_eq!(list[0].network_ref("pod-ns").to_string(), "pod-ns/net-a");
    assert_eq!(list[1].network_ref("pod-ns").to_string(), "other-ns/net-c");
}

#[test]
fn comma_format_errors_say_which_item_and_why() {
    let cases = [
        (
            "net-a,",
            "element 2: empty network reference (is there a stray comma?)",
        ),
        (",net-a", "element 1: empty network reference"),
        ("net-a,,net-b", "element 2: empty network reference"),
        ("net-a, ,net-b", "element 2: empty network reference"),
        (
            "a/b/c",
            "element 1 (\"b/c\"), key \"name\": \"a/b/c\" has more than one '/'",
        ),
        (
            "net-a@x@y",
            "element 1 (\"net-a\"), key \"interface\": \"net-a@x@y\" has more than one '@'",
        ),
        (
            "net-a,Net_B",
            "element 2 (\"Net_B\"), key \"name\": \"Net_B\" is not a valid DNS-1123 label: it \
             must consist of lower case alphanumeric characters or '-'",
        ),
        (
            "bad_ns/net-a",
            "element 1 (\"net-a\"), key \"namespace\": \"bad_ns\" is not a valid DNS-1123 label",
        ),
        (
            "/net-a",
            "element 1 (\"net-a\"), key \"namespace\": \"\" is not a valid DNS-1123 label: it must \
             not be empty",
        ),
        (
            "ns/",
            "element 1 (\"ns/\"), key \"name\": \"\" is not a valid DNS-1123 label",
        ),
        (
            "net-a@",
            "element 1 (\"net-a\"), key \"interface\": \"\" is not a valid interface name",
        ),
        (
            "net-a@sixteen-chars-xx",
            "element 1 (\"net-a\"), key \"interface\": \"sixteen-chars-xx\" is not a valid \
             interface name: interface name is longer than 15 bytes",
        ),
        (
            "net-a@a:b",
            "key \"interface\": \"a:b\" is not a valid interface name",
        ),
        (
            "net-a@all",
            "element 1 (\"net-a\"), key \"interface\": \"all\" is not a valid interface name: \
             the kernel reserves it",
        ),
        // A name may be longer than a label's 63 (spec §3.3 only recommends it), up to what
        // Kubernetes takes for an object's name; a namespace may not.
        (
            &format!("{},b", "a".repeat(254)),
            "no more than 253 characters",
        ),
        (
            &format!("{}/net-a", "a".repeat(64)),
            "key \"namespace\": \"aaaa",
        ),
        (
            &format!("{}/net-a", "a".repeat(64)),
            "no more than 63 characters",
        ),
    ];
    for (value, needle) in cases {
        let e = err(value);
        assert!(e.starts_with(PREFIX), "{value:?}: {e}");
        assert!(e.contains(needle), "{value:?}: {e}\n  expected: {needle}");
    }
    // Both forms take a 64-character name (Kubernetes and Multus do).
    let long = "a".repeat(64);
    for value in [long.clone(), json!([{ "name": long }]).to_string()] {
        let got = parse(&value).unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(got[0].name, long);
    }
}

#[test]
fn json_format_reads_every_key() {
    let e = one(json!({
        "name": "net-b",
        "namespace": "other-ns",
        "ips": ["10.2.2.42/24", "2001:db8::5/64"],
        "mac": "02:23:45:67:89:01",
        "interface": "net9",
        "cni-args": {"spoofchk": "on", "n": [1, {"x": null}]},
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200},
        "default-route": ["10.0.0.1"],
        "infiniband-guid": "24:8a:07:03:00:8d:ae:2f",
        "deviceID": "0000:04:00.5",
        "org.example.custom-key": {"any": "thing"}
    }));
    assert_eq!(e.name, "net-b");
    assert_eq!(e.namespace.as_deref(), Some("other-ns"));
    assert_eq!(e.ips.len(), 2);
    assert_eq!(e.mac.unwrap().to_string(), "02:23:45:67:89:01");
    assert_eq!(e.interface.as_deref(), Some("net9"));
    assert_eq!(e.cni_args.as_ref().unwrap()["spoofchk"], json!("on"));
    assert_eq!(e.port_mappings[0].host_port, 8080);
    assert_eq!(e.bandwidth.as_ref().unwrap().egress_rate, Some(8000));
    assert_eq!(
        e.default_route.as_deref(),
        Some(&["10.0.0.1".parse().unwrap()][..])
    );
    assert_eq!(
        e.infiniband_guid.unwrap().to_string(),
        "24:8a:07:03:00:8d:ae:2f"
    );
    assert_eq!(e.device_id.as_deref(), Some("0000:04:00.5"));
    assert_eq!(
        e.extensions["org.example.custom-key"],
        json!({"any": "thing"})
    );
    assert_eq!(e.unknown_keys().count(), 0);

    let c = one(json!({"name": "net-b", "ipam-claim-reference": "vm123.tenantblue"}));
    assert_eq!(c.ipam_claim_reference.as_deref(), Some("vm123.tenantblue"));
}

#[test]
fn json_null_and_empty_values() {
    // `null` is an absent key; an empty namespace is the pod's namespace (§4.1.2.1.1).
    let e =
        one(json!({"name": "a", "namespace": "", "ips": null, "mac": null, "default-route": null}));
    assert_eq!(e, NetworkSelectionElement::named("a"));
    // An empty default-route list is allowed and is not absence (§4.1.2.1.9).
    let e = one(json!({"name": "a", "default-route": []}));
    assert_eq!(e.default_route, Some(vec![]));
}

#[test]
fn multus_forms_are_accepted() {
    let e = one(json!({"name": "a", "interfaceRequest": "net5"}));
    assert_eq!(e.interface.as_deref(), Some("net5"));
    let e = one(json!({"name": "a", "interface": "net1", "interfaceRequest": "net5"}));
    assert_eq!(e.interface.as_deref(), Some("net1"));
    let e = one(json!({"name": "a", "deviceID": "0000:18:02.5"}));
    assert_eq!(e.device_id.as_deref(), Some("0000:18:02.5"));
}

#[test]
fn unknown_keys_are_kept_and_reported() {
    let e = one(json!({"name": "a", "overrides": {"x": 1}, "org.foo.bar.key-name": 2}));
    assert_eq!(e.unknown_keys().collect::<Vec<_>>(), ["overrides"]);
    let back = serde_json::to_value(&e).unwrap();
    assert_eq!(
        back,
        json!({"name": "a", "org.foo.bar.key-name": 2, "overrides": {"x": 1}})
    );
}

#[test]
fn json_errors_say_which_element_which_key_and_why() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!([{"name": "a"}, {}]),
            "element 2, key \"name\": the key is required",
        ),
        (
            json!([{"name": 5}]),
            "element 1, key \"name\": expected a string, not a number",
        ),
        (
            json!([{"name": "Net"}]),
            "element 1 (\"Net\"), key \"name\": \"Net\" is not a valid DNS-1123 label",
        ),
        (
            json!([{"name": ""}]),
            "element 1 (\"\"), key \"name\": \"\" is not a valid DNS-1123 label: it must not be empty",
        ),
        (
            json!([{"name": "a", "namespace": "a.b"}]),
            "element 1 (\"a\"), key \"namespace\": \"a.b\" is not a valid DNS-1123 label",
        ),
        (
            json!([{"name": "a", "namespace": 1}]),
            "key \"namespace\": expected a string",
        ),
        (
            json!([{"name": "a", "ips": []}]),
            "element 1 (\"a\"), key \"ips\": the list must contain at least one address",
        ),
        (
            json!([{"name": "a", "ips": "1.2.3.4"}]),
            "key \"ips\": expected a list of strings, not a string",
        ),
        (
            json!([{"name": "a", "ips": ["1.2.3.4", "1.2.3.4/40"]}]),
            "key \"ips\": entry 2: \"1.2.3.4/40\": \"40\" is not a prefix length between 0 and 32",
        ),
        (
            json!([{"name": "a", "mac": "02:23:45:67:89"}]),
            "element 1 (\"a\"), key \"mac\": \"02:23:45:67:89\" is not a valid 6-byte hardware address",
        ),
        (
            json!([{"name": "a", "mac": ""}]),
            "key \"mac\": \"\" is not a valid 6-byte hardware address",
        ),
        (
            json!([{"name": "a", "mac": "01:00:5e:00:00:01"}]),
            "element 1 (\"a\"), key \"mac\": 01:00:5e:00:00:01 is not a usable interface address: it is a multicast address",
        ),
        (
            json!([{"name": "a", "interface": "a/b"}]),
            "key \"interface\": \"a/b\" is not a valid interface name: interface name must not contain '/', ':', NUL or whitespace",
        ),
        (
            json!([{"name": "a", "interface": "default"}]),
            "element 1 (\"a\"), key \"interface\": \"default\" is not a valid interface name: the kernel reserves it",
        ),
        (
            json!([{"name": "a", "interfaceRequest": "x y"}]),
            "key \"interfaceRequest\": \"x y\" is not a valid interface name",
        ),
        (
            json!([{"name": "a", "cni-args": "spoofchk=on"}]),
            "key \"cni-args\": expected an object, not a string",
        ),
        (
            json!([{"name": "a", "portMappings": [{"hostPort": 8080, "containerPort": 0}]}]),
            "key \"portMappings\": entry 1: \"containerPort\": 0 is not an integer between 1 and 65535",
        ),
        (
            json!([{"name": "a", "portMappings": [{"hostPort": 1, "containerPort": 1, "protocol": "icmp"}]}]),
            "key \"portMappings\": entry 1: \"protocol\": \"icmp\" is not one of \"TCP\", \"UDP\" or \"SCTP\"",
        ),
        (
            json!([{"name": "a", "bandwidth": {"ingressBurst": 300}}]),
            "key \"bandwidth\": \"ingressBurst\" is given without \"ingressRate\"",
        ),
        (
            json!([{"name": "a", "bandwidth": {"egressRate": 0}}]),
            "key \"bandwidth\": \"egressRate\": 0 is not an integer",
        ),
        (
            json!([{"name": "a", "default-route": ["10.0.0.1/8"]}]),
            "key \"default-route\": entry 1: \"10.0.0.1/8\" is not an IPv4 or IPv6 address",
        ),
        (
            json!([{"name": "a", "infiniband-guid": "02:23:45:67:89:01"}]),
            "key \"infiniband-guid\": \"02:23:45:67:89:01\" is not a valid 8-byte hardware address",
        ),
        (
            json!([{"name": "a", "ipam-claim-reference": "Vm_1"}]),
            "key \"ipam-claim-reference\": \"Vm_1\" is not a valid IPAMClaim name",
        ),
        (
            json!([{"name": "a", "ips": ["10.0.0.5/24"], "ipam-claim-reference": "vm1.net"}]),
            "element 1 (\"a\"), key \"ipam-claim-reference\": cannot be used together with \"ips\"",
        ),
        (
            json!([{"name": "a", "deviceID": ""}]),
            "key \"deviceID\": must not be empty",
        ),
        (
            json!([{"name": "a"}, 7]),
            "element 2: expected an object, not a number",
        ),
        (
            json!([{"name": "a", "default-route": ["10.0.0.1"]}, {"name": "b"}, {"name": "c", "default-route": []}]),
            "element 3 (\"c\"), key \"default-route\": only one element may have \"default-route\", and element 1 (\"a\") already has it",
        ),
        (
            json!([{"name": "a", "interface": "net1"}, {"name": "b", "interface": "net1"}]),
            "element 2 (\"b\"), key \"interface\": interface name \"net1\" is already requested by element 1 (\"a\")",
        ),
    ];
    for (value, needle) in cases {
        let e = err(&value.to_string());
        assert!(e.starts_with(PREFIX), "{value}: {e}");
        assert!(
            e.contains(needle),
            "{value}:\n  got:      {e}\n  expected: {needle}"
        );
    }
}

#[test]
fn the_error_message_is_exact_and_becomes_a_cni_error_7() {
    let e = parse(r#"[{"name":"net-a"},{"name":"net-b","mac":"zz"}]"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid \"k8s.v1.cni.cncf.io/networks\" annotation: element 2 (\"net-b\"), key \"mac\": \
         \"zz\" is not a valid 6-byte hardware address"
    );
    let at = e.location().unwrap();
    assert_eq!(
        (at.position, at.name.as_deref(), at.key.as_deref()),
        (2, Some("net-b"), Some("mac"))
    );
    let c: cni::CniError = e.into();
    assert_eq!(c.code, 7);
}

#[test]
fn malformed_values() {
    for (value, needle) in [
        ("[", "not a valid JSON list"),
        (
            "{\"name\":\"a\"}",
            "expected a JSON list of network selection elements, not an object",
        ),
        ("\"net-a\"", "not a string"),
        ("[{\"name\":\"a\"},]", "not a valid JSON list"),
    ] {
        let e = err(value);
        assert!(e.starts_with(PREFIX) && e.contains(needle), "{value}: {e}");
    }
}

#[test]
fn format_detection_matches_multus() {
    assert!(is_json("[]") && is_json(" {") && is_json("\"a\""));
    assert!(!is_json("net-a,ns/net-b@x"));
}

#[test]
fn elements_deserialise_through_the_same_checks() {
    let e: NetworkSelectionElement =
        serde_json::from_value(json!({"name": "a", "mac": "02:23:45:67:89:01"})).unwrap();
    assert_eq!(e.mac.unwrap().0[0], 2);
    let bad = serde_json::from_value::<NetworkSelectionElement>(json!({"name": "a", "mac": "x"}));
    assert!(bad.unwrap_err().to_string().contains("key \"mac\""));
}

#[test]
fn serialises_in_the_spec_key_order() {
    let e = one(json!({
        "deviceID": "d", "ipam-claim-reference": "c", "infiniband-guid": "24:8a:07:03:00:8d:ae:2f",
        "default-route": [], "bandwidth": {"egressRate": 1}, "portMappings": [{"hostPort": 1, "containerPort": 2}],
        "cni-args": {}, "interface": "i", "mac": "02:23:45:67:89:01",
        "namespace": "n", "name": "a", "z.z": 1
    }));
    assert_eq!(
        serde_json::to_string(&e).unwrap(),
        r#"{"name":"a","namespace":"n","mac":"02:23:45:67:89:01","interface":"i","cni-args":{},"portMappings":[{"hostPort":1,"containerPort":2,"protocol":"tcp"}],"bandwidth":{"egressRate":1},"default-route":[],"infiniband-guid":"24:8a:07:03:00:8d:ae:2f","ipam-claim-reference":"c","deviceID":"d","z.z":1}"#
    );
}

// ---- property tests: what the parser accepts serialises and re-parses to the same value ----

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"
}

fn ip_addr() -> impl Strategy<Value = std::net::IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(std::net::IpAddr::from),
        any::<[u8; 16]>().prop_map(std::net::IpAddr::from),
    ]
}

fn ip_request() -> impl Strategy<Value = IpRequest> {
    (ip_addr(), any::<Option<u8>>()).prop_map(|(addr, p)| IpRequest {
        addr,
        prefix: p.map(|p| p % if addr.is_ipv4() { 33 } else { 129 }),
    })
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[ -~]{0,8}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z.]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn port_mapping() -> impl Strategy<Value = PortMapping> {
    (1u16.., 1u16.., 0..3u8, prop::option::of(ip_addr())).prop_map(|(h, c, p, host_ip)| {
        PortMapping {
            host_port: h,
            container_port: c,
            protocol: [Protocol::Tcp, Protocol::Udp, Protocol::Sctp][p as usize],
            host_ip,
        }
    })
}

fn bandwidth() -> impl Strategy<Value = Bandwidth> {
    (
        prop::option::of(1u64..),
        prop::option::of(1u64..),
        prop::option::of(1u64..),
        prop::option::of(1u64..),
    )
        .prop_filter_map("needs a value and a rate per burst", |(ir, ib, er, eb)| {
            let bw = Bandwidth {
                ingress_rate: ir,
                ingress_burst: ib.filter(|_| ir.is_some()),
                egress_rate: er,
                egress_burst: eb.filter(|_| er.is_some()),
            };
            (bw != Bandwidth::default()).then_some(bw)
        })
}

prop_compose! {
    fn element()(
        name in label(),
        namespace in prop::option::of(label()),
        ips in prop::collection::vec(ip_request(), 0..3),
        // Unicast and not all zeros (§4.1.2.1.4: an address the pod's interface can take).
        mac in prop::option::of(any::<[u8; 6]>().prop_map(|mut m| { m[0] = (m[0] & 0xfe) | 0x02; m })),
        interface in prop::option::of("[a-zA-Z0-9_.-]{1,15}".prop_filter("not . .. all default", |s| !matches!(s.as_str(), "." | ".." | "all" | "default"))),
        cni_args in prop::option::of(prop::collection::btree_map("[a-z]{1,5}", json_value(), 0..3)),
        port_mappings in prop::collection::vec(port_mapping(), 0..3),
        bandwidth in prop::option::of(bandwidth()),
        default_route in prop::option::of(prop::collection::vec(ip_addr(), 0..3)),
        guid in prop::option::of(any::<[u8; 8]>()),
        claim in prop::option::of("[a-z0-9]{1,5}(\\.[a-z0-9]{1,5}){0,2}"),
        device_id in prop::option::of("[ -~]{1,12}"),
        extensions in prop::collection::btree_map("[a-z]{1,4}\\.[a-z]{1,4}", json_value(), 0..3),
    ) -> NetworkSelectionElement {
        let claim = if ips.is_empty() { claim } else { None };
        NetworkSelectionElement {
            name, namespace, ips, mac: mac.map(HwAddr), interface,
            cni_args: cni_args.map(|m| m.into_iter().collect()),
            port_mappings, bandwidth, default_route, infiniband_guid: guid.map(HwAddr),
            ipam_claim_reference: claim, device_id, extensions,
        }
    }
}

/// Values for the spec's keys, valid or not, to feed the parser.
fn key_value(key: &'static str) -> BoxedStrategy<Value> {
    let valid: BoxedStrategy<Value> = match key {
        "namespace" => label().prop_map(Value::String).boxed(),
        "ips" => prop::collection::vec(ip_request().prop_map(|i| json!(i.to_string())), 0..3)
            .prop_map(Value::Array)
            .boxed(),
        "mac" => prop_oneof![
            // Unicast, not all zeros.
            "[1-9a-fA-F][02468aceACE](:[0-9a-fA-F]{2}){5}",
            "[1-9a-fA-F][02468aceACE](-[0-9a-fA-F]{2}){5}"
        ]
        .prop_map(Value::String)
        .boxed(),
        "cni-args" => prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..3)
            .prop_map(|m| json!(m))
            .boxed(),
        "infiniband-guid" => "[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){7}"
            .prop_map(Value::String)
            .boxed(),
        "interface" | "interfaceRequest" => {
            "[a-z0-9_][a-z0-9_.-]{0,14}".prop_map(Value::String).boxed()
        }
        "portMappings" => prop::collection::vec(
            (
                1u32..65536,
                1u32..65536,
                prop::sample::select(vec!["tcp", "UDP", "Sctp"]),
            )
                .prop_map(|(h, c, p)| json!({"hostPort": h, "containerPort": c, "protocol": p})),
            0..3,
        )
        .prop_map(Value::Array)
        .boxed(),
        "bandwidth" => (1u64..1000, 1u64..1000, any::<bool>())
            .prop_map(|(rate, burst, egress)| {
                if egress {
                    json!({"egressRate": rate, "egressBurst": burst})
                } else {
                    json!({"ingressRate": rate, "ingressBurst": burst})
                }
            })
            .boxed(),
        "default-route" => {
            prop::collection::vec(ip_addr().prop_map(|a| json!(a.to_string())), 0..3)
                .prop_map(Value::Array)
                .boxed()
        }
        _ => "[a-z0-9.]{0,8}".prop_map(Value::String).boxed(),
    };
    // Mostly valid values, so that whole elements are often accepted; the invalid ones are the
    // parser's business in `the_parser_never_panics` and the table tests.
    prop_oneof![24 => valid, 1 => json_value()].boxed()
}

fn raw_element() -> impl Strategy<Value = Value> {
    const KEYS: &[&str] = &[
        "namespace",
        "ips",
        "mac",
        "interface",
        "interfaceRequest",
        "cni-args",
        "portMappings",
        "bandwidth",
        "default-route",
        "infiniband-guid",
        "ipam-claim-reference",
        "deviceID",
        "x.y",
        "reserved",
    ];
    let pairs: Vec<BoxedStrategy<Option<(String, Value)>>> = KEYS
        .iter()
        .map(|k| prop::option::of(key_value(k).prop_map(move |v| (k.to_string(), v))).boxed())
        .collect();
    (label(), pairs).prop_map(|(name, pairs)| {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), Value::String(name));
        for (k, v) in pairs.into_iter().flatten() {
            m.insert(k, v);
        }
        Value::Object(m)
    })
}

proptest! {
    #[test]
    fn generated_elements_round_trip(list in prop::collection::vec(element(), 0..4)) {
        // Drop what the cross-element rules refuse, then check the list survives a round trip.
        let mut list = list;
        let mut seen_route = false;
        let mut ifnames = std::collections::BTreeSet::new();
        for e in &mut list {
            if e.default_route.is_some() {
                if seen_route { e.default_route = None; }
                seen_route = true;
            }
            if let Some(i) = &e.interface
                && !ifnames.insert(i.clone())
            {
                e.interface = None;
            }
        }
        let text = serde_json::to_string(&list).unwrap();
        let back = parse(&text).unwrap();
        prop_assert_eq!(back, list);
    }

    #[test]
    fn accepted_elements_reserialise_to_the_same_value(raw in raw_element()) {
        // Only accepted elements say anything here; the generator is tuned so that enough are
        // (each key's value is valid 24 times in 25), and proptest fails the test if too many
        // are refused.
        let accepted = NetworkSelectionElement::from_value(1, &raw);
        prop_assume!(accepted.is_ok());
        let e = accepted.unwrap();
        let text = serde_json::to_value(&e).unwrap();
        let again = NetworkSelectionElement::from_value(1, &text).unwrap();
        prop_assert_eq!(&again, &e);
        // And through the annotation as a whole.
        let list = parse(&json!([text]).to_string()).unwrap();
        prop_assert_eq!(list, vec![e]);
    }

    #[test]
    fn accepted_comma_values_round_trip(items in prop::collection::vec(
        (prop::option::of(label()), label(), prop::option::of("[a-z0-9_]{1,15}".prop_filter("not all or default", |s| s != "all" && s != "default"))), 1..5)
    ) {
        let text: Vec<String> = items.iter().map(|(ns, n, i)| {
            let mut s = String::new();
            if let Some(ns) = ns { s.push_str(ns); s.push('/'); }
            s.push_str(n);
            if let Some(i) = i { s.push('@'); s.push_str(i); }
            s
        }).collect();
        match parse(&text.join(",")) {
            Ok(list) => {
                let again = parse(&serde_json::to_string(&list).unwrap()).unwrap();
                prop_assert_eq!(again, list);
            }
            // Only a repeated interface name may be refused.
            Err(e) => prop_assert!(e.to_string().contains("already requested"), "{}", e),
        }
    }

    #[test]
    fn the_parser_never_panics(s in "\\PC{0,64}") {
        let _ = parse(&s);
    }
}

#[test]
fn the_default_network_annotation_is_read_without_the_secondary_attachment_rules() {
    // Multus's `v1.multus-cni.io/default-network` takes this format; §4.1.2.1.11 (no `ips` with
    // `ipam-claim-reference`) is a rule for secondary attachments, and OVN-Kubernetes asks for
    // both on the default network.
    let v = r#"[{"name":"isolated-net","namespace":"myisolatedns","mac":"02:03:04:05:06:07","ipam-claim-reference":"myvm.isolated-net","ips":["10.0.0.5/24"]}]"#;
    let got = parse_default_network(v).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].ipam_claim_reference.as_deref(),
        Some("myvm.isolated-net")
    );
    assert_eq!(got[0].ips.len(), 1);
    assert!(err(v).contains("cannot be used together with \"ips\""));
    // Every key's own value is still checked, and the comma format is read as for `parse`.
    let e = parse_default_network(r#"[{"name":"a","ips":["10.0.0.5/33"]}]"#).unwrap_err();
    assert!(e.to_string().contains("key \"ips\""), "{e}");
    let got = parse_default_network("kube-system/calico-conf").unwrap();
    assert_eq!(
        got[0].network_ref("x").to_string(),
        "kube-system/calico-conf"
    );
    assert!(parse_default_network(" ").unwrap().is_empty());
}

#[test]
fn a_key_given_twice_in_an_element_is_refused_naming_it() {
    // `namespace` twice bears on isolation: the last one won silently.
    let e =
        parse(r#"[{"name": "a"}, {"name": "b", "namespace": "x", "namespace": "y"}]"#).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("element 2: key \"namespace\" is given twice"),
        "{text}"
    );
    let e = parse(r#"[{"name": "a", "Name": "b"}]"#).unwrap_err();
    assert!(e.to_string().contains("\"name\" and \"Name\""), "{e}");
    // The same key in two elements is no duplicate.
    assert_eq!(parse(r#"[{"name": "a"}, {"name": "b"}]"#).unwrap().len(), 2);
}
