//! A token of the daemon's service account bound to its Node (a TokenRequest of
//! authentication.k8s.io/v1, `boundObjectRef` of kind `Node`), for the kubeconfig that `plumb
//! daemon --write-kubeconfig` keeps on the node (`kubeconfig_writer`). The pod's own token dies
//! with the pod, so a copy of it fails the plugin's own calls with 401 while no daemon runs (an
//! upgrade with the DaemonSet's `maxUnavailable: 1`); a node-bound token is valid while its Node
//! exists, until it expires.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use plumb_cluster::kube::KubeCluster;

/// How long a token is asked to last: a day covers a daemon that is away for hours (an
/// upgrade, a crash loop). The API server may give less (its
/// `--service-account-max-token-expiration`); the renewals follow what it gave. Renewed each
/// sixth of its life, so that at least five sixths are left when the daemon goes away.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// A token is not used in its last minutes: a call that reads it then must not meet its
/// expiry, whose time the node's clock may have a little wrong.
const EXPIRY_MARGIN: Duration = Duration::from_secs(300);

/// The most of a token or certificate read: a token is 1-2 KiB, a CA bundle a few.
pub const MAX_CREDENTIAL: u64 = 1 << 20;

/// How long after a refusal the daemon asks again, and the least time between two requests.
const RETRY: Duration = Duration::from_secs(60);

/// How often, by default, the token in use is shown to the API server (`plumb daemon
/// --node-token-check`). A token can stop being taken before it expires: its service account
/// or its Node deleted and made again, the API server's service-account signing key replaced.
/// Nothing the daemon itself does uses the token on the node (it runs its calls with its pod's
/// own), so it would keep it until the next renewal, hours on, and the plugin's own calls,
/// which use it exactly while no daemon runs, would fail with 401 all that time. A GET of
/// `/version` per node every five minutes costs the API server nothing it would notice.
pub const PROBE_EVERY: Duration = Duration::from_secs(300);

/// How long one check of the token in use may wait on the API server.
const PROBE_BUDGET: Duration = Duration::from_secs(10);

/// Whom a service-account token names: the claims the API server puts in its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub namespace: String,
    pub service_account: String,
    /// The service account's UID, when the claim has it: one deleted and made again under the
    /// same name is another, whose tokens the API server no longer takes.
    pub service_account_uid: Option<String>,
    /// The node, and its UID when the claim has it.
    pub node: Option<(String, Option<String>)>,
    /// Whether it is bound to a pod (a pod's own token) rather than to a node or nothing.
    pub pod_bound: bool,
    /// When it expires (`exp`, seconds since the epoch), if it says.
    pub expires: Option<u64>,
}

/// The identity a service-account token (a JWT) names, from its claims; or what it lacks.
/// Whom to ask a node-bound token for comes from the pod's token: its claims name the service
/// account, its namespace and, since Kubernetes 1.30, the node (`kubernetes.io.node`). Read
/// without checking the signature: the API server checks the token when it is used, and the
/// daemon needs no more than the names.
pub fn identity(token: &str) -> Result<Identity, String> {
    const NOT_JWT: &str = "not a JWT (a bound service-account token)";
    let payload = token.trim().split('.').nth(1).ok_or(NOT_JWT)?;
    let bytes = base64url(payload).ok_or(NOT_JWT)?;
    let claims: Value =
        serde_json::from_slice(&bytes).map_err(|_| "its claims are not JSON".to_string())?;
    let k8s = &claims["kubernetes.io"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let (Some(namespace), Some(service_account)) = (
        text(&k8s["namespace"]),
        text(&k8s["serviceaccount"]["name"]),
    ) else {
        return Err("its claims name no service account (kubernetes.io.serviceaccount)".into());
    };
    let node = text(&k8s["node"]["name"]).map(|name| (name, text(&k8s["node"]["uid"])));
    Ok(Identity {
        namespace,
        service_account,
        service_account_uid: text(&k8s["serviceaccount"]["uid"]),
        node,
        pod_bound: k8s["pod"].is_object(),
        expires: claims["exp"].as_u64(),
    })
}

/// Base64url without padding (RFC 4648 §5), as a JWT's parts are written.
fn base64url(s: &str) -> Option<Vec<u8>> {
    if s.len() % 4 == 1 || s.contains(['+', '/', '=']) {
        return None;
    }
    let mut standard: String = s
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !standard.len().is_multiple_of(4) {
        standard.push('=');
    }
    cni::base64::decode(&standard)
}

/// A token issued for the node. Its times are on the monotonic clock: the node's wall clock may
/// jump, and may differ from the API server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub token: String,
    /// For whom: `namespace/name`, and the node, with its UID when known.
    pub service_account: String,
    pub node: String,
    pub node_uid: Option<String>,
    /// Until when it may be used, by the monotonic clock ([`EXPIRY_MARGIN`] before its end).
    pub usable_until: Instant,
    /// When to ask for the next.
    pub renew_at: Instant,
    /// When it was issued, or last shown to the API server (whatever the answer).
    pub shown_at: Instant,
    /// Whether the last check found it refused: it is shown again within a minute, and
    /// dropped if refused again.
    pub doubted: bool,
}

use plumb_cluster::kube::Grant;

/// For whom a token is: the service account (`namespace/name`), the node and its UID.
type Bound = (String, String, Option<String>);

impl Issued {
    /// A token `grant`ed at `asked` (monotonic; the wall clock then `wall`), scheduled; or why
    /// it cannot be used: a lifetime that the node's clock sees (nearly) over. Its life is the
    /// shortest of what was asked, what the API server granted, and what its expiry leaves by
    /// the node's clock (which may be behind).
    fn scheduled(
        (token, expires, granted): Grant,
        (service_account, node, node_uid): Bound,
        asked: Instant,
        wall: SystemTime,
    ) -> Result<Issued, String> {
        let life = (expires.duration_since(wall).unwrap_or_default())
            .min(LIFETIME)
            .min(granted.unwrap_or(LIFETIME));
        if life < 2 * EXPIRY_MARGIN {
            return Err(format!(
                "the token issued for {service_account} has {} s left by this node's clock, \
                 under the {} s it needs (is the node's clock right?)",
                life.as_secs(),
                (2 * EXPIRY_MARGIN).as_secs()
            ));
        }
        Ok(Issued {
            token,
            service_account,
            node,
            node_uid,
            usable_until: asked + life - EXPIRY_MARGIN,
            // Each sixth of its life, never sooner than a retry.
            renew_at: asked + (life / 6).max(RETRY),
            shown_at: asked,
            doubted: false,
        })
    }
}

impl Issued {
    /// How often it is shown to the API server when checks come `every`: within a minute
    /// once it was refused.
    fn checked_every(&self, every: Duration) -> Duration {
        if self.doubted {
            every.min(RETRY)
        } else {
            every
        }
    }
}

/// What a look at the request in flight found, to be said in the daemon's log.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A token was issued.
    Issued,
    /// None could be had, for this reason.
    Refused(String),
    /// The one in use was refused once; what to say.
    Doubted(String),
    /// The one in use could not be shown to the API server (no answer, an answer that is
    /// neither a yes nor a 401, a kubeconfig that cannot be used); why. Said once per reason
    /// until an answer comes: a check that never works leaves a revoked token in use until
    /// its renewal, and the operator should know.
    Unchecked(String),
}

/// The daemon's node-bound token: the one in use, the request in flight, when to ask again,
/// the check of the one in use in flight.
#[derive(Debug, Default)]
pub struct NodeToken {
    issued: Option<Issued>,
    pending: Option<mpsc::Receiver<Result<Issued, String>>>,
    next_try: Option<Instant>,
    /// The token being shown to the API server, how often it is shown, and the answer to
    /// come: the token the file on the node held throughout (`None`: it changed), and whether
    /// the API server takes it (`Err`: no answer to go by).
    probing: Option<(String, Duration, mpsc::Receiver<Probed>)>,
    /// Why the last checks could not be made, as last said ([`Event::Unchecked`]).
    unchecked: Option<String>,
}

/// What a check of the token in use found: the token shown, and whether it was taken.
type Probed = (Option<String>, Result<bool, String>);

impl NodeToken {
    /// The token to write at `now`: the one issued, unless it is (nearly) expired. `None` (none
    /// issued, or in its last minutes): the pod's own token is copied instead, as where no
    /// node-bound token can be had (an older cluster, no grant to ask).
    pub fn current(&self, now: Instant) -> Option<&Issued> {
        self.issued.as_ref().filter(|i| now < i.usable_until)
    }

    /// Takes `token`, the one a daemon before this one wrote, as the one in use: a node-bound
    /// token of the service account and node that `pod` (this pod's token) names, their UIDs
    /// too where both say them, with at least [`EXPIRY_MARGIN`] twice over left by the node's
    /// clock. So a daemon that starts does not put its pod's copy over a token that outlives
    /// pods, and lose it for good when it cannot get a new one. It is renewed at once.
    pub fn adopt(&mut self, token: &str, pod: &Identity, now: (Instant, SystemTime)) {
        let Ok(found) = identity(token) else { return };
        let same = |a: &Option<String>, b: &Option<String>| a.is_none() || b.is_none() || a == b;
        let (Some(node), Some(pod_node)) = (&found.node, &pod.node) else {
            return;
        };
        let matches = !found.pod_bound
            && found.namespace == pod.namespace
            && found.service_account == pod.service_account
            && same(&found.service_account_uid, &pod.service_account_uid)
            && node.0 == pod_node.0
            && same(&node.1, &pod_node.1);
        // The file's claims are not signed: an `exp` past what the clock can hold (a corrupt
        // file) is not adopted; added unchecked it panicked at every start of the daemon.
        let Some(expires) = found
            .expires
            .filter(|_| matches)
            .and_then(|exp| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(exp)))
        else {
            return;
        };
        let grant = (token.to_string(), expires, None);
        let bound = (
            format!("{}/{}", found.namespace, found.service_account),
            node.0.clone(),
            node.1.clone(),
        );
        if let Ok(mut issued) = Issued::scheduled(grant, bound, now.0, now.1) {
            issued.renew_at = now.0;
            self.issued = Some(issued);
        }
    }

    /// Drops the token in use when `pod` (this pod's token, read again) names its node with
    /// another UID: the Node was deleted and registered again, and the API server no longer
    /// takes a token bound to the one before. The pod's copy goes back at once, and a new one
    /// is asked for at once.
    pub fn check(&mut self, pod: &Identity) -> Option<Event> {
        let issued = self.issued.as_ref()?;
        let now_uid = pod.node.as_ref().and_then(|n| n.1.as_ref());
        let (Some(was), Some(is)) = (issued.node_uid.as_ref(), now_uid) else {
            return None;
        };
        if was == is {
            return None;
        }
        let why = format!(
            "the token in use is bound to node {} with UID {was}, which is now {is} (the Node \
             was registered again)",
            issued.node
        );
        self.issued = None;
        self.next_try = None;
        Some(Event::Refused(why))
    }

    /// Takes in the answer of the request in flight, if it has come.
    pub fn poll(&mut self, now: Instant) -> Option<Event> {
        let answer = match self.pending.as_ref()?.try_recv() {
            Ok(answer) => answer,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => Err("the request ended".into()),
        };
        self.pending = None;
        match answer {
            Ok(issued) => {
                self.issued = Some(issued);
                Some(Event::Issued)
            }
            // The token in use stays until it expires: a refusal of the pod's own token (401,
            // the pod being deleted) says nothing of it, and the copy would fare no better.
            Err(why) => {
                self.next_try = Some(now + RETRY);
                Some(Event::Refused(why))
            }
        }
    }

    /// When the token in use is to be shown to the API server next: `every` after it was
    /// issued or last shown, or within a minute of a check that found it refused. `None`: no
    /// token in use, or never (a huge `--node-token-check`).
    fn next_check(&self, every: Duration) -> Option<Instant> {
        let issued = self.issued.as_ref()?;
        issued.shown_at.checked_add(issued.checked_every(every))
    }

    /// Shows the token in use to the API server in the background, through `on_node` (the
    /// kubeconfig written on the node, and the token file it names: what the plugin's own
    /// calls use), when [`NodeToken::next_check`] says, unless a new one is being asked for.
    pub fn probe_if_due(&mut self, now: Instant, every: Duration, on_node: (&Path, &Path)) {
        let due = self.next_check(every).is_some_and(|at| now >= at);
        if !due || self.probing.is_some() || self.pending.is_some() {
            return;
        }
        let Some(issued) = self.issued.as_mut() else {
            return;
        };
        issued.shown_at = now;
        let (tx, rx) = mpsc::channel();
        let (kubeconfig, token_file) = (on_node.0.to_path_buf(), on_node.1.to_path_buf());
        let spawned = std::thread::Builder::new()
            .name("node-token-check".into())
            .spawn(move || {
                // The file as it was before and after: another daemon taking over writes its
                // own token there, and the answer must be about the one this daemon wrote.
                let read = || cni::files::read_bounded(&token_file, MAX_CREDENTIAL).ok();
                let before = read();
                let accepted = KubeCluster::with_budget(&kubeconfig, PROBE_BUDGET)
                    .and_then(|c| c.credentials_accepted())
                    .map_err(|e| e.msg);
                let shown = before.filter(|b| read().as_ref() == Some(b));
                let shown = shown.map(|t| String::from_utf8_lossy(&t).trim().to_string());
                let _ = tx.send((shown, accepted));
            });
        // No thread, no check: the next one comes in `every`.
        if spawned.is_ok() {
            self.probing = Some((issued.token.clone(), every, rx));
        }
    }

    /// Takes in the answer of the check in flight, if it has come. No answer (the API server
    /// down, failing) says nothing of the token: it stays. A first refusal (401) may be the
    /// API server's own trouble (it answers 401 when it cannot look the Node or the service
    /// account up): a new token is asked for at once, the one in use stays, and it is shown
    /// again within a minute. Refused again, it is dropped: the pod's copy goes back.
    pub fn poll_probe(&mut self) -> Option<Event> {
        let (token, every, answer) = self.probing.as_ref()?;
        let (shown, accepted) = match answer.try_recv() {
            Err(mpsc::TryRecvError::Empty) => return None,
            Ok(answer) => answer,
            Err(mpsc::TryRecvError::Disconnected) => (None, Err("the check ended".into())),
        };
        let (token, every) = (token.clone(), *every);
        self.probing = None;
        // Only about the token that was shown, still the one in use: a new one may have come
        // meanwhile, or the file may have held another daemon's.
        let issued = self.issued.as_mut().filter(|i| i.token == token)?;
        if shown.as_deref() != Some(token.as_str()) {
            return None;
        }
        match accepted {
            Ok(true) => {
                issued.doubted = false;
                self.unchecked = None;
                return None;
            }
            Ok(false) => self.unchecked = None,
            Err(why) if self.unchecked.as_ref() == Some(&why) => return None,
            Err(why) => {
                self.unchecked = Some(why.clone());
                let again = issued.checked_every(every);
                return Some(Event::Unchecked(format!(
                    "cannot show the token in use, bound to node {}, to the API server: {why}; \
                     it stays in use, and is shown again in {} s",
                    issued.node,
                    again.as_secs()
                )));
            }
        }
        let why = |again: &str| {
            format!(
                "the API server refuses the token in use, bound to node {} (401 Unauthorized to \
                 GET /version{again}: the Node or the service account {} deleted and made \
                 again, the API server's service-account signing key replaced, or the API \
                 server unable to look them up)",
                issued.node, issued.service_account
            )
        };
        if issued.doubted {
            let why = why(", twice");
            self.issued = None;
            self.next_try = None;
            return Some(Event::Refused(why));
        }
        let said = format!(
            "{}; asked for a new one; it stays in use unless refused again in {} s",
            why(""),
            every.min(RETRY).as_secs()
        );
        // Renewed at once: due since the check began.
        issued.renew_at = issued.shown_at;
        issued.doubted = true;
        self.next_try = None;
        Some(Event::Doubted(said))
    }

    /// Whether a request is due at `now`: none in use or it is time to renew, none in
    /// flight, none refused within the last [`RETRY`].
    pub fn due(&self, now: Instant) -> bool {
        self.issued.as_ref().is_none_or(|i| now >= i.renew_at)
            && self.pending.is_none()
            && self.next_try.is_none_or(|t| now >= t)
    }

    /// Asks for a token in the background, through `kubeconfig` (one holding the pod's own
    /// token), for whom `pod` (that token's identity) names, when one is due and none is
    /// being asked for. Says why not when it cannot ask at all. Never through the token
    /// written on the node: a node-bound token cannot renew itself (deploy/node-token.yaml's
    /// admission policy refuses any other).
    pub fn request_if_due(
        &mut self,
        now: Instant,
        pod: Result<&Identity, &str>,
        kubeconfig: &Path,
    ) -> Option<Event> {
        if !self.due(now) {
            return None;
        }
        // Never two requests within a retry's time, whatever comes back.
        self.next_try = Some(now + RETRY);
        let who = match pod {
            Ok(Identity {
                node: Some(node),
                namespace,
                service_account,
                ..
            }) => ((namespace.clone(), service_account.clone()), node.clone()),
            Ok(_) => {
                return Some(Event::Refused(
                    "the pod's token names no node (claim kubernetes.io.node: Kubernetes before \
                     1.30, or its ServiceAccountTokenPodNodeInfo feature gate off)"
                        .into(),
                ));
            }
            Err(why) => return Some(Event::Refused(why.to_string())),
        };
        let (tx, rx) = mpsc::channel();
        let kubeconfig = kubeconfig.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("node-token".into())
            .spawn(move || {
                let _ = tx.send(ask(&kubeconfig, &who));
            });
        match spawned {
            Ok(_) => self.pending = Some(rx),
            Err(e) => return Some(Event::Refused(format!("cannot start a thread: {e}"))),
        }
        None
    }
}

/// One TokenRequest through `kubeconfig` for `who` (service account, node). Node-bound tokens
/// are on by default since Kubernetes 1.31, GA in 1.33.
fn ask(
    kubeconfig: &Path,
    ((namespace, name), (node, node_uid)): &((String, String), (String, Option<String>)),
) -> Result<Issued, String> {
    let asked = (Instant::now(), SystemTime::now());
    let cluster = KubeCluster::from_kubeconfig(kubeconfig).map_err(|e| e.msg)?;
    let seconds = LIFETIME.as_secs() as i64;
    let grant = cluster
        .node_bound_token((namespace, name), (node, node_uid.as_deref()), seconds)
        .map_err(|e| e.msg)?;
    let bound = (
        format!("{namespace}/{name}"),
        node.clone(),
        node_uid.clone(),
    );
    Issued::scheduled(grant, bound, asked.0, asked.1)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A JWT with `claims` as its payload (the signature is not read).
    pub(crate) fn jwt(claims: &serde_json::Value) -> String {
        let payload = cni::base64::encode(claims.to_string().as_bytes())
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_");
        format!("eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln")
    }

    /// The claims of a token of `kube-system/plumb` on node `node`: a pod's, or one bound to
    /// the node only, expiring at `exp`.
    pub(crate) fn claims(node: Option<&str>, pod: bool, exp: u64) -> serde_json::Value {
        let mut k8s = serde_json::json!({"namespace": "kube-system",
            "serviceaccount": {"name": "plumb", "uid": "s1"}});
        if let Some(node) = node {
            k8s["node"] = serde_json::json!({"name": node, "uid": "6a1c"});
        }
        if pod {
            k8s["pod"] = serde_json::json!({"name": "plumb-x", "uid": "p1"});
        }
        serde_json::json!({"aud": ["https://kubernetes.default.svc"], "exp": exp,
            "sub": "system:serviceaccount:kube-system:plumb", "kubernetes.io": k8s})
    }

    pub(crate) fn epoch(t: SystemTime) -> u64 {
        t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
    }

    /// Token "t" of kube-system/plumb bound to node-1 (with `node_uid`), issued at `now` (the
    /// wall clock then `wall`) for a day.
    fn a_days_token(node_uid: Option<&str>, now: Instant, wall: SystemTime) -> Issued {
        let who = (
            "kube-system/plumb".to_string(),
            "node-1".to_string(),
            node_uid.map(str::to_string),
        );
        Issued::scheduled(("t".into(), wall + LIFETIME, None), who, now, wall).unwrap()
    }

    #[test]
    fn a_tokens_claims_name_the_service_account_the_node_and_the_pod() {
        assert_eq!(
            identity(&format!(
                "{}\n",
                jwt(&claims(Some("node-1"), true, 1_700_000_000))
            )),
            Ok(Identity {
                namespace: "kube-system".into(),
                service_account: "plumb".into(),
                service_account_uid: Some("s1".into()),
                node: Some(("node-1".into(), Some("6a1c".into()))),
                pod_bound: true,
                expires: Some(1_700_000_000),
            })
        );
        // Before Kubernetes 1.30: no node claim. A node-bound token: no pod claim.
        assert_eq!(identity(&jwt(&claims(None, true, 1))).unwrap().node, None);
        assert!(
            !identity(&jwt(&claims(Some("n"), false, 1)))
                .unwrap()
                .pod_bound
        );
        // Not a service account's, not a JWT, not JSON.
        let legacy = serde_json::json!({"iss": "kubernetes/serviceaccount",
            "kubernetes.io/serviceaccount/namespace": "kube-system"});
        assert!(
            identity(&jwt(&legacy))
                .unwrap_err()
                .contains("no service account")
        );
        for bad in [
            "",
            "opaque-token",
            "a.b",
            "a.!!!.c",
            "a.e30=.c",
            "a.bm90IGpzb24.c",
        ] {
            assert!(identity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn base64url_reads_what_jwts_write_and_nothing_else() {
        assert_eq!(base64url("").unwrap(), b"");
        assert_eq!(base64url("-_8").unwrap(), [0xfb, 0xff]);
        assert_eq!(base64url("YQ").unwrap(), b"a");
        assert!(base64url("+/8").is_none() && base64url("YQ==").is_none());
        assert!(base64url("Y").is_none() && base64url("Y*").is_none());
    }

    #[test]
    fn a_token_is_renewed_each_sixth_of_its_life_and_not_used_in_its_last_minutes() {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let who = || ("kube-system/plumb".to_string(), "node-1".to_string(), None);
        let day = Issued::scheduled(("t".into(), wall + LIFETIME, None), who(), now, wall).unwrap();
        assert_eq!(day.renew_at, now + LIFETIME / 6);
        assert_eq!(day.usable_until, now + LIFETIME - EXPIRY_MARGIN);
        // The API server gave an hour: renewed every ten minutes.
        let hour = Duration::from_secs(3600);
        let short = Issued::scheduled(("t".into(), wall + hour, None), who(), now, wall).unwrap();
        assert_eq!(short.renew_at, now + hour / 6);
        // A lifetime longer than asked is taken as asked; one (nearly) over by this node's
        // clock is refused, naming the clock.
        let long =
            Issued::scheduled(("t".into(), wall + 2 * LIFETIME, None), who(), now, wall).unwrap();
        assert_eq!(long.usable_until, day.usable_until);
        // A node clock behind the API server's: the lifetime granted bounds it still.
        let granted =
            Issued::scheduled(("t".into(), wall + LIFETIME, Some(hour)), who(), now, wall).unwrap();
        assert_eq!(granted.usable_until, now + hour - EXPIRY_MARGIN);
        let skewed = Issued::scheduled(("t".into(), wall + EXPIRY_MARGIN, None), who(), now, wall);
        assert!(skewed.unwrap_err().contains("node's clock"));

        let t = NodeToken {
            issued: Some(day.clone()),
            ..NodeToken::default()
        };
        assert_eq!(t.current(now), Some(&day));
        assert_eq!(t.current(day.usable_until), None);
    }

    #[test]
    fn nothing_is_asked_before_it_is_due_and_a_token_naming_no_node_is_said() {
        let now = Instant::now();
        let nowhere = Path::new("/nonexistent/plumb.kubeconfig");
        let pod = identity(&jwt(&claims(None, true, 1))).unwrap();
        let mut t = NodeToken::default();
        assert!(matches!(
            t.request_if_due(now, Ok(&pod), nowhere),
            Some(Event::Refused(why)) if why.contains("names no node (claim kubernetes.io.node")
        ));
        // Not again within a minute; an unreadable token said as it is.
        assert_eq!(t.request_if_due(now, Ok(&pod), nowhere), None);
        let later = now + RETRY;
        assert_eq!(
            t.request_if_due(later, Err("token: not a JWT"), nowhere),
            Some(Event::Refused("token: not a JWT".into()))
        );
        // A token in use that is not due: nothing asked.
        let wall = SystemTime::now();
        let issued = a_days_token(None, now, wall);
        let mut t = NodeToken {
            issued: Some(issued),
            ..NodeToken::default()
        };
        assert_eq!(t.request_if_due(now, Ok(&pod), nowhere), None);
        assert!(t.pending.is_none() && t.next_try.is_none());
    }

    #[test]
    fn a_refusal_is_said_and_the_token_in_use_kept_until_it_expires() {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let issued = a_days_token(None, now, wall);
        let (tx, rx) = mpsc::channel();
        let mut t = NodeToken {
            issued: Some(issued.clone()),
            pending: Some(rx),
            ..NodeToken::default()
        };
        assert_eq!(t.poll(now), None, "nothing came yet");
        tx.send(Err("401 Unauthorized".into())).unwrap();
        assert_eq!(t.poll(now), Some(Event::Refused("401 Unauthorized".into())));
        assert_eq!(t.current(now), Some(&issued));
        assert_eq!(t.next_try, Some(now + RETRY));
        assert!(t.pending.is_none());
        // A thread gone without an answer is a refusal too, not a wait for ever.
        let (tx, rx) = mpsc::channel::<Result<Issued, String>>();
        t.pending = Some(rx);
        drop(tx);
        assert_eq!(
            t.poll(now),
            Some(Event::Refused("the request ended".into()))
        );
    }

    #[test]
    fn the_token_in_use_is_shown_to_the_api_server_and_dropped_when_refused_twice() {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let issued = a_days_token(None, now, wall);
        let mut t = NodeToken {
            issued: Some(issued),
            next_try: Some(now + RETRY),
            ..NodeToken::default()
        };
        let every = Duration::from_secs(300);
        let nowhere = (
            Path::new("/nonexistent/plumb.kubeconfig"),
            Path::new("/nonexistent/token"),
        );
        // Not before `every` has passed since it was issued.
        t.probe_if_due(now + every - Duration::from_secs(1), every, nowhere);
        assert!(t.probing.is_none());
        // Nor while a renewal is asked for: its answer replaces the token anyway.
        let (_renewal, rx) = mpsc::channel();
        t.pending = Some(rx);
        t.probe_if_due(now + every, every, nowhere);
        assert!(t.probing.is_none());
        t.pending = None;
        // No answer to go by (here no kubeconfig to ask with) keeps the token, and says why
        // the check could not be made.
        let d = tempfile::tempdir().unwrap();
        let token_file = d.path().join("token");
        std::fs::write(&token_file, "t").unwrap();
        t.probe_if_due(now + every, every, (nowhere.0, &token_file));
        assert_eq!(t.probing.as_ref().map(|p| p.0.as_str()), Some("t"));
        assert_eq!(t.current(now).unwrap().shown_at, now + every);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut said = None;
        while t.probing.is_some() && Instant::now() < deadline {
            said = said.or(t.poll_probe());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(t.probing.is_none() && t.current(now).is_some());
        assert!(
            matches!(&said, Some(Event::Unchecked(why))
                if why.starts_with("cannot show the token in use, bound to node node-1, to the API server: ")
                    && why.contains("/nonexistent/plumb.kubeconfig")
                    && why.ends_with("it stays in use, and is shown again in 300 s")),
            "{said:?}"
        );
        // The next one comes `every` after the last; a huge `every` is never, not a panic.
        t.probe_if_due(now + 2 * every - Duration::from_secs(1), every, nowhere);
        t.probe_if_due(now + 2 * every, Duration::MAX, nowhere);
        assert!(t.probing.is_none());

        let answered = |t: &mut NodeToken, shown: (&str, &str), taken| {
            let (tx, rx) = mpsc::channel();
            tx.send((Some(shown.1.to_string()), Ok(taken))).unwrap();
            t.probing = Some((shown.0.to_string(), every, rx));
            t.poll_probe()
        };
        let later = now + 2 * every;
        let doubted = |t: &NodeToken| t.current(now).is_some_and(|i| i.doubted);
        // Why a check could not be made is said once per reason, and again after an answer.
        let failed = |t: &mut NodeToken, why: &str| {
            let (tx, rx) = mpsc::channel();
            tx.send((Some("t".to_string()), Err(why.to_string())))
                .unwrap();
            t.probing = Some(("t".to_string(), every, rx));
            t.poll_probe()
        };
        assert!(matches!(
            failed(&mut t, "403 Forbidden"),
            Some(Event::Unchecked(_))
        ));
        assert_eq!(failed(&mut t, "403 Forbidden"), None);
        assert!(
            matches!(failed(&mut t, "503"), Some(Event::Unchecked(why)) if why.contains(": 503;"))
        );
        assert_eq!(answered(&mut t, ("t", "t"), true), None);
        assert!(matches!(failed(&mut t, "503"), Some(Event::Unchecked(_))));
        assert_eq!(answered(&mut t, ("t", "t"), true), None);
        // One refused once is shown again within a minute, and the line says so.
        t.issued.as_mut().unwrap().doubted = true;
        assert!(matches!(failed(&mut t, "503"),
            Some(Event::Unchecked(why)) if why.ends_with("shown again in 60 s")));
        t.issued.as_mut().unwrap().doubted = false;
        assert_eq!(answered(&mut t, ("t", "t"), true), None);
        assert!(t.current(now).is_some());
        // A refusal of a token replaced since it was shown, or of another daemon's token
        // found in the file on the node, says nothing of this one.
        assert_eq!(answered(&mut t, ("older", "older"), false), None);
        assert_eq!(answered(&mut t, ("t", "another's"), false), None);
        assert!(t.current(now).is_some() && !doubted(&t));
        // Refused once (the API server may be unable to look the Node up): a new one is
        // asked for at once, this one stays, and it is shown again within a minute.
        let once = answered(&mut t, ("t", "t"), false);
        assert!(
            matches!(&once, Some(Event::Doubted(said))
                if said.contains("refuses the token in use, bound to node node-1 (401")
                    && said.ends_with("it stays in use unless refused again in 60 s")),
            "{once:?}"
        );
        assert!(t.current(later).is_some() && t.due(later));
        // Within a minute of the check that found it refused (it began at now + every).
        assert_eq!(t.next_check(every), Some(now + every + RETRY));
        // Taken at the next check: the doubt is gone.
        assert_eq!(answered(&mut t, ("t", "t"), true), None);
        assert!(!doubted(&t));
        // Refused twice in a row: dropped, the pod's copy goes back, a new one asked for.
        answered(&mut t, ("t", "t"), false);
        let twice = answered(&mut t, ("t", "t"), false);
        assert!(
            matches!(&twice, Some(Event::Refused(why)) if why.contains("GET /version, twice")),
            "{twice:?}"
        );
        assert_eq!(t.current(now), None, "the pod's copy goes back");
        assert_eq!(t.next_try, None, "a new one is asked for at once");
        assert!(t.due(now));
    }

    #[test]
    fn a_node_bound_token_a_daemon_before_wrote_is_kept_and_renewed_at_once() {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let pod = identity(&jwt(&claims(Some("node-1"), true, epoch(wall) + 3600))).unwrap();
        let fresh = epoch(wall) + 20 * 3600;
        let adopted = |token: &str| {
            let mut t = NodeToken::default();
            t.adopt(token, &pod, (now, wall));
            t.issued
        };
        let ours = jwt(&claims(Some("node-1"), false, fresh));
        let issued = adopted(&ours).expect("kept");
        assert_eq!(
            (issued.token.as_str(), issued.renew_at),
            (ours.as_str(), now)
        );
        assert!(issued.usable_until > now + Duration::from_secs(19 * 3600));
        // Not: a pod's token (the copy), another node's, one about to expire, not a JWT.
        assert_eq!(adopted(&jwt(&claims(Some("node-1"), true, fresh))), None);
        // Nor one of another service account, namespace, or incarnation of the node or the
        // service account (their UIDs).
        let changed = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut c = claims(Some("node-1"), false, fresh);
            edit(&mut c["kubernetes.io"]);
            adopted(&jwt(&c))
        };
        assert_eq!(changed(&|k| k["namespace"] = "other".into()), None);
        assert_eq!(
            changed(&|k| k["serviceaccount"]["name"] = "other".into()),
            None
        );
        assert_eq!(changed(&|k| k["serviceaccount"]["uid"] = "s2".into()), None);
        assert_eq!(changed(&|k| k["node"]["uid"] = "7b2d".into()), None);
        assert!(changed(&|k| k["node"].as_object_mut().unwrap().clear()).is_none());
        assert_eq!(adopted(&jwt(&claims(Some("node-2"), false, fresh))), None);
        assert_eq!(
            adopted(&jwt(&claims(Some("node-1"), false, epoch(wall) + 60))),
            None
        );
        assert_eq!(adopted("opaque"), None);
        // Nor one whose expiry the clock cannot hold (a corrupt file): not a panic.
        for exp in [u64::MAX, 1 << 63] {
            assert_eq!(adopted(&jwt(&claims(Some("node-1"), false, exp))), None);
        }
    }

    #[test]
    fn a_token_of_the_node_before_it_registered_again_is_dropped_for_the_copy() {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let issued = a_days_token(Some("6a1c"), now, wall);
        let mut t = NodeToken {
            issued: Some(issued),
            next_try: Some(now + RETRY),
            ..NodeToken::default()
        };
        let same = identity(&jwt(&claims(Some("node-1"), true, 1))).unwrap();
        assert_eq!(t.check(&same), None);
        assert!(t.current(now).is_some());
        let mut again = same.clone();
        again.node = Some(("node-1".into(), Some("7b2d".into())));
        assert!(matches!(
            t.check(&again),
            Some(Event::Refused(why)) if why.contains("UID 6a1c, which is now 7b2d")
        ));
        assert_eq!(t.current(now), None);
        assert_eq!(t.next_try, None, "asked for again at once");
    }
}
