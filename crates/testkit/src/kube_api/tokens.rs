//! TokenRequest (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`,
//! authentication.k8s.io/v1): a token for a service account, bound to an object (a Pod, a
//! Secret, or, since Kubernetes 1.33 by default, a Node). The stand-in answers as the API server
//! does (201 with the request, its status holding the token and when it expires), accepts the
//! token from then on, and keeps each issued token for the tests to read
//! ([`super::KubeApi::issued_tokens`]). The service account itself is not checked: the stand-in
//! serves none.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::handlers::Call;
use super::server::{Reply, Shared, lock};
use super::status::{ApiError, Cause};
use super::store::{new_uid, now_rfc3339, rfc3339};

/// A token the stand-in issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub namespace: String,
    pub service_account: String,
    /// The bound object's kind and name, if the request named one.
    pub bound: Option<(String, String)>,
    /// The lifetime asked for (the API server's default, an hour, when none was).
    pub expiration_seconds: u64,
    pub token: String,
}

/// The shortest lifetime the API server issues (`ExpirationSeconds` validation: ten minutes).
const MIN_EXPIRATION: u64 = 600;

pub(crate) fn create(
    shared: &Arc<Shared>,
    ns: &str,
    name: &str,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let body: Value = serde_json::from_slice(call.body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
    let spec = &body["spec"];
    let invalid = |field: &str, message: &str| {
        ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: message.into(),
                field: field.into(),
            }],
        )
    };
    let expiration_seconds = match &spec["expirationSeconds"] {
        Value::Null => 3600,
        v => v.as_u64().filter(|s| *s >= MIN_EXPIRATION).ok_or_else(|| {
            invalid(
                "spec.expirationSeconds",
                "may not specify a duration less than 10 minutes",
            )
        })?,
    };
    let bound = match &spec["boundObjectRef"] {
        Value::Null => None,
        r => {
            let kind = r["kind"].as_str().unwrap_or("");
            let bound_name = r["name"].as_str().unwrap_or("");
            if !matches!(kind, "Pod" | "Secret" | "Node") {
                return Err(invalid(
                    "spec.boundObjectRef.kind",
                    &format!(
                        "Unsupported value: {kind:?}: supported values: \"Pod\", \"Secret\", \"Node\""
                    ),
                ));
            }
            if bound_name.is_empty() {
                return Err(invalid("spec.boundObjectRef.name", "Required value"));
            }
            Some((kind.to_owned(), bound_name.to_owned()))
        }
    };
    let token = format!("testkit-issued-{}", new_uid());
    // Behind the tokens given at the start: `KubeApi::token` stays the first of those.
    lock(&shared.tokens).push(token.clone());
    lock(&shared.issued).push(IssuedToken {
        namespace: ns.to_owned(),
        service_account: name.to_owned(),
        bound,
        expiration_seconds,
        token: token.clone(),
    });
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut spec = spec.clone();
    spec["expirationSeconds"] = json!(expiration_seconds);
    if spec["audiences"].as_array().is_none_or(Vec::is_empty) {
        spec["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    Ok(Reply::value(
        201,
        &json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": now_rfc3339()},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": rfc3339(now + expiration_seconds)},
        }),
    ))
}
