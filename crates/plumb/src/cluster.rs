//! The Kubernetes API as plumb uses it, behind one small trait (DESIGN.md practice 5): GET a pod,
//! GET a NAD, PATCH the pod's network-status annotation, POST an event. [`KubeCluster`] is the
//! real one, through kube-rs; tests of the layers above use in-memory fakes, and the end-to-end
//! tests reach testkit's API stand-in through `KubeCluster` unchanged.
//!
//! Retries are plumb's own and bounded (kube-rs's default retry layer is turned off so that the
//! total time is known): a pod that is not visible yet, and transient failures (5xx, 429,
//! connection errors), are retried with backoff; in the end the error says what happened. There
//! is never a fake success (multus-reference §8 quirk 5).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cni::error::{CniError, ErrorCode};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod as KubePod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use serde_json::json;

use crate::plan::Pod;

/// What plumb asks of the API server.
pub trait Cluster {
    /// The pod; `Ok(None)` when it does not exist (after retrying, when `wait_for_pod`).
    fn pod(&self, namespace: &str, name: &str, wait_for_pod: bool)
    -> Result<Option<Pod>, CniError>;
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError>;
    /// Sets the pod's `k8s.v1.cni.cncf.io/network-status` annotation (one PATCH of the status
    /// subresource, as Multus writes it through `pods/status`).
    fn set_network_status(&self, pod: &Pod, value: &str) -> Result<(), CniError>;
    /// Records an event on the pod (`Normal` or `Warning`).
    fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str) -> Result<(), CniError>;
}

/// The pod annotation the kubelet sets on static pods (their API object is a mirror, whose UID
/// differs from the one the runtime has).
const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

impl Pod {
    fn from_kube(p: KubePod) -> Pod {
        Pod {
            namespace: p.metadata.namespace.unwrap_or_default(),
            name: p.metadata.name.unwrap_or_default(),
            uid: p.metadata.uid.unwrap_or_default(),
            annotations: p.metadata.annotations.unwrap_or_default(),
        }
    }

    /// A static (mirror) pod: the kubelet made it from a file, and its API UID is not the one
    /// the runtime passes.
    pub fn is_static(&self) -> bool {
        self.annotations
            .get(CONFIG_SOURCE_ANNOTATION)
            .is_some_and(|s| s != "api")
    }
}

/// Retry schedule: the waits between attempts (about 3 s in all).
const BACKOFF: [Duration; 6] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
    Duration::from_millis(1500),
];

/// Per-request limits, so a hung API server cannot hold a pod's sandbox creation for long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether an error may go away by itself.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A kube-rs error as a CNI error naming what was asked: API refusals keep the server's
/// message; everything else is code 11 (try again later) when transient, else 5 (I/O).
fn cni_error(what: &str, e: &kube::Error) -> CniError {
    let code = if transient(e) {
        ErrorCode::TryAgainLater
    } else {
        ErrorCode::Io
    };
    let detail = match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => {
            // Name the root cause (connection refused, certificate problems…).
            let mut msg = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                msg = format!("{msg}: {s}");
                source = s.source();
            }
            msg
        }
    };
    CniError::new(code, format!("Kubernetes API: {what}: {detail}"))
}

/// The real API, through kube-rs from a kubeconfig, on a current-thread tokio runtime.
pub struct KubeCluster {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

impl KubeCluster {
    /// A client from `kubeconfig`. The file (and a `tokenFile` it names) is read now, on every
    /// CNI call: a rotated service-account token is always the current one.
    pub fn from_kubeconfig(kubeconfig: &Path) -> Result<KubeCluster, CniError> {
        let bad = |e: &dyn std::fmt::Display| {
            CniError::new(
                ErrorCode::InvalidConfig,
                format!("kubeconfig {}: {e}", kubeconfig.display()),
            )
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CniError::new(ErrorCode::Internal, format!("tokio runtime: {e}")))?;
        let mut kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(&e))?;
        inline_token_files(&mut kc).map_err(|e| bad(&e))?;
        let mut cfg = rt
            .block_on(kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            ))
            .map_err(|e| bad(&e))?;
        cfg.default_retry = false;
        cfg.connect_timeout = Some(CONNECT_TIMEOUT);
        cfg.read_timeout = Some(REQUEST_TIMEOUT);
        cfg.write_timeout = Some(REQUEST_TIMEOUT);
        let client = {
            // The client spawns its connection tasks on the current runtime.
            let _guard = rt.enter();
            kube::Client::try_from(cfg).map_err(|e| bad(&e))?
        };
        Ok(KubeCluster { rt, client })
    }

    /// Runs `op` until it succeeds, fails for good, or the retries run out. `retry_not_found`
    /// also retries a 404 (a pod the API server does not show yet).
    fn with_retries<T, F, Fut>(&self, retry_not_found: bool, op: F) -> Result<T, kube::Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        self.rt.block_on(async {
            let mut waits = BACKOFF.iter();
            loop {
                match op().await {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        let again = transient(&e) || (retry_not_found && is_not_found(&e));
                        match waits.next() {
                            Some(wait) if again => tokio::time::sleep(*wait).await,
                            _ => return Err(e),
                        }
                    }
                }
            }
        })
    }
}

impl Cluster for KubeCluster {
    fn pod(
        &self,
        namespace: &str,
        name: &str,
        wait_for_pod: bool,
    ) -> Result<Option<Pod>, CniError> {
        let api: Api<KubePod> = Api::namespaced(self.client.clone(), namespace);
        match self.with_retries(wait_for_pod, || api.get(name)) {
            Ok(p) => Ok(Some(Pod::from_kube(p))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(cni_error(&format!("get pod {namespace}/{name}"), &e)),
        }
    }

    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        let api: Api<NetworkAttachmentDefinition> =
            Api::namespaced(self.client.clone(), &r.namespace);
        match self.with_retries(false, || api.get(&r.name)) {
            Ok(nad) => Ok(Some(nad)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(cni_error(
                &format!("get network-attachment-definition {r}"),
                &e,
            )),
        }
    }

    fn set_network_status(&self, pod: &Pod, value: &str) -> Result<(), CniError> {
        let api: Api<KubePod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let mut patch = json!({"metadata": {"annotations": {
            netattach::NETWORK_STATUS_ANNOTATION: value
        }}});
        // A UID in the patch is a precondition: a pod recreated under the same name since
        // (another UID) gets a 409 instead of this sandbox's status.
        if !pod.uid.is_empty() {
            patch["metadata"]["uid"] = json!(pod.uid);
        }
        let params = PatchParams::default();
        let patch = Patch::Merge(&patch);
        self.with_retries(false, || api.patch_status(&pod.name, &params, &patch))
            .map(drop)
            .map_err(|e| {
                cni_error(
                    &format!("set network-status of pod {}/{}", pod.namespace, pod.name),
                    &e,
                )
            })
    }

    fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str) -> Result<(), CniError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &pod.namespace);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", pod.name)),
                namespace: Some(pod.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                uid: Some(pod.uid.clone()).filter(|u| !u.is_empty()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(kind.into()),
            source: Some(EventSource {
                component: Some("plumb".into()),
                host: None,
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Default::default()
        };
        // Events are best effort: one try, so a struggling API server delays no pod for them.
        self.rt
            .block_on(api.create(&PostParams::default(), &event))
            .map(drop)
            .map_err(|e| cni_error(&format!("event on pod {}/{}", pod.namespace, pod.name), &e))
    }
}

/// Reads every `tokenFile` now, trimmed, into `token`: kube-rs keeps a file's token for a
/// minute and does not trim it, while a service-account token written with a final newline is
/// common (client-go trims). Reading it on every CNI call is what makes rotation safe.
fn inline_token_files(kc: &mut kube::config::Kubeconfig) -> Result<(), String> {
    for named in &mut kc.auth_infos {
        let Some(auth) = named.auth_info.as_mut() else {
            continue;
        };
        if let Some(file) = auth.token_file.take() {
            let token = std::fs::read_to_string(&file)
                .map_err(|e| format!("user {:?}: tokenFile {file}: {e}", named.name))?;
            let token = token.trim();
            if token.is_empty() {
                return Err(format!("user {:?}: tokenFile {file} is empty", named.name));
            }
            auth.token = Some(token.to_string().into());
        }
    }
    Ok(())
}

/// Annotations as the planner takes them.
pub fn annotations_from(
    map: &serde_json::Map<String, serde_json::Value>,
) -> BTreeMap<String, String> {
    map.iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}
