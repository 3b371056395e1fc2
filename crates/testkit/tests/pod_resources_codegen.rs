//! plumb checks in its generated PodResources client (`crates/cluster/src/pod_resources/v1.rs`)
//! so that its build needs no code generator. This test keeps that file honest: testkit's build
//! script generates the client from the same proto with the same settings, and the two must be
//! the same text. With `PLUMB_REGENERATE=1` it writes the file instead.

use std::path::{Path, PathBuf};

/// What testkit's build.rs generated (client only, as plumb needs it).
const GENERATED: &str = include_str!(concat!(env!("OUT_DIR"), "/client/v1.rs"));

const REGENERATE: &str = "PLUMB_REGENERATE=1 cargo test -p testkit --test pod_resources_codegen";

/// The header written above the generated code. Every line is an inner doc comment, so the
/// body is what follows the last `//!` line and one empty line.
fn header() -> String {
    format!(
        "//! Generated, do not edit: the kubelet PodResources v1 messages and gRPC client (no server),
//! from `crates/cluster/proto/podresources/v1/api.proto` by tonic-prost-build over protox, in
//! testkit's build script (`crates/testkit/build.rs`).
//!
//! After changing the proto or the generator's version, regenerate with
//! `{REGENERATE}`.
//! Without the variable, that test fails while this file differs from the generator's output.

"
    )
}

fn checked_in_path() -> PathBuf {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives in crates/");
    crates.join("cluster/src/pod_resources/v1.rs")
}

/// The file without its header.
fn body(file: &str) -> &str {
    let mut rest = file;
    while rest.starts_with("//!") {
        rest = rest.split_once('\n').map_or("", |(_, tail)| tail);
    }
    rest.strip_prefix('\n').unwrap_or(rest)
}

#[test]
fn plumbs_checked_in_client_is_what_the_generator_writes() {
    let path = checked_in_path();
    if std::env::var_os("PLUMB_REGENERATE").is_some_and(|v| v == "1") {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        }
        std::fs::write(&path, header() + GENERATED)
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        eprintln!("wrote {}", path.display());
    }
    let file = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {}: {e}\nTo create it, run: {REGENERATE}",
            path.display()
        )
    });
    assert!(
        body(&file) == GENERATED,
        "{} is not what the generator writes from crates/cluster/proto/podresources/v1/api.proto \
         (the proto, or the tonic-prost-build/protox version, changed without regenerating, or \
         the file was edited by hand).\nTo regenerate it, run: {REGENERATE}\nthen review and \
         commit the change.",
        path.display()
    );
}

#[test]
fn the_header_is_not_part_of_the_body() {
    let file = header() + "// code\n";
    assert_eq!(body(&file), "// code\n");
    assert_eq!(body("// code\n"), "// code\n");
}
