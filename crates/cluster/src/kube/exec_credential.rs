//! The current user's exec credential plugin (`users[].user.exec` in the kubeconfig, the
//! `client.authentication.k8s.io` protocol), run by plumb itself rather than by kube-rs: once,
//! with a deadline and its output bounded (`run`), never interactive (a CNI plugin has no
//! terminal), and what it returns (a token, or a client certificate and key) put into the
//! kubeconfig in place of the `exec` entry before kube-rs sees it.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use cni::child::{PastMax, Unfinished, kill_group, run_to_end};

use kube::config::{ExecAuthCluster, ExecConfig, ExecInteractiveMode};
use serde::Deserialize;
use serde_json::json;

/// The most of the plugin's output read: a credential is a token or a certificate and its key,
/// a few KiB.
pub const MAX_OUTPUT: usize = 1 << 20;

/// How much of the plugin's stderr an error quotes.
const STDERR_QUOTED: usize = 1024;

/// What the plugin returned.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Credential {
    pub token: Option<String>,
    /// PEM, as the protocol gives them.
    pub client_certificate_data: Option<String>,
    pub client_key_data: Option<String>,
    /// Its `expirationTimestamp`: it bounds how long the daemon uses a client built with it
    /// (`sources::Sources`). Without one, the credential is used until the API refuses it (401),
    /// which builds the client, and so runs the plugin, again: as client-go does.
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
///
/// kube-rs runs the plugin with `Command::output()` while it builds the client: no time limit
/// (a plugin waiting on its cloud's metadata endpoint holds the CNI call, and stays behind when
/// the call gives up), its whole output read (one printing without end fills the memory), and
/// twice per client. Here it runs once, in a process group of its own that is killed at the
/// deadline, its output read up to [`MAX_OUTPUT`] from the calling thread, as delegates are
/// ([`cni::child`]): a process it left behind holding its output open is waited for half a
/// second, never until the deadline, and leaves no thread blocked in the daemon.
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
    // Through cni::inherit as the delegates are: in the daemon, a start beside one of them
    // would otherwise get the duplicate of a call's lock open at that moment, and hold back
    // that call's container while it lives.
    let mut child = cni::inherit::spawning(|| cmd.spawn()).map_err(|e| {
        // As client-go: the kubeconfig's hint says how to install a plugin that is missing.
        let hint = match &exec.install_hint {
            Some(hint) if e.kind() == std::io::ErrorKind::NotFound => format!(" ({hint})"),
            _ => String::new(),
        };
        Failed::Broken(format!("{shown}: cannot start it: {e}{hint}"))
    })?;
    let ran = run_to_end(
        &mut child,
        &[],
        Instant::now() + within,
        MAX_OUTPUT,
        PastMax::GiveUp,
    )
    .map_err(|e| {
        kill_group(&mut child);
        let why = match e {
            // Silent; or answered, its output closed, and hung; or exited, a process it started
            // holding its output: which of them, the deadline cannot tell.
            Unfinished::TimedOut => format!(
                "it (or a process it started) did not finish within {:.1} s",
                within.as_secs_f64()
            ),
            Unfinished::PastMax => format!("it printed more than {} KiB", MAX_OUTPUT >> 10),
            Unfinished::Io(e) => format!("its output could not be read ({e})"),
        };
        Failed::Transient(format!("{shown}: {why}; it was stopped"))
    })?;
    if !ran.status.success() {
        return Err(Failed::Transient(format!(
            "{shown} failed ({}): {}",
            ran.status,
            quoted(&ran.stderr)
        )));
    }
    // The answer's own text goes into some of these (its kind, serde's "invalid type: string
    // …"): up to MAX_OUTPUT of it in the CNI error and the logs, cut.
    credential(&ran.stdout, api_version).map_err(|why| {
        Failed::Broken(format!(
            "{shown}: {}",
            cni::quote::cut(&why, cni::quote::MESSAGE)
        ))
    })
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
/// holding a token or a certificate and its key (as client-go requires). Public for the fuzz
/// target `plumb_exec_credential`: the plugin's output is untrusted input.
pub fn credential(stdout: &[u8], api_version: &str) -> Result<Credential, String> {
    // YAML, which covers JSON: client-go's decoder takes both, and some plugins answer in YAML
    // (`aws eks get-token` with the AWS CLI's output set to yaml).
    let answer: Answer = std::str::from_utf8(stdout)
        .map_err(|_| "its answer is not UTF-8 text".to_string())
        .and_then(|text| {
            // Bounded before the YAML parser, which takes seconds over deep nesting it then
            // refuses (plumb_engine::yaml::MAX_NESTING).
            match plumb_engine::yaml::nesting_problem(text) {
                Some(problem) => Err(problem),
                None => serde_norway::from_str(text).map_err(|e| e.to_string()),
            }
        })
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
    fn a_plugin_that_answers_but_does_not_exit_is_not_said_to_have_given_no_answer() {
        // Its credential printed and its output closed, it hangs: what the operator must look
        // at is why it does not exit, not why it is silent.
        let exec = sh(&format!("echo '{TOKEN}'; exec >&- 2>&-; sleep 30"));
        let e = run(&exec, None, Duration::from_millis(500)).unwrap_err();
        assert!(
            matches!(&e, Failed::Transient(m) if m.contains("it (or a process it started) did not finish within 0.5 s; it was stopped")),
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
            matches!(&e, Failed::Transient(m) if m.contains("it (or a process it started) did not finish within 0.5 s; it was stopped")),
            "{e:?}"
        );
        std::thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "what it started ran on");
    }

    #[test]
    fn a_plugin_that_leaves_a_process_holding_its_output_is_not_waited_for() {
        // A helper it started (a credential cache, say) keeps its stdout, or its stderr, open
        // for 4 s: the answer it printed before exiting is used at once.
        for holder in ["sleep 4 &", "sleep 4 >/dev/null &"] {
            let started = Instant::now();
            let c = run(
                &sh(&format!("echo '{TOKEN}'; {holder}")),
                None,
                Duration::from_secs(20),
            )
            .unwrap_or_else(|e| panic!("{holder}: {e:?}"));
            assert_eq!(c.token.as_deref(), Some("t0k"), "{holder}");
            assert!(started.elapsed() < Duration::from_secs(3), "{holder}");
        }
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
        // A kind of 512 KiB is quoted by its start.
        let long_kind = run(
            &sh(
                "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"'; \
                 head -c 524288 /dev/zero | tr '\\0' k; printf '\"}'",
            ),
            None,
            Duration::from_secs(10),
        )
        .unwrap_err();
        assert!(
            matches!(&long_kind, Failed::Broken(m) if m.len() < 600 && m.contains("its answer is of kind \"kkk") && m.ends_with("… (524332 bytes)")),
            "{}",
            format!("{long_kind:?}")
                .chars()
                .take(700)
                .collect::<String>()
        );
        // 1 MiB of `[` took the YAML parser 3 s (optimised) to refuse.
        let deep = run(
            &sh(&format!(
                "head -c {} /dev/zero | tr '\\0' '['",
                MAX_OUTPUT - 1
            )),
            None,
            Duration::from_secs(10),
        )
        .unwrap_err();
        assert!(
            matches!(&deep, Failed::Broken(m) if m.ends_with("its answer is not an ExecCredential in JSON or YAML: line 1: collections nested more than 1000 deep (plumb reads at most 128 levels)")),
            "{deep:?}"
        );
        let mut always = sh("true");
        always.interactive_mode = Some(ExecInteractiveMode::Always);
        assert!(matches!(
            run(&always, None, Duration::from_secs(10)),
            Err(Failed::Broken(m)) if m.contains("no terminal")
        ));
    }
}
