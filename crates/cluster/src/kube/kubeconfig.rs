//! The kubeconfig as plumb reads it: bounded (a path naming `/dev/zero` or a FIFO fails at
//! once), relative paths resolved against its directory, the current context's token and
//! certificate files read now into the kubeconfig itself (a rotated token is picked up on every
//! call), exec credential plugins run with a deadline, and the kube-rs client built from it.

use super::*;
use std::path::Path;

use cni::error::{CniError, ErrorCode};

use super::Sources;
use super::transport::Use;

/// The most of a kubeconfig plumb reads. A real one, its certificates inline, is a few KiB;
/// a path that names something larger (a log, an image, `/dev/zero`) is a mistake, and reading
/// it whole could get the plugin killed for its memory, with no error for the runtime.
pub(super) const MAX_KUBECONFIG: u64 = 1 << 20;

/// The most of a `tokenFile` plumb reads: a service-account token is 1–2 KiB.
pub(super) const MAX_TOKEN_FILE: u64 = 1 << 20;

/// The kubeconfig at `path`, read as kube-rs's `Kubeconfig::read_from` reads it (its text in
/// UTF-8 or, after a byte-order mark, UTF-16; several YAML documents merged; relative file
/// names resolved against its directory), but bounded by [`cni::files::read_bounded`]: `read_from` reads
/// whatever the path names, to its end.
pub(super) fn read_kubeconfig(
    path: &Path,
    sources: &mut Sources,
) -> Result<kube::config::Kubeconfig, String> {
    let bytes = sources
        .read(path, MAX_KUBECONFIG)
        .map_err(|e| e.to_string())?;
    let text = match bytes.as_slice() {
        [0xFF, 0xFE, rest @ ..] => utf16(rest, u16::from_le_bytes)?,
        [0xFE, 0xFF, rest @ ..] => utf16(rest, u16::from_be_bytes)?,
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8(rest.to_vec())
            .map_err(|_| "not valid UTF-8 after its byte-order mark".to_string())?,
        _ => String::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())?,
    };
    let mut kc = kube::config::Kubeconfig::from_yaml(&text).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent() {
        beside(dir, &mut kc);
    }
    Ok(kc)
}

/// `bytes` as UTF-16 text, each unit decoded by `unit`. kube-rs panics on an odd length.
pub(super) fn utf16(bytes: &[u8], unit: fn([u8; 2]) -> u16) -> Result<String, String> {
    let units = bytes.chunks_exact(2);
    if !units.remainder().is_empty() {
        return Err("not valid UTF-16 (an odd number of bytes)".into());
    }
    String::from_utf16(&units.map(|c| unit([c[0], c[1]])).collect::<Vec<_>>())
        .map_err(|_| "not valid UTF-16".to_string())
}

/// The file names of `kc` that are relative made relative to `dir`, the kubeconfig's directory,
/// as kube-rs 5's `Kubeconfig::read_from` (and client-go's `GetAuthInfoFileReferences`) does:
/// certificate-authority, client-certificate, client-key, tokenFile, and an exec command that
/// contains a separator (a bare name is looked up in `PATH`).
pub(super) fn beside(dir: &Path, kc: &mut kube::config::Kubeconfig) {
    let fix = |file: &mut Option<String>| {
        if let Some(f) = file.as_deref()
            && Path::new(f).is_relative()
            && let Some(abs) = dir.join(f).to_str()
        {
            *file = Some(abs.to_owned());
        }
    };
    for cluster in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        fix(&mut cluster.certificate_authority);
    }
    for auth in kc
        .auth_infos
        .iter_mut()
        .filter_map(|a| a.auth_info.as_mut())
    {
        fix(&mut auth.client_certificate);
        fix(&mut auth.client_key);
        fix(&mut auth.token_file);
        if let Some(exec) = auth.exec.as_mut()
            && exec
                .command
                .as_deref()
                .is_some_and(|c| c.contains(std::path::MAIN_SEPARATOR))
        {
            fix(&mut exec.command);
        }
    }
}

/// A client from the kubeconfig file, its current context's token file read now (and its exec
/// credential plugin run: [`exec_credential`]), and the API server's URL, within `limit`.
pub(super) async fn client_from(
    kubeconfig: &Path,
    limit: Duration,
    usage: Use,
) -> Result<(kube::Client, String, Sources), CniError> {
    let mut sources = Sources::default();
    let mut kc =
        read_kubeconfig(kubeconfig, &mut sources).map_err(|e| bad_kubeconfig(kubeconfig, &e))?;
    inline_files(&mut kc, &mut sources).map_err(|e| bad_kubeconfig(kubeconfig, &e))?;
    // kube's proxy support is a feature plumb leaves out (two more crates, for a setup nodes
    // rarely have): a proxy the kubeconfig names is refused, saying so plainly rather than
    // with kube's message naming its cargo feature; before any credential plugin runs.
    if let Some(proxy) = current_cluster(&kc).and_then(|c| c.proxy_url.as_deref()) {
        return Err(bad_kubeconfig(
            kubeconfig,
            &format!(
                "proxy-url {proxy}: plumb does not connect through a proxy; remove proxy-url so \
                 that it connects to the API server directly"
            ),
        ));
    }
    if let Some(expires) = credential_from_exec(&mut kc, limit, kubeconfig).await? {
        sources.valid_until(expires);
    }
    let (client, server) = client_of(kc, kubeconfig, usage).await?;
    Ok((client, server, sources))
}

/// The current user's exec credential plugin run now, by plumb ([`exec_credential`]), and its
/// credential put in its place in `kc`, so that kube-rs has nothing to run. When the
/// credential expires, if it says.
pub(super) async fn credential_from_exec(
    kc: &mut kube::config::Kubeconfig,
    within: Duration,
    kubeconfig: &Path,
) -> Result<Option<std::time::SystemTime>, CniError> {
    let bad = |e: &dyn std::fmt::Display| bad_kubeconfig(kubeconfig, e);
    let Some(user) = current_user(kc) else {
        return Ok(None);
    };
    let cluster = current_cluster(kc).cloned();
    let Some(auth) = kc
        .auth_infos
        .iter_mut()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_mut())
    else {
        return Ok(None);
    };
    let Some(exec) = auth.exec.clone() else {
        return Ok(None);
    };
    let cluster = match (exec.provide_cluster_info, cluster) {
        (true, Some(c)) => Some(
            kube::config::ExecAuthCluster::try_from(&c)
                .map_err(|e| bad(&format!("user {user:?}: exec's cluster information: {e}")))?,
        ),
        _ => None,
    };
    let ran = tokio::task::spawn_blocking(move || exec_credential::run(&exec, cluster, within))
        .await
        .map_err(|e| CniError::new(ErrorCode::Internal, format!("exec credential plugin: {e}")))?;
    let credential = match ran {
        Ok(c) => c,
        Err(exec_credential::Failed::Transient(why)) => {
            return Err(CniError::new(
                ErrorCode::TryAgainLater,
                format!("kubeconfig {}: user {user:?}: {why}", kubeconfig.display()),
            ));
        }
        Err(exec_credential::Failed::Broken(why)) => {
            return Err(bad(&format!("user {user:?}: {why}")));
        }
    };
    auth.exec = None;
    if let Some(token) = credential.token {
        auth.token = Some(token.into());
    }
    if let (Some(cert), Some(key)) = (
        credential.client_certificate_data,
        credential.client_key_data,
    ) {
        auth.client_certificate_data = Some(cni::base64::encode(cert.as_bytes()));
        auth.client_key_data = Some(cni::base64::encode(key.as_bytes()).into());
    }
    Ok(credential.expires)
}

pub(super) fn bad_kubeconfig(kubeconfig: &Path, e: &dyn std::fmt::Display) -> CniError {
    CniError::new(
        ErrorCode::InvalidConfig,
        format!("kubeconfig {}: {e}", kubeconfig.display()),
    )
}

/// The client of `kc`, read from `kubeconfig`, and the API server's URL.
pub(super) async fn client_of(
    kc: kube::config::Kubeconfig,
    kubeconfig: &Path,
    usage: Use,
) -> Result<(kube::Client, String), CniError> {
    let bad = |e: &dyn std::fmt::Display| bad_kubeconfig(kubeconfig, e);
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| bad(&e))?;
    let (client, server) = client_of_config(cfg, usage).map_err(|e| bad(&e))?;
    Ok((client, server))
}

/// How long the watches' connection may stay silent: kube's default, chosen for watches.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(295);

/// The client of `cfg` with plumb's timeouts and no retries of kube's, and the API server's URL.
pub(super) fn client_of_config(
    mut cfg: kube::Config,
    usage: Use,
) -> Result<(kube::Client, String), kube::Error> {
    cfg.default_retry = false;
    cfg.connect_timeout = Some(CONNECT_TIMEOUT);
    // A call's client has no read timeout: every request is bounded whole by its attempt's
    // (`attempt`), and kube's applies to the connection's reads, an idle one's too, so that the
    // daemon's kept connection was cut after 5 s without a call and the next ADD shook hands
    // again. The watches' client has kube's own (295 s, past the 290 s a watch asks the API
    // server for): nothing else bounds a list or a watch's start that never gets an answer.
    cfg.read_timeout = match usage {
        Use::Call => None,
        Use::Watch => Some(WATCH_READ_TIMEOUT),
    };
    cfg.write_timeout = Some(REQUEST_TIMEOUT);
    let server = cfg
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    // The client spawns its connection tasks on the runtime this runs on.
    let client = super::transport::client(cfg, usage)?;
    Ok((client, server))
}

/// The files the current context names, read now and bounded ([`cni::files::read_bounded`]) into
/// the kubeconfig itself, so that kube-rs, which reads them whole whatever they are (a FIFO
/// waits for a writer, `/dev/zero` never ends), has nothing left to read:
/// - its user's `tokenFile`, trimmed, into `token`: kube-rs keeps a file's token for a minute
///   and does not trim it, while a service-account token written with a final newline is
///   common (client-go trims). Reading it on every CNI call is what makes rotation safe;
/// - its user's `client-certificate` and `client-key`, and its cluster's
///   `certificate-authority`, into their `-data` forms (base64), unless those are given, which
///   kube-rs would use instead of the files anyway.
///
/// Other users' and clusters' files are left alone: a stale entry nobody uses must not fail
/// every call. Without a current context, every one is read (kube-rs then refuses the
/// kubeconfig with its own message).
/// The user of `kc`'s current context, if it names one.
pub(super) fn current_user(kc: &kube::config::Kubeconfig) -> Option<String> {
    let current = kc.current_context.as_ref()?;
    let context = kc.contexts.iter().find(|c| &c.name == current)?;
    context.context.as_ref()?.user.clone()
}

/// The cluster of `kc`'s current context, if it names one that is there.
pub(super) fn current_cluster(kc: &kube::config::Kubeconfig) -> Option<&kube::config::Cluster> {
    let current = kc.current_context.as_ref()?;
    let context = kc.contexts.iter().find(|c| &c.name == current)?;
    let name = &context.context.as_ref()?.cluster;
    kc.clusters
        .iter()
        .find(|c| &c.name == name)?
        .cluster
        .as_ref()
}

pub(super) fn inline_files(
    kc: &mut kube::config::Kubeconfig,
    sources: &mut Sources,
) -> Result<(), String> {
    let context = kc.current_context.as_ref().and_then(|current| {
        kc.contexts
            .iter()
            .find(|c| &c.name == current)
            .and_then(|c| c.context.clone())
    });
    let current_user = context.as_ref().and_then(|c| c.user.clone());
    let current_cluster = context.as_ref().map(|c| c.cluster.clone());
    for named in &mut kc.auth_infos {
        if current_user.as_ref().is_some_and(|u| *u != named.name) {
            continue;
        }
        let Some(auth) = named.auth_info.as_mut() else {
            continue;
        };
        let user = |e: String| format!("user {:?}: {e}", named.name);
        // client-go (and so Multus) removed these in Kubernetes 1.26. kube-rs still has gcp's,
        // which runs its `cmd-path` on the call's only thread with no time limit: one that
        // does not return held the CNI call until the runtime killed it, with no error.
        if let Some(provider) = &auth.auth_provider
            && ["gcp", "azure"].contains(&provider.name.as_str())
        {
            return Err(user(format!(
                "the {:?} auth-provider was removed from Kubernetes clients in 1.26; use its \
                 exec credential plugin instead (for gcp, gke-gcloud-auth-plugin; for azure, \
                 kubelogin), or a service account token",
                provider.name
            )));
        }
        if let Some(file) = auth.token_file.take() {
            let token = sources
                .read(Path::new(&file), MAX_TOKEN_FILE)
                .map_err(|e| e.to_string())
                .and_then(|b| String::from_utf8(b).map_err(|_| "not valid UTF-8".to_string()))
                .map_err(|e| user(format!("tokenFile {file}: {e}")))?;
            let token = token.trim();
            if token.is_empty() {
                return Err(user(format!("tokenFile {file} is empty")));
            }
            auth.token = Some(token.to_string().into());
        }
        if auth.client_certificate_data.is_none()
            && let Some(file) = auth.client_certificate.take()
        {
            let pem =
                inlined(&file, sources).map_err(|e| user(format!("client-certificate {e}")))?;
            auth.client_certificate_data = Some(pem);
        }
        if auth.client_key_data.is_none()
            && let Some(file) = auth.client_key.take()
        {
            let pem = inlined(&file, sources).map_err(|e| user(format!("client-key {e}")))?;
            auth.client_key_data = Some(pem.into());
        }
    }
    for named in &mut kc.clusters {
        if current_cluster.as_ref().is_some_and(|c| *c != named.name) {
            continue;
        }
        let Some(cluster) = named.cluster.as_mut() else {
            continue;
        };
        if cluster.certificate_authority_data.is_none()
            && let Some(file) = cluster.certificate_authority.take()
        {
            let pem = inlined(&file, sources)
                .map_err(|e| format!("cluster {:?}: certificate-authority {e}", named.name))?;
            cluster.certificate_authority_data = Some(pem);
        }
    }
    Ok(())
}

/// The most of a certificate or key file plumb reads: a CA bundle of a whole system store is a
/// few hundred KiB.
pub(super) const MAX_CERT_FILE: u64 = 1 << 20;

/// The file a kubeconfig names for a certificate or key, as its `-data` form (base64).
pub(super) fn inlined(file: &str, sources: &mut Sources) -> Result<String, String> {
    sources
        .read(Path::new(file), MAX_CERT_FILE)
        .map(|pem| cni::base64::encode(&pem))
        .map_err(|e| format!("{file}: {e}"))
}
