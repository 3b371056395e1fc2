//! A recording fake CNI plugin: a small POSIX shell script installed under a plugin name in a
//! directory, so any runtime (plumb's `cni` crate, the `plumb` binary, a shell) finds and
//! executes it exactly as it would a real plugin. Each call's stdin and environment are kept in
//! files for the test to assert on (the role of `plugins/test/noop` in the Go reference).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The bytes the plugin got on stdin.
    pub stdin: Vec<u8>,
    /// Its whole environment.
    pub env: BTreeMap<String, String>,
    /// The file [`FakePlugin::copy_on_add`] names, as it was once the plugin had read its
    /// stdin (`None`: it did not exist then, or no copy was asked for).
    pub copied: Option<Vec<u8>>,
}

impl Call {
    /// stdin as JSON (panics with the text when it is not JSON: a test failure).
    pub fn stdin_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdin).unwrap_or_else(|e| {
            panic!(
                "fake plugin stdin is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.stdin)
            )
        })
    }

    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    /// `CNI_COMMAND` of this call.
    pub fn command(&self) -> &str {
        self.var("CNI_COMMAND").unwrap_or("")
    }
}

/// A fake plugin installed as `<dir>/<name>`, recording into `<dir>/.<name>.state/`.
///
/// What a call answers is configured per command ([`FakePlugin::respond`]): stdout, stderr and
/// exit code. With nothing configured, ADD prints a minimal result in the requested
/// `cniVersion`, VERSION lists every version 0.1.0–1.1.0, and the other commands print nothing
/// and succeed.
#[derive(Debug)]
pub struct FakePlugin {
    binary: PathBuf,
    state: PathBuf,
}

const SCRIPT: &str = r#"#!/bin/sh
# testkit fake CNI plugin: records stdin and environment, answers what the test configured.
set -u
d=__STATE__
n=$(cat "$d/count" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$d/count"
mkdir -p "$d/calls/$n"
cat >"$d/calls/$n/stdin"
env -0 >"$d/calls/$n/env"
cmd=${CNI_COMMAND:-}
echo "__NAME__ $cmd" >>__SEQUENCE__
if [ "$cmd" = ADD ] && [ -f "$d/respond/copy" ]; then
  # What a file held once this plugin had its configuration (absent: no copy).
  cp "$(cat "$d/respond/copy")" "$d/calls/$n/copied" 2>/dev/null || true
fi
if [ "$cmd" = ADD ] && [ -f "$d/respond/devinfo" ]; then
  # A device plugin-aware delegate: writes its device info where runtimeConfig says.
  f=$(grep -o '"CNIDeviceInfoFile" *: *"[^"]*"' "$d/calls/$n/stdin" | head -n 1 | sed 's/.*: *"//; s/"$//')
  [ -n "$f" ] && mkdir -p "$(dirname "$f")" && cp "$d/respond/devinfo" "$f"
fi
[ -f "$d/respond/$cmd.err" ] && cat "$d/respond/$cmd.err" >&2
if [ -f "$d/respond/$cmd.out" ]; then
  cat "$d/respond/$cmd.out"
elif [ "$cmd" = VERSION ]; then
  printf '{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}'
elif [ "$cmd" = ADD ]; then
  v=$(grep -o '"cniVersion" *: *"[^"]*"' "$d/calls/$n/stdin" | head -n 1)
  printf '{%s}' "${v:-\"cniVersion\":\"0.1.0\"}"
fi
exit "$(cat "$d/respond/$cmd.code" 2>/dev/null || echo 0)"
"#;

/// The file in the plugin directory where every fake plugin there appends "NAME COMMAND".
const SEQUENCE: &str = ".fake-sequence";

/// Every call of every fake plugin in `dir`, in order, as (plugin name, command).
pub fn sequence(dir: &Path) -> Vec<(String, String)> {
    fs::read_to_string(dir.join(SEQUENCE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, c)| (n.to_string(), c.to_string()))
        .collect()
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

impl FakePlugin {
    /// Installs a fake plugin named `name` in `dir` (created if missing).
    /// `name` must be a plain plugin name (letters, digits, `-`, `_`).
    pub fn install(dir: &Path, name: &str) -> FakePlugin {
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "fake plugin name {name:?}"
        );
        fs::create_dir_all(dir).expect("create plugin dir");
        let binary = dir.join(name);
        let state = dir.join(format!(".{name}.state"));
        fs::create_dir_all(state.join("calls")).expect("create state dir");
        fs::create_dir_all(state.join("respond")).expect("create respond dir");
        let script = SCRIPT
            .replace("__STATE__", &shell_quote(&state))
            .replace("__NAME__", name)
            .replace("__SEQUENCE__", &shell_quote(&dir.join(SEQUENCE)));
        // Write to a temporary name, then rename: exec of a file still open for writing fails
        // with ETXTBSY.
        let tmp = dir.join(format!(".{name}.tmp"));
        fs::write(&tmp, script).expect("write fake plugin");
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).expect("chmod");
        fs::rename(&tmp, &binary).expect("install fake plugin");
        FakePlugin { binary, state }
    }

    pub fn path(&self) -> &Path {
        &self.binary
    }

    /// What `command` (e.g. "ADD") answers from now on: stdout, stderr and the exit code.
    pub fn respond(&self, command: &str, stdout: &str, stderr: &str, code: i32) {
        let r = self.state.join("respond");
        fs::write(r.join(format!("{command}.out")), stdout).expect("write response");
        fs::write(r.join(format!("{command}.err")), stderr).expect("write response");
        fs::write(r.join(format!("{command}.code")), code.to_string()).expect("write response");
    }

    /// `command` fails with the spec's error JSON on stdout.
    pub fn fail(&self, command: &str, code: u32, msg: &str) {
        let body = serde_json::json!({"cniVersion": "1.0.0", "code": code, "msg": msg});
        self.respond(command, &body.to_string(), "", 1);
    }

    /// From now on ADD writes `content` to the file its `runtimeConfig.CNIDeviceInfoFile`
    /// names (device-info spec §5.1.2), as a device-aware plugin such as SR-IOV's does.
    pub fn write_device_info_on_add(&self, content: &str) {
        fs::write(self.state.join("respond").join("devinfo"), content).expect("write device info");
    }

    /// From now on ADD copies `file`, as it is once the plugin has read its stdin, into the
    /// call's [`Call::copied`]: what existed when a delegate could first act.
    pub fn copy_on_add(&self, file: &Path) {
        fs::write(
            self.state.join("respond").join("copy"),
            file.as_os_str().as_encoded_bytes(),
        )
        .expect("write copy request");
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        let n: usize = fs::read_to_string(self.state.join("count"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        (1..=n)
            .map(|i| {
                let dir = self.state.join("calls").join(i.to_string());
                let stdin = fs::read(dir.join("stdin")).expect("read recorded stdin");
                let raw = fs::read(dir.join("env")).expect("read recorded env");
                let env = raw
                    .split(|b| *b == 0)
                    .filter(|kv| !kv.is_empty())
                    .filter_map(|kv| {
                        let kv = String::from_utf8_lossy(kv);
                        let (k, v) = kv.split_once('=')?;
                        Some((k.to_string(), v.to_string()))
                    })
                    .collect();
                Call {
                    stdin,
                    env,
                    copied: fs::read(dir.join("copied")).ok(),
                }
            })
            .collect()
    }

    /// The calls of one command (e.g. "DEL").
    pub fn calls_of(&self, command: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.command() == command)
            .collect()
    }
}
