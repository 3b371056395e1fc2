//! End-to-end benchmark (not a test): ADD+DEL of a pod on three networks (default bridge +
//! host-local, a second bridge, a macvlan) through the `plumb` binary, with the API stand-in
//! serving the pod and NADs, against running the same three delegates directly (as a runtime
//! would without plumb), interleaved in one run on the same machine. Twice: with one netns for
//! the whole run, where the kernel has no deleted netns to clean up meanwhile (the headline:
//! plumb's own cost); then each pod in a netns of its own, made just before its ADD and deleted
//! after its DEL, as a runtime gives one to every sandbox (see `measure`). Also: `CNI_COMMAND=VERSION` of plumb
//! against the reference bridge plugin's, plumb's peak RSS during one ADD (from its own debug
//! log), and the size of `target/release/plumb` without its symbols.
//!
//! Prints the medians and ratios and writes them as JSON to `target/bench-e2e.json`.
//! Needs root and Debian's containernetworking-plugins; skips (exit 0) otherwise.
//! Run: `cargo bench -p plumb --bench e2e_add_del` (ITERATIONS=N per run, default 300; PAUSE_MS,
//! an untimed pause before each ADD and each DEL, default 0; API_LATENCY_US, added to every
//! answer of the API stand-in, default 0; API_HTTP1=1, the stand-in without HTTP/2; DAEMON=1,
//! through `plumb daemon` with its watch caches, thin mode and the same calls posted straight to
//! the daemon's socket (the shim's own cost is the difference) measured in the same run; PLUMB, the
//! path of another plumb build to measure in its place; CONFIG=readme, plumb configured as the
//! README recommends: the default network a file named by path and the pod's annotations given
//! by the runtime, instead of the default network a NAD and the pod read from the API). A DEL's
//! time is mostly the kernel's (`rcu_barrier` when a link goes: about 10 ms per delegate) and
//! varies a lot: a quarter of the iterations' ratios lie below 0.95 and a quarter above 1.15.
//! Hence 300 iterations (about a minute per run), and a bootstrap interval printed with each
//! median so that a reader sees how far it can be trusted.
//!
//! For profiling, `HOLD=SECONDS` sets everything up, writes `target/bench-e2e-hold.sh` (N=20
//! ADD+DEL pairs of the pod through plumb, or through `$PLUMB` when set), and keeps the API
//! stand-in serving for that long instead of measuring: e.g. `perf record -g -- sh
//! target/bench-e2e-hold.sh` in another shell.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::kube_api::{Fault, FaultKind, KubeApi, KubeApiOptions, KubeconfigUser, Resource};
use testkit::netns::{Link, Netns, unique_name};

use common::{PLUGINS, PLUMB, ms};

/// The node the bench's pod is bound to, whose pods the daemon keeps.
const NODE: &str = "bench-node";

/// The plumb binary to measure: `$PLUMB` when set (another build, to compare in the same
/// conditions), else the one cargo built with the bench.
fn plumb_binary() -> String {
    std::env::var("PLUMB").unwrap_or_else(|_| PLUMB.to_string())
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A 95% interval of the median of `v` by the percentile bootstrap: 2,000 resamples drawn
/// with a fixed-seed xorshift generator, so that the same samples give the same interval.
fn median_interval(v: &[f64]) -> (f64, f64) {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut medians: Vec<f64> = (0..2000)
        .map(|_| {
            let mut r: Vec<f64> = (0..v.len())
                .map(|_| v[(next() % v.len() as u64) as usize])
                .collect();
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    (medians[50], medians[1949])
}

/// [`common::output`], asserted to succeed.
fn run(bin: &str, env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let out = common::output(bin, env, stdin);
    assert!(
        out.status.success(),
        "{bin} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The three delegate configurations, as plumb gives them (name and cniVersion set).
struct Delegates {
    configs: Vec<(String, Value)>, // (ifname, config)
    /// `BASELINE=runtime`: run them as a runtime's libcni does, not bare: each ADD's result
    /// written to a result cache in this directory (`cacheAdd`: the file written in place, no
    /// fsync), and each DEL given it as `prevResult`, then the file removed (`cacheDel`). What
    /// plumb does for its delegates, and what a runtime does for every plugin it runs.
    cache: Option<PathBuf>,
}

impl Delegates {
    /// ADD of each in order, then, after `pause`, DEL in reverse, as a runtime would run them
    /// one by one. Returns how long the ADDs and the DELs took.
    fn add_del(&self, cid: &str, netns: &str, pause: Duration) -> (Duration, Duration) {
        let t = Instant::now();
        for (ifname, conf) in &self.configs {
            self.call("ADD", cid, netns, ifname, conf);
        }
        let add = t.elapsed();
        std::thread::sleep(pause);
        let t = Instant::now();
        for (ifname, conf) in self.configs.iter().rev() {
            self.call("DEL", cid, netns, ifname, conf);
        }
        (add, t.elapsed())
    }

    fn call(&self, command: &str, cid: &str, netns: &str, ifname: &str, conf: &Value) {
        let bin = format!("{PLUGINS}/{}", conf["type"].as_str().unwrap());
        let network = conf["name"].as_str().unwrap();
        // libcni's file name: <cacheDir>/results/<network>-<containerID>-<ifname>.
        let entry = self
            .cache
            .as_ref()
            .map(|dir| dir.join(format!("results/{network}-{cid}-{ifname}")));
        let mut stdin = conf.clone();
        if let (Some(entry), "DEL") = (&entry, command) {
            let cached: Value = serde_json::from_slice(&std::fs::read(entry).unwrap()).unwrap();
            stdin["prevResult"] = cached["result"].clone();
        }
        let out = run(
            &bin,
            &[
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", cid),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", ifname),
                ("CNI_PATH", PLUGINS),
            ],
            stdin.to_string().as_bytes(),
        );
        match (&entry, command) {
            (Some(entry), "ADD") => {
                let result: Value = serde_json::from_slice(&out.stdout).unwrap();
                let cached = json!({"kind": "cniCacheV1", "containerId": cid,
                    "config": conf.to_string(), "ifName": ifname, "networkName": network,
                    "netns": netns, "result": result});
                std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
                std::fs::write(entry, serde_json::to_vec(&cached).unwrap()).unwrap();
            }
            (Some(entry), "DEL") => std::fs::remove_file(entry).unwrap(),
            _ => {}
        }
    }
}

fn main() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root || !Path::new(PLUGINS).join("bridge").exists() {
        println!("e2e_add_del: SKIP (needs root and {PLUGINS}/bridge)");
        return;
    }
    let iterations: usize = std::env::var("ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    // PAUSE_MS lets the pod live a moment between its ADD and its DEL, and each run start
    // after the machine idled, as on a real node. Untimed. It moves the result: on this VM,
    // runs with 50 ms came out about 4% higher than back-to-back runs, plumb's DEL losing most
    // (more process wake-ups after idle?); both are worth a look when judging a change.
    let pause = Duration::from_millis(
        std::env::var("PAUSE_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    );

    let dir = tempfile::tempdir().unwrap();
    let ipam = dir.path().join("ipam");
    let (b0, b1, parent) = (unique_name("bc"), unique_name("ba"), unique_name("bp"));
    let _links = [Link::bridge(&parent)];
    let cleanup = [Link::adopt(&b0), Link::adopt(&b1)];
    let bridge = |name: &str, br: &str, subnet: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": br,
               "isGateway": true,
               "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam}})
    };
    let default_net = bridge("default-net", &b0, "10.250.1.0/24");
    let net_a = bridge("net-a", &b1, "10.250.2.0/24");
    let net_b = json!({"cniVersion": "1.0.0", "name": "net-b", "type": "macvlan",
        "master": parent, "mode": "bridge",
        "ipam": {"type": "host-local", "subnet": "10.250.3.0/24", "dataDir": ipam}});

    // API_HTTP1=1: the stand-in offers HTTP/1.1 only, so plumb asks for the NADs one after the
    // other (as behind a proxy without HTTP/2); by default it offers h2, as the API server does.
    let http1_only = std::env::var("API_HTTP1").is_ok_and(|v| v == "1");
    let api = KubeApi::start(KubeApiOptions {
        http2: !http1_only,
        ..KubeApiOptions::default()
    });
    // API_LATENCY_US: the API stand-in answers every request that much later, as an API server
    // across the network would (loopback answers in about 0.1 ms; a real one takes 0.5-2 ms).
    let latency = Duration::from_micros(
        std::env::var("API_LATENCY_US")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    );
    if !latency.is_zero() {
        api.add_fault(Fault::new(FaultKind::Latency(latency)));
    }
    for (ns, conf) in [
        ("kube-system", &default_net),
        ("default", &net_a),
        ("other-ns", &net_b),
    ] {
        api.put(
            Resource::NetworkAttachmentDefinitions,
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"namespace": ns, "name": conf["name"]},
                   "spec": {"config": conf.to_string()}}),
        );
    }
    api.register_node(NODE, "bench-node-uid");
    let pod = api.put(
        Resource::Pods,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "default", "name": "bench",
                            "annotations": {"k8s.v1.cni.cncf.io/networks": "net-a,other-ns/net-b@mv1"}},
               "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]}}),
    );
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
    // DAEMON=1: `plumb daemon` serves the calls, which the plugin (the shim) forwards to it,
    // its watch caches holding the pod and the NADs; thin mode is measured in the same run.
    let daemon = std::env::var("DAEMON")
        .is_ok_and(|v| v == "1")
        .then(|| Daemon::start(&dir.path().join("plumb.sock"), &kubeconfig));
    // By default the default network is a NAD and plumb reads the pod from the API: the
    // headline, as measured since the bench began. CONFIG=readme: the configuration the README
    // recommends, the default network a file (`clusterNetwork` a path, as in Multus's
    // deployments) and the pod's annotations given by the runtime (containerd and CRI-O do for
    // a plugin that declares the capability), so that plumb needs no API answer before the
    // default network: no pod GET, and nothing to wait for but the other NADs.
    let nad_config = !std::env::var("CONFIG").is_ok_and(|v| v == "readme");
    let default_file = dir.path().join("net.d/10-default-net.conf");
    std::fs::create_dir_all(default_file.parent().unwrap()).unwrap();
    std::fs::write(&default_file, default_net.to_string()).unwrap();
    let config = |level: &str| {
        let mut c = json!({"cniVersion": "1.0.0", "name": "plumb", "type": "plumb",
               "clusterNetwork": default_file, "kubeconfig": kubeconfig,
               "capabilities": {"io.kubernetes.cri.pod-annotations": true},
               "runtimeConfig": {"io.kubernetes.cri.pod-annotations":
                   {"k8s.v1.cni.cncf.io/networks": "net-a,other-ns/net-b@mv1"}},
               "binDir": PLUGINS, "cniDir": dir.path().join("cni"),
               "plumbStateDir": dir.path().join("state"), "logLevel": level});
        if nad_config {
            c["clusterNetwork"] = json!("default-net");
            let o = c.as_object_mut().unwrap();
            o.remove("capabilities");
            o.remove("runtimeConfig");
        }
        c.to_string()
    };
    let through_daemon = |config: &str| {
        let mut c: Value = serde_json::from_str(config).unwrap();
        if let Some(d) = &daemon {
            c["plumbDaemonSocket"] = json!(d.socket);
        }
        c.to_string()
    };
    let thin = config("error");
    let quiet = through_daemon(&thin);
    let plumb_bin = plumb_binary();
    let args =
        format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=bench;K8S_POD_UID={uid}");
    let plumb = |command: &str, cid: &str, netns: &str, conf: &str| {
        run(
            &plumb_bin,
            &[
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", cid),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", PLUGINS),
                ("CNI_ARGS", &args),
            ],
            conf.as_bytes(),
        )
    };
    let runtime_baseline = std::env::var("BASELINE").is_ok_and(|v| v == "runtime");
    let direct = Delegates {
        configs: vec![
            ("eth0".into(), default_net.clone()),
            ("net1".into(), net_a.clone()),
            ("mv1".into(), net_b.clone()),
        ],
        cache: runtime_baseline.then(|| dir.path().join("runtime-cache")),
    };

    if let Some(secs) = std::env::var("HOLD").ok().and_then(|s| s.parse().ok()) {
        hold(secs, &plumb_bin, &args, &quiet);
        return;
    }
    // Warm up both paths (page cache, first-run costs), untimed.
    let warm = Netns::new();
    let warm_path = warm.path().display().to_string();
    plumb("ADD", "warm", &warm_path, &quiet);
    plumb("DEL", "warm", &warm_path, &quiet);
    let _ = direct.add_del("warm-direct", &warm_path, Duration::ZERO);

    // One netns for the whole run (the headline), which leaves the kernel no netns to clean up
    // while the calls run; then each pod in a netns of its own, as a runtime gives one to every
    // sandbox. See `measure` for why the first is the one to judge plumb by.
    let add_del = |conf: &'static str| -> Run<'_> {
        let conf = if conf == "thin" { &thin } else { &quiet };
        Box::new(move |cid: &str, netns: &str, pause: Duration| {
            let t = Instant::now();
            plumb("ADD", cid, netns, conf);
            let add = t.elapsed();
            std::thread::sleep(pause);
            let t = Instant::now();
            plumb("DEL", cid, netns, conf);
            (add, t.elapsed())
        })
    };
    let mut arms: Vec<Arm> = vec![
        Arm {
            name: "direct",
            run: Box::new(|cid: &str, netns: &str, pause: Duration| {
                direct.add_del(cid, netns, pause)
            }),
        },
        Arm {
            name: if daemon.is_some() { "daemon" } else { "thin" },
            run: add_del("quiet"),
        },
    ];
    if let Some(d) = &daemon {
        // Thin mode in the same run, and the daemon's own time for the call: the call posted to
        // its socket by the bench itself, as the shim would, but with no process started.
        arms.push(Arm {
            name: "thin",
            run: add_del("thin"),
        });
        let posted = |command: &str, cid: &str, netns: &str| {
            d.post(
                &[
                    ("CNI_COMMAND", command),
                    ("CNI_CONTAINERID", cid),
                    ("CNI_NETNS", netns),
                    ("CNI_IFNAME", "eth0"),
                    ("CNI_PATH", PLUGINS),
                    ("CNI_ARGS", &args),
                ],
                quiet.as_bytes(),
            )
        };
        arms.push(Arm {
            name: "daemon without the shim",
            run: Box::new(move |cid: &str, netns: &str, pause: Duration| {
                let t = Instant::now();
                posted("ADD", cid, netns);
                let add = t.elapsed();
                std::thread::sleep(pause);
                let t = Instant::now();
                posted("DEL", cid, netns);
                (add, t.elapsed())
            }),
        });
    }
    let shared_ns = Netns::new();
    let shared = measure(iterations, pause, Some(&shared_ns), &arms);
    drop(shared_ns);
    let per_pod = measure(iterations, pause, None, &arms[..2]);

    // VERSION: plumb's start-up against a Go plugin's.
    let version = |bin: &str| {
        let mut v: Vec<Duration> = (0..100)
            .map(|_| {
                let t = Instant::now();
                run(
                    bin,
                    &[("CNI_COMMAND", "VERSION")],
                    b"{\"cniVersion\":\"1.0.0\"}",
                );
                t.elapsed()
            })
            .collect();
        median(&mut v)
    };
    let (vp, vb) = (version(&plumb_bin), version(&format!("{PLUGINS}/bridge")));

    // Where an ADD's time goes, as plumb's debug log splits it (median of each part over
    // several ADDs), and plumb's peak RSS during an ADD (the largest seen).
    let ns = Netns::new();
    let netns = ns.path().display().to_string();
    let mut parts: Vec<(String, Vec<f64>)> = Vec::new();
    let mut rss_kib: u64 = 0;
    for i in 0..iterations.min(15) {
        let cid = format!("bench-split{i}");
        let out = plumb("ADD", &cid, &netns, &config("debug"));
        plumb("DEL", &cid, &netns, &quiet);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut line: Vec<(String, f64)> = stderr
            .lines()
            .find_map(|l| l.split("ADD timings: ").nth(1))
            .unwrap_or_default()
            .split(", ")
            .filter_map(|part| {
                let (name, rest) = part.rsplit_once(' ')?.0.rsplit_once(' ')?;
                Some((name.to_string(), rest.parse().ok()?))
            })
            .collect();
        if let Some(client) = stderr
            .lines()
            .find_map(|l| l.split("API client from the kubeconfig in ").nth(1))
            .and_then(|s| s.trim_end_matches(" ms").parse().ok())
        {
            line.push(("of which the API client".into(), client));
        }
        for (name, v) in line {
            match parts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, vs)) => vs.push(v),
                None => parts.push((name, vec![v])),
            }
        }
        rss_kib = rss_kib.max(
            stderr
                .lines()
                .find_map(|l| l.split("peak RSS ").nth(1))
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0),
        );
    }
    let timings: Vec<String> = parts
        .iter_mut()
        .map(|(name, vs)| {
            vs.sort_by(f64::total_cmp);
            format!("{name} {:.1} ms", vs[vs.len() / 2])
        })
        .collect();
    let timings = if timings.is_empty() {
        "(not logged)".to_string()
    } else {
        timings.join(", ")
    };

    let release: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/plumb");
    let size = stripped_size(&release, dir.path());

    let mode = if daemon.is_some() {
        "plumb daemon"
    } else {
        "thin mode"
    };
    let baseline = if runtime_baseline {
        "run as a runtime runs them (libcni's result cache, prevResult on DEL)"
    } else {
        "run bare"
    };
    let configuration = if nad_config {
        "the default network a NAD, the pod from the API"
    } else {
        "the default network a file, the pod's annotations from the runtime (CONFIG=readme)"
    };
    println!(
        "e2e_add_del: {iterations} interleaved iterations of ADD+DEL of a pod on 3 networks \
         through {mode} of {plumb_bin}, against the delegates {baseline} ({} ms untimed before \
         each ADD and each DEL; API latency {} ms); plumb's configuration: {configuration}",
        ms(pause),
        ms(latency)
    );
    shared.print("one netns for the whole run: plumb's own cost (the headline)");
    if daemon.is_some() {
        let (add, del) = shared.difference(1, 2);
        println!(
            "    the daemon against thin mode, the iterations' median difference: ADD {add:+.2} ms, DEL {del:+.2} ms"
        );
        let (add, del) = shared.difference(1, 3);
        println!(
            "    the shim's own cost (through the shim minus the same call posted to the \
             daemon's socket): ADD {add:+.2} ms, DEL {del:+.2} ms"
        );
    }
    per_pod.print("each pod in a netns of its own, as a runtime runs pods back to back");
    println!(
        "  VERSION plumb {:.2} ms, bridge {:.2} ms, ratio {:.3}",
        ms(vp),
        ms(vb),
        vp.as_secs_f64() / vb.as_secs_f64()
    );
    // With the daemon the shim's own peak is what the runtime starts per call; the daemon's is
    // its peak over the whole run.
    let daemon_rss_kib = daemon.as_ref().and_then(Daemon::peak_rss_kib);
    println!("  peak RSS of plumb during one ADD: {rss_kib} KiB");
    if let Some(kib) = daemon_rss_kib {
        println!("  peak RSS of plumb daemon over the run: {kib} KiB");
    }
    println!("  an ADD in thin mode as plumb's debug log splits it (medians): {timings}");
    match size {
        Some(s) => println!("  target/release/plumb without its symbols: {s} bytes"),
        None => println!("  target/release/plumb: not built, or no `strip` to measure it"),
    }
    let report = json!({
        "iterations": iterations,
        "mode": mode,
        "baseline": if runtime_baseline { "runtime" } else { "bare" },
        "config": if nad_config { "nad" } else { "readme" },
        "plumb": plumb_bin,
        "shared_netns": shared.json(),
        "per_pod_netns": per_pod.json(),
        "median_paired_ratio": shared.paired_ratio(1),
        "median_paired_ratio_interval95": shared.interval(1),
        "shim_cost_ms": daemon.is_some().then(|| shared.difference(1, 3)),
        "pause_ms": ms(pause),
        "api_latency_ms": ms(latency),
        "version_plumb_median_ms": ms(vp),
        "version_bridge_median_ms": ms(vb),
        "version_ratio": vp.as_secs_f64() / vb.as_secs_f64(),
        "plumb_add_peak_rss_kib": rss_kib,
        "plumb_daemon_peak_rss_kib": daemon_rss_kib,
        "plumb_add_split_medians": timings,
        "release_binary_bytes": size,
    });
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-e2e.json");
    // The workspace's target/ is not there when CARGO_TARGET_DIR points elsewhere.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap()).unwrap();
    println!("  written to {}", path.display());
    drop(cleanup);
}

/// `plumb daemon` on `socket`, stopped when dropped.
struct Daemon {
    process: common::Daemon,
    socket: PathBuf,
}

impl Daemon {
    /// Started with its watch caches (from `kubeconfig`, for [`NODE`]), returned once they
    /// hold the bench's pod.
    fn start(socket: &Path, kubeconfig: &Path) -> Daemon {
        let process = common::daemon(&plumb_binary(), socket, kubeconfig, NODE, &[]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(Instant::now() < deadline, "plumb daemon did not listen");
            std::thread::sleep(Duration::from_millis(10));
        }
        let daemon = Daemon {
            process,
            socket: socket.to_path_buf(),
        };
        loop {
            let (_, body) = daemon.request("GET", "/caches", &[]);
            let r: Value = serde_json::from_slice(&body).unwrap();
            if r["caches"]["pods"]["objects"] == 1 && r["caches"]["nads"]["synced"] == true {
                break daemon;
            }
            assert!(Instant::now() < deadline, "the daemon's caches: {r}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// One HTTP/1.1 request on a connection of its own: the answer's headers and body.
    fn request(&self, method: &str, path: &str, body: &[u8]) -> (String, Vec<u8>) {
        use std::io::Read;
        let mut s = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: plumb\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        let at = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&answer[..at]).into_owned();
        (head, answer[at + 4..].to_vec())
    }

    /// A CNI call posted to the daemon as the shim forwards it (`POST /cni`: the `CNI_*`
    /// variables as a line of JSON, then stdin), asserted to succeed.
    fn post(&self, env: &[(&str, &str)], stdin: &[u8]) {
        let vars: serde_json::Map<String, Value> =
            env.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let mut body = serde_json::to_vec(&vars).unwrap();
        body.push(b'\n');
        body.extend_from_slice(stdin);
        let (head, out) = self.request("POST", "/cni", &body);
        assert!(
            head.to_ascii_lowercase().contains("plumb-exit-code: 0"),
            "{head}\n{}",
            String::from_utf8_lossy(&out)
        );
    }

    /// Its peak resident set (VmHWM).
    fn peak_rss_kib(&self) -> Option<u64> {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.process.0.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

/// The size of `binary` without its symbols, as the release profile ships it (`strip =
/// "symbols"`): the bench profile, which builds the same path, keeps them for `perf`. Measured
/// on a stripped copy in `scratch`; `None` when the binary or `strip` is missing.
fn stripped_size(binary: &Path, scratch: &Path) -> Option<u64> {
    let copy = scratch.join("plumb-stripped");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&copy)
        .arg(binary)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    stripped.then(|| std::fs::metadata(&copy).ok().map(|m| m.len()))?
}

/// One way of running the pod's ADD and DEL: the delegates directly, or through plumb in one
/// of its modes. Its ADD's and DEL's times.
struct Arm<'a> {
    name: &'static str,
    run: Run<'a>,
}

/// ADD then, after the pause, DEL of sandbox `cid` in `netns`: their times.
type Run<'a> = Box<dyn Fn(&str, &str, Duration) -> (Duration, Duration) + 'a>;

/// The times of one interleaved run: each iteration runs the pod every way, in an order drawn
/// anew each iteration. The first way is the baseline (the delegates directly).
struct Samples {
    names: Vec<&'static str>,
    /// Each way's ADD and DEL of each iteration.
    add: Vec<Vec<Duration>>,
    del: Vec<Vec<Duration>>,
}

/// `iterations` interleaved ADD+DEL of the pod in each of `arms`. With `shared`, every run uses
/// that netns; without, each run gets a netns of its own, made just before its ADD and deleted
/// just after its DEL (untimed), as a runtime makes one per sandbox.
///
/// The kernel cleans a deleted netns up asynchronously, and a DEL that comes within some tens of
/// ms waits behind that clean-up (`rcu_barrier`), 3–7 ms. When both runs of an iteration shared
/// one netns deleted after both, the first run of each iteration paid for the previous deletion
/// and the second did not: the ratios fell in two clusters by order (1.14 with plumb first, 1.03
/// with plumb second, over 1000 iterations). With a netns per run, every run follows a deletion
/// alike, but how much it pays depends on how long its own ADD took: plumb's, about 6 ms longer,
/// leaves the clean-up more time, so its DEL comes out faster than the direct one. That favours
/// plumb, and pods on a node are not deleted in step with each other; so the shared netns, where
/// nothing overlaps, is the measure of plumb's own cost.
fn measure(iterations: usize, pause: Duration, shared: Option<&Netns>, arms: &[Arm]) -> Samples {
    let mut s = Samples {
        names: arms.iter().map(|a| a.name).collect(),
        add: vec![Vec::new(); arms.len()],
        del: vec![Vec::new(); arms.len()],
    };
    let tag = if shared.is_some() { "s" } else { "p" };
    // A run pays for what the kernel still does after the run before it (a DEL's links are
    // freed after an RCU grace period): with two ways, alternating which goes first evens that
    // out; with more, an order that only turned would give each way the same one before it
    // (measured: the shim's DEL 3 ms dearer behind the direct run's). Drawn with a fixed-seed
    // xorshift generator, so that every run of the bench draws the same orders.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..iterations {
        let mut order: Vec<usize> = (0..arms.len()).collect();
        if arms.len() == 2 {
            order.rotate_left(i % 2);
        } else {
            for k in (1..order.len()).rev() {
                order.swap(k, (next() % (k as u64 + 1)) as usize);
            }
        }
        for which in order {
            let own = shared.is_none().then(Netns::new);
            let netns = own
                .as_ref()
                .or(shared)
                .unwrap()
                .path()
                .display()
                .to_string();
            std::thread::sleep(pause);
            let (add, del) = (arms[which].run)(&format!("bench-{tag}{which}-{i}"), &netns, pause);
            s.add[which].push(add);
            s.del[which].push(del);
        }
    }
    s
}

fn total(add: &[Duration], del: &[Duration]) -> Vec<Duration> {
    add.iter().zip(del).map(|(a, d)| *a + *d).collect()
}

impl Samples {
    /// Each iteration's own ratio of way `k` over the baseline, sorted.
    fn ratios(&self, k: usize) -> Vec<f64> {
        let p = total(&self.add[k], &self.del[k]);
        let d = total(&self.add[0], &self.del[0]);
        let mut r: Vec<f64> = (0..p.len())
            .map(|i| p[i].as_secs_f64() / d[i].as_secs_f64())
            .collect();
        r.sort_by(f64::total_cmp);
        r
    }

    /// The median of the iterations' ratios of way `k`: the runs of an iteration share the
    /// machine's load of that moment, so this is the figure the goal is read from.
    fn paired_ratio(&self, k: usize) -> f64 {
        let r = self.ratios(k);
        r[r.len() / 2]
    }

    /// How far the median can be trusted: a 95% bootstrap interval.
    fn interval(&self, k: usize) -> [f64; 2] {
        let (lo, hi) = median_interval(&self.ratios(k));
        [lo, hi]
    }

    /// The median of the iterations' differences of way `a` and way `b`, ADD and DEL, in ms.
    fn difference(&self, a: usize, b: usize) -> (f64, f64) {
        let d = |x: &[Duration], y: &[Duration]| {
            let mut v: Vec<f64> = x.iter().zip(y).map(|(x, y)| ms(*x) - ms(*y)).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        (d(&self.add[a], &self.add[b]), d(&self.del[a], &self.del[b]))
    }

    /// Way `k`'s medians: ADD+DEL, ADD, DEL.
    fn medians(&self, k: usize) -> [f64; 3] {
        let m = |v: &[Duration]| ms(median(&mut v.to_vec()));
        [
            m(&total(&self.add[k], &self.del[k])),
            m(&self.add[k]),
            m(&self.del[k]),
        ]
    }

    fn print(&self, what: &str) {
        println!("  {what}:");
        let [d, da, dd] = self.medians(0);
        println!(
            "    {} median {d:.2} ms (ADD {da:.2} ms, DEL {dd:.2} ms)",
            self.names[0]
        );
        for k in 1..self.names.len() {
            let [p, pa, pd] = self.medians(k);
            let r = self.ratios(k);
            let [lo, hi] = self.interval(k);
            println!(
                "    {}: median {p:.2} ms, median ratio to {} of the iterations {:.3} (95% \
                 interval {lo:.3} to {hi:.3}; the iterations' quartiles {:.3}, {:.3}); ADD \
                 {pa:.2} ms ({:.3}), DEL {pd:.2} ms ({:.3})",
                self.names[k],
                self.names[0],
                self.paired_ratio(k),
                r[r.len() / 4],
                r[r.len() * 3 / 4],
                pa / da,
                pd / dd
            );
        }
    }

    fn json(&self) -> Value {
        let all = |v: &[Duration]| v.iter().map(|d| ms(*d)).collect::<Vec<_>>();
        let mut ways = serde_json::Map::new();
        for (k, name) in self.names.iter().enumerate() {
            let [t, a, d] = self.medians(k);
            let mut way = json!({
                "add_del_median_ms": t,
                "add_median_ms": a,
                "del_median_ms": d,
                "samples_ms": {"add": all(&self.add[k]), "del": all(&self.del[k])},
            });
            if k > 0 {
                let r = self.ratios(k);
                way["median_paired_ratio"] = json!(self.paired_ratio(k));
                way["median_paired_ratio_interval95"] = json!(self.interval(k));
                way["paired_ratio_quartiles"] = json!([r[r.len() / 4], r[r.len() * 3 / 4]]);
            }
            ways.insert(name.to_string(), way);
        }
        Value::Object(ways)
    }
}

/// `HOLD=SECONDS`: a script that runs ADD+DEL of the bench pod through plumb, and the API
/// stand-in (owned by the caller) serving it for `secs` seconds.
fn hold(secs: u64, plumb: &str, args: &str, config: &str) {
    let ns = Netns::new();
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&target).unwrap();
    let conf = target.join("bench-e2e-hold.json");
    std::fs::write(&conf, config).unwrap();
    let env = format!(
        "CNI_CONTAINERID=hold CNI_NETNS={} CNI_IFNAME=eth0 CNI_PATH={PLUGINS} CNI_ARGS='{args}'",
        ns.path().display()
    );
    let script = format!(
        "#!/bin/sh\n# ADD+DEL of the e2e bench pod, N times (default 20), through $PLUMB.\n\
         plumb=${{PLUMB:-{plumb}}}\n\
         for i in $(seq 1 ${{N:-20}}); do\n\
         \x20 {env} CNI_COMMAND=ADD \"$plumb\" <{conf} >/dev/null || exit 1\n\
         \x20 {env} CNI_COMMAND=DEL \"$plumb\" <{conf} >/dev/null || exit 1\n\
         done\n",
        conf = conf.display()
    );
    let path = target.join("bench-e2e-hold.sh");
    std::fs::write(&path, script).unwrap();
    println!(
        "e2e_add_del: holding for {secs} s; run: sh {}",
        path.display()
    );
    std::thread::sleep(Duration::from_secs(secs));
}
