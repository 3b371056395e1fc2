//! Parsing a 64-element JSON selection annotation, and building the 64 status entries (and the
//! annotation value) from realistic 1.0.0 results: the per-pod work of the planner and of the
//! status writer.

use std::hint::black_box;

use cni::{CniResult, Version};
use criterion::{Criterion, criterion_group, criterion_main};
use netattach::selection;
use netattach::status::{self, StatusInput};
use serde_json::json;

fn annotation() -> String {
    let elements: Vec<_> = (0..64)
        .map(|i| match i % 4 {
            0 => json!({"name": format!("net-{i}")}),
            1 => json!({
                "name": format!("net-{i}"), "namespace": "other-ns", "interface": format!("net{i}"),
                "ips": [format!("10.{i}.0.5/24"), format!("2001:db8:{i:x}::5/64")],
                "mac": format!("02:00:00:00:00:{i:02x}")
            }),
            2 => json!({
                "name": format!("net-{i}"), "cni-args": {"spoofchk": "on", "trust": "off"},
                "portMappings": [{"hostPort": 8000 + i, "containerPort": 80, "protocol": "tcp"}],
                "bandwidth": {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200}
            }),
            _ => json!({
                "name": format!("net-{i}"), "infiniband-guid": format!("24:8a:07:03:00:8d:ae:{i:02x}"),
                "deviceID": format!("0000:18:02.{}", i % 8), "org.example.tier": "gold"
            }),
        })
        .collect();
    serde_json::to_string_pretty(&elements).unwrap()
}

/// What a bridge + host-local ADD returns at 1.0.0: host and container interfaces, a dual-stack
/// address pair on the container side, routes and DNS.
fn results() -> Vec<CniResult> {
    (0..64)
        .map(|i| {
            let v = json!({
                "cniVersion": "1.0.0",
                "interfaces": [
                    {"name": "br0", "mac": "aa:aa:aa:aa:aa:aa"},
                    {"name": format!("veth{i:08x}"), "mac": "ee:ee:ee:ee:ee:ee"},
                    {"name": format!("net{i}"), "mac": format!("02:00:00:00:01:{i:02x}"), "sandbox": "/var/run/netns/cni-0f3c2b1a"}
                ],
                "ips": [
                    {"interface": 2, "address": format!("10.{i}.0.5/24"), "gateway": format!("10.{i}.0.1")},
                    {"interface": 2, "address": format!("2001:db8:{i:x}::5/64"), "gateway": format!("2001:db8:{i:x}::1")}
                ],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local", "cluster.local"]}
            });
            CniResult::from_value(v, Version::V1_0_0).unwrap()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let text = annotation();
    assert_eq!(selection::parse(&text).unwrap().len(), 64);
    // Baseline, in the same run: serde_json reading the same text as an untyped value. The
    // ratio is what validating every element costs over merely reading the JSON.
    c.bench_function("baseline: serde_json Value of the same annotation", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&text)).unwrap())
    });
    c.bench_function("parse 64-element JSON annotation", |b| {
        b.iter(|| selection::parse(black_box(&text)).unwrap())
    });

    let results = results();
    let names: Vec<String> = (0..64).map(|i| format!("other-ns/net-{i}")).collect();
    let ifnames: Vec<String> = (0..64).map(|i| format!("net{i}")).collect();
    let build_all = || -> Vec<status::NetworkStatus> {
        results
            .iter()
            .zip(&names)
            .zip(&ifnames)
            .enumerate()
            .map(|(i, ((r, name), ifname))| {
                status::build(&StatusInput {
                    name,
                    result: Some(r),
                    ifname,
                    is_default: i == 0,
                    default_route: if i == 5 { Some(&[]) } else { None },
                    device_info: None,
                })
            })
            .collect()
    };
    assert_eq!(build_all()[3].ips.len(), 2);
    c.bench_function("build 64 status entries", |b| {
        b.iter(|| black_box(build_all()))
    });
    c.bench_function("build 64 status entries + annotation text", |b| {
        b.iter(|| status::to_annotation(&black_box(build_all())))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
