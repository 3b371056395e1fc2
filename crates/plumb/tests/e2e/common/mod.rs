//! What plumb's end-to-end tests share: running the built `plumb` binary exactly as a container
//! runtime does (CNI_* environment, configuration on stdin), and a private node directory per
//! test (records, result cache, host-local data) so tests run in parallel.

pub mod cluster;
pub mod daemon;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

pub const PLUGINS: &str = "/usr/lib/cni";

/// The files in `dir`, by name (none if it is not there).
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// One test's node: a temporary directory for plumb's state, the CNI result cache and the
/// host-local allocations.
pub struct Node {
    pub dir: tempfile::TempDir,
}

impl Node {
    pub fn new() -> Node {
        Node {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn state_dir(&self) -> PathBuf {
        self.path("state")
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.path("cni")
    }

    pub fn ipam_dir(&self) -> PathBuf {
        self.path("ipam")
    }

    /// plumb's configuration with this node's directories, plus `extra` keys.
    pub fn config(&self, extra: Value) -> Value {
        let mut v = json!({
            "cniVersion": "1.0.0", "name": "plumb-net", "type": "plumb",
            "binDir": PLUGINS, "cniDir": self.cache_dir(), "plumbStateDir": self.state_dir(),
            "confDir": self.path("conf"), "logLevel": "debug", "logToStderr": true
        });
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v
    }

    /// A bridge + host-local delegate on `bridge` with `10.203.<subnet>.0/24`.
    pub fn bridge(&self, name: &str, bridge: &str, subnet: u8) -> Value {
        json!({"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": bridge,
               "isGateway": true,
               "ipam": {"type": "host-local", "subnet": format!("10.203.{subnet}.0/24"),
                        "dataDir": self.ipam_dir()}})
    }

    /// Addresses host-local holds for `network`.
    pub fn allocations(&self, network: &str) -> Vec<String> {
        fs::read_dir(self.ipam_dir().join(network))
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every address host-local holds, in any network.
    pub fn all_allocations(&self) -> usize {
        fs::read_dir(self.ipam_dir())
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| self.allocations(&e.file_name().to_string_lossy()).len())
                    .sum()
            })
            .unwrap_or(0)
    }

    pub fn record(&self, container_id: &str) -> PathBuf {
        self.state_dir().join(format!("{container_id}.json"))
    }

    /// What a failed ADD of `container_id` in `ns` leaves: no interface, no address, at most a
    /// record of no attachment (for its DEL, which then needs no API server).
    pub fn assert_nothing_attached(&self, ns: &testkit::netns::Netns, container_id: &str) {
        assert_eq!(ns.links(), ["lo"], "interfaces left");
        assert_eq!(self.all_allocations(), 0, "addresses left");
        assert_eq!(
            self.left_to_undo(container_id),
            Vec::<String>::new(),
            "recorded"
        );
    }

    /// The networks the sandbox's record still names for DEL to undo: none when there is no
    /// record, or when a failed ADD was wholly undone (its record then names no attachment, so
    /// that the runtime's DEL has nothing to do).
    pub fn left_to_undo(&self, container_id: &str) -> Vec<String> {
        let Ok(bytes) = fs::read(self.record(container_id)) else {
            return Vec::new();
        };
        let record: Value = serde_json::from_slice(&bytes).unwrap();
        record["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["network"].as_str().unwrap().to_string())
            .collect()
    }

    /// Result cache entries left.
    pub fn cache_entries(&self) -> Vec<String> {
        fs::read_dir(self.cache_dir().join("results"))
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One CNI call of the built binary.
pub struct CniCall<'a> {
    pub command: &'a str,
    pub container_id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
    pub config: &'a Value,
}

pub fn run(call: &CniCall<'_>) -> Output {
    run_without(call, &[])
}

/// A call for the whole node, with no container (GC, STATUS).
pub fn run_node_wide(command: &str, config: &Value) -> Output {
    run(&CniCall {
        command,
        container_id: "",
        netns: "",
        ifname: "",
        args: "",
        config,
    })
}

/// [`run`], with the variables `unset` left out of plumb's environment.
pub fn run_without(call: &CniCall<'_>, unset: &[&str]) -> Output {
    run_under(call, &[], unset)
}

/// For [`start`]: the plugin's output, which the test does not read, goes nowhere (a pipe
/// nobody reads could fill up and hold the plugin).
pub fn quiet(c: &mut Command) {
    c.stdout(Stdio::null()).stderr(Stdio::null());
}

/// [`run_without`], plumb started by the command `wrapper` (its program and arguments, plumb's
/// path appended), e.g. `unshare` to give it its own mounts.
pub fn run_under(call: &CniCall<'_>, wrapper: &[&str], unset: &[&str]) -> Output {
    start_under(call, wrapper, unset, |_| {})
        .wait_with_output()
        .unwrap()
}

/// plumb started for `call` as [`run`] starts it, but not waited for: for a test that acts while
/// the call runs (kills it, or its caller). `adjust` changes the command before it starts (the
/// user it runs as, where its output goes).
pub fn start(call: &CniCall<'_>, adjust: impl FnOnce(&mut Command)) -> std::process::Child {
    start_under(call, &[], &[], adjust)
}

/// plumb started by `wrapper` for `call`, as a runtime starts it: a clean environment but
/// `PATH` and the CNI variables (but those in `unset`), output piped unless `adjust` says
/// otherwise, the configuration written to its stdin, which is then closed.
fn start_under(
    call: &CniCall<'_>,
    wrapper: &[&str],
    unset: &[&str],
    adjust: impl FnOnce(&mut Command),
) -> std::process::Child {
    let plumb = env!("CARGO_BIN_EXE_plumb");
    let mut command = match wrapper.split_first() {
        None => Command::new(plumb),
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(plumb);
            c
        }
    };
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CNI_COMMAND", call.command)
        .env("CNI_CONTAINERID", call.container_id)
        .env("CNI_NETNS", call.netns)
        .env("CNI_IFNAME", call.ifname)
        .env("CNI_ARGS", call.args)
        .env("CNI_PATH", PLUGINS);
    for var in unset {
        command.env_remove(var);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    adjust(&mut command);
    let mut child = command.spawn().expect("run plumb");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(call.config).unwrap())
        .unwrap();
    child
}

/// The JSON plumb printed, asserting success.
pub fn ok(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "plumb failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("plumb printed non-JSON ({e}): {text}"))
    }
}

/// The CNI error plumb printed, asserting failure.
pub fn err(out: &Output) -> Value {
    assert!(
        !out.status.success(),
        "plumb succeeded but should not have: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "plumb's error is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Waits (30 s at most) for `file` to exist: a delegate's marker that it has begun or ended,
/// which a test waits for rather than for a fixed time, whatever the machine's load.
pub fn wait_for_file(file: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never came",
            file.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A configuration that names plumb itself as the plugin of its cluster network, with the same
/// state directory (a misconfiguration): the plugin then runs plumb as its delegate for the
/// same container. `extra` keys go into both configurations. `plumb` is found as a plugin
/// through a bin directory holding a link to the binary under test.
pub fn plumb_as_its_own_delegate(node: &Node, extra: Value) -> Value {
    let bin = node.path("bin");
    fs::create_dir_all(&bin).unwrap();
    let _ = std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_plumb"), bin.join("plumb"));
    let mut inner = node.config(json!({"delegates": [node.bridge("inner", "plumbnest0", 250)]}));
    let mut outer = node.config(json!({"binDir": bin}));
    for (k, v) in extra.as_object().unwrap() {
        inner[k] = v.clone();
        outer[k] = v.clone();
    }
    inner["name"] = json!("nested");
    outer["delegates"] = json!([{"cniVersion": "1.0.0", "name": "outer", "plugins": [inner]}]);
    outer
}

/// STATUS and GC with [`plumb_as_its_own_delegate`]'s `config`, it and its plumb network made
/// CNI 1.1 (older networks get neither call): plumb's delegate plumb would run the same call again
/// (for ever, had the configuration named itself). Each fails at once, saying why.
pub fn node_wide_calls_fail_at_once(config: &Value) {
    let mut config = config.clone();
    config["cniVersion"] = json!("1.1.0");
    config["delegates"][0]["cniVersion"] = json!("1.1.0");
    for (command, code) in [("STATUS", 50), ("GC", 7)] {
        config["cni.dev/valid-attachments"] = json!([]);
        let call = CniCall {
            command,
            container_id: "",
            netns: "",
            ifname: "",
            args: "",
            config: &config,
        };
        let out = run_under(&call, &["timeout", "20"], &[]);
        assert_ne!(out.status.code(), Some(124), "{command} did not end");
        let e = err(&out);
        assert_eq!(e["code"], code, "{command}: {e}");
        assert!(
            e.to_string().contains(&format!(
                "{command}: plumb is running as a delegate of plumb itself"
            )) && e["msg"].as_str().unwrap().contains("network \"outer\""),
            "{command}: {e}"
        );
    }
}

/// The `flock` on `path` held by another process (util-linux's `flock`, as another call of
/// the container would hold it; not this test process, which is an ancestor of the plumb it
/// starts and so would look like plumb's own caller), until the returned child is dropped.
pub fn hold_lock(path: &Path) -> HeldLock {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut child = Command::new("flock")
        .args(["--close", "--exclusive"])
        .arg(path)
        .args(["-c", "read line"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run flock");
    let stdin = child.stdin.take();
    // Until it holds it: a lock attempt of our own fails.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let file = fs::File::open(path).unwrap();
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Err(_) => break,
            Ok(mine) => drop(mine),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "flock never took {path:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    HeldLock { child, stdin }
}

/// See [`hold_lock`]: dropping it ends the holder (its stdin closes) and waits for it.
pub struct HeldLock {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
}

impl HeldLock {
    /// The process holding the lock (util-linux `flock`).
    #[allow(dead_code)] // not every test binary that includes this module asks
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// With [`plumb_as_its_own_delegate`]'s `config`: ADD of `container_id` fails at once (within
/// 20 s, which `timeout` enforces in place of the runtime's deadline, so that a hang fails the
/// test rather than CI), saying plumb is its own delegate; DEL then succeeds and leaves nothing.
pub fn add_fails_at_once_and_del_undoes_it(node: &Node, config: &Value, container_id: &str) {
    let ns = testkit::netns::Netns::new();
    let netns = ns.path();
    let call = CniCall {
        command: "ADD",
        container_id,
        netns: netns.to_str().unwrap(),
        ifname: "eth0",
        args: "",
        config,
    };
    let out = run_under(&call, &["timeout", "20"], &[]);
    assert_ne!(out.status.code(), Some(124), "the ADD waited for itself");
    let e = err(&out);
    assert!(
        e["msg"].as_str().unwrap().contains("plugin \"plumb\"")
            && e.to_string().contains("delegate of plumb itself"),
        "{e}"
    );
    ok(&run(&CniCall {
        command: "DEL",
        ..call
    }));
    assert!(!node.record(container_id).exists());
    assert_eq!(ns.links(), ["lo"]);
}

/// Every process descended from `pid`, as /proc shows them now.
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let child: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // After the command's closing parenthesis: state, then the parent's pid.
            let parent = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.split_off(1)
}
