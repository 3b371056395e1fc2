//! Generates the kubelet PodResources v1 gRPC code from plumb's vendored proto, with protox (a
//! pure-Rust protoc: `protoc` is not installed on the build machines) and tonic-prost-build.
//!
//! Two outputs in OUT_DIR:
//! - `server/v1.rs`: messages, server and client, for the stand-in kubelet (`pod_resources`).
//! - `client/v1.rs`: messages and client only, generated exactly as plumb's checked-in
//!   `crates/cluster/src/pod_resources/v1.rs` must be. A test compares the two (and rewrites
//!   plumb's file when asked), so plumb builds without protox or any code generator.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest.join("../cluster/proto");
    let proto = proto_dir.join("podresources/v1/api.proto");
    println!("cargo:rerun-if-changed={}", proto.display());

    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    generate(&proto, &proto_dir, &out.join("server"), true)?;
    generate(&proto, &proto_dir, &out.join("client"), false)?;
    Ok(())
}

/// Generates the messages and client (and the server when `server`) into `out/v1.rs`.
fn generate(
    proto: &Path,
    include: &Path,
    out: &Path,
    server: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(out)?;
    let fds = protox::compile([proto], [include])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(server)
        .build_transport(false)
        .out_dir(out)
        .compile_fds(fds)?;
    Ok(())
}
