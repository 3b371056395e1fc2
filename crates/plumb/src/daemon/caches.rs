//! The daemon's watch caches, set up from its flags: the node whose pods it keeps
//! (`--node-name`, `$NODE_NAME`, the host name), the identity it watches with (`--kubeconfig`,
//! the pod's service account, or the kubeconfig the first call names), the NADs' namespaces; and
//! what it shows of them (`GET /caches` on its socket). The caches are plumb-cluster's.

use std::path::Path;
use std::sync::Arc;

use cni::error::{CniError, ErrorCode};
use plumb_cluster::Say;
use plumb_cluster::cached::{Cached, CachesFor};
use plumb_cluster::caches::{Caches, Scope, Source};
use plumb_cluster::client_pool::ClientPool;
use plumb_cluster::connect::Pooled;
use plumb_cluster::events::EventQueue;

use super::{Args, say};

/// The calls' connection to the cluster: the kept clients, the caches, the event queue. No
/// caches unless `serving` (a daemon that serves no calls watches nothing).
pub(super) fn connect(
    args: &Args,
    serving: bool,
    service_account: &Path,
    getenv: &dyn Fn(&str) -> Option<String>,
    delegates: cni::runtime::RanHook,
) -> Result<Cached, CniError> {
    let node = node_name(args.node_name.as_deref(), getenv)?;
    for ns in &args.nad_namespaces {
        netattach::names::validate_label(ns).map_err(|e| {
            CniError::new(
                ErrorCode::InvalidConfig,
                format!("--nad-namespaces: {ns:?}: {e}"),
            )
        })?;
    }
    if let Some(selector) = &args.dynamic_namespaces
        && let Some(why) = super::dynamic::selector_problem(selector)
    {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            format!("--dynamic-namespaces {selector:?}: {why}"),
        ));
    }
    let scope = Scope {
        node,
        nad_namespaces: args.nad_namespaces.clone(),
        dynamic_namespaces: args.dynamic_namespaces.clone(),
    };
    let said: Say = Arc::new(|line: std::fmt::Arguments<'_>| say(line));
    let started = |what: &'static str| {
        move |e: std::io::Error| CniError::new(ErrorCode::Internal, format!("starting {what}: {e}"))
    };
    let which = if scope.nad_namespaces.is_empty() {
        "all namespaces".to_string()
    } else {
        format!("namespaces {}", scope.nad_namespaces.join(", "))
    };
    let pods = match &scope.node {
        Some(node) => format!("the pods of node {node:?}"),
        None => "no pods".to_string(),
    };
    let source = match serving {
        true => source(args.kubeconfig.as_deref(), service_account, getenv)?,
        false => None,
    };
    if args.dynamic && source.is_none() {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            "--dynamic: the daemon watches pods and namespaces with its own identity: give \
             --kubeconfig (in a pod, its service account is used)",
        ));
    }
    let caches = match source {
        None if !serving => CachesFor::FirstKubeconfig {
            scope,
            say: Arc::clone(&said),
            started: Default::default(),
        },
        Some(source) => {
            say(format_args!(
                "caches: watching {pods} and the NADs of {which} with {source}"
            ));
            CachesFor::Every(
                Caches::start(source, scope, Arc::clone(&said))
                    .map_err(started("the watch caches"))?,
            )
        }
        None => {
            say(format_args!(
                "caches: will watch {pods} and the NADs of {which} once a call names a \
                 kubeconfig"
            ));
            CachesFor::FirstKubeconfig {
                scope,
                say: Arc::clone(&said),
                started: Default::default(),
            }
        }
    };
    let pool = Arc::new(ClientPool::default());
    let events = EventQueue::start(said).map_err(started("the event sender"))?;
    Ok(Cached {
        pooled: Pooled(pool),
        caches,
        events: Arc::new(events),
        delegates: Some(delegates),
    })
}

/// `--node-name`, else `$NODE_NAME` (the DaemonSet sets it from `spec.nodeName`), else the
/// host name in lower case, as the kubelet registers it by default. A name given that cannot be
/// a node's stops the daemon; a host name that cannot is said, and no pods are kept.
fn node_name(
    flag: Option<&str>,
    getenv: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, CniError> {
    let (name, from) = match flag {
        Some(n) => (n.to_string(), "--node-name"),
        None => match getenv("NODE_NAME").filter(|n| !n.is_empty()) {
            Some(n) => (n, "NODE_NAME"),
            None => (
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .unwrap_or_default()
                    .trim()
                    .to_lowercase(),
                "the host name",
            ),
        },
    };
    // Part of a field selector: a name with `,` or `=` would select something else.
    let Err(e) = netattach::names::validate_subdomain(&name) else {
        return Ok(Some(name));
    };
    let problem = format!(
        "the node name from {from}, {:?}: {e}; give the node's name as the kubelet registered \
         it with --node-name",
        cni::quote::cut(&name, cni::quote::VALUE)
    );
    if from == "the host name" {
        say(format_args!(
            "caches: {problem}; keeping no pods: every call reads its pod with a GET"
        ));
        return Ok(None);
    }
    Err(CniError::new(ErrorCode::InvalidConfig, problem))
}

/// Whether the daemon watches with its pod's service account: it runs in a pod (Kubernetes set
/// `KUBERNETES_SERVICE_HOST`) and has no `--kubeconfig`.
pub(super) fn in_a_pod(args: &Args, getenv: &dyn Fn(&str) -> Option<String>) -> bool {
    args.kubeconfig.is_none() && getenv("KUBERNETES_SERVICE_HOST").is_some_and(|h| !h.is_empty())
}

/// The daemon's own identity: `--kubeconfig`, else the pod's service account in
/// `service_account` when it runs in a pod; `None`: the kubeconfig of the first call.
fn source(
    kubeconfig: Option<&Path>,
    service_account: &Path,
    getenv: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Source>, CniError> {
    if let Some(path) = kubeconfig {
        return Ok(Some(Source::Kubeconfig(path.to_path_buf())));
    }
    if getenv("KUBERNETES_SERVICE_HOST").is_none_or(|h| h.is_empty()) {
        return Ok(None);
    }
    let server = super::kubeconfig_writer::in_cluster_server(getenv).map_err(|name| {
        CniError::new(
            ErrorCode::InvalidConfig,
            format!(
                "{name} is not set, KUBERNETES_SERVICE_HOST is: the daemon's pod names no API \
                 server to watch (give --kubeconfig)"
            ),
        )
    })?;
    Ok(Some(Source::InCluster {
        server,
        service_account: service_account.to_path_buf(),
    }))
}

/// The caches' state and the events' counts, as JSON (`GET /caches`).
pub(super) fn report(connect: &Cached) -> String {
    let (sent, failed, dropped) = connect.events.counts();
    let caches = connect.caches().map(|c| c.report());
    let report = serde_json::json!({
        "started": caches.is_some(),
        "caches": caches,
        "events": {"sent": sent, "failed": failed, "dropped": dropped},
    });
    format!("{report}\n")
}

/// Whether the daemon is ready (`GET /readyz`; it answers, so its socket is bound): the caches
/// it watches with its own identity serve calls. Caches that start with the first call do not
/// hold it back (they cannot start before a call comes). One line saying why.
pub(super) fn readiness(connect: &Cached) -> (bool, String) {
    let Some(r) = connect.caches().map(|c| c.report()) else {
        return (
            true,
            "ready: serving calls (the caches start with the first call)\n".to_string(),
        );
    };
    // No node name: no pods are kept, and none are waited for.
    let serving = (r.pods.synced || r.node.is_none()) && r.nads.synced;
    if serving || !matches!(connect.caches, CachesFor::Every(_)) {
        return (
            true,
            format!(
                "ready: serving calls; in the caches: {} pods, {} NADs\n",
                r.pods.objects, r.nads.objects
            ),
        );
    }
    let state = |synced| if synced { "in" } else { "not in" };
    (
        false,
        format!(
            "not ready: the caches do not serve yet (pods {}, NADs {})\n",
            state(r.pods.synced),
            state(r.nads.synced)
        ),
    )
}

/// One line of it for `GET /healthz`.
pub(super) fn summary(connect: &Cached) -> String {
    let Some(r) = connect.caches().map(|c| c.report()) else {
        return "caches not started (no call has named a kubeconfig yet)".to_string();
    };
    let kept = |k: &plumb_cluster::caches::KeptReport| {
        format!(
            "{} ({} kept, {} hits, {} misses)",
            if k.synced { "synced" } else { "not synced" },
            k.objects,
            k.hits,
            k.misses
        )
    };
    format!(
        "caches: pods of node {} {}, NADs {}",
        r.node.as_deref().unwrap_or("(none)"),
        kept(&r.pods),
        kept(&r.nads)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_name_comes_from_the_flag_then_the_environment_and_must_be_a_name() {
        let env = |v: &str| (v == "NODE_NAME").then(|| "from-env".to_string());
        assert_eq!(node_name(Some("n1"), &env).unwrap().as_deref(), Some("n1"));
        assert_eq!(node_name(None, &env).unwrap().as_deref(), Some("from-env"));
        let e = node_name(Some("a,b"), &env).unwrap_err();
        assert!(
            e.msg.contains("--node-name") && e.msg.contains("\"a,b\""),
            "{e}"
        );
        let e = node_name(None, &|_| Some("x=y".into())).unwrap_err();
        assert!(e.msg.contains("NODE_NAME"), "{e}");
    }

    #[test]
    fn the_identity_is_the_flag_then_the_pod_then_the_first_call() {
        let in_pod = |v: &str| match v {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let (k, sa) = (Path::new("/k"), Path::new("/sa"));
        assert!(matches!(source(Some(k), sa, &in_pod), Ok(Some(Source::Kubeconfig(p))) if p == k));
        assert!(matches!(
            source(None, sa, &in_pod),
            Ok(Some(Source::InCluster { server, service_account }))
                if server == "https://[fd00::1]:443" && service_account == sa
        ));
        assert!(matches!(source(None, sa, &|_| None), Ok(None)));
        let no_port = |v: &str| (v == "KUBERNETES_SERVICE_HOST").then(|| "10.0.0.1".to_string());
        let e = source(None, sa, &no_port).unwrap_err();
        assert!(e.msg.contains("KUBERNETES_SERVICE_PORT"), "{e}");
    }
}
