//! A Kubernetes API server stand-in for tests: the real REST shapes of the objects plumb uses
//! (pods, events core/v1 and events.k8s.io/v1, NetworkAttachmentDefinitions, IPAMClaims,
//! namespaces) over HTTP or HTTPS, reached through kube-rs and a kubeconfig exactly as a real
//! cluster is ([`KubeApi`]). No API server can be installed on the build machines, so this is
//! the one sanctioned stand-in (docs/architecture.md, "How it is tested"); what is simpler than
//! the real server is listed in `crates/testkit/KUBE_API.md`.

mod faults;
mod handlers;
mod kubeconfig;
#[cfg(test)]
mod namespace_tests;
mod patch;
mod resources;
mod selector;
mod server;
mod status;
mod store;
mod tls;
mod tokens;
mod watch;
mod writes;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub use self::faults::{Fault, FaultKind, LoggedRequest};
pub use self::kubeconfig::KubeconfigUser;
pub use self::resources::Resource;
use self::server::{Shared, lock};
use self::store::Store;
pub use self::tokens::IssuedToken;

/// How the stand-in is started.
#[derive(Clone, Debug)]
pub struct KubeApiOptions {
    /// Serve HTTPS (a fresh CA and a server certificate for `127.0.0.1` and `localhost`).
    /// Default `true`.
    pub tls: bool,
    /// Ask TLS clients for a certificate and accept those the CA signed (clients without one
    /// can still use a token). Only meaningful with `tls`. Default `true`.
    pub client_cert_auth: bool,
    /// Bearer tokens accepted from the start. Default: one random token.
    pub tokens: Vec<String>,
    /// Let requests without credentials through (the real server would call them
    /// `system:anonymous`, then RBAC would refuse most). Default `false`: 401.
    pub allow_anonymous: bool,
    /// How often a watch with `allowWatchBookmarks` gets a bookmark. Default 60 s, as the
    /// API server's watch cache.
    pub bookmark_interval: Duration,
    /// Offer HTTP/2 to TLS clients by ALPN, as the API server does (a client that picks it
    /// gets its requests served concurrently on one connection). `false`: HTTP/1.1 only, as
    /// behind a proxy that does not speak HTTP/2. Plain HTTP is always HTTP/1.1. Default
    /// `true`.
    pub http2: bool,
    /// The API server's `--service-account-max-token-expiration`, in seconds: a TokenRequest
    /// asking for longer is granted this long (its answer's `spec.expirationSeconds` says so).
    /// Default `None`: what is asked.
    pub max_token_expiration: Option<u64>,
}

impl Default for KubeApiOptions {
    fn default() -> Self {
        KubeApiOptions {
            tls: true,
            client_cert_auth: true,
            tokens: vec![format!("testkit-{}", store::new_uid())],
            allow_anonymous: false,
            bookmark_interval: Duration::from_secs(60),
            http2: true,
            max_token_expiration: None,
        }
    }
}

impl KubeApiOptions {
    /// Plain HTTP, token auth.
    pub fn http() -> Self {
        KubeApiOptions {
            tls: false,
            client_cert_auth: false,
            ..KubeApiOptions::default()
        }
    }
}

/// A running stand-in. It runs on its own thread with its own tokio runtime, so synchronous
/// tests, async tests and tests that run `plumb` as a subprocess use it alike. Dropping it
/// stops the server and closes every connection.
///
/// It serves GET, LIST, WATCH, create, replace, PATCH (merge, strategic merge, JSON patch,
/// server-side apply), DELETE and the `status` subresources, with one global resourceVersion,
/// 409 conflicts, and `Status` error bodies as the API server writes them. Tests seed and
/// inspect objects directly, assert on a log of every request, inject faults (latency, error
/// codes, dropped connections), rotate tokens, and take the server down (connection refused)
/// and back up on the same address.
///
/// ```no_run
/// use testkit::kube_api::{KubeApi, KubeApiOptions, KubeconfigUser, Resource};
/// let api = KubeApi::start(KubeApiOptions::default());
/// api.put(Resource::Pods, serde_json::json!({"metadata": {"name": "p", "namespace": "default"}}));
/// let dir = tempfile::tempdir().unwrap();
/// let kubeconfig = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
/// // … run plumb with `kubeconfig`, then:
/// assert!(api.requests().iter().any(|r| r.method == "PATCH"));
/// ```
pub struct KubeApi {
    shared: Arc<Shared>,
    tls: Option<tls::TlsMaterial>,
    acceptor: Option<TlsAcceptor>,
    runtime: Handle,
    /// The accept loop while the server is up; aborting it closes the listening socket.
    listener: Mutex<Option<JoinHandle<()>>>,
    /// While down: a socket bound to the address and not listening (connecting is refused), so
    /// that no other socket of the machine (a client's ephemeral port) takes the port meanwhile.
    reserved: Mutex<Option<tokio::net::TcpSocket>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KubeApi {
    /// Starts a server on `127.0.0.1` on a free port.
    pub fn start(opts: KubeApiOptions) -> KubeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("local address of a bound socket");
        let tls = opts
            .tls
            .then(|| tls::generate(opts.client_cert_auth, opts.http2));
        let acceptor = tls
            .as_ref()
            .map(|t| TlsAcceptor::from(t.server_config.clone()));
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            changes: tokio::sync::watch::Sender::new(0),
            watches_held: tokio::sync::watch::Sender::new(false),
            tokens: Mutex::new(opts.tokens),
            issued: Mutex::new(Vec::new()),
            service_account_uids: Mutex::new(std::collections::BTreeMap::new()),
            node_uids: Mutex::new(std::collections::BTreeMap::new()),
            max_token_expiration: opts.max_token_expiration,
            faults: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            logged: Condvar::new(),
            allow_anonymous: opts.allow_anonymous,
            // Bounded both ways: zero would spin, a huge value would overflow `Instant`.
            bookmark_interval: opts
                .bookmark_interval
                .clamp(Duration::from_millis(1), Duration::from_secs(86_400)),
            addr,
            connections: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
        });

        // current_thread: one core's worth of server is plenty for tests, starts in
        // microseconds, and leaves the other core to the code under test.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let handle = runtime.handle().clone();
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("kube-api-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // Dropping the runtime drops every connection and watch task.
            })
            .expect("spawn the kube-api thread");

        let api = KubeApi {
            shared,
            tls,
            acceptor,
            runtime: handle,
            listener: Mutex::new(None),
            reserved: Mutex::new(None),
            shutdown: Some(shutdown),
            thread: Some(thread),
        };
        api.serve(listener);
        api
    }

    fn serve(&self, listener: TcpListener) {
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let task = self.runtime.spawn(server::accept_loop(
            self.shared.clone(),
            listener,
            self.acceptor.clone(),
        ));
        *lock(&self.listener) = Some(task);
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `https://127.0.0.1:{port}` (or `http://…`), the kubeconfig's `server`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.shared.addr)
    }

    /// The CA certificate (PEM) that signed the server and client certificates.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    /// A client certificate and key (PEM) the server accepts when `client_cert_auth` is on.
    pub fn client_identity_pem(&self) -> Option<(&str, &str)> {
        self.tls
            .as_ref()
            .map(|t| (t.client_cert_pem.as_str(), t.client_key_pem.as_str()))
    }

    /// The first accepted token (what `KubeconfigUser::Token` writes).
    pub fn token(&self) -> Option<String> {
        lock(&self.shared.tokens).first().cloned()
    }

    /// Accepts another bearer token from now on. An accepted token is moved to the front, so it
    /// becomes the one `token()` and new kubeconfigs use.
    pub fn accept_token(&self, token: &str) {
        let mut tokens = lock(&self.shared.tokens);
        tokens.retain(|t| t != token);
        tokens.insert(0, token.to_owned());
    }

    /// The tokens issued through TokenRequest so far, in order (each accepted from then on).
    pub fn issued_tokens(&self) -> Vec<IssuedToken> {
        lock(&self.shared.issued).clone()
    }

    /// Gives the service account `namespace`/`name` the UID `uid`, which the tokens issued
    /// for it name from now on (as the pod tokens a test writes name it). Without it, the first
    /// token issued for a service account gives it a new UID.
    pub fn set_service_account_uid(&self, namespace: &str, name: &str, uid: &str) {
        lock(&self.shared.service_account_uids)
            .insert((namespace.to_owned(), name.to_owned()), uid.to_owned());
    }

    /// Registers the Node `name` with `uid`, as the kubelet does. A Node registered again with
    /// another UID (deleted and made again) is another object: the tokens bound to the one
    /// before are refused from now on (401), and a TokenRequest naming its old UID gets 409.
    /// Nodes never registered are not checked.
    pub fn register_node(&self, name: &str, uid: &str) {
        let before = lock(&self.shared.node_uids).insert(name.to_owned(), uid.to_owned());
        if before.is_none_or(|b| b == uid) {
            return;
        }
        let bound_before: Vec<String> = (lock(&self.shared.issued).iter())
            .filter(|t| {
                t.bound
                    .as_ref()
                    .is_some_and(|(k, n)| k == "Node" && n == name)
                    && t.bound_uid.as_deref() != Some(uid)
            })
            .map(|t| t.token.clone())
            .collect();
        lock(&self.shared.tokens).retain(|t| !bound_before.contains(t));
    }

    /// `true`: open watches deliver no more changes until `false`, when they deliver what they
    /// held, as a watch cache that lags behind the writes (a kubelet can start a pod's sandbox
    /// before a watcher on its node sees the pod). New watches still get their initial events.
    pub fn hold_watches(&self, held: bool) {
        self.shared.watches_held.send_replace(held);
    }

    /// Stops accepting a token: requests carrying it get 401 from now on.
    pub fn revoke_token(&self, token: &str) {
        lock(&self.shared.tokens).retain(|t| t != token);
    }

    /// Writes a kubeconfig (one cluster, context and user, namespace `default`) for this server
    /// and returns its path. Parent directories are created.
    ///
    /// Panics on I/O errors, and for `ClientCertificate` on a plain-HTTP server: both are
    /// mistakes in the test, not in the code under test.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>, user: KubeconfigUser<'_>) -> PathBuf {
        let path = path.as_ref();
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let file_name = path
            .file_name()
            .expect("kubeconfig path names a file")
            .to_string_lossy();
        let url = self.url();
        let info = kubeconfig::ClusterInfo {
            server: &url,
            ca_pem: self.ca_pem(),
            token: self.token(),
            client_cert_pem: self.tls.as_ref().map(|t| t.client_cert_pem.as_str()),
            client_key_pem: self.tls.as_ref().map(|t| t.client_key_pem.as_str()),
        };
        kubeconfig::write(dir, &file_name, &info, user)
    }

    /// Stores an object as a controller or `kubectl apply` would have left it, without going
    /// through HTTP (not logged, no faults). The namespace is `metadata.namespace` or
    /// `default`; a cluster-scoped object (a Namespace) has none, and is read and deleted with
    /// the namespace `""`. A new object gets a uid and creationTimestamp unless it has them; a
    /// replaced one keeps its old ones unless the new object sets them. Watches see the write.
    /// Returns the stored object, with its resourceVersion.
    pub fn put(&self, res: Resource, mut obj: Value) -> Value {
        let name = store::name_of(&obj).to_owned();
        assert!(!name.is_empty(), "KubeApi::put needs metadata.name");
        let ns = if res.is_namespaced() {
            obj.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_owned()
        } else {
            String::new()
        };
        self.shared.write(|s| {
            if let Some(old) = s.get(res, &ns, &name) {
                let meta = store::metadata_mut(&mut obj);
                for field in ["uid", "creationTimestamp"] {
                    if !meta.contains_key(field)
                        && let Some(v) = old.pointer(&format!("/metadata/{field}"))
                    {
                        meta.insert(field.to_owned(), v.clone());
                    }
                }
            }
            s.write(res, &ns, obj)
        })
    }

    /// The stored object, as a GET would return it (`ns` is `""` for a cluster-scoped one).
    pub fn get(&self, res: Resource, ns: &str, name: &str) -> Option<Value> {
        lock(&self.shared.store).get(res, ns, name).cloned()
    }

    /// The stored objects of one resource, in one namespace or all, ordered by namespace and
    /// name (all of a cluster-scoped one with `None`).
    pub fn list(&self, res: Resource, ns: Option<&str>) -> Vec<Value> {
        lock(&self.shared.store)
            .list(res, ns)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Removes an object at once (finalizers ignored); watches see `DELETED`. Returns it. `ns`
    /// is `""` for a cluster-scoped object.
    pub fn delete(&self, res: Resource, ns: &str, name: &str) -> Option<Value> {
        self.shared.write(|s| s.delete(res, ns, name))
    }

    /// The current resourceVersion (bumped by every write).
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }

    /// Forgets the change history, as etcd compaction does: a watch from an older
    /// resourceVersion then gets a 410 `Expired` error event.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// Every request answered so far, oldest first (a watch is logged when its stream starts).
    pub fn requests(&self) -> Vec<LoggedRequest> {
        lock(&self.shared.log).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// The number of connections accepted so far (TLS handshakes included, even failed ones).
    pub fn connections_accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// The most requests that were being handled at once so far: more than 1 only when a
    /// client had several in flight together (on HTTP/2, or on several connections). A
    /// request counts from its arrival until its answer's head is ready, injected latency
    /// included; a watch's stream after that is not counted.
    pub fn max_in_flight(&self) -> u64 {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits until a logged request matches (including ones logged before the call), for at
    /// most `timeout`. Use it to wait for a subprocess to reach the server, or for its watch
    /// to be established.
    pub fn wait_for_request(
        &self,
        timeout: Duration,
        pred: impl Fn(&LoggedRequest) -> bool,
    ) -> Option<LoggedRequest> {
        let deadline = Instant::now() + timeout;
        let mut log = lock(&self.shared.log);
        loop {
            if let Some(found) = log.iter().find(|r| pred(r)) {
                return Some(found.clone());
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())?;
            log = self
                .shared
                .logged
                .wait_timeout(log, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Adds a fault; faults apply in the order they were added (see [`Fault`]), to matching
    /// requests before authentication, as a proxy or an overloaded server would fail them.
    pub fn add_fault(&self, fault: Fault) {
        lock(&self.shared.faults).push(fault);
    }

    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// `true`: the server stops listening (connecting gets "connection refused") and every
    /// open connection, watches included, is cut. `false`: it listens again on the same
    /// address, with the same objects, tokens and certificates.
    pub fn set_down(&self, down: bool) {
        let mut listener = lock(&self.listener);
        if down {
            if let Some(task) = listener.take() {
                task.abort();
                // The abort takes effect when the server thread next runs. Wait for it, so the
                // listening socket is closed (and the caller's next request refused) when this
                // returns; connections are cut after that, so none accepted meanwhile survives.
                let (closed, wait) = std::sync::mpsc::channel();
                self.runtime.spawn(async move {
                    let _ = task.await;
                    let _ = closed.send(());
                });
                let _ = wait.recv_timeout(Duration::from_secs(5));
                *lock(&self.reserved) = self.reserve();
            }
            self.shared.cut_connections();
        } else if listener.is_none() {
            drop(listener);
            let mut reserved = lock(&self.reserved).take();
            // The old listening socket may not be closed yet on a loaded machine (its task is
            // aborted, not joined, when the wait above times out): wait for the port, not for
            // a time.
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let socket = loop {
                let listening = match reserved.take() {
                    Some(socket) => {
                        let _in = self.runtime.enter();
                        socket.listen(1024).and_then(|l| l.into_std())
                    }
                    None => TcpListener::bind(self.shared.addr),
                };
                match listening {
                    Ok(socket) => break socket,
                    Err(e)
                        if e.kind() == std::io::ErrorKind::AddrInUse
                            && std::time::Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => panic!("rebind {} after set_down(false): {e}", self.shared.addr),
                }
            };
            self.serve(socket);
        }
    }

    /// The address bound again at once, not listening (`reserved`); `None` if it cannot be.
    fn reserve(&self) -> Option<tokio::net::TcpSocket> {
        let socket = match self.shared.addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .ok()?;
        // As std's listeners do: the cut connections' TIME_WAIT does not hold the port.
        socket.set_reuseaddr(true).ok()?;
        socket.bind(self.shared.addr).ok()?;
        Some(socket)
    }

    /// Whether `set_down(true)` is in effect.
    pub fn is_down(&self) -> bool {
        lock(&self.listener).is_none()
    }

    /// Stops the server (as dropping it does).
    pub fn stop(self) {}
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.listener).take() {
            task.abort();
        }
        self.shared.cut_connections();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi")
            .field("url", &self.url())
            .field("down", &self.is_down())
            .finish()
    }
}
