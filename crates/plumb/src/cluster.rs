//! The Kubernetes API as plumb uses it, behind one small trait (DESIGN.md practice 5): GET a pod,
//! GET a NAD, PATCH the pod's network-status annotation, POST an event. [`KubeCluster`] is the
//! real one, through kube-rs; tests of the layers above use in-memory fakes, and the end-to-end
//! tests reach testkit's API stand-in through `KubeCluster` unchanged.
//!
//! Retries are plumb's own and bounded (kube-rs's default retry layer is turned off so that the
//! total time is known): a pod that is not visible yet, and transient failures (5xx, 429,
//! connection errors, no answer in time), are retried with backoff, never sooner than the
//! server's `Retry-After`; in the end the error says what happened. There is never a fake
//! success (multus-reference §8 quirk 5). Time is bounded
//! twice: each attempt by [`REQUEST_TIMEOUT`] (a server that trickles its answer included), and
//! everything one CNI call asks of the API by [`API_BUDGET`], so that the error reaches the
//! runtime before the runtime gives up on the call. A 401 is retried once with the kubeconfig and
//! its token file read again: a token rotated during the call is picked up.
//!
//! The NADs a pod selects are asked for together ([`Cluster::nads`]): over an HTTP/2 connection
//! they go out at once, sharing it, instead of one round trip after another; over HTTP/1.1 they
//! are asked one after the other, as each would open a connection of its own otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cni::error::{CniError, ErrorCode};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod as KubePod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, GetParams, Patch, PatchParams, PostParams};
use kube::core::Request as ApiRequest;
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use serde_json::{Value, json};

use crate::plan::Pod;

mod client_stack;
/// Public for the fuzz target `plumb_exec_credential` (its parser of the plugin's answer).
pub mod exec_credential;
mod sources;

use sources::Sources;

/// What plumb asks of the API server.
pub trait Cluster {
    /// The pod; `Ok(None)` when it does not exist (after retrying, when `wait_for_pod`).
    fn pod(&self, namespace: &str, name: &str, wait_for_pod: bool)
    -> Result<Option<Pod>, CniError>;
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError>;
    /// [`Cluster::nad`] of each of `refs`, in their order; the real API asks for them at once
    /// when it can.
    fn nads(
        &self,
        refs: &[NetworkRef],
    ) -> Vec<Result<Option<NetworkAttachmentDefinition>, CniError>> {
        refs.iter().map(|r| self.nad(r)).collect()
    }
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

/// Per-request limits, so a hung API server cannot hold a pod's sandbox creation for long:
/// `REQUEST_TIMEOUT` bounds one attempt, its answer read whole.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// All the time one CNI call may spend waiting on the API: every request, retry and backoff
/// added up (the delegates' time in between does not count). The kubelet gives a whole sandbox
/// creation 2 minutes (`--runtime-request-timeout`) and the delegates need their share; past this
/// the call fails with code 11 and the kubelet tries again.
pub const API_BUDGET: Duration = Duration::from_secs(30);

/// The API budget of a STATUS call (CNI 1.1), which the runtime makes every few seconds to learn
/// whether the node can start pods: an API server that does not answer within this long says
/// "not now" (code 50) and the runtime asks again, rather than holding the runtime's own status
/// report for [`API_BUDGET`]. Enough for one whole attempt ([`REQUEST_TIMEOUT`]) or a refused
/// connection retried through most of the backoff.
pub const STATUS_API_BUDGET: Duration = Duration::from_secs(5);

/// The most NAD GETs of one call in flight at once on an HTTP/2 connection (the API server
/// allows 100 or more streams on one; a pod selects a handful of NADs).
const MAX_CONCURRENT_GETS: usize = 8;

/// How many times the network-status is written again when the pod changed between its read
/// and its update (409), when plumb may not PATCH (Multus's RBAC). client-go's
/// `RetryOnConflict`, which Multus uses, tries 5 times.
const MAX_UPDATE_CONFLICTS: usize = 5;

/// Why a request got no answer that plumb can use.
#[derive(Debug)]
enum Failure {
    Kube(kube::Error),
    /// No whole answer within this long.
    NoAnswer(Duration),
    /// The call's budget (this long) was spent before this request was answered.
    OutOfTime(Duration),
    /// Refused (401), and the kubeconfig, read again for a new token, could not be used: why
    /// (whose code the call's error takes: a failing exec credential plugin is code 11).
    Unauthorized(kube::Error, Box<CniError>),
}

impl Failure {
    /// Whether it may go away by itself.
    fn transient(&self) -> bool {
        match self {
            Failure::Kube(kube::Error::Api(s)) => s.code == 429 || s.code >= 500,
            Failure::Kube(e @ (kube::Error::HyperError(_) | kube::Error::Service(_))) => {
                !tls_refused(e)
            }
            Failure::Kube(_) | Failure::OutOfTime(_) | Failure::Unauthorized(..) => false,
            Failure::NoAnswer(_) => true,
        }
    }

    /// How long the server asked to wait before asking again (`Retry-After`, or the `Status`'s
    /// `retryAfterSeconds`).
    fn retry_after(&self) -> Duration {
        match self {
            Failure::Kube(kube::Error::Api(s)) => Duration::from_secs(
                s.details
                    .as_ref()
                    .map_or(0, |d| u64::from(d.retry_after_seconds)),
            ),
            _ => Duration::ZERO,
        }
    }

    fn is_status(&self, code: u16) -> bool {
        matches!(self, Failure::Kube(kube::Error::Api(s)) if s.code == code)
    }

    fn is_not_found(&self) -> bool {
        self.is_status(404)
    }

    /// Whether the API server refused a write for the UID it carried: the pod was recreated
    /// under the same name. A PATCH whose `metadata.uid` differs from the pod's is refused
    /// as an update of an immutable field (422 Invalid, the cause on `metadata.uid`); a UID
    /// precondition that fails is a 409 "Precondition failed: UID in precondition".
    fn uid_refused(&self) -> bool {
        let Failure::Kube(kube::Error::Api(s)) = self else {
            return false;
        };
        let on_uid = s
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
            || s.message.contains("metadata.uid");
        (s.code == 422 && on_uid) || (s.code == 409 && s.message.contains("UID in precondition"))
    }
}

/// Whether `e` comes from a TLS handshake that failed on a certificate or on what the two sides
/// support: the server's certificate not trusted by the kubeconfig's CA (a rotated CA, an
/// address that now leads elsewhere), ours refused by the server, no common protocol. Asking
/// again gets the same answer, so it is not retried.
fn tls_refused(e: &kube::Error) -> bool {
    use rustls::AlertDescription as A;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<rustls::Error>() {
            return match r {
                rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented
                | rustls::Error::PeerIncompatible(_) => true,
                rustls::Error::AlertReceived(alert) => matches!(
                    alert,
                    A::BadCertificate
                        | A::UnsupportedCertificate
                        | A::CertificateRevoked
                        | A::CertificateExpired
                        | A::CertificateUnknown
                        | A::UnknownCA
                        | A::CertificateRequired
                        | A::ProtocolVersion
                        | A::HandshakeFailure
                ),
                _ => false,
            };
        }
        // The handshake's failure comes as io::Errors wrapped in one another (tokio-rustls,
        // then the connector) around the rustls::Error, and an io::Error's `source` skips
        // what it wraps: unwrap them.
        cause = match c.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        };
    }
    false
}

/// The error of a status write refused because the pod is not this sandbox's any more: code 3
/// (the container is unknown), whichever way the write went (PATCH or update), with `why`.
fn recreated(what: &str, pod: &Pod, why: &dyn std::fmt::Display) -> CniError {
    CniError::new(
        ErrorCode::UnknownContainer,
        format!(
            "{what}: the pod was recreated (this sandbox's UID is {}; {why}); its network-status \
             is not written",
            pod.uid
        ),
    )
}

/// A failed request as a CNI error naming what was asked, and of which API server (a
/// connection refused does not say where, and a kubeconfig with an old control-plane address
/// is the first thing to rule out): API refusals keep the server's
/// message; everything else is code 11 (try again later) when transient or out of time, else 5
/// (I/O).
fn cni_error(server: &str, what: &str, f: &Failure) -> CniError {
    let e = match f {
        Failure::Kube(e) => e,
        Failure::Unauthorized(e, reread) => {
            return CniError::new(
                reread.kind(),
                format!(
                    "Kubernetes API {server}: {what}: {} (and the kubeconfig read again for a \
                     new token could not be used: {})",
                    kube_detail(e),
                    reread.msg
                ),
            );
        }
        Failure::NoAnswer(t) => {
            return CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "Kubernetes API {server}: {what}: no whole answer within {} s",
                    t.as_secs_f32()
                ),
            );
        }
        Failure::OutOfTime(budget) => {
            return CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "Kubernetes API {server}: {what}: no answer before the {} s this call may spend on \
                     the API ran out",
                    budget.as_secs_f32()
                ),
            );
        }
    };
    let code = if f.transient() {
        ErrorCode::TryAgainLater
    } else {
        ErrorCode::Io
    };
    CniError::new(
        code,
        format!("Kubernetes API {server}: {what}: {}", kube_detail(e)),
    )
}

/// What went wrong, as the API server said it, or down to the root cause (connection refused,
/// certificate problems…), each thing said once: the operator reads it in the pod's events.
fn kube_detail(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason.is_empty() => format!("{} ({})", s.message, s.code),
        // The API server's 401 says "Unauthorized" as its message and its reason.
        kube::Error::Api(s) if s.message == s.reason => format!("{} {}", s.code, s.reason),
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => {
            // kube-rs's "ServiceError: " names its own wrapper, nothing the operator can act
            // on; and hyper's error prints its own text and is then its own source's, so each
            // layer is kept only when it adds words ("client error (Connect)" once, then
            // "tcp connect error: Connection refused").
            let top = other.to_string();
            let mut parts = vec![
                top.strip_prefix("ServiceError: ")
                    .unwrap_or(&top)
                    .to_string(),
            ];
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                let text = s.to_string();
                if !parts.last().is_some_and(|p| p.ends_with(&text)) {
                    parts.push(text);
                }
                source = s.source();
            }
            parts.join(": ")
        }
    }
}

/// The real API, through kube-rs from a kubeconfig, on a current-thread tokio runtime. In thin
/// mode one is built per CNI call; the daemon keeps one across calls (`client_pool.rs`), each
/// call starting with [`KubeCluster::begin_call`].
pub struct KubeCluster {
    rt: Runtime,
    kubeconfig: PathBuf,
    /// The API server's URL, for errors.
    server: String,
    /// Replaced once per call when the API refuses the token (401): see
    /// [`KubeCluster::retrying`].
    client: Mutex<Client>,
    /// Held while the client is built again, so that requests refused together wait for the
    /// one rebuild and are retried with its client.
    rebuilding: futures::lock::Mutex<()>,
    /// Whether the last answer came over HTTP/2: only then are requests sent together (see
    /// [`Cluster::nads`]).
    http2: AtomicBool,
    /// How much of the budget this call's requests have spent so far.
    spent: Mutex<Duration>,
    budget: Duration,
}

/// The call's tokio runtime, shut down without waiting for its blocking threads. A host name
/// in the kubeconfig is looked up by getaddrinfo on such a thread, which no timeout stops: with
/// a DNS server that does not answer, each attempt gave up after [`CONNECT_TIMEOUT`] but its
/// lookup ran on for the resolver's own timeouts, and dropping the runtime waited for every one
/// of them, holding the CNI call well past [`API_BUDGET`]. Those threads end with the process.
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn block_on<F: std::future::Future>(&self, work: F) -> F::Output {
        self.0
            .as_ref()
            .expect("the runtime is only taken when dropped")
            .block_on(work)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The client, the files it was built from, whether it was already built again after a 401 in
/// this call, and how many times that succeeded.
struct Client {
    client: kube::Client,
    sources: Sources,
    reread: bool,
    generation: u64,
}

impl KubeCluster {
    /// A client from `kubeconfig`. The file (and a `tokenFile` it names) is read now, on every
    /// CNI call: a rotated service-account token is always the current one.
    pub fn from_kubeconfig(kubeconfig: &Path) -> Result<KubeCluster, CniError> {
        Self::with_budget(kubeconfig, API_BUDGET)
    }

    /// As [`KubeCluster::from_kubeconfig`], with a `budget` of API time other than
    /// [`API_BUDGET`] (STATUS: [`STATUS_API_BUDGET`]).
    pub fn with_budget(kubeconfig: &Path, budget: Duration) -> Result<KubeCluster, CniError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CniError::new(ErrorCode::Internal, format!("tokio runtime: {e}")))?;
        let rt = Runtime(Some(rt));
        let started = Instant::now();
        let (client, server, sources) = rt.block_on(client_from(kubeconfig, budget))?;
        Ok(KubeCluster {
            rt,
            kubeconfig: kubeconfig.to_path_buf(),
            server,
            client: Mutex::new(Client {
                client,
                sources,
                reread: false,
                generation: 0,
            }),
            rebuilding: futures::lock::Mutex::new(()),
            http2: AtomicBool::new(false),
            // An exec credential plugin's time is the API's too.
            spent: Mutex::new(started.elapsed()),
            budget,
        })
    }

    fn client(&self) -> kube::Client {
        self.current().0
    }

    /// The kubeconfig this client is for.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Whether the kubeconfig and every file of it the client was built from (token,
    /// certificates) still hold what they held then: only then may another call use it.
    pub fn unchanged(&self) -> bool {
        let c = self.client.lock().unwrap_or_else(|p| p.into_inner());
        c.sources.unchanged()
    }

    /// Readies a client kept from an earlier call for a new one, with `budget` of API time:
    /// nothing spent yet, and a 401 may rebuild the client once more.
    pub fn begin_call(&mut self, budget: Duration) {
        self.budget = budget;
        *self.spent.get_mut().unwrap_or_else(|p| p.into_inner()) = Duration::ZERO;
        self.client
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .reread = false;
    }

    /// The client and its generation (which rebuild it comes from).
    fn current(&self) -> (kube::Client, u64) {
        let c = self.client.lock().unwrap_or_else(|p| p.into_inner());
        (c.client.clone(), c.generation)
    }

    /// What is left of the budget for a request that started at `started`.
    fn left(&self, started: Instant) -> Duration {
        let spent = *self.spent.lock().unwrap_or_else(|p| p.into_inner());
        self.budget.saturating_sub(spent + started.elapsed())
    }

    /// Runs `work` (one request, with or without retries) and counts its time as spent.
    fn spend<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let started = Instant::now();
        let out = self.rt.block_on(work);
        *self.spent.lock().unwrap_or_else(|p| p.into_inner()) += started.elapsed();
        out
    }

    /// One attempt of `request`, bounded by [`REQUEST_TIMEOUT`] and what is left of the budget
    /// for the request that started at `started`.
    async fn attempt<T>(
        &self,
        started: Instant,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Failure> {
        let limit = REQUEST_TIMEOUT.min(self.left(started));
        if limit.is_zero() {
            return Err(Failure::OutOfTime(self.budget));
        }
        match tokio::time::timeout(limit, request).await {
            Ok(answer) => answer.map_err(Failure::Kube),
            Err(_) if limit < REQUEST_TIMEOUT => Err(Failure::OutOfTime(self.budget)),
            Err(_) => Err(Failure::NoAnswer(limit)),
        }
    }

    /// [`KubeCluster::retrying`] on its own, its time counted as spent.
    fn with_retries<T, F, Fut>(&self, retry_not_found: bool, op: F) -> Result<T, Failure>
    where
        F: Fn(kube::Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let started = Instant::now();
        self.spend(self.retrying(started, retry_not_found, op))
    }

    /// Runs `op` (given the client) until it succeeds, fails for good, or the retries or the
    /// budget (what is left of it for requests that started at `started`) run out.
    /// `retry_not_found` also retries a 404 (a pod the API server does not show yet). The
    /// call's first 401 rebuilds the client from the kubeconfig, whose token file may have been
    /// replaced since this call read it (the old token revoked with the pod that held it), and
    /// retries at once; requests refused with the old client at the same time are retried with
    /// the new one.
    async fn retrying<T, F, Fut>(
        &self,
        started: Instant,
        retry_not_found: bool,
        op: F,
    ) -> Result<T, Failure>
    where
        F: Fn(kube::Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let mut waits = BACKOFF.iter();
        loop {
            let (client, generation) = self.current();
            let e = match self.attempt(started, op(client)).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let e = match e {
                Failure::Kube(refused) if e.is_status(401) => {
                    match self.rebuilt_since(generation, started).await {
                        Ok(true) => continue,
                        Ok(false) => Failure::Kube(refused),
                        Err(why) => return Err(Failure::Unauthorized(refused, Box::new(why))),
                    }
                }
                e => e,
            };
            let again = e.transient() || (retry_not_found && e.is_not_found());
            // Never sooner than the server asked (a 429 from priority and fairness, as
            // client-go waits); a wait past the budget ends the call now, with code 11.
            match waits.next().map(|wait| (*wait).max(e.retry_after())) {
                Some(wait) if again && wait < self.left(started) => tokio::time::sleep(wait).await,
                _ => return Err(e),
            }
        }
    }

    /// Whether there is a client newer than `generation` (the one a request was refused
    /// with): built again from the kubeconfig now, the first time in this call, or by a
    /// request refused at the same time; why not, when the kubeconfig read again could not be
    /// used (the token file gone, say), which is then the error to fix. The rebuild gets what
    /// is left of the budget for requests that started at `started`.
    async fn rebuilt_since(&self, generation: u64, started: Instant) -> Result<bool, CniError> {
        let _one_at_a_time = self.rebuilding.lock().await;
        {
            let c = self.client.lock().unwrap_or_else(|p| p.into_inner());
            if c.generation > generation {
                return Ok(true);
            }
            if c.reread {
                return Ok(false);
            }
        }
        self.client.lock().unwrap_or_else(|p| p.into_inner()).reread = true;
        match client_from(&self.kubeconfig, self.left(started)).await {
            Ok((client, _, sources)) => {
                let mut c = self.client.lock().unwrap_or_else(|p| p.into_inner());
                c.client = client;
                c.sources = sources;
                c.generation += 1;
                // A new client has no connection yet: which version it speaks is not known.
                self.http2.store(false, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// The network-status annotation written with one merge PATCH of pods/status.
    fn patch_network_status(&self, pod: &Pod, value: &str) -> Result<Value, Failure> {
        let mut patch = json!({"metadata": {"annotations": {
            netattach::NETWORK_STATUS_ANNOTATION: value
        }}});
        // A UID in the patch is a precondition: a pod recreated under the same name since
        // (another UID) gets a 409 instead of this sandbox's status. Not for a static pod: the
        // UID the runtime knows it by (when its annotations came from the runtime) is the
        // kubelet's, not its mirror's, and the API would refuse every patch.
        if checks_uid(pod) {
            patch["metadata"]["uid"] = json!(pod.uid);
        }
        let params = PatchParams::default();
        let patch = Patch::Merge(&patch);
        let (params, patch) = (&params, &patch);
        let http2 = &self.http2;
        self.with_retries(false, |client| async move {
            let api = Api::<KubePod>::namespaced(client.clone(), &pod.namespace);
            let request = ApiRequest::new(api.resource_url())
                .patch_subresource("status", &pod.name, params, patch);
            send::<Value>(&client, request, http2).await
        })
    }

    /// The network-status annotation written as Multus writes it: the pod read, then put back
    /// to pods/status with the annotation set, read again if it changed in between (409). The
    /// pod goes back as the API server sent it, every field kept, including those newer than
    /// plumb's Kubernetes types (a typed copy would clear them).
    fn update_network_status(&self, pod: &Pod, value: &str, what: &str) -> Result<Value, CniError> {
        let what = format!("{what} (by update: the PATCH was forbidden)");
        let fail = |e: &Failure| cni_error(&self.server, &what, e);
        let http2 = &self.http2;
        for _ in 0..MAX_UPDATE_CONFLICTS {
            let mut current: Value = self
                .with_retries(false, |client| async move {
                    let api = Api::<KubePod>::namespaced(client.clone(), &pod.namespace);
                    let request =
                        ApiRequest::new(api.resource_url()).get(&pod.name, &GetParams::default());
                    send::<Value>(&client, request, http2).await
                })
                .map_err(|e| fail(&e))?;
            answers_for(&what, name_of(&current), (&pod.namespace, &pod.name))?;
            let meta = current
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| {
                    CniError::new(
                        ErrorCode::Io,
                        format!("{what}: the pod read has no metadata"),
                    )
                })?;
            // What the PATCH's UID precondition does: this sandbox's status is not written
            // onto a pod recreated under the same name.
            let uid = meta.get("uid").and_then(Value::as_str).unwrap_or_default();
            if checks_uid(pod) && uid != pod.uid {
                return Err(recreated(&what, pod, &format!("its UID is {uid}")));
            }
            let annotations = meta.entry("annotations").or_insert(Value::Null);
            if !annotations.is_object() {
                *annotations = json!({});
            }
            annotations[netattach::NETWORK_STATUS_ANNOTATION] = json!(value);
            let body = serde_json::to_vec(&current)
                .map_err(|e| CniError::new(ErrorCode::Internal, format!("{what}: {e}")))?;
            let body = &body;
            let put = self.with_retries(false, |client| async move {
                let api = Api::<KubePod>::namespaced(client.clone(), &pod.namespace);
                let request = ApiRequest::new(api.resource_url()).replace_subresource(
                    "status",
                    &pod.name,
                    &PostParams::default(),
                    body.clone(),
                );
                send::<Value>(&client, request, http2).await
            });
            match put {
                // Changed since it was read (the kubelet writes its status too): again.
                Err(e) if e.is_status(409) => continue,
                put => return put.map_err(|e| fail(&e)),
            }
        }
        Err(CniError::new(
            ErrorCode::TryAgainLater,
            format!("{what}: the pod changed {MAX_UPDATE_CONFLICTS} times while it was written"),
        ))
    }

    /// A token of the service account `namespace`/`name`, bound to the Node `node` (its UID
    /// when known) and asked to last `seconds` (TokenRequest, authentication.k8s.io/v1), with
    /// when it expires as the API server says, and the lifetime it granted (it may shorten
    /// the one asked); or why not.
    pub fn node_bound_token(
        &self,
        (namespace, name): (&str, &str),
        (node, node_uid): (&str, Option<&str>),
        seconds: i64,
    ) -> Result<crate::node_token::Grant, CniError> {
        use k8s_openapi::api::authentication::v1::{
            BoundObjectReference, TokenRequest, TokenRequestSpec,
        };
        use k8s_openapi::api::core::v1::ServiceAccount;

        let what =
            format!("create a token of serviceaccount {namespace}/{name} bound to node {node}");
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(node.into()),
                    uid: node_uid.map(Into::into),
                }),
            },
            ..TokenRequest::default()
        };
        let request = &request;
        let answer = self.with_retries(false, |client| async move {
            Api::<ServiceAccount>::namespaced(client, namespace)
                .create_token_request(name, &PostParams::default(), request)
                .await
        });
        let answer = answer.map_err(|f| cni_error(&self.server, &what, &f))?;
        let granted = (answer.spec.expiration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs);
        let status = (answer.status.filter(|s| !s.token.is_empty())).ok_or_else(|| {
            CniError::new(ErrorCode::Io, format!("{what}: the answer holds no token"))
        })?;
        let expires = std::time::UNIX_EPOCH
            + Duration::from_secs(status.expiration_timestamp.0.as_second().max(0) as u64);
        Ok((status.token, expires, granted))
    }

    /// Whether the API server takes the kubeconfig's credentials: a GET of `/version`, which
    /// every client may make (the default RBAC's `system:public-info-viewer`), so that only
    /// authentication refuses it: with a token the API server no longer takes it answers 401,
    /// not the anonymous answer (it never takes a bad token for no token). `Err` when there is
    /// no answer to go by (the API server down, a 5xx): that says nothing of the token.
    pub fn credentials_accepted(&self) -> Result<bool, CniError> {
        let http2 = &self.http2;
        let answer = self.with_retries(false, |client| async move {
            let request = http::Request::get("/version").body(Vec::new());
            let request = request.map_err(kube::core::request::Error::BuildRequest);
            send::<serde_json::Value>(&client, request, http2).await
        });
        match answer {
            Ok(_) => Ok(true),
            Err(f) if f.is_status(401) => Ok(false),
            Err(f) => Err(cni_error(&self.server, "get /version", &f)),
        }
    }

    /// GET of NAD `r`, retried as [`KubeCluster::retrying`] does.
    async fn get_nad(
        &self,
        started: Instant,
        r: &NetworkRef,
    ) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        let what = format!("get network-attachment-definition {r}");
        let http2 = &self.http2;
        let got = self
            .retrying(started, false, |client| async move {
                let api =
                    Api::<NetworkAttachmentDefinition>::namespaced(client.clone(), &r.namespace);
                let request =
                    ApiRequest::new(api.resource_url()).get(&r.name, &GetParams::default());
                send_within::<NetworkAttachmentDefinition>(&client, request, http2, MAX_NAD_ANSWER)
                    .await
            })
            .await;
        match got {
            Ok(nad) => {
                let meta = &nad.metadata;
                answers_for(
                    &what,
                    (
                        meta.namespace.as_deref().unwrap_or_default(),
                        meta.name.as_deref().unwrap_or_default(),
                    ),
                    (&r.namespace, &r.name),
                )?;
                Ok(Some(nad))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(cni_error(&self.server, &what, &e)),
        }
    }
}

/// One request through `client`, its answer judged by its HTTP status. kube-rs's own request
/// methods take any JSON object in an error answer for a `Status` and its `code` for the HTTP
/// status (0 when there is none): a load balancer's 503 `{"message": …}` was then final, and a
/// 500 whose body said 404 a missing pod. The status line is what the server (or whatever is
/// in front of it) answered; the body only explains it. `http2` is set to whether the answer
/// came over HTTP/2.
async fn send<T: serde::de::DeserializeOwned>(
    client: &kube::Client,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    http2: &AtomicBool,
) -> Result<T, kube::Error> {
    send_within::<T>(client, request, http2, MAX_ANSWER).await
}

/// [`send`], the answer read up to `limit` bytes.
async fn send_within<T: serde::de::DeserializeOwned>(
    client: &kube::Client,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    http2: &AtomicBool,
    limit: usize,
) -> Result<T, kube::Error> {
    let request = request.map_err(kube::Error::BuildRequest)?;
    let answer = client.send(request.map(kube::client::Body::from)).await?;
    http2.store(answer.version() == http::Version::HTTP_2, Ordering::Relaxed);
    let code = answer.status().as_u16();
    let success = (200..300).contains(&code);
    // Seconds only: the API server never sends the HTTP-date form.
    let retry_after = answer
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.trim().parse::<u32>().ok());
    let (body, whole) = read_at_most(answer.into_body(), limit).await?;
    if !success {
        let text = String::from_utf8_lossy(&body);
        let mut status = serde_json::from_str::<kube::core::Status>(&text)
            .ok()
            .filter(|s| !s.message.is_empty() || !s.reason.is_empty())
            .unwrap_or_else(|| kube::core::Status::failure(text.trim(), ""));
        status.code = code;
        status.message = shortened(status.message, MAX_ERROR_MESSAGE);
        // A reason is one word (`NotFound`); an answer's can be anything.
        status.reason = shortened(status.reason, MAX_ERROR_MESSAGE);
        // The priority-and-fairness filter's 429 has the wait in its header only.
        if let Some(seconds) = retry_after {
            match status.details.as_mut() {
                Some(d) if d.retry_after_seconds == 0 => d.retry_after_seconds = seconds,
                Some(_) => {}
                None => {
                    status.details = Some(kube::core::response::StatusDetails {
                        name: String::new(),
                        group: String::new(),
                        kind: String::new(),
                        uid: String::new(),
                        causes: Vec::new(),
                        retry_after_seconds: seconds,
                    })
                }
            }
        }
        return Err(kube::Error::Api(status.boxed()));
    }
    if !whole {
        return Err(kube::Error::SerdeError(serde::de::Error::custom(format!(
            "the answer is larger than {} MiB, more than any such API object; not read",
            limit >> 20
        ))));
    }
    serde_json::from_slice(&body).map_err(kube::Error::SerdeError)
}

/// The most of an answer plumb reads: an API object is at most ~1.5 MiB in etcd (its default
/// request limit), so anything past this is not the API server's object, and holding it all
/// could get the plugin killed for its memory (the runtime would get no error at all). Well
/// above 1.5 MiB: a pod is kept in etcd as protobuf, and its JSON can be several times larger
/// (the API server writes `<`, `>` and `&` as six bytes each).
const MAX_ANSWER: usize = 16 << 20;

/// The most of a NAD's answer plumb reads. A custom resource is kept in etcd as the JSON the
/// API server sends, so it cannot pass ~1.5 MiB; and a call holds up to 32 NADs at once
/// (plugin.rs `MAX_PREFETCHED_NADS`): at [`MAX_ANSWER`] each, a server or proxy sending huge
/// answers made one ADD take 582 MB.
const MAX_NAD_ANSWER: usize = 4 << 20;

/// The most of an error answer's message (and of its reason) kept in the CNI error (a proxy's
/// error page can be megabytes).
const MAX_ERROR_MESSAGE: usize = 1024;

/// The most of a name from an answer kept in the CNI error: a Kubernetes name has at most 253
/// bytes, an answer's can have megabytes.
const MAX_NAME: usize = 253;

/// The first `limit` bytes of `body`, and whether that is all of it.
async fn read_at_most(
    mut body: kube::client::Body,
    limit: usize,
) -> Result<(Vec<u8>, bool), kube::Error> {
    use http_body::Body as _;
    let mut bytes = Vec::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if bytes.len() + data.len() > limit {
            bytes.extend_from_slice(&data[..limit - bytes.len()]);
            return Ok((bytes, false));
        }
        bytes.extend_from_slice(&data);
    }
    Ok((bytes, true))
}

/// `text` cut to at most `limit` bytes (on a character boundary), marked when cut.
fn shortened(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// The most of a kubeconfig plumb reads. A real one, its certificates inline, is a few KiB;
/// a path that names something larger (a log, an image, `/dev/zero`) is a mistake, and reading
/// it whole could get the plugin killed for its memory, with no error for the runtime.
const MAX_KUBECONFIG: u64 = 1 << 20;

/// The most of a `tokenFile` plumb reads: a service-account token is 1–2 KiB.
const MAX_TOKEN_FILE: u64 = 1 << 20;

/// The kubeconfig at `path`, read as kube-rs's `Kubeconfig::read_from` reads it (its text in
/// UTF-8 or, after a byte-order mark, UTF-16; several YAML documents merged; relative file
/// names resolved against its directory), but bounded by [`cni::files::read_bounded`]: `read_from` reads
/// whatever the path names, to its end.
fn read_kubeconfig(path: &Path, sources: &mut Sources) -> Result<kube::config::Kubeconfig, String> {
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
fn utf16(bytes: &[u8], unit: fn([u8; 2]) -> u16) -> Result<String, String> {
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
fn beside(dir: &Path, kc: &mut kube::config::Kubeconfig) {
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
async fn client_from(
    kubeconfig: &Path,
    limit: Duration,
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
    let (client, server) = client_of(kc, kubeconfig).await?;
    Ok((client, server, sources))
}

/// The current user's exec credential plugin run now, by plumb ([`exec_credential`]), and its
/// credential put in its place in `kc`, so that kube-rs has nothing to run. When the
/// credential expires, if it says.
async fn credential_from_exec(
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

fn bad_kubeconfig(kubeconfig: &Path, e: &dyn std::fmt::Display) -> CniError {
    CniError::new(
        ErrorCode::InvalidConfig,
        format!("kubeconfig {}: {e}", kubeconfig.display()),
    )
}

/// The client of `kc`, read from `kubeconfig`, and the API server's URL.
async fn client_of(
    kc: kube::config::Kubeconfig,
    kubeconfig: &Path,
) -> Result<(kube::Client, String), CniError> {
    let bad = |e: &dyn std::fmt::Display| bad_kubeconfig(kubeconfig, e);
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| bad(&e))?;
    cfg.default_retry = false;
    cfg.connect_timeout = Some(CONNECT_TIMEOUT);
    // No read timeout: every request is bounded whole by its attempt's (`attempt`), and kube's
    // applies to the connection's reads, an idle one's too, so that the daemon's kept
    // connection was cut after 5 s without a call and the next ADD shook hands again.
    cfg.read_timeout = None;
    cfg.write_timeout = Some(REQUEST_TIMEOUT);
    let server = cfg
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    // The client spawns its connection tasks on the runtime this runs on.
    let client = client_stack::client(cfg).map_err(|e| bad(&e))?;
    Ok((client, server))
}

impl Cluster for KubeCluster {
    fn pod(
        &self,
        namespace: &str,
        name: &str,
        wait_for_pod: bool,
    ) -> Result<Option<Pod>, CniError> {
        let what = format!("get pod {namespace}/{name}");
        let http2 = &self.http2;
        let got = self.with_retries(wait_for_pod, |client| async move {
            let api = Api::<KubePod>::namespaced(client.clone(), namespace);
            let request = ApiRequest::new(api.resource_url()).get(name, &GetParams::default());
            send(&client, request, http2).await
        });
        match got {
            Ok(p) => {
                let pod = Pod::from_kube(p);
                answers_for(&what, (&pod.namespace, &pod.name), (namespace, name))?;
                Ok(Some(pod))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(cni_error(&self.server, &what, &e)),
        }
    }

    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        self.spend(self.get_nad(Instant::now(), r))
    }

    /// Together, on one HTTP/2 connection, when the last answer came over one: hyper's pool
    /// shares a connection between requests once it knows it is HTTP/2, and otherwise (HTTP/1.1,
    /// or no connection yet) each request in flight would open one of its own, a TLS handshake
    /// each. Each GET is retried on its own; their time counts once against the budget.
    fn nads(
        &self,
        refs: &[NetworkRef],
    ) -> Vec<Result<Option<NetworkAttachmentDefinition>, CniError>> {
        use futures::StreamExt;
        if refs.len() < 2 || !self.http2.load(Ordering::Relaxed) {
            return refs.iter().map(|r| self.nad(r)).collect();
        }
        let started = Instant::now();
        self.spend(
            futures::stream::iter(refs)
                .map(|r| self.get_nad(started, r))
                .buffered(MAX_CONCURRENT_GETS)
                .collect(),
        )
    }

    fn set_network_status(&self, pod: &Pod, value: &str) -> Result<(), CniError> {
        let what = format!("set network-status of pod {}/{}", pod.namespace, pod.name);
        let written = match self.patch_network_status(pod, value) {
            // Multus writes the annotation with a GET and a PUT, and its ClusterRole grants
            // `update` on pods/status, not `patch`: with Multus's RBAC plumb writes it the same
            // way (two round trips more than the PATCH; deploy/rbac.yaml grants `patch`).
            Err(e) if e.is_status(403) => self.update_network_status(pod, value, &what)?,
            Err(e) if e.uid_refused() => {
                let refused = cni_error(&self.server, "PATCH", &e);
                return Err(recreated(&what, pod, &refused.msg));
            }
            written => written.map_err(|e| cni_error(&self.server, &what, &e))?,
        };
        // The answer is the written pod: one about another pod means the write went elsewhere,
        // or nowhere (checked as for the GETs).
        answers_for(&what, name_of(&written), (&pod.namespace, &pod.name))?;
        // Another pod of the same name too: the write carried this sandbox's UID (a
        // precondition), so an answer with another one (or none) was not this write's, and
        // the pod may run without its network-status while ADD reported success.
        let uid = written["metadata"]["uid"].as_str().unwrap_or_default();
        if checks_uid(pod) && uid != pod.uid {
            return Err(CniError::new(
                ErrorCode::Io,
                format!(
                    "Kubernetes API: {what}: the answer is about a pod with UID {:?}, not this \
                     sandbox's {}",
                    shortened(uid.to_string(), MAX_NAME),
                    pod.uid
                ),
            ));
        }
        Ok(())
    }

    fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str) -> Result<(), CniError> {
        let api: Api<Event> = Api::namespaced(self.client(), &pod.namespace);
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
        // Sent as the other requests are ([`send`]): kube's `create` reads an answer whole,
        // however large, after the pod's network was set up.
        let client = self.client();
        let body = serde_json::to_vec(&event)
            .map_err(|e| CniError::new(ErrorCode::Internal, format!("event on pod: {e}")))?;
        let request = ApiRequest::new(api.resource_url()).create(&PostParams::default(), body);
        let started = Instant::now();
        self.spend(self.attempt(started, send::<Event>(&client, request, &self.http2)))
            .map(drop)
            .map_err(|e| {
                let what = format!("event on pod {}/{}", pod.namespace, pod.name);
                cni_error(&self.server, &what, &e)
            })
    }
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
fn current_user(kc: &kube::config::Kubeconfig) -> Option<String> {
    let current = kc.current_context.as_ref()?;
    let context = kc.contexts.iter().find(|c| &c.name == current)?;
    context.context.as_ref()?.user.clone()
}

/// The cluster of `kc`'s current context, if it names one that is there.
fn current_cluster(kc: &kube::config::Kubeconfig) -> Option<&kube::config::Cluster> {
    let current = kc.current_context.as_ref()?;
    let context = kc.contexts.iter().find(|c| &c.name == current)?;
    let name = &context.context.as_ref()?.cluster;
    kc.clusters
        .iter()
        .find(|c| &c.name == name)?
        .cluster
        .as_ref()
}

fn inline_files(kc: &mut kube::config::Kubeconfig, sources: &mut Sources) -> Result<(), String> {
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
const MAX_CERT_FILE: u64 = 1 << 20;

/// The file a kubeconfig names for a certificate or key, as its `-data` form (base64).
fn inlined(file: &str, sources: &mut Sources) -> Result<String, String> {
    sources
        .read(Path::new(file), MAX_CERT_FILE)
        .map(|pem| cni::base64::encode(&pem))
        .map_err(|e| format!("{file}: {e}"))
}

/// The namespace and name of an API object as JSON (empty when missing).
fn name_of(object: &Value) -> (&str, &str) {
    let meta = &object["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default(),
    )
}

/// Whether a write of `pod`'s status is made on the condition that the API's pod has the
/// runtime's UID: not for a static pod, whose API object (a mirror) has another UID.
fn checks_uid(pod: &Pod) -> bool {
    !pod.uid.is_empty() && !pod.is_static()
}

/// An answer about another object than the one asked for (a proxy's mistake, or worse) is not
/// used: plumb would patch, or plan from, the wrong object.
fn answers_for(what: &str, got: (&str, &str), asked: (&str, &str)) -> Result<(), CniError> {
    if got == asked {
        return Ok(());
    }
    Err(CniError::new(
        ErrorCode::Io,
        format!(
            "Kubernetes API: {what}: the answer is about {}/{}, not the object asked for",
            shortened(got.0.to_string(), MAX_NAME),
            shortened(got.1.to_string(), MAX_NAME)
        ),
    ))
}

/// Annotations as the planner takes them.
pub fn annotations_from(
    map: &serde_json::Map<String, serde_json::Value>,
) -> BTreeMap<String, String> {
    map.iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;
    use testkit::kube_api::{Fault, FaultKind, KubeApi, KubeApiOptions, KubeconfigUser, Resource};

    use super::*;

    /// The API stand-in with one pod, and a client for it with a `budget` of API time.
    fn cluster(budget: Duration) -> (KubeApi, tempfile::TempDir, KubeCluster) {
        let api = KubeApi::start(KubeApiOptions::default());
        api.put(
            Resource::Pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"namespace": "default", "name": "p"},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        );
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
        let c = KubeCluster::with_budget(&kubeconfig, budget).unwrap();
        (api, dir, c)
    }

    /// A TCP relay to `upstream`, through which a test can make the connections already open go
    /// dead ([`Relay::black_hole`]: what comes on them goes nowhere, and no reset comes back),
    /// as when an API server or a load balancer in front of it fails over.
    struct Relay {
        addr: std::net::SocketAddr,
        accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        dead_below: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Relay {
        fn to(upstream: std::net::SocketAddr) -> Relay {
            use std::sync::atomic::AtomicUsize;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let relay = Relay {
                addr: listener.local_addr().unwrap(),
                accepted: std::sync::Arc::new(AtomicUsize::new(0)),
                dead_below: std::sync::Arc::new(AtomicUsize::new(0)),
            };
            let (accepted, dead_below) = (relay.accepted.clone(), relay.dead_below.clone());
            std::thread::spawn(move || {
                for client in listener.incoming().flatten() {
                    let id = accepted.fetch_add(1, Ordering::SeqCst);
                    let Ok(server) = std::net::TcpStream::connect(upstream) else {
                        continue;
                    };
                    for (mut from, mut to) in [
                        (client.try_clone().unwrap(), server.try_clone().unwrap()),
                        (server, client),
                    ] {
                        let dead_below = dead_below.clone();
                        std::thread::spawn(move || {
                            let mut buf = [0u8; 16384];
                            while let Ok(n @ 1..) = std::io::Read::read(&mut from, &mut buf) {
                                let dead = id < dead_below.load(Ordering::SeqCst);
                                if !dead && std::io::Write::write_all(&mut to, &buf[..n]).is_err() {
                                    break;
                                }
                            }
                        });
                    }
                }
            });
            relay
        }

        fn black_hole(&self) {
            self.dead_below
                .store(self.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
        }
    }

    #[test]
    fn a_connection_gone_dead_is_dropped_and_the_retry_gets_a_new_one() {
        // An HTTP/2 request that times out resets only its stream: without pings, the dead
        // connection stayed in the pool, and every later request of the call (and, in the
        // daemon, of every later call) went onto it and timed out too.
        let (api, dir, _) = cluster(Duration::from_secs(30));
        let relay = Relay::to(api.addr());
        let kubeconfig = dir.path().join("kubeconfig");
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        let relayed = kubeconfig.with_file_name("kc-relayed");
        std::fs::write(
            &relayed,
            text.replace(&api.addr().to_string(), &relay.addr.to_string()),
        )
        .unwrap();
        let mut c = KubeCluster::with_budget(&relayed, Duration::from_secs(30)).unwrap();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
        assert!(
            c.http2.load(Ordering::Relaxed),
            "the stand-in speaks HTTP/2"
        );
        relay.black_hole();
        for _ in 0..2 {
            c.begin_call(Duration::from_secs(30));
            let started = Instant::now();
            assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{:?}",
                started.elapsed()
            );
        }
        assert_eq!(api.connections_accepted(), 2, "one new connection, kept");
    }

    /// A pod other than the `default/p` the tests ask for, as a misbehaving proxy answers.
    fn someone_else() -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "default", "name": "someone-else", "uid": "u-2"},
               "spec": {"containers": [{"name": "c", "image": "x"}]}})
    }

    #[test]
    fn an_answer_about_another_object_is_refused() {
        // A proxy that answers with another pod or NAD than the one asked for: plumb would plan
        // from, or patch the status of, the wrong object. The call fails and names both.
        let (api, _dir, c) = cluster(Duration::from_secs(5));
        let other_pod = someone_else();
        api.add_fault(
            Fault::new(FaultKind::Body(200, other_pod.to_string()))
                .path("/api/v1/namespaces/default/pods/p")
                .times(1),
        );
        let e = c.pod("default", "p", false).unwrap_err();
        assert!(e.msg.contains("get pod default/p"), "{e}");
        assert!(e.msg.contains("default/someone-else"), "{e}");
        // Once the proxy behaves, the pod is read.
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");

        let nad = |ns: &str, name: &str| {
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"namespace": ns, "name": name},
                   "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}})
        };
        api.put(Resource::NetworkAttachmentDefinitions, nad("ns-a", "net-a"));
        api.add_fault(
            Fault::new(FaultKind::Body(200, nad("ns-b", "net-a").to_string()))
                .path(
                    "/apis/k8s.cni.cncf.io/v1/namespaces/ns-a/network-attachment-definitions/net-a",
                )
                .times(1),
        );
        let r = NetworkRef::new("ns-a", "net-a");
        let e = c.nad(&r).unwrap_err();
        assert!(e.msg.contains("ns-b/net-a"), "{e}");
        assert!(c.nad(&r).unwrap().is_some());
    }

    /// A NAD of `ns`/`name` as the API serves it.
    fn nad_object(ns: &str, name: &str) -> serde_json::Value {
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"namespace": ns, "name": name},
               "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}})
    }

    /// The stand-in (`http2` or HTTP/1.1 only) with pod `default/p` and NADs `ns-a/one` and
    /// `ns-a/two`, each NAD answer 200 ms late; `ns-a/broken` answers 403. A client for it.
    fn slow_nads(http2: bool) -> (KubeApi, tempfile::TempDir, KubeCluster, Vec<NetworkRef>) {
        let api = KubeApi::start(KubeApiOptions {
            http2,
            ..KubeApiOptions::default()
        });
        api.put(
            Resource::Pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"namespace": "default", "name": "p"},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        );
        for name in ["one", "two"] {
            api.put(
                Resource::NetworkAttachmentDefinitions,
                nad_object("ns-a", name),
            );
        }
        let nads = "/apis/k8s.cni.cncf.io/v1/namespaces/ns-a/network-attachment-definitions";
        api.add_fault(
            Fault::new(FaultKind::Status(403, "Forbidden".into())).path(&format!("{nads}/broken")),
        );
        api.add_fault(Fault::new(FaultKind::Latency(Duration::from_millis(200))).path(nads));
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
        let c = KubeCluster::from_kubeconfig(&kubeconfig).unwrap();
        let refs = ["one", "missing", "broken", "two"]
            .map(|n| NetworkRef::new("ns-a", n))
            .to_vec();
        (api, dir, c, refs)
    }

    /// What `nads` answered for `slow_nads`'s refs: each as `nad` answers it, in order.
    fn assert_answers(got: &[Result<Option<NetworkAttachmentDefinition>, CniError>]) {
        let name = |i: usize| {
            got[i]
                .as_ref()
                .unwrap()
                .as_ref()
                .map(|n| n.metadata.name.clone().unwrap())
        };
        assert_eq!(got.len(), 4);
        assert_eq!(name(0).as_deref(), Some("one"));
        assert_eq!(name(1), None, "a missing NAD is Ok(None)");
        let e = got[2].as_ref().unwrap_err();
        assert!(
            e.msg
                .contains("get network-attachment-definition ns-a/broken"),
            "{e}"
        );
        assert!(e.msg.contains("403"), "{e}");
        assert_eq!(e.code, ErrorCode::Io.code(), "{e}");
        assert_eq!(name(3).as_deref(), Some("two"));
    }

    #[test]
    fn nads_go_out_together_on_one_http2_connection() {
        let (api, _dir, c, refs) = slow_nads(true);
        // The pod's GET opens the connection and shows it is HTTP/2.
        c.pod("default", "p", false).unwrap().unwrap();
        assert_answers(&c.nads(&refs));
        assert!(api.max_in_flight() >= 2, "{}", api.max_in_flight());
        assert_eq!(api.connections_accepted(), 1);
    }

    #[test]
    fn nads_go_one_after_the_other_over_http1_or_before_the_version_is_known() {
        // HTTP/1.1: together they would each need a connection of their own.
        let (api, _dir, c, refs) = slow_nads(false);
        c.pod("default", "p", false).unwrap().unwrap();
        assert_answers(&c.nads(&refs));
        assert_eq!(api.max_in_flight(), 1);
        assert_eq!(api.connections_accepted(), 1);
        // No answer yet, so no connection whose version is known: one after the other, and
        // the first one's connection carries the others.
        let (api, _dir, c, refs) = slow_nads(true);
        assert_answers(&c.nads(&refs));
        assert_eq!(api.max_in_flight(), 1);
        assert_eq!(api.connections_accepted(), 1);
    }

    #[test]
    fn nads_refused_together_for_a_rotated_token_are_all_retried_with_the_new_one() {
        let (api, dir, _, refs) = slow_nads(true);
        let token = dir.path().join("token");
        let kubeconfig = api.write_kubeconfig(
            dir.path().join("rotating"),
            KubeconfigUser::TokenFile(&token),
        );
        let c = KubeCluster::from_kubeconfig(&kubeconfig).unwrap();
        c.pod("default", "p", false).unwrap().unwrap();
        // The token is replaced (and the old one revoked) after the call read it.
        let old = api.token().unwrap();
        api.accept_token("rotated");
        api.revoke_token(&old);
        std::fs::write(&token, "rotated").unwrap();
        let found = [&refs[0], &refs[3]].map(|r| r.clone());
        let got = c.nads(&found);
        assert!(got.iter().all(|g| matches!(g, Ok(Some(_)))), "{got:?}");
        let statuses: Vec<u16> = api
            .requests()
            .iter()
            .filter(|r| r.path.contains("network-attachment-definitions"))
            .map(|r| r.status)
            .collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 401).count(),
            2,
            "{statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            2,
            "{statuses:?}"
        );
    }

    #[test]
    fn a_token_the_api_server_no_longer_takes_is_told_from_an_api_server_that_does_not_answer() {
        // The daemon checks the token it wrote on the node this way (node_token.rs): a 401
        // only, never an API server down or failing, may make it drop the token.
        let (api, _dir, c) = cluster(Duration::from_secs(2));
        assert!(c.credentials_accepted().unwrap());
        api.add_fault(Fault::new(FaultKind::Status(500, "InternalError".into())).path("/version"));
        let e = c.credentials_accepted().unwrap_err();
        assert!(
            e.msg.contains("get /version") && e.msg.contains("500"),
            "{e}"
        );
        api.clear_faults();
        api.revoke_token(&api.token().unwrap());
        assert!(!c.credentials_accepted().unwrap());
        let asked: Vec<_> = (api.requests().into_iter())
            .map(|r| (r.method, r.path, r.status))
            .collect();
        assert_eq!(
            asked.last(),
            Some(&("GET".to_string(), "/version".to_string(), 401)),
            "{asked:?}"
        );
    }

    #[test]
    fn time_between_requests_is_not_api_time() {
        // The delegates run between the GETs and the status PATCH; however long they take, the
        // PATCH still has its budget.
        let (_api, _dir, c) = cluster(Duration::from_millis(500));
        c.pod("default", "p", false).unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let pod = c.pod("default", "p", false).unwrap().unwrap();
        c.set_network_status(&pod, "[]").unwrap();
    }

    #[test]
    fn the_requests_of_a_call_share_one_budget() {
        let (api, _dir, c) = cluster(Duration::from_millis(900));
        api.add_fault(
            Fault::new(FaultKind::Latency(Duration::from_millis(400))).path("/api/v1/namespaces"),
        );
        c.pod("default", "p", false).unwrap().unwrap();
        c.pod("default", "p", false).unwrap().unwrap();
        // 800 ms of the 900 are spent: the third GET gets 100 ms, and no answer in them.
        let started = Instant::now();
        let e = c.pod("default", "p", false).unwrap_err();
        assert_eq!(e.code, ErrorCode::TryAgainLater.code(), "{e}");
        assert!(e.msg.contains("ran out"), "{e}");
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
    }

    /// A `Status` body as the API server writes it, claiming `code`.
    fn status_body(code: u16, reason: &str) -> String {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("claims {code}"), "reason": reason, "code": code})
        .to_string()
    }

    #[test]
    fn an_error_answer_is_judged_by_its_http_status() {
        let (api, _dir, c) = cluster(Duration::from_secs(10));
        let path = "/api/v1/namespaces/default/pods/p";
        // A load balancer in front of the API server answers 503 with a JSON body that is no
        // `Status` (no `code`): as transient as any 503, so retried.
        let lb = r#"{"message": "no healthy upstream"}"#;
        api.add_fault(
            Fault::new(FaultKind::Body(503, lb.into()))
                .path(path)
                .times(2),
        );
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
        // When it lasts: code 11, and the message names the HTTP status.
        api.add_fault(Fault::new(FaultKind::Body(503, lb.into())).path(path));
        let e = c.pod("default", "p", false).unwrap_err();
        assert_eq!(e.code, ErrorCode::TryAgainLater.code(), "{e}");
        assert!(
            e.msg.contains("no healthy upstream") && e.msg.contains("503"),
            "{e}"
        );
        api.clear_faults();
        // A 500 whose body claims 404 is a server error, not a missing pod (which fails the
        // ADD with code 3, and makes a DEL without a record undo nothing); the same for a NAD.
        api.add_fault(
            Fault::new(FaultKind::Body(500, status_body(404, "NotFound")))
                .path(path)
                .times(1),
        );
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
        api.put(
            Resource::NetworkAttachmentDefinitions,
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"namespace": "default", "name": "n"},
                   "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}}),
        );
        api.add_fault(
            Fault::new(FaultKind::Body(500, status_body(404, "NotFound")))
                .path(
                    "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/n",
                )
                .times(1),
        );
        assert!(c.nad(&NetworkRef::new("default", "n")).unwrap().is_some());
        // And a 403 whose body claims 503 is not retried.
        api.clear_requests();
        api.add_fault(
            Fault::new(FaultKind::Body(403, status_body(503, "ServiceUnavailable")))
                .path(path)
                .times(2),
        );
        let e = c.pod("default", "p", false).unwrap_err();
        assert_eq!(e.code, ErrorCode::Io.code(), "{e}");
        assert!(e.msg.contains("403"), "{e}");
        assert_eq!(api.requests().len(), 1);
    }

    /// A 403 as the API server answers a request that RBAC does not allow.
    fn forbidden(verb: &str) -> FaultKind {
        FaultKind::Body(
            403,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": format!("pods \"p\" is forbidden: User \"system:serviceaccount:kube-system:multus\" \
                                       cannot {verb} resource \"pods/status\" in API group \"\" in the namespace \"default\""),
                   "reason": "Forbidden", "details": {"name": "p", "kind": "pods"}, "code": 403})
            .to_string(),
        )
    }

    const STATUS_PATH: &str = "/api/v1/namespaces/default/pods/p/status";

    /// The methods and HTTP statuses of the requests made on the status of pod `default/p`
    /// and on the pod itself.
    fn writes(api: &KubeApi) -> Vec<(String, u16)> {
        api.requests()
            .iter()
            .filter(|r| r.path.starts_with("/api/v1/namespaces/default/pods/p"))
            .map(|r| (r.method.clone(), r.status))
            .collect()
    }

    #[test]
    fn with_multus_rbac_the_status_is_written_by_update() {
        // Multus's ClusterRole grants get and update on pods/status, not patch: an operator
        // who swaps Multus for plumb and keeps its service account gets every pod's
        // network-status written (a refused write undoes the pod's attachments), by GET and PUT.
        let (api, _dir, c) = cluster(Duration::from_secs(5));
        let mut p = api.get(Resource::Pods, "default", "p").unwrap();
        // A status field newer than plumb's Kubernetes types is kept.
        p["status"] = json!({"phase": "Pending", "aFieldFromTheFuture": {"x": 1}});
        api.put(Resource::Pods, p);
        api.add_fault(
            Fault::new(forbidden("patch"))
                .method("PATCH")
                .path(STATUS_PATH),
        );
        let pod = c.pod("default", "p", false).unwrap().unwrap();
        api.clear_requests();
        c.set_network_status(&pod, "[{\"name\":\"x\"}]").unwrap();
        let p = api.get(Resource::Pods, "default", "p").unwrap();
        assert_eq!(
            p["metadata"]["annotations"][netattach::NETWORK_STATUS_ANNOTATION],
            "[{\"name\":\"x\"}]"
        );
        assert_eq!(p["status"]["aFieldFromTheFuture"], json!({"x": 1}));
        assert_eq!(
            writes(&api),
            [
                ("PATCH".into(), 403),
                ("GET".into(), 200),
                ("PUT".into(), 200)
            ]
        );

        // A pod changed between the GET and the PUT (409) is read again.
        api.add_fault(
            Fault::new(FaultKind::Status(409, "Conflict".into()))
                .method("PUT")
                .path(STATUS_PATH)
                .times(1),
        );
        api.clear_requests();
        c.set_network_status(&pod, "[]").unwrap();
        assert_eq!(
            writes(&api),
            [
                ("PATCH".into(), 403),
                ("GET".into(), 200),
                ("PUT".into(), 409),
                ("GET".into(), 200),
                ("PUT".into(), 200)
            ]
        );
        let p = api.get(Resource::Pods, "default", "p").unwrap();
        assert_eq!(
            p["metadata"]["annotations"][netattach::NETWORK_STATUS_ANNOTATION],
            "[]"
        );

        // Neither allowed: the error says what was refused.
        api.add_fault(
            Fault::new(forbidden("update"))
                .method("PUT")
                .path(STATUS_PATH),
        );
        let e = c.set_network_status(&pod, "[]").unwrap_err();
        assert!(e.msg.contains("set network-status of pod default/p"), "{e}");
        assert!(e.msg.contains("cannot update"), "{e}");
    }

    #[test]
    fn a_patch_refused_by_a_uid_precondition_says_the_pod_was_recreated() {
        // The API server's answer when a write's UID precondition fails (409, not the 422 of a
        // UID changed by a merge patch): the sandbox is not the pod's, code 3. A 409 for any
        // other reason is not taken for it.
        let (api, _dir, c) = cluster(Duration::from_secs(5));
        let pod = c.pod("default", "p", false).unwrap().unwrap();
        // The status PATCH answered with a 409 saying `message`, once; what it fails with.
        let refused_with = |message: &str| {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": message, "reason": "Conflict", "code": 409});
            api.add_fault(
                Fault::new(FaultKind::Body(409, status.to_string()))
                    .method("PATCH")
                    .path(STATUS_PATH)
                    .times(1),
            );
            c.set_network_status(&pod, "[]").unwrap_err()
        };
        let e = refused_with(
            "Precondition failed: UID in precondition: the-uid-before, UID in object meta: the-new-uid",
        );
        assert_eq!(e.code, ErrorCode::UnknownContainer.code(), "{e}");
        assert!(e.msg.contains("the pod was recreated"), "{e}");
        let e = refused_with(
            "Operation cannot be fulfilled on pods \"p\": the object has been modified",
        );
        assert_ne!(e.code, ErrorCode::UnknownContainer.code(), "{e}");
        assert!(!e.msg.contains("recreated"), "{e}");
    }

    #[test]
    fn an_update_of_the_status_of_a_recreated_pod_is_refused() {
        // As the PATCH's UID precondition: the status of this sandbox is not written onto a
        // pod recreated under the same name.
        let (api, _dir, c) = cluster(Duration::from_secs(5));
        api.add_fault(
            Fault::new(forbidden("patch"))
                .method("PATCH")
                .path(STATUS_PATH),
        );
        let mut pod = c.pod("default", "p", false).unwrap().unwrap();
        pod.uid = "the-uid-of-the-pod-before".into();
        api.clear_requests();
        let e = c.set_network_status(&pod, "[]").unwrap_err();
        assert_eq!(e.code, ErrorCode::UnknownContainer.code(), "{e}");
        assert!(e.msg.contains("recreated"), "{e}");
        assert_eq!(writes(&api), [("PATCH".into(), 403), ("GET".into(), 200)]);
        let p = api.get(Resource::Pods, "default", "p").unwrap();
        assert!(
            p["metadata"]["annotations"]
                .get(netattach::NETWORK_STATUS_ANNOTATION)
                .is_none()
        );
    }

    #[test]
    fn a_kubeconfig_as_multus_writes_it_is_used() {
        // Multus's thin entrypoint writes the server as `https://[${KUBERNETES_SERVICE_HOST}]:…`,
        // an IPv4 address in brackets; Go reads it. An operator who keeps that kubeconfig must
        // get a working client.
        let (api, dir, _) = cluster(Duration::from_secs(5));
        let path = dir.path().join("kubeconfig");
        let text = std::fs::read_to_string(&path).unwrap();
        let url = api.url();
        let bracketed = url.replace("https://127.0.0.1:", "https://[127.0.0.1]:");
        assert_ne!(url, bracketed);
        std::fs::write(&path, text.replace(&url, &bracketed)).unwrap();
        let c = KubeCluster::with_budget(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    }

    #[test]
    fn a_status_patch_answered_for_another_pod_is_refused() {
        // A proxy that answers the PATCH with another pod (and never applied it): the pod would
        // run without its network-status while plumb reported success.
        let (api, _dir, c) = cluster(Duration::from_secs(5));
        let other_pod = someone_else();
        api.add_fault(
            Fault::new(FaultKind::Body(200, other_pod.to_string()))
                .method("PATCH")
                .path("/api/v1/namespaces/default/pods/p/status")
                .times(1),
        );
        let pod = c.pod("default", "p", false).unwrap().unwrap();
        let e = c.set_network_status(&pod, "[]").unwrap_err();
        assert!(e.msg.contains("set network-status of pod default/p"), "{e}");
        assert!(e.msg.contains("default/someone-else"), "{e}");
        c.set_network_status(&pod, "[]").unwrap();
    }

    #[test]
    fn a_status_write_answered_for_another_uid_is_refused() {
        // The answer names the pod but carries another UID (or none): not the answer to a
        // write made on the condition of this sandbox's UID, so the status may never have been
        // written. Accepted, the pod ran without its network-status while ADD succeeded. By
        // PATCH, and by update (the PATCH forbidden, as under Multus's RBAC).
        let (api, _dir, c) = cluster(Duration::from_secs(5));
        let pod = c.pod("default", "p", false).unwrap().unwrap();
        let path = "/api/v1/namespaces/default/pods/p/status";
        for (other_uid, forbidden) in [
            (json!("u-2"), false),
            (json!(null), false),
            (json!("u-2"), true),
        ] {
            let mut answer = api.get(Resource::Pods, "default", "p").unwrap();
            answer["metadata"]["uid"] = other_uid;
            if forbidden {
                api.add_fault(
                    Fault::new(FaultKind::Status(403, "Forbidden".into()))
                        .method("PATCH")
                        .path(path)
                        .times(1),
                );
            }
            api.add_fault(
                Fault::new(FaultKind::Body(200, answer.to_string()))
                    .method(if forbidden { "PUT" } else { "PATCH" })
                    .path(path)
                    .times(1),
            );
            let e = c.set_network_status(&pod, "[]").unwrap_err();
            assert_eq!(e.kind(), ErrorCode::Io, "{e}");
            assert!(
                e.msg.contains("set network-status of pod default/p")
                    && e.msg.contains(&format!("not this sandbox's {}", pod.uid)),
                "{e}"
            );
        }
        c.set_network_status(&pod, "[]").unwrap();
    }

    #[test]
    fn a_huge_answer_is_refused_and_does_not_flood_the_error() {
        // An API object is at most ~1.5 MiB (etcd's request limit); a proxy or a broken server
        // that sends far more must not make plumb hold it all in memory (the runtime would see
        // the plugin killed, with no error) nor copy it into the CNI error.
        let (api, _dir, c) = cluster(Duration::from_secs(10));
        let path = "/api/v1/namespaces/default/pods/p";
        let huge_pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": "p", "uid": "u",
                         "annotations": {"x": "y".repeat(20 << 20)}},
            "spec": {"containers": [{"name": "c", "image": "x"}]}});
        api.add_fault(
            Fault::new(FaultKind::Body(200, huge_pod.to_string()))
                .path(path)
                .times(1),
        );
        let e = c.pod("default", "p", false).unwrap_err();
        assert_eq!(e.code, ErrorCode::Io.code(), "{e}");
        assert!(
            e.msg.contains("get pod default/p") && e.msg.contains("MiB"),
            "{e}"
        );
        // A pod's JSON can be several times what etcd holds of it (protobuf): one of 6 MiB is
        // read. A NAD's cannot (etcd holds its JSON): one is refused past 4 MiB, since a call
        // holds 32 of them.
        let mut large_pod = huge_pod.clone();
        large_pod["metadata"]["annotations"]["x"] = json!("y".repeat(6 << 20));
        api.add_fault(
            Fault::new(FaultKind::Body(200, large_pod.to_string()))
                .path(path)
                .times(1),
        );
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
        let nad_path =
            "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/n";
        let large_nad = json!({"apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"namespace": "default", "name": "n",
                         "annotations": {"x": "y".repeat(5 << 20)}},
            "spec": {"config": "{}"}});
        api.add_fault(
            Fault::new(FaultKind::Body(200, large_nad.to_string()))
                .path(nad_path)
                .times(1),
        );
        let e = c.nad(&NetworkRef::new("default", "n")).unwrap_err();
        assert!(
            e.msg
                .contains("get network-attachment-definition default/n")
                && e.msg.contains("larger than 4 MiB"),
            "{e}"
        );
        // An error page of a megabyte: the error keeps its start, not all of it.
        let page = format!("<html>{}</html>", "z".repeat(1 << 20));
        api.add_fault(Fault::new(FaultKind::Body(403, page)).path(path).times(1));
        let e = c.pod("default", "p", false).unwrap_err();
        assert!(e.msg.contains("<html>zzz") && e.msg.contains("403"), "{e}");
        assert!(e.msg.len() < 2048, "{} bytes", e.msg.len());
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    }

    #[test]
    fn an_answer_with_huge_names_does_not_flood_the_error() {
        // The message of an error answer was cut to 1 KiB, but not its reason, nor the names
        // of an answer about another object: a broken server or proxy made a CNI error (and
        // the kubelet's event and log lines it ends up in) of megabytes.
        let (api, _dir, c) = cluster(Duration::from_secs(10));
        let path = "/api/v1/namespaces/default/pods/p";
        let huge = "r".repeat(1 << 20);
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "forbidden", "reason": huge, "code": 403});
        api.add_fault(
            Fault::new(FaultKind::Body(403, status.to_string()))
                .path(path)
                .times(1),
        );
        let e = c.pod("default", "p", false).unwrap_err();
        assert!(
            e.msg.contains("forbidden") && e.msg.contains("403 rrr"),
            "{e}"
        );
        assert!(e.msg.len() < 4096, "{} bytes", e.msg.len());
        let other = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": huge, "uid": "u-2"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}});
        api.add_fault(
            Fault::new(FaultKind::Body(200, other.to_string()))
                .path(path)
                .times(1),
        );
        let e = c.pod("default", "p", false).unwrap_err();
        assert!(e.msg.contains("the answer is about default/rrr"), "{e}");
        assert!(e.msg.len() < 4096, "{} bytes", e.msg.len());
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    }

    #[test]
    fn a_huge_answer_to_an_event_is_not_read() {
        // Events are posted after the pod's networks are up: an answer read whole, however
        // large (kube's `create`), could get the plugin killed for its memory then, and the
        // runtime would see a failed ADD. It is refused after 16 MiB as other answers are.
        let (api, _dir, c) = cluster(Duration::from_secs(10));
        let pod = c.pod("default", "p", false).unwrap().unwrap();
        let huge_event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"namespace": "default", "name": "p.1"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
            "message": "m".repeat(20 << 20)});
        api.add_fault(
            Fault::new(FaultKind::Body(201, huge_event.to_string()))
                .method("POST")
                .path("/api/v1/namespaces/default/events")
                .times(1),
        );
        let e = c
            .event(&pod, "Normal", "AddedInterface", "Add net1")
            .unwrap_err();
        assert!(
            e.msg.contains("event on pod default/p") && e.msg.contains("16 MiB"),
            "{e}"
        );
        c.event(&pod, "Normal", "AddedInterface", "Add net1")
            .unwrap();
    }

    #[test]
    fn errors_name_the_api_server() {
        // "connection refused" alone does not say which address: a kubeconfig pointing at an
        // old control-plane address is the first thing to rule out at 3 a.m.
        let (api, _dir, c) = cluster(Duration::from_secs(5));
        let server = api.url();
        api.set_down(true);
        let e = c.pod("default", "p", false).unwrap_err();
        assert!(e.msg.contains("get pod default/p"), "{e}");
        assert!(e.msg.contains(&server), "{server}: {e}");
        api.set_down(false);
        api.add_fault(Fault::new(FaultKind::Status(403, "Forbidden".into())).times(1));
        let e = c.nad(&NetworkRef::new("default", "n")).unwrap_err();
        assert!(e.msg.contains(&server), "{server}: {e}");
    }

    #[test]
    fn a_busy_server_is_asked_again_after_the_time_it_asks_for() {
        // With its queues full, the API server's priority-and-fairness filter answers 429 with
        // `Retry-After`; client-go (so Multus) waits that long. Asking again after 50, 100,
        // 200 ms from every node of a large cluster only adds to the load it is shedding.
        let (api, _dir, c) = cluster(Duration::from_secs(10));
        let path = "/api/v1/namespaces/default/pods/p";
        api.add_fault(
            Fault::new(FaultKind::TooManyRequests(1))
                .path(path)
                .times(2),
        );
        let started = Instant::now();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // A wait longer than what is left of the budget: code 11 at once, and the server is
        // not asked again in vain.
        api.clear_requests();
        api.add_fault(Fault::new(FaultKind::TooManyRequests(60)).path(path));
        let started = Instant::now();
        let e = c.pod("default", "p", false).unwrap_err();
        assert_eq!(e.code, ErrorCode::TryAgainLater.code(), "{e}");
        assert!(e.msg.contains("429"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(1), "{e}");
        assert_eq!(api.requests().len(), 1);
    }

    #[test]
    fn a_server_certificate_the_kubeconfig_does_not_trust_fails_at_once() {
        // A kubeconfig whose CA is not the server's (a rotated CA, an address that now leads to
        // another cluster) will not be trusted by asking again: the call fails at once, saying
        // why, rather than after the whole budget of retries.
        let (api, dir, _) = cluster(Duration::from_secs(20));
        let other = KubeApi::start(KubeApiOptions::default());
        let kubeconfig = dir.path().join("kubeconfig");
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        std::fs::write(&kubeconfig, text.replace(&api.url(), &other.url())).unwrap();
        let c = KubeCluster::with_budget(&kubeconfig, Duration::from_secs(20)).unwrap();
        let started = Instant::now();
        let e = c.pod("default", "p", false).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1), "{e}");
        assert_eq!(e.kind(), ErrorCode::Io, "{e}");
        assert!(e.msg.to_lowercase().contains("certificate"), "{e}");
        assert!(e.msg.contains(&other.url()), "{e}");
    }

    #[test]
    fn a_kubeconfig_or_token_file_that_is_no_small_regular_file_is_refused_at_once() {
        // A kubeconfig path that names a huge file, a device or a FIFO (a mistake in
        // the configuration, a volume mounted wrong) must not make the CNI call read without
        // end, hold it all in memory, or wait for a writer: code 7, naming the file and why.
        let (api, dir, _) = cluster(Duration::from_secs(5));
        let huge = dir.path().join("huge");
        let mut text = std::fs::read_to_string(dir.path().join("kubeconfig")).unwrap();
        text.push_str(&format!("# {}\n", "x".repeat(2 << 20)));
        std::fs::write(&huge, &text).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let odd_utf16 = dir.path().join("odd-utf16");
        std::fs::write(&odd_utf16, [0xFF, 0xFE, b'a']).unwrap();
        for (path, why) in [
            (huge.as_path(), "larger than 1 MiB"),
            (Path::new("/dev/zero"), "not a regular file"),
            (fifo.as_path(), "not a regular file"),
            (odd_utf16.as_path(), "UTF-16"),
        ] {
            let started = Instant::now();
            let e = in_time(path);
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{}",
                path.display()
            );
            assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
            assert!(
                e.msg.contains(&format!("kubeconfig {}", path.display())) && e.msg.contains(why),
                "{e}"
            );
        }
        // The same for the token file it names.
        let token = dir.path().join("token");
        std::fs::write(&token, api.token().unwrap()).unwrap();
        let kubeconfig = api.write_kubeconfig(
            dir.path().join("kc-token-file"),
            KubeconfigUser::TokenFile(&token),
        );
        for (path, why) in [
            (huge.as_path(), "larger than 1 MiB"),
            (Path::new("/dev/zero"), "not a regular file"),
            (fifo.as_path(), "not a regular file"),
        ] {
            let text = std::fs::read_to_string(&kubeconfig)
                .unwrap()
                .replace(&token.display().to_string(), &path.display().to_string());
            let bad = dir.path().join("kc-bad-token-file");
            std::fs::write(&bad, text).unwrap();
            let e = in_time(&bad);
            assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
            assert!(
                e.msg.contains(&format!("tokenFile {}", path.display())) && e.msg.contains(why),
                "{e}"
            );
        }
    }

    /// The error of a client from `kubeconfig`, which must come within seconds.
    fn in_time(kubeconfig: &Path) -> CniError {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = kubeconfig.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(KubeCluster::with_budget(&path, Duration::from_secs(5)).err());
        });
        rx.recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("{}: no answer within 5 s", kubeconfig.display()))
            .unwrap_or_else(|| panic!("{}: accepted", kubeconfig.display()))
    }

    /// `kubeconfig` (written for `KubeconfigUser::Token`) with its user replaced by an exec
    /// credential plugin running `script` in sh, written beside it as `name`.
    #[test]
    fn a_kubeconfig_naming_a_proxy_is_refused_saying_so() {
        // Not kube's message, which names its cargo feature ("kube/http-proxy").
        let (_api, dir, _) = cluster(Duration::from_secs(5));
        let kubeconfig = dir.path().join("kubeconfig");
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        let proxied = kubeconfig.with_file_name("kc-proxied");
        std::fs::write(
            &proxied,
            text.replace(
                "    server: ",
                "    proxy-url: http://127.0.0.1:3128\n    server: ",
            ),
        )
        .unwrap();
        let e = KubeCluster::with_budget(&proxied, Duration::from_secs(5))
            .err()
            .expect("refused");
        assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
        assert!(
            e.msg.contains(
                "proxy-url http://127.0.0.1:3128: plumb does not connect through a proxy"
            ),
            "{e}"
        );
        // Refused before its user's credential plugin runs: one that hangs does not turn the
        // configuration error into a timeout.
        let with_exec = with_exec_user(&proxied, "kc-proxied-exec", "sleep 30");
        let started = Instant::now();
        let e = KubeCluster::with_budget(&with_exec, Duration::from_secs(5))
            .err()
            .expect("refused");
        assert!(started.elapsed() < Duration::from_secs(2), "{e}");
        assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
    }

    #[test]
    fn an_exec_credential_plugin_may_give_a_client_certificate() {
        // plumb runs the plugin itself and puts its credential in the kubeconfig: a client
        // certificate and key (PEM, as the protocol gives them) work as a token does.
        let (api, dir, _) = cluster(Duration::from_secs(5));
        let with_cert = api.write_kubeconfig(
            dir.path().join("kc-cert"),
            KubeconfigUser::ClientCertificate,
        );
        let text = std::fs::read_to_string(&with_cert).unwrap();
        let pem = |key: &str| String::from_utf8(data_line(&text, key).1).unwrap();
        let credential = json!({"apiVersion": "client.authentication.k8s.io/v1beta1",
            "kind": "ExecCredential", "status": {
                "clientCertificateData": pem("client-certificate"),
                "clientKeyData": pem("client-key")}});
        let answer = dir.path().join("credential.json");
        std::fs::write(&answer, credential.to_string()).unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let execs = with_exec_user(
            &kubeconfig,
            "kc-exec-cert",
            &format!("cat {}", answer.display()),
        );
        let c = KubeCluster::with_budget(&execs, Duration::from_secs(5)).unwrap();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    }

    #[test]
    fn a_removed_auth_provider_is_refused_before_it_runs_anything() {
        // kube-rs runs gcp's `cmd-path` with no time limit (a `sleep 100` held the call until
        // the runtime killed it); client-go removed gcp and azure in 1.26, so Multus refuses
        // them too. Refused at once, naming the provider and what to use instead.
        let (_api, dir, _) = cluster(Duration::from_secs(5));
        let kubeconfig = dir.path().join("kubeconfig");
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        let user = text.find("  user:\n    token:").unwrap();
        for name in ["gcp", "azure"] {
            let path = kubeconfig.with_file_name(format!("kc-{name}"));
            let with_provider = format!(
                "{}  user:\n    auth-provider:\n      name: {name}\n      config:\n        \
                 cmd-path: /bin/sleep\n        cmd-args: \"100\"\n",
                &text[..user]
            );
            std::fs::write(&path, with_provider).unwrap();
            let started = Instant::now();
            let e = KubeCluster::with_budget(&path, Duration::from_secs(5))
                .err()
                .expect("refused");
            assert!(started.elapsed() < Duration::from_secs(2), "{e}");
            assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
            assert!(
                e.msg.contains(&format!(
                    "the \"{name}\" auth-provider was removed from Kubernetes clients in 1.26"
                )),
                "{e}"
            );
        }
    }

    fn with_exec_user(kubeconfig: &Path, name: &str, script: &str) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let user = text.find("  user:\n    token:").unwrap();
        let exec = format!(
            "{}  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      \
             command: /bin/sh\n      args: [\"-c\", {}]\n",
            &text[..user],
            serde_json::to_string(script).unwrap()
        );
        let path = kubeconfig.with_file_name(name);
        std::fs::write(&path, exec).unwrap();
        path
    }

    #[test]
    fn an_exec_credential_plugin_that_does_not_return_fails_the_call_within_its_budget() {
        // kube-rs runs a user's exec plugin while it builds the client, with no timeout: one
        // that hangs (its cloud's metadata endpoint down) held the CNI call until the runtime
        // killed it, with no error to show. Now: code 11 within the budget, naming the file.
        let (api, dir, _) = cluster(Duration::from_secs(5));
        let kubeconfig = dir.path().join("kubeconfig");
        let hangs = with_exec_user(&kubeconfig, "kc-exec-hangs", "sleep 30");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = hangs.clone();
        let started = Instant::now();
        std::thread::spawn(move || {
            let _ = tx.send(KubeCluster::with_budget(&path, Duration::from_secs(2)).err());
        });
        let e = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("no answer within 10 s")
            .expect("accepted");
        assert!(started.elapsed() < Duration::from_secs(4), "{e}");
        assert_eq!(e.kind(), ErrorCode::TryAgainLater, "{e}");
        assert!(
            e.msg.contains(&hangs.display().to_string()) && e.msg.contains("exec"),
            "{e}"
        );
        // A plugin that answers is used as before.
        let credential = json!({"apiVersion": "client.authentication.k8s.io/v1beta1",
            "kind": "ExecCredential", "status": {"token": api.token().unwrap()}});
        let answers = with_exec_user(
            &kubeconfig,
            "kc-exec-answers",
            &format!("echo '{credential}'"),
        );
        let c = KubeCluster::with_budget(&answers, Duration::from_secs(5)).unwrap();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    }

    /// The line of kubeconfig `text` giving `key` inline (`<key>-data: …`), and what it holds.
    fn data_line<'a>(text: &'a str, key: &str) -> (&'a str, Vec<u8>) {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key}-data:")))
            .unwrap();
        let data = line.split_once(':').unwrap().1.trim();
        (line, cni::base64::decode(data).unwrap())
    }

    #[test]
    fn certificate_and_key_files_are_read_bounded_into_the_kubeconfig() {
        // The cluster's CA, the client certificate and its key named as files work as their
        // -data forms do; a FIFO or a device in their place fails at once with code 7 naming
        // the field, where kube-rs would wait for a writer or read on without end.
        let (api, dir, _) = cluster(Duration::from_secs(5));
        let kubeconfig = api.write_kubeconfig(
            dir.path().join("kc-cert"),
            KubeconfigUser::ClientCertificate,
        );
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        let keys = ["certificate-authority", "client-certificate", "client-key"];
        let mut with_files = text.clone();
        for key in keys {
            let (line, data) = data_line(&text, key);
            let file = dir.path().join(key);
            std::fs::write(&file, data).unwrap();
            let indent = &line[..line.len() - line.trim_start().len()];
            with_files = with_files.replace(line, &format!("{indent}{key}: {}", file.display()));
        }
        let files = dir.path().join("kc-files");
        std::fs::write(&files, &with_files).unwrap();
        let c = KubeCluster::with_budget(&files, Duration::from_secs(5)).unwrap();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");

        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        for key in keys {
            for bad in [fifo.as_path(), Path::new("/dev/zero")] {
                let text = with_files.replace(
                    &dir.path().join(key).display().to_string(),
                    &bad.display().to_string(),
                );
                let kc = dir.path().join("kc-bad");
                std::fs::write(&kc, text).unwrap();
                let e = in_time(&kc);
                assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
                assert!(
                    e.msg.contains(&format!("{key} {}", bad.display()))
                        && e.msg.contains("not a regular file"),
                    "{key}: {e}"
                );
            }
        }
    }

    #[test]
    fn relative_paths_in_the_kubeconfig_are_its_directorys() {
        // As kubectl and kube-rs read them: a certificate-authority or tokenFile named
        // relatively is beside the kubeconfig, whatever the plugin's working directory.
        let (api, dir, _) = cluster(Duration::from_secs(5));
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("token"), api.token().unwrap()).unwrap();
        let kubeconfig = api.write_kubeconfig(
            sub.join("kubeconfig"),
            KubeconfigUser::TokenFile(&sub.join("token")),
        );
        let mut text = std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .replace(&sub.join("token").display().to_string(), "token");
        if let Some(ca) = api.ca_pem() {
            std::fs::write(sub.join("ca.crt"), ca).unwrap();
            let data = text
                .lines()
                .find(|l| l.trim_start().starts_with("certificate-authority-data:"))
                .unwrap()
                .to_string();
            text = text.replace(&data, "    certificate-authority: ca.crt");
        }
        std::fs::write(&kubeconfig, text).unwrap();
        let c = KubeCluster::with_budget(&kubeconfig, Duration::from_secs(5)).unwrap();
        assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
    }
}
