//! [`KubeCluster`]: the engine's [`Cluster`] through kube-rs (GET a pod, GET a NAD, PATCH the
//! pod's network-status annotation, POST an event), built from a kubeconfig, with retries of
//! its own, bounded by the call's budget; testkit's API stand-in is reached through it
//! unchanged. Its parts: `transport` (the connector), `failure` (retries and errors),
//! `kubeconfig` and `exec_credential` (credentials), `status_write`, `token_request`.

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

use plumb_engine::cluster::{API_BUDGET, Cluster};
use plumb_engine::plan::Pod;

/// Public for the fuzz target `plumb_exec_credential` (its parser of the plugin's answer).
pub mod exec_credential;
mod failure;
mod kubeconfig;
mod sources;
mod status_write;
mod token_request;
mod transport;

use failure::*;
use kubeconfig::*;
pub(crate) use sources::Sources;
use status_write::*;
pub use token_request::Grant;
use transport::Use;

/// A client for the daemon's watch caches from `kubeconfig`, made on the runtime it runs on,
/// and the files it was made from.
pub(crate) async fn watch_client(kubeconfig: &Path) -> Result<(kube::Client, Sources), CniError> {
    let (client, _, sources) = client_from(kubeconfig, API_BUDGET, Use::Watch).await?;
    Ok((client, sources))
}

/// A kubeconfig of one cluster at `server`, its CA certificate in the file `ca`, and one user
/// whose token is in the file `token` (read again on every use): a service account's, as the
/// daemon watches with it and as it writes one on the node.
pub fn token_kubeconfig(server: &str, ca: &str, token: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "plumb", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "plumb", "user": {"tokenFile": token}}],
        "contexts": [{"name": "plumb", "context": {"cluster": "plumb", "user": "plumb"}}],
        "current-context": "plumb",
    })
}

/// A client for the daemon's watch caches from a pod's service account: the API server at
/// `server`, the CA certificate and token in the directory `service_account` (`ca.crt`,
/// `token`, kube-rs reading the token again as the kubelet rotates it), made on the runtime it
/// runs on. Not kube-rs's own in-cluster configuration, which reads the directory at its fixed
/// path: the daemon may read it elsewhere (`plumb daemon --host-root`).
pub(crate) async fn in_cluster_watch_client(
    server: &str,
    service_account: &Path,
) -> Result<kube::Client, CniError> {
    let failed = |e: &dyn std::fmt::Display| {
        CniError::new(
            ErrorCode::InvalidConfig,
            format!(
                "in-cluster configuration ({server}, the service account in {}): {e}",
                service_account.display()
            ),
        )
    };
    let file = |name: &str| service_account.join(name).to_string_lossy().into_owned();
    let kubeconfig = token_kubeconfig(server, &file("ca.crt"), &file("token"));
    let kubeconfig: kube::config::Kubeconfig =
        serde_json::from_value(kubeconfig).map_err(|e| failed(&e))?;
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| failed(&e))?;
    let (client, _) = client_of_config(cfg, Use::Watch).map_err(|e| failed(&e))?;
    Ok(client)
}

/// A pod as the planner takes it.
fn pod_from_kube(p: KubePod) -> Pod {
    Pod {
        namespace: p.metadata.namespace.unwrap_or_default(),
        name: p.metadata.name.unwrap_or_default(),
        uid: p.metadata.uid.unwrap_or_default(),
        annotations: p.metadata.annotations.unwrap_or_default(),
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
/// `REQUEST_TIMEOUT` bounds one attempt, its answer read whole (a server that trickles its
/// answer included). Everything one CNI call asks of the API is bounded too, by the call's
/// budget (the engine's `API_BUDGET`), so that the error reaches the runtime before the runtime
/// gives up on the call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The most NAD GETs of one call in flight at once on an HTTP/2 connection (the API server
/// allows 100 or more streams on one; a pod selects a handful of NADs).
const MAX_CONCURRENT_GETS: usize = 8;

/// How many times the network-status is written again when the pod changed between its read
/// and its update (409), when plumb may not PATCH (Multus's RBAC). client-go's
/// `RetryOnConflict`, which Multus uses, tries 5 times.
const MAX_UPDATE_CONFLICTS: usize = 5;

/// The real API, through kube-rs from a kubeconfig, on a current-thread tokio runtime. In thin
/// mode one is built per CNI call; the daemon keeps one across calls (`client_pool`), each
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
        let rt = crate::runtime::current_thread()?;
        let rt = Runtime(Some(rt));
        let started = Instant::now();
        let (client, server, sources) = rt.block_on(client_from(kubeconfig, budget, Use::Call))?;
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
    ///
    /// Retries are plumb's own and bounded (kube-rs's default retry layer is turned off so that
    /// the total time is known), with backoff, never sooner than the server's `Retry-After`; in
    /// the end the error says what happened. There is never a fake success
    /// (docs/multus-behaviour.md §8, quirk 5).
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
        match client_from(&self.kubeconfig, self.left(started), Use::Call).await {
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
                let pod = pod_from_kube(p);
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
            // way (two round trips more than the PATCH; deploy/common/rbac.yaml grants `patch`).
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
                    cni::quote::cut(uid, MAX_NAME),
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

#[cfg(test)]
mod tests;
