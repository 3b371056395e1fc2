//! A token of the daemon's service account bound to its Node, for the kubeconfig that `plumb
//! daemon --write-kubeconfig` keeps on the node (kubeconfig_writer.rs).
//!
//! The token the kubelet mounts in the daemon's pod is bound to that pod: the API server
//! refuses it once the pod is gone. Copied to the node, it outlived the daemon by about a
//! minute, so an upgrade that deleted the old daemon's pod before the new one ran (a
//! DaemonSet's default `maxUnavailable: 1`, a new image slow to pull) left every ADD and DEL
//! the plugin ran itself meanwhile failing with 401. A token bound to the Node (TokenRequest,
//! authentication.k8s.io/v1, `boundObjectRef` of kind `Node`: Kubernetes 1.33, or 1.31 with its
//! feature gate) is valid while that Node object exists, until it expires: the daemon asks for
//! one that lasts [`LIFETIME`], writes it where the copy went, and asks again at four fifths of
//! its life.
//!
//! Whom to ask for comes from the pod's token: its claims name the service account, its
//! namespace and, since Kubernetes 1.30, the node (`kubernetes.io.node`). They are read
//! without checking the signature: the API server checks the token when it is used, and the
//! daemon needs no more than the names.
//!
//! Where no such token can be had (an older cluster, the RBAC without `serviceaccounts/token`
//! `create`), the pod's token is copied as before, and the reason said once; a token the API
//! server stops taking (401) is dropped for the copy at once.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::cluster::KubeCluster;

/// How long a token is asked to last: a day covers a daemon that is away for hours (an
/// upgrade, a crash loop). The API server may give less (its
/// `--service-account-max-token-expiration`), and the daemon renews at four fifths of what it
/// got.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// A token is not used in its last minute: a call that reads it then must not meet its expiry.
const EXPIRY_MARGIN: Duration = Duration::from_secs(60);

/// How long after a refusal the daemon asks again.
const RETRY: Duration = Duration::from_secs(60);

/// Whom a service-account token names: the claims the API server puts in a pod's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub namespace: String,
    pub service_account: String,
    /// The node, and its UID when the claim has it.
    pub node: Option<(String, Option<String>)>,
}

/// The identity a service-account token (a JWT) names, from its claims; or what it lacks.
pub fn identity(token: &str) -> Result<Identity, String> {
    let payload = token
        .trim()
        .split('.')
        .nth(1)
        .ok_or("the service account's token is not a JWT")?;
    let bytes = base64url(payload).ok_or("the service account's token is not a JWT")?;
    let claims: Value = serde_json::from_slice(&bytes)
        .map_err(|_| "the service account's token's claims are not JSON")?;
    let k8s = &claims["kubernetes.io"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let (Some(namespace), Some(service_account)) = (
        text(&k8s["namespace"]),
        text(&k8s["serviceaccount"]["name"]),
    ) else {
        return Err("the service account's token names no service account".into());
    };
    let node = text(&k8s["node"]["name"]).map(|name| (name, text(&k8s["node"]["uid"])));
    Ok(Identity {
        namespace,
        service_account,
        node,
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

/// A token issued for the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub token: String,
    /// For whom: `namespace/name`, and the node.
    pub service_account: String,
    pub node: String,
    pub expires: SystemTime,
    /// When to ask for the next.
    pub renew_at: SystemTime,
}

/// What a look at the request in flight found, to be said in the daemon's log.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A token was issued.
    Issued,
    /// None could be had, for this reason; the pod's token is copied meanwhile.
    Refused(String),
}

/// The daemon's node-bound token: the one issued, the request in flight, when to ask again.
#[derive(Debug, Default)]
pub struct NodeToken {
    issued: Option<Issued>,
    pending: Option<mpsc::Receiver<Result<Issued, (String, bool)>>>,
    next_try: Option<SystemTime>,
}

impl NodeToken {
    /// The token to write at `now`: the one issued, unless it is (nearly) expired.
    pub fn current(&self, now: SystemTime) -> Option<&Issued> {
        self.issued
            .as_ref()
            .filter(|i| now + EXPIRY_MARGIN < i.expires)
    }

    /// Takes in the answer of the request in flight, if it has come.
    pub fn poll(&mut self, now: SystemTime) -> Option<Event> {
        let answer = match self.pending.as_ref()?.try_recv() {
            Ok(answer) => answer,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => Err(("the request ended".into(), false)),
        };
        self.pending = None;
        match answer {
            Ok(issued) => {
                self.issued = Some(issued);
                Some(Event::Issued)
            }
            Err((why, unauthorized)) => {
                // Refused with the token written (the node-bound one revoked, or the Node
                // deleted): the pod's token goes back in its place at once.
                if unauthorized {
                    self.issued = None;
                }
                self.next_try = Some(now + RETRY);
                Some(Event::Refused(why))
            }
        }
    }

    /// Asks for a token in the background, through the kubeconfig at `kubeconfig` (the one
    /// written, holding the token that works now), for whom the pod's `pod_token` names,
    /// when one is due and none is being asked for. Says why not when it cannot ask at all.
    pub fn request_if_due(
        &mut self,
        now: SystemTime,
        pod_token: &str,
        kubeconfig: &Path,
    ) -> Option<Event> {
        let due = self.issued.as_ref().is_none_or(|i| now >= i.renew_at);
        if !due || self.pending.is_some() || self.next_try.is_some_and(|t| now < t) {
            return None;
        }
        let who = match identity(pod_token) {
            Ok(Identity {
                node: Some(node),
                namespace,
                service_account,
            }) => ((namespace, service_account), node),
            Ok(_) => {
                self.next_try = Some(now + RETRY);
                return Some(Event::Refused(
                    "the service account's token names no node (Kubernetes before 1.30)".into(),
                ));
            }
            Err(why) => {
                self.next_try = Some(now + RETRY);
                return Some(Event::Refused(why));
            }
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
            Err(e) => {
                self.next_try = Some(now + RETRY);
                return Some(Event::Refused(format!("cannot start a thread: {e}")));
            }
        }
        None
    }
}

/// One TokenRequest through `kubeconfig` for `who` (service account, node).
fn ask(
    kubeconfig: &Path,
    ((namespace, name), (node, node_uid)): &((String, String), (String, Option<String>)),
) -> Result<Issued, (String, bool)> {
    let cluster = KubeCluster::from_kubeconfig(kubeconfig).map_err(|e| (e.msg, false))?;
    let seconds = LIFETIME.as_secs() as i64;
    let (token, expires) = cluster
        .node_bound_token((namespace, name), (node, node_uid.as_deref()), seconds)
        .map_err(|(e, unauthorized)| (e.msg, unauthorized))?;
    let asked = SystemTime::now();
    let life = expires.duration_since(asked).unwrap_or_default();
    Ok(Issued {
        token,
        service_account: format!("{namespace}/{name}"),
        node: node.clone(),
        expires,
        renew_at: asked + life * 4 / 5,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JWT with `claims` as its payload (the signature is not read).
    pub(crate) fn jwt(claims: &serde_json::Value) -> String {
        let payload = cni::base64::encode(claims.to_string().as_bytes())
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_");
        format!("eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln")
    }

    #[test]
    fn a_pod_tokens_claims_name_the_service_account_and_the_node() {
        let claims = serde_json::json!({
            "aud": ["https://kubernetes.default.svc"], "sub": "system:serviceaccount:kube-system:plumb",
            "kubernetes.io": {"namespace": "kube-system",
                "node": {"name": "node-1", "uid": "6a1c"},
                "pod": {"name": "plumb-x", "uid": "p1"},
                "serviceaccount": {"name": "plumb", "uid": "s1"}}});
        assert_eq!(
            identity(&format!("{}\n", jwt(&claims))),
            Ok(Identity {
                namespace: "kube-system".into(),
                service_account: "plumb".into(),
                node: Some(("node-1".into(), Some("6a1c".into()))),
            })
        );
        // Before Kubernetes 1.30: no node claim.
        let mut old = claims.clone();
        old["kubernetes.io"].as_object_mut().unwrap().remove("node");
        assert_eq!(identity(&jwt(&old)).unwrap().node, None);
        // Not a pod's token, not a JWT, not JSON.
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
    fn a_token_is_used_until_its_last_minute_and_renewed_at_four_fifths() {
        let now = SystemTime::now();
        let issued = Issued {
            token: "t".into(),
            service_account: "kube-system/plumb".into(),
            node: "node-1".into(),
            expires: now + Duration::from_secs(1000),
            renew_at: now + Duration::from_secs(800),
        };
        let t = NodeToken {
            issued: Some(issued.clone()),
            ..NodeToken::default()
        };
        assert_eq!(t.current(now), Some(&issued));
        assert_eq!(t.current(now + Duration::from_secs(939)), Some(&issued));
        assert_eq!(t.current(now + Duration::from_secs(940)), None);
        // Not due before four fifths: nothing asked, nothing said (the kubeconfig named does
        // not exist, so a request would fail).
        let mut t = t;
        let nowhere = Path::new("/nonexistent/plumb.kubeconfig");
        assert_eq!(t.request_if_due(now, "not-a-jwt", nowhere), None);
        assert!(t.pending.is_none());
        // Due, with a token that names no node: said, and not again for a minute.
        let later = now + Duration::from_secs(800);
        assert!(matches!(
            t.request_if_due(later, "not-a-jwt", nowhere),
            Some(Event::Refused(why)) if why.contains("not a JWT")
        ));
        assert_eq!(t.request_if_due(later, "not-a-jwt", nowhere), None);
    }

    #[test]
    fn a_refusal_is_said_and_a_401_drops_the_token_for_the_copy() {
        let now = SystemTime::now();
        let issued = Issued {
            token: "t".into(),
            service_account: "kube-system/plumb".into(),
            node: "node-1".into(),
            expires: now + Duration::from_secs(1000),
            renew_at: now,
        };
        for (unauthorized, kept) in [(false, true), (true, false)] {
            let (tx, rx) = mpsc::channel();
            let mut t = NodeToken {
                issued: Some(issued.clone()),
                pending: Some(rx),
                next_try: None,
            };
            assert_eq!(t.poll(now), None, "nothing came yet");
            tx.send(Err(("403 Forbidden".into(), unauthorized)))
                .unwrap();
            assert_eq!(t.poll(now), Some(Event::Refused("403 Forbidden".into())));
            assert_eq!(
                t.current(now).is_some(),
                kept,
                "unauthorized: {unauthorized}"
            );
            assert_eq!(t.next_try, Some(now + RETRY));
            assert!(t.pending.is_none());
        }
    }
}
