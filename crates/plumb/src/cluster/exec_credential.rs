//! The current user's exec credential plugin (`users[].user.exec` in the kubeconfig, the
//! `client.authentication.k8s.io` protocol), run by plumb itself rather than by kube-rs.
//!
//! kube-rs runs the plugin with `Command::output()` while it builds the client: no time limit
//! (a plugin waiting on its cloud's metadata endpoint held the CNI call, and stayed behind when
//! the call gave up), its whole output read (one printing without end filled the memory), and
//! twice per client. Here it runs once, in a process group of its own that is killed at the
//! call's deadline, its output read up to [`MAX_OUTPUT`], never interactive (a CNI plugin has no
//! terminal), and what it returns (a token, or a client certificate and key) goes into the
//! kubeconfig in place of the `exec` entry, before kube-rs sees it.
//!
//! Its `expirationTimestamp` bounds how long the daemon uses a client built with it
//! ([`super::sources::Sources`]); without one, the credential is used until the API refuses it
//! (401), which builds the client, and so runs the plugin, again: as client-go does.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use kube::config::{ExecAuthCluster, ExecConfig, ExecInteractiveMode};
use serde::Deserialize;
use serde_json::json;

/// The most of the plugin's output read: a credential is a token or a certificate and its key,
/// a few KiB.
pub const MAX_OUTPUT: u64 = 1 << 20;

/// How much of the plugin's stderr an error quotes.
const STDERR_QUOTED: usize = 1024;

/// What the plugin returned.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Credential {
    pub token: Option<String>,
    /// PEM, as the protocol gives them.
    pub client_certificate_data: Option<String>,
    pub client_key_data: Option<String>,
    pub expires: Option<SystemTime>,
}

/// Why the plugin gave no credential.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed {
    /// It did not answer in time, or failed (a non-zero exit): it may work when asked again.
    Transient(String),
    /// It cannot work as configured: no command, an interactive plugin, an answer that is not a
    /// credential.
    Broken(String),
}

#[derive(Deserialize)]
struct Answer {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    status: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    token: Option<String>,
    #[serde(rename = "clientCertificateData")]
    client_certificate_data: Option<String>,
    #[serde(rename = "clientKeyData")]
    client_key_data: Option<String>,
    #[serde(rename = "expirationTimestamp")]
    expiration_timestamp: Option<String>,
}

/// Runs `exec` (with `cluster`, the current context's cluster, when it asks for it) and
/// returns its credential, giving up at `within`.
pub fn run(
    exec: &ExecConfig,
    cluster: Option<ExecAuthCluster>,
    within: Duration,
) -> Result<Credential, Failed> {
    let broken = |why: &str| Failed::Broken(why.to_string());
    let command = exec
        .command
        .as_deref()
        .ok_or_else(|| broken("exec has no command"))?;
    let api_version = exec
        .api_version
        .as_deref()
        .ok_or_else(|| broken("exec has no apiVersion"))?;
    if exec.interactive_mode == Some(ExecInteractiveMode::Always) {
        return Err(broken(
            "exec's interactiveMode is Always, and a CNI plugin has no terminal to ask on",
        ));
    }
    let mut spec = json!({"interactive": false});
    if exec.provide_cluster_info {
        let cluster = cluster.ok_or_else(|| {
            broken("exec asks for the cluster's information (provideClusterInfo), and the current context names no cluster")
        })?;
        spec["cluster"] = json!(cluster);
    }
    let info = json!({"apiVersion": api_version, "kind": "ExecCredential", "spec": spec});
    let mut cmd = Command::new(command);
    cmd.args(exec.args.iter().flatten())
        .envs(
            exec.env
                .iter()
                .flatten()
                .filter_map(|e| Some((e.get("name")?, e.get("value")?))),
        )
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        // Its own group, so that what it starts goes with it at the deadline.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("exec credential plugin {command}");
    let mut child = cmd.spawn().map_err(|e| {
        // As client-go: the kubeconfig's hint says how to install a plugin that is missing.
        let hint = match &exec.install_hint {
            Some(hint) if e.kind() == std::io::ErrorKind::NotFound => format!(" ({hint})"),
            _ => String::new(),
        };
        Failed::Broken(format!("{shown}: cannot start it: {e}{hint}"))
    })?;
    let deadline = Instant::now() + within;
    let answered = answer_of(&mut child, deadline).map_err(|why| {
        cni::exec::kill_group(&mut child);
        Failed::Transient(format!(
            "{shown}: {why} within {:.1} s; it was stopped",
            within.as_secs_f64()
        ))
    })?;
    if !answered.status.success() {
        // Its stderr, as far as it wrote it by now.
        let stderr = answered
            .stderr
            .recv_timeout(Duration::from_millis(200))
            .unwrap_or_default();
        return Err(Failed::Transient(format!(
            "{shown} failed ({}): {}",
            answered.status,
            quoted(&stderr)
        )));
    }
    credential(&answered.stdout, api_version)
        .map_err(|why| Failed::Broken(format!("{shown}: {why}")))
}

/// What the plugin did before its deadline.
struct Answered {
    /// Its stdout, to its end (up to [`MAX_OUTPUT`]).
    stdout: Vec<u8>,
    /// The start of its stderr, as it comes.
    stderr: mpsc::Receiver<Vec<u8>>,
    status: ExitStatus,
}

/// What the plugin printed and how it exited, before `deadline`; or what it did not do.
fn answer_of(child: &mut Child, deadline: Instant) -> Result<Answered, String> {
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("its output could not be read".into());
    };
    let (stdout, stderr) = (read(out, MAX_OUTPUT), read(err, STDERR_QUOTED as u64));
    let left = || deadline.saturating_duration_since(Instant::now());
    let stdout = stdout.recv_timeout(left()).map_err(|_| "no answer")?;
    if stdout.len() as u64 > MAX_OUTPUT {
        return Err(format!("it printed more than {} KiB", MAX_OUTPUT >> 10));
    }
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Ok(Answered {
                    stdout,
                    stderr,
                    status,
                });
            }
            Ok(None) if !left().is_zero() => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => return Err("it closed its output but did not exit".into()),
            Err(e) => return Err(format!("cannot wait for it ({e})")),
        }
    }
}

/// What `pipe` holds, up to `limit` and one byte more (which tells "exactly the limit" from
/// "more"), sent as soon as it is read, from a thread that then drains the rest, so that the
/// plugin is never held on a full pipe.
fn read(mut pipe: impl Read + Send + 'static, limit: u64) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = pipe.by_ref().take(limit + 1).read_to_end(&mut kept);
        let _ = tx.send(kept);
        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
    });
    rx
}

fn quoted(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(&stderr[..stderr.len().min(STDERR_QUOTED)]);
    let text = text.trim();
    if text.is_empty() {
        "it wrote nothing on stderr".into()
    } else {
        format!("{text:?}")
    }
}

/// The credential of the plugin's answer, which must be an `ExecCredential` of `api_version`
/// holding a token or a certificate and its key (as client-go requires).
fn credential(stdout: &[u8], api_version: &str) -> Result<Credential, String> {
    // YAML, which covers JSON: client-go's decoder takes both, and some plugins answer in YAML
    // (`aws eks get-token` with the AWS CLI's output set to yaml).
    let answer: Answer = std::str::from_utf8(stdout)
        .map_err(|_| "its answer is not UTF-8 text".to_string())
        .and_then(|text| serde_norway::from_str(text).map_err(|e| e.to_string()))
        .map_err(|e| format!("its answer is not an ExecCredential in JSON or YAML: {e}"))?;
    if answer.kind.as_deref() != Some("ExecCredential") {
        return Err(format!(
            "its answer is of kind {:?}, not ExecCredential",
            answer.kind.unwrap_or_default()
        ));
    }
    if answer.api_version.as_deref() != Some(api_version) {
        return Err(format!(
            "it answered in apiVersion {:?}, and was asked for {api_version:?}",
            answer.api_version.unwrap_or_default()
        ));
    }
    let status = answer
        .status
        .ok_or("its answer has no status (no credential)")?;
    // An empty field is an absent one, as client-go reads them (scripts print every field).
    let given = |v: Option<String>| v.filter(|v| !v.is_empty());
    let (token, cert, key) = (
        given(status.token),
        given(status.client_certificate_data),
        given(status.client_key_data),
    );
    if cert.is_some() != key.is_some() {
        return Err("its answer holds a client certificate without its key, or a key alone".into());
    }
    if token.is_none() && cert.is_none() {
        return Err("its answer holds neither a token nor a client certificate and key".into());
    }
    let expires = given(status.expiration_timestamp)
        .as_deref()
        .map(|t| {
            t.parse::<k8s_openapi::jiff::Timestamp>()
                .map(SystemTime::from)
                .map_err(|e| format!("its expirationTimestamp {t:?}: {e}"))
        })
        .transpose()?;
    Ok(Credential {
        token,
        client_certificate_data: cert,
        client_key_data: key,
        expires,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn sh(script: &str) -> ExecConfig {
        ExecConfig {
            api_version: Some("client.authentication.k8s.io/v1".into()),
            command: Some("/bin/sh".into()),
            args: Some(vec!["-c".into(), script.into()]),
            env: None,
            drop_env: None,
            install_hint: None,
            interactive_mode: None,
            provide_cluster_info: false,
            cluster: None,
            other: Default::default(),
        }
    }

    /// What a plugin that prints `answer` gives.
    fn answering(answer: &str) -> Result<Credential, Failed> {
        run(
            &sh(&format!("echo '{answer}'")),
            None,
            Duration::from_secs(10),
        )
    }

    const TOKEN: &str = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t0k","expirationTimestamp":"2030-01-02T03:04:05Z"}}"#;

    #[test]
    fn a_plugin_s_token_and_expiry_are_returned_and_it_is_told_it_is_not_interactive() {
        let mut exec = sh(&format!(
            "test \"$GREETING\" = hi || exit 3; echo \"$KUBERNETES_EXEC_INFO\" >&2; echo '{TOKEN}'"
        ));
        exec.env = Some(vec![HashMap::from([
            ("name".into(), "GREETING".into()),
            ("value".into(), "hi".into()),
        ])]);
        let c = run(&exec, None, Duration::from_secs(10)).unwrap();
        assert_eq!(c.token.as_deref(), Some("t0k"));
        assert_eq!(
            c.expires,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_553_445))
        );
    }

    #[test]
    fn an_answer_in_yaml_and_empty_fields_are_read_as_client_go_reads_them() {
        let yaml = "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\n\
                    status:\n  token: y4ml\n  clientCertificateData: ''\n  clientKeyData: ''\n";
        let c = run(
            &sh(&format!("printf '{yaml}'")),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(c.token.as_deref(), Some("y4ml"));
        assert_eq!((c.client_certificate_data, c.client_key_data), (None, None));
        // A certificate with an empty key is a certificate alone.
        let half = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"x","clientCertificateData":"c","clientKeyData":""}}"#;
        let e = answering(half).unwrap_err();
        assert!(
            matches!(&e, Failed::Broken(m) if m.contains("without its key")),
            "{e:?}"
        );
    }

    #[test]
    fn a_missing_plugin_is_reported_with_its_install_hint() {
        let mut exec = sh("true");
        exec.command = Some("/nonexistent/aws-iam-authenticator".into());
        exec.install_hint = Some("install aws-iam-authenticator from its releases".into());
        let e = run(&exec, None, Duration::from_secs(10)).unwrap_err();
        assert!(
            matches!(&e, Failed::Broken(m) if m.contains("cannot start it") && m.ends_with("(install aws-iam-authenticator from its releases)")),
            "{e:?}"
        );
    }

    #[test]
    fn a_plugin_that_does_not_answer_is_stopped_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("late");
        // Its child outlives it unless the group is killed: it would write the marker.
        let exec = sh(&format!("(sleep 2; touch {}) & sleep 30", marker.display()));
        let started = Instant::now();
        let e = run(&exec, None, Duration::from_millis(500)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3), "{e:?}");
        assert!(
            matches!(&e, Failed::Transient(m) if m.contains("no answer within 0.5 s; it was stopped")),
            "{e:?}"
        );
        std::thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "what it started ran on");
    }

    #[test]
    fn a_plugin_printing_without_end_is_stopped_at_the_limit() {
        let e = run(&sh("exec yes"), None, Duration::from_secs(20)).unwrap_err();
        assert!(
            matches!(&e, Failed::Transient(m) if m.contains("printed more than 1024 KiB")),
            "{e:?}"
        );
    }

    #[test]
    fn failures_say_what_the_plugin_said_and_broken_answers_are_refused() {
        let e = run(
            &sh("echo 'metadata server down' >&2; exit 1"),
            None,
            Duration::from_secs(10),
        )
        .unwrap_err();
        assert!(
            matches!(&e, Failed::Transient(m) if m.contains("\"metadata server down\"")),
            "{e:?}"
        );
        for (answer, why) in [
            (
                "[not, a, credential",
                "not an ExecCredential in JSON or YAML",
            ),
            (
                r#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"x"}}"#,
                "was asked for",
            ),
            (
                r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}"#,
                "neither a token nor",
            ),
            (
                r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"x","clientKeyData":"k"}}"#,
                "a key alone",
            ),
        ] {
            let e = answering(answer).unwrap_err();
            assert!(
                matches!(&e, Failed::Broken(m) if m.contains(why)),
                "{answer}: {e:?}"
            );
        }
        let mut always = sh("true");
        always.interactive_mode = Some(ExecInteractiveMode::Always);
        assert!(matches!(
            run(&always, None, Duration::from_secs(10)),
            Err(Failed::Broken(m)) if m.contains("no terminal")
        ));
    }
}
