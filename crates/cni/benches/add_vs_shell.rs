//! End-to-end benchmark (not a test): one ADD of the bridge + host-local → tuning → portmap list
//! through `cni::runtime` against the same three reference plugins run from a shell script
//! that chains `prevResult` with shell string operations only (no extra processes), interleaved
//! in one run on the same machine. Prints the medians and their ratio and writes them as JSON to
//! `target/bench-add-vs-shell.json`. DEL runs after each ADD, untimed.
//!
//! Needs root and Debian's containernetworking-plugins; skips (exit 0) otherwise.
//! Run: `cargo bench -p cni --bench add_vs_shell` (ITERATIONS=N to change the 30 iterations).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cni::NetworkConfigList;
use cni::cache::ResultCache;
use cni::runtime::{CniConfig, RuntimeConf};
use serde_json::json;

const PLUGINS: &str = "/usr/lib/cni";

const SHELL: &str = r#"#!/bin/bash
# Runs the three plugins as a runtime would, for $CNI_COMMAND (ADD chains prevResult; DEL in reverse).
set -euo pipefail
d=$1
export CNI_CONTAINERID=$2 CNI_NETNS=$3 CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni CNI_ARGS=
if [ "$CNI_COMMAND" = ADD ]; then
  r=$(/usr/lib/cni/bridge <"$d/p0.json")
  c=$(<"$d/p1.json"); r=$(printf '%s,"prevResult":%s}' "${c%\}}" "$r" | /usr/lib/cni/tuning)
  c=$(<"$d/p2.json"); printf '%s,"prevResult":%s}' "${c%\}}" "$r" | /usr/lib/cni/portmap >/dev/null
else
  /usr/lib/cni/portmap <"$d/p2.json" >/dev/null
  /usr/lib/cni/tuning <"$d/p1.json" >/dev/null
  /usr/lib/cni/bridge <"$d/p0.json" >/dev/null
fi
"#;

fn sh(args: &[&str]) {
    let ok = Command::new(args[0])
        .args(&args[1..])
        .status()
        .map(|s| s.success());
    assert!(matches!(ok, Ok(true)), "{args:?} failed");
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root || !Path::new(PLUGINS).join("bridge").exists() {
        println!("add_vs_shell: SKIP (needs root and {PLUGINS}/bridge)");
        return;
    }
    let iterations: usize = std::env::var("ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let dir = tempfile::tempdir().unwrap();
    let ns = format!("plumbbench{}", std::process::id());
    let bridge = format!("pbb{}", std::process::id() % 100000);
    sh(&["ip", "netns", "add", &ns]);
    let netns = format!("/var/run/netns/{ns}");

    let ipam = dir.path().join("ipam");
    let plugins = [
        json!({"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false,
               "ipam": {"type": "host-local", "dataDir": ipam, "ranges": [[{"subnet": "10.202.0.0/24"}]],
                        "routes": [{"dst": "0.0.0.0/0"}]}}),
        json!({"type": "tuning", "capabilities": {"mac": true}}),
        json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": false}),
    ];
    let list_json = json!({"cniVersion": "1.0.0", "name": "benchnet", "plugins": plugins});
    let list = NetworkConfigList::from_bytes(list_json.to_string().as_bytes()).unwrap();
    // The shell gets the same requests the crate derives (name, cniVersion injected; no
    // capability args, so no runtimeConfig).
    for (i, p) in plugins.iter().enumerate() {
        let mut p = p.clone();
        p["name"] = json!("benchnet");
        p["cniVersion"] = json!("1.0.0");
        p.as_object_mut().unwrap().remove("capabilities");
        std::fs::write(dir.path().join(format!("p{i}.json")), p.to_string()).unwrap();
    }
    let script = dir.path().join("run.sh");
    std::fs::write(&script, SHELL).unwrap();
    let cni = CniConfig::new(
        vec![PathBuf::from(PLUGINS)],
        ResultCache::new(dir.path().join("cache")),
    );
    let rt = RuntimeConf {
        container_id: "bench-crate".into(),
        netns: netns.clone(),
        ifname: "eth0".into(),
        ..Default::default()
    };
    let run_shell = |cmd: &str| {
        let st = Command::new("bash")
            .arg(&script)
            .arg(dir.path())
            .arg("bench-shell")
            .arg(&netns)
            .env("CNI_COMMAND", cmd)
            .status()
            .unwrap();
        assert!(st.success(), "shell {cmd} failed");
    };

    // Warm up both paths (page cache, iptables modules).
    for _ in 0..3 {
        cni.add_network_list(&list, &rt).unwrap();
        cni.del_network_list(&list, &rt).unwrap();
        run_shell("ADD");
        run_shell("DEL");
    }
    let (mut crate_t, mut shell_t) = (Vec::new(), Vec::new());
    for _ in 0..iterations {
        let t = Instant::now();
        cni.add_network_list(&list, &rt).unwrap();
        crate_t.push(t.elapsed());
        cni.del_network_list(&list, &rt).unwrap();

        let t = Instant::now();
        run_shell("ADD");
        shell_t.push(t.elapsed());
        run_shell("DEL");
    }
    sh(&["ip", "netns", "del", &ns]);
    let _ = Command::new("ip").args(["link", "del", &bridge]).status();

    let (c, s) = (median(&mut crate_t), median(&mut shell_t));
    let ratio = c.as_secs_f64() / s.as_secs_f64();
    println!(
        "add_vs_shell: {iterations} interleaved iterations of one ADD (bridge+host-local, tuning, portmap)"
    );
    println!("  cni crate   median {:>8.2} ms", c.as_secs_f64() * 1e3);
    println!("  shell script median {:>8.2} ms", s.as_secs_f64() * 1e3);
    println!("  ratio crate/shell  {ratio:.3}");
    let out = json!({"iterations": iterations, "crate_median_ms": c.as_secs_f64() * 1e3,
                     "shell_median_ms": s.as_secs_f64() * 1e3, "ratio": ratio});
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| format!("{}/../../target", env!("CARGO_MANIFEST_DIR")));
    let path = Path::new(&target).join("bench-add-vs-shell.json");
    if std::fs::write(&path, out.to_string()).is_ok() {
        println!("  written to {}", path.display());
    }
}
