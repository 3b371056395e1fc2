//! TokenRequest: a service-account token bound to the Node, for the daemon's kubeconfig on the
//! node, and the check that the API server still takes the token in use (`GET /version`).

use std::time::{Duration, SystemTime};

use cni::error::{CniError, ErrorCode};
use kube::api::{Api, PostParams};

use super::*;

/// What the API server answered a TokenRequest: the token, when it expires by its clock, and
/// the lifetime it granted (`spec.expirationSeconds` of the answer, which it shortens to its
/// cap), when it says.
pub type Grant = (String, SystemTime, Option<Duration>);

impl KubeCluster {
    /// A token of the service account `namespace`/`name`, bound to the Node `node` (its UID
    /// when known) and asked to last `seconds` (TokenRequest, authentication.k8s.io/v1), with
    /// when it expires as the API server says, and the lifetime it granted (it may shorten
    /// the one asked); or why not.
    pub fn node_bound_token(
        &self,
        (namespace, name): (&str, &str),
        (node, node_uid): (&str, Option<&str>),
        seconds: i64,
    ) -> Result<Grant, CniError> {
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
}
