//! Which pod a CNI call is for: the `K8S_POD_*` keys the kubelet's runtime puts in `CNI_ARGS`
//! (CNI conventions, "CNI_ARGS": `K8S_POD_NAMESPACE`, `K8S_POD_NAME`,
//! `K8S_POD_INFRA_CONTAINER_ID`, `K8S_POD_UID`).

use cni::error::{CniError, ErrorCode};
use netattach::names;

/// The `CNI_ARGS` key that carries a selection (either annotation format) for runtimes without
/// Kubernetes.
pub const NETWORKS_ARG: &str = "PLUMB_NETWORKS";

/// The pod named in `CNI_ARGS`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodArgs {
    pub namespace: String,
    pub name: String,
    /// `K8S_POD_UID`, when the runtime gives it: a pod recreated under the same name has
    /// another UID, and its networks must not be attached to the old sandbox.
    pub uid: Option<String>,
}

impl PodArgs {
    /// The pod from parsed `CNI_ARGS` pairs; `None` when the call names no pod (a runtime
    /// without Kubernetes). A namespace without a name, or the reverse, is an error, and so
    /// are names that are not DNS-1123, since they go into API paths.
    pub fn from_args(pairs: &[(String, String)]) -> Result<Option<PodArgs>, CniError> {
        let get = |k: &str| cni::args::get(pairs, k).filter(|v| !v.is_empty());
        let (namespace, name) = match (get("K8S_POD_NAMESPACE"), get("K8S_POD_NAME")) {
            (None, None) => return Ok(None),
            (Some(ns), Some(n)) => (ns, n),
            (ns, _) => {
                let missing = if ns.is_none() {
                    "K8S_POD_NAMESPACE"
                } else {
                    "K8S_POD_NAME"
                };
                return Err(CniError::new(
                    ErrorCode::InvalidEnvironment,
                    format!("CNI_ARGS names a pod but has no {missing}"),
                ));
            }
        };
        names::validate_label(namespace).map_err(|e| {
            CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("CNI_ARGS K8S_POD_NAMESPACE: {e}"),
            )
        })?;
        names::validate_subdomain(name).map_err(|e| {
            CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("CNI_ARGS K8S_POD_NAME: {e}"),
            )
        })?;
        Ok(Some(PodArgs {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: get("K8S_POD_UID").map(str::to_string),
        }))
    }
}

impl std::fmt::Display for PodArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(s: &str) -> Vec<(String, String)> {
        cni::args::parse(s).unwrap()
    }

    #[test]
    fn reads_the_kubelet_keys() {
        let p = PodArgs::from_args(&pairs(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;\
             K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(p.to_string(), "ns1/web-0");
        assert_eq!(p.uid.as_deref(), Some("u-1"));
    }

    #[test]
    fn no_pod_and_bad_pods() {
        assert_eq!(PodArgs::from_args(&pairs("IgnoreUnknown=1")).unwrap(), None);
        let e = PodArgs::from_args(&pairs("K8S_POD_NAME=x")).unwrap_err();
        assert!(e.msg.contains("K8S_POD_NAMESPACE"), "{e}");
        assert_eq!(e.code, 4);
        let e = PodArgs::from_args(&pairs("K8S_POD_NAMESPACE=Bad_NS;K8S_POD_NAME=x")).unwrap_err();
        assert!(e.msg.contains("K8S_POD_NAMESPACE"), "{e}");
        let e = PodArgs::from_args(&pairs("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=../x")).unwrap_err();
        assert!(e.msg.contains("K8S_POD_NAME"), "{e}");
    }
}
