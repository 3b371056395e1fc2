//! Result decoding, encoding and conversion, for every version 0.1.0–1.1.0.

use serde_json::{Value, json};

use super::*;
use crate::version::SUPPORTED;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/results/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn full() -> CniResult {
    CniResult::parse(&fixture("full-1.1.0.json"), Version::V1_1_0).unwrap()
}

#[test]
fn reads_what_cnitool_printed() {
    let r = CniResult::parse(&fixture("cnitool-add-result-1.0.0.json"), Version::V1_1_0).unwrap();
    assert_eq!(r.cni_version, Version::V1_0_0);
    assert_eq!(r.interfaces.len(), 3);
    assert_eq!(r.interfaces[2].sandbox, "/var/run/netns/fixture");
    assert_eq!(r.ips[0].interface, Some(2));
    assert_eq!(r.ips[0].address.to_string(), "10.99.0.2/24");
    // And writes it back byte-for-byte equivalent.
    let back = r.to_value().unwrap();
    let orig: Value = serde_json::from_slice(&fixture("cnitool-add-result-1.0.0.json")).unwrap();
    assert_eq!(back, orig);
}

#[test]
fn full_1_1_result_round_trips_in_1_0_and_1_1() {
    let r = full();
    let orig: Value = serde_json::from_slice(&fixture("full-1.1.0.json")).unwrap();
    assert_eq!(r.to_value().unwrap(), orig);
    let as10 = r.convert_to(Version::V1_0_0).unwrap().to_value().unwrap();
    let mut expect = orig.clone();
    expect["cniVersion"] = json!("1.0.0");
    assert_eq!(as10, expect, "1.0.0 and 1.1.0 share one layout");
}

#[test]
fn down_to_0_3_and_0_4_adds_version_and_drops_1_x_fields() {
    for v in [Version::V0_3_0, Version::V0_3_1, Version::V0_4_0] {
        let out = full().convert_to(v).unwrap().to_value().unwrap();
        assert_eq!(out["cniVersion"], json!(v.to_string()));
        assert_eq!(
            out["interfaces"][2],
            json!({"name":"eth0","mac":"0a:58:0a:01:02:03","sandbox":"/var/run/netns/p1"})
        );
        assert_eq!(
            out["ips"][0],
            json!({"version":"4","interface":2,"address":"10.1.2.3/24","gateway":"10.1.2.1"})
        );
        assert_eq!(
            out["ips"][2],
            json!({"version":"6","interface":2,"address":"2001:db8::3/64","gateway":"2001:db8::1"})
        );
        // An absent interface index stays absent; it is not 0.
        assert_eq!(
            out["ips"][3],
            json!({"version":"4","address":"192.0.2.9/32"})
        );
        assert_eq!(out["routes"][0], json!({"dst":"0.0.0.0/0","gw":"10.1.2.1"}));
        assert_eq!(out["dns"]["domain"], json!("example.org"));
    }
}

#[test]
fn down_to_0_2_keeps_first_address_per_family_and_splits_routes() {
    for v in [Version::V0_1_0, Version::V0_2_0] {
        let out = full().convert_to(v).unwrap().to_value().unwrap();
        assert_eq!(
            out,
            json!({
                "cniVersion": v.to_string(),
                "ip4": {"ip":"10.1.2.3/24","gateway":"10.1.2.1","routes":[
                    {"dst":"0.0.0.0/0","gw":"10.1.2.1"},{"dst":"192.168.0.0/16","gw":"10.1.2.254"}]},
                "ip6": {"ip":"2001:db8::3/64","gateway":"2001:db8::1","routes":[{"dst":"::/0"}]},
                "dns": {"nameservers":["10.1.2.1"],"domain":"example.org",
                        "search":["a.example.org"],"options":["ndots:2"]}
            })
        );
    }
}

#[test]
fn routes_of_a_family_without_an_address_are_dropped_going_to_0_2() {
    let r = CniResult::parse(&fixture("ipam-0.4.0.json"), Version::V0_4_0).unwrap();
    let mut only6 = r.clone();
    only6.ips.retain(|ip| !ip.address.is_ipv4());
    let out = only6
        .convert_to(Version::V0_2_0)
        .unwrap()
        .to_value()
        .unwrap();
    assert_eq!(
        out,
        json!({"cniVersion":"0.2.0","ip6":{"ip":"2001:db8::3/64"}})
    );
}

#[test]
fn an_ip_less_result_cannot_go_down_to_0_2() {
    let mut r = full();
    r.ips.clear();
    for v in [Version::V0_1_0, Version::V0_2_0] {
        let e = r.convert_to(v).unwrap_err();
        assert!(e.msg.contains("no valid IP addresses"), "{e}");
        assert_eq!(e.code, 1);
    }
    // Every newer version carries it fine.
    for v in SUPPORTED.iter().filter(|v| **v >= Version::V0_3_0) {
        r.convert_to(*v).unwrap();
    }
}

#[test]
fn legacy_0_2_goes_up_to_every_version() {
    let r = CniResult::parse(&fixture("legacy-0.2.0.json"), Version::V0_2_0).unwrap();
    assert_eq!(r.cni_version, Version::V0_2_0);
    let up = r.convert_to(Version::V1_0_0).unwrap().to_value().unwrap();
    assert_eq!(
        up,
        json!({
            "cniVersion":"1.0.0",
            "ips":[{"address":"10.1.2.3/24","gateway":"10.1.2.1"},{"address":"2001:db8::3/64"}],
            "routes":[{"dst":"0.0.0.0/0","gw":"10.1.2.1"},{"dst":"::/0"}],
            "dns":{"nameservers":["10.1.2.1"]}
        })
    );
    let up04 = r.convert_to(Version::V0_4_0).unwrap().to_value().unwrap();
    assert_eq!(
        up04["ips"][1],
        json!({"version":"6","address":"2001:db8::3/64"})
    );
    // ... and back down again unchanged.
    let down = r
        .convert_to(Version::V1_1_0)
        .unwrap()
        .convert_to(Version::V0_2_0)
        .unwrap();
    assert_eq!(down, r);
}

#[test]
fn every_pair_of_versions_converts_and_reparses() {
    let sources = [
        full(),
        CniResult::parse(&fixture("ipam-0.4.0.json"), Version::V0_4_0).unwrap(),
    ];
    for src in &sources {
        for from in SUPPORTED {
            let a = src.convert_to(from).unwrap();
            for to in SUPPORTED {
                let b = a.convert_to(to).unwrap();
                let bytes = b.to_json().unwrap();
                let again = CniResult::parse(bytes.as_bytes(), Version::V0_1_0).unwrap();
                assert_eq!(again, b, "{from} -> {to}: {bytes}");
                assert_eq!(again.cni_version, to);
            }
        }
    }
}

#[test]
fn missing_version_takes_the_requested_one() {
    let r = CniResult::parse(br#"{"ips":[{"address":"10.0.0.2/8"}]}"#, Version::V1_0_0).unwrap();
    assert_eq!(r.cni_version, Version::V1_0_0);
    let r = CniResult::parse(
        br#"{"cniVersion":"","ip4":{"ip":"10.0.0.2/8"}}"#,
        Version::V0_2_0,
    )
    .unwrap();
    assert_eq!(r.ips.len(), 1);
}

#[test]
fn a_negative_interface_index_means_no_interface() {
    // Go's types hold the index as a signed int; multi-net spec §5.3.3.1 reads < 0 as none.
    for v in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let json =
            format!(r#"{{"cniVersion":"{v}","ips":[{{"address":"10.0.0.1/8","interface":-1}}]}}"#);
        let r = CniResult::parse(json.as_bytes(), Version::V1_0_0).unwrap();
        assert_eq!(r.ips[0].interface, None, "{v}");
    }
}

#[test]
fn bad_results_are_decode_or_version_errors() {
    let cases: &[(&[u8], u32)] = &[
        (b"", 6),
        (b"null", 6),
        (b"[]", 6),
        (br#"{"cniVersion":7}"#, 6),
        (br#"{"cniVersion":"0.5.0"}"#, 1),
        (br#"{"cniVersion":"9.9.9"}"#, 1),
        (
            br#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1"}]}"#,
            6,
        ),
        (br#"{"cniVersion":"1.0.0","interfaces":[{"mac":"x"}]}"#, 6),
        (br#"{"cniVersion":"0.2.0","ip4":{"gateway":"10.0.0.1"}}"#, 6),
        (
            br#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/8","gateway":"x"}]}"#,
            6,
        ),
        (
            br#"{"cniVersion":"1.0.0","routes":[{"dst":"0.0.0.0/0","gw":7}]}"#,
            6,
        ),
    ];
    for (input, code) in cases {
        let e = CniResult::parse(input, Version::V1_0_0).unwrap_err();
        assert_eq!(e.code, *code, "{}: {e}", String::from_utf8_lossy(input));
    }
}

#[test]
fn an_empty_gateway_is_no_gateway_in_every_version() {
    // Go's net.IP (libcni, the reference plugins) reads "" as no address; plugins not written
    // in Go write it for "no gateway".
    let cases = [
        json!({"cniVersion": "0.2.0",
               "ip4": {"ip": "10.0.0.2/8", "gateway": "", "routes": [{"dst": "0.0.0.0/0", "gw": ""}]}}),
        json!({"cniVersion": "0.4.0",
               "ips": [{"version": "4", "address": "10.0.0.2/8", "gateway": ""}],
               "routes": [{"dst": "0.0.0.0/0", "gw": ""}]}),
        json!({"cniVersion": "1.1.0",
               "ips": [{"address": "10.0.0.2/8", "gateway": ""}],
               "routes": [{"dst": "0.0.0.0/0", "gw": ""}]}),
    ];
    for input in cases {
        let r = CniResult::parse(input.to_string().as_bytes(), Version::V1_1_0)
            .unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(r.ips[0].gateway, None, "{input}");
        assert_eq!(r.routes[0].gw, None, "{input}");
        // Written back without the empty gateway, as libcni would.
        let out = r.to_value().unwrap().to_string();
        assert!(!out.contains("gateway") && !out.contains("gw"), "{out}");
    }
}

#[test]
fn empty_dns_is_omitted_and_unknown_result_keys_are_ignored() {
    let r = CniResult::parse(
        br#"{"cniVersion":"1.0.0","dns":{},"extra":1,"ips":[{"address":"10.0.0.2/8"}]}"#,
        Version::V1_0_0,
    )
    .unwrap();
    assert_eq!(
        r.to_value().unwrap(),
        json!({"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/8"}]})
    );
}

#[test]
fn null_fields_read_as_absent_as_go_reads_them() {
    // Go's encoding/json leaves a field untouched on null, so libcni reads null as empty;
    // plugins not written in Go (and Go structs without omitempty) print it.
    let cases = [
        (
            json!({"cniVersion":null,"interfaces":null,"ips":null,"routes":null,"dns":null}),
            json!({"cniVersion":"1.1.0"}),
        ),
        (
            json!({"cniVersion":"1.0.0",
                   "interfaces":[{"name":"eth0","mac":null,"sandbox":null,"socketPath":null,"pciID":null,"mtu":null}],
                   "ips":[{"address":"10.0.0.2/8","interface":null,"gateway":null}],
                   "routes":[{"dst":"0.0.0.0/0","gw":null}],
                   "dns":{"nameservers":null,"domain":null,"search":null,"options":null}}),
            json!({"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],
                   "ips":[{"address":"10.0.0.2/8"}],"routes":[{"dst":"0.0.0.0/0"}]}),
        ),
        (
            json!({"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":null,"sandbox":null}],
                   "ips":[{"version":null,"address":"10.0.0.2/8"}],"routes":null,"dns":null}),
            json!({"cniVersion":"0.4.0","interfaces":[{"name":"eth0"}],
                   "ips":[{"version":"4","address":"10.0.0.2/8"}]}),
        ),
        (
            json!({"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/8","routes":null},"ip6":null,"dns":null}),
            json!({"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/8"}}),
        ),
    ];
    for (input, want) in cases {
        let r = CniResult::parse(input.to_string().as_bytes(), Version::V1_1_0)
            .unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(r.to_value().unwrap(), want, "{input}");
    }
}
