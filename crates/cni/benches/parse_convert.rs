//! Micro-benchmarks of the pure CNI data paths a runtime takes on every ADD: parsing a
//! configuration list, parsing a plugin's result, converting it down to what an older caller
//! asked for, and serialising it back.
//!
//! Run: `cargo bench -p cni --bench parse_convert` (about 25 s).

use std::hint::black_box;
use std::time::Duration;

use cni::version::Version;
use cni::{CniResult, NetworkConfigList};
use criterion::{Criterion, criterion_group, criterion_main};

/// A bridge + host-local → tuning → portmap list (as in tests/fixtures/libcni).
const CONFLIST: &[u8] = include_bytes!("../tests/fixtures/libcni/10-fixture.conflist");
/// A 1.1.0 result with every field set.
const RESULT_1_1_0: &[u8] = include_bytes!("../tests/fixtures/results/full-1.1.0.json");

fn parse_convert(c: &mut Criterion) {
    let mut g = c.benchmark_group("cni");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));

    // Baselines, in the same run: serde_json reading the same bytes as untyped values.
    g.bench_function("baseline_serde_value_conflist", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(CONFLIST)).unwrap())
    });
    g.bench_function("baseline_serde_value_result", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(RESULT_1_1_0)).unwrap())
    });
    g.bench_function("conflist_parse_3_plugins", |b| {
        b.iter(|| NetworkConfigList::from_bytes(black_box(CONFLIST)).unwrap())
    });
    g.bench_function("result_parse_1.1.0", |b| {
        b.iter(|| CniResult::parse(black_box(RESULT_1_1_0), Version::V1_0_0).unwrap())
    });

    let result = CniResult::parse(RESULT_1_1_0, Version::V1_0_0).unwrap();
    g.bench_function("result_convert_1.1.0_to_0.4.0", |b| {
        b.iter(|| black_box(&result).convert_to(Version::V0_4_0).unwrap())
    });
    g.bench_function("result_convert_1.1.0_to_0.2.0", |b| {
        b.iter(|| black_box(&result).convert_to(Version::V0_2_0).unwrap())
    });
    g.bench_function("result_to_json_1.1.0", |b| {
        b.iter(|| black_box(&result).to_json().unwrap())
    });
    g.finish();
}

criterion_group!(benches, parse_convert);
criterion_main!(benches);
