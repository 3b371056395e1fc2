//! What the benches that run `plumb daemon` share: the daemon's process figures, its
//! `/caches` answer, CNI calls through the plugin binary (the shim), and the files a sandbox
//! left behind. Each bench uses some of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::netns::Netns;

pub const PLUGINS: &str = "/usr/lib/cni";
pub const PLUMB: &str = env!("CARGO_BIN_EXE_plumb");

/// Whether the bench can run: root, and Debian's plugins in [`PLUGINS`].
pub fn can_run() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    root && Path::new(PLUGINS).join("bridge").exists()
}

/// The environment variable `key` as a number, else `default`.
pub fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// VmRSS, VmHWM (KiB) and Threads of process `pid`.
pub fn status(pid: u32) -> Value {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    json!({"VmRSS": field("VmRSS:"), "VmHWM": field("VmHWM:"), "Threads": field("Threads:")})
}

/// A `plumb daemon` the bench started, killed when dropped: also when the bench panics, so
/// that no daemon outlives it holding the bench's output open.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `plumb daemon` of `binary` serving `socket` for node `node`, watching with `kubeconfig`,
/// with `more` arguments; its log discarded. A clean environment, as a service manager gives
/// it: the delegates the daemon runs inherit it, and cargo's LD_LIBRARY_PATH (seven
/// directories) made every dynamically linked delegate search them all for its libraries,
/// 0.4 ms more per delegate.
pub fn daemon(
    binary: &str,
    socket: &Path,
    kubeconfig: &Path,
    node: &str,
    more: &[String],
) -> Daemon {
    let child = Command::new(binary)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg("daemon")
        .arg("--socket")
        .arg(socket)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-name", node])
        .args(more)
        .stderr(Stdio::null())
        .spawn()
        .expect("plumb daemon starts");
    Daemon(child)
}

/// The daemon's `GET /caches`, once it answers.
pub fn caches(socket: &Path) -> Option<Value> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.write_all(b"GET /caches HTTP/1.1\r\nHost: plumb\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    serde_json::from_str(answer.split_once("\r\n\r\n")?.1).ok()
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The value at quantile `q` of `sorted`, in milliseconds.
pub fn quantile(sorted: &[Duration], q: f64) -> f64 {
    ms(sorted[((sorted.len() - 1) as f64 * q) as usize])
}

/// The files under `dir` that a sandbox left: not host-local's own (`lock`,
/// `last_reserved_ip.*`), which stay.
pub fn leftovers(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut left = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            left.extend(leftovers(&path));
        } else if name != "lock" && !name.starts_with("last_reserved_ip") {
            left.push(path.display().to_string());
        }
    }
    left
}

/// One CNI call through the plugin binary (the shim), retried while it is answered code 11 (as
/// a runtime retries it) and asserted to succeed: how long it took, retries included, and how
/// many times it was refused.
pub fn call(command: &str, cid: &str, ns: &Netns, args: &str, config: &str) -> (Duration, usize) {
    let started = Instant::now();
    let mut refused = 0;
    loop {
        let out = call_once(command, cid, ns, args, config);
        if out.status.success() {
            return (started.elapsed(), refused);
        }
        let e: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert!(
            e["code"] == 11,
            "{command} {cid}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        refused += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn call_once(
    command: &str,
    cid: &str,
    ns: &Netns,
    args: &str,
    config: &str,
) -> std::process::Output {
    let netns = ns.path().display().to_string();
    let env = [
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", cid),
        ("CNI_NETNS", &netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", PLUGINS),
        ("CNI_ARGS", args),
    ];
    output(PLUMB, &env, config.as_bytes())
}

/// `bin` run with only `env` in its environment and `stdin` on its standard input, as a
/// runtime runs a plugin: what it printed and how it exited.
pub fn output(bin: &str, env: &[(&str, &str)], stdin: &[u8]) -> std::process::Output {
    let mut child = Command::new(bin)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}
