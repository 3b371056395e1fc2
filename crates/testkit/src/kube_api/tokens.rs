//! TokenRequest (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`,
//! authentication.k8s.io/v1) in the API stand-in: a token for a service account, bound to an
//! object (a Pod, a Secret, or a Node: on by default since Kubernetes 1.31), answered as the API
//! server does (201 with the request, its status holding the token and when it expires), then
//! accepted, and kept for the tests to read ([`super::KubeApi::issued_tokens`]).

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
    /// The bound object's UID, if the request named an object.
    pub bound_uid: Option<String>,
    /// The lifetime granted: the one asked for (the API server's default, an hour, when none
    /// was), within the API server's cap.
    pub expiration_seconds: u64,
    pub token: String,
}

/// The shortest lifetime the API server issues (`ExpirationSeconds` validation: ten minutes).
const MIN_EXPIRATION: u64 = 600;

/// Answers a TokenRequest for service account `ns/name`. The service account itself is not
/// checked: the stand-in serves none. A Node bound to is checked when it was registered
/// ([`super::KubeApi::register_node`]): a reference naming another UID gets 409, as the API
/// server answers for an object deleted and made again. A lifetime asked for past the API
/// server's cap (`KubeApiOptions::max_token_expiration`) is shortened to it.
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
    let asked = match &spec["expirationSeconds"] {
        Value::Null => 3600,
        v => v.as_u64().filter(|s| *s >= MIN_EXPIRATION).ok_or_else(|| {
            invalid(
                "spec.expirationSeconds",
                "may not specify a duration less than 10 minutes",
            )
        })?,
    };
    let expiration_seconds = shared
        .max_token_expiration
        .map_or(asked, |cap| asked.min(cap));
    let bound = match &spec["boundObjectRef"] {
        Value::Null => None,
        r => {
            let kind = r["kind"].as_str().unwrap_or("");
            let bound_name = r["name"].as_str().unwrap_or("");
            // The API server's registry answers another kind with a 400 (`token.go`).
            if !matches!(kind, "Pod" | "Secret" | "Node") {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {name:?} to object of type {kind}"
                )));
            }
            if bound_name.is_empty() {
                return Err(invalid("spec.boundObjectRef.name", "Required value"));
            }
            Some((kind.to_owned(), bound_name.to_owned()))
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    // The bound object's UID, as the API server reads it from the object: a registered
    // Node's, which the request may name only rightly (`token.go`); else the one the request
    // names, else a new one.
    let named = spec["boundObjectRef"]["uid"]
        .as_str()
        .filter(|u| !u.is_empty());
    let registered = match &bound {
        Some((kind, node)) if kind == "Node" => lock(&shared.node_uids).get(node).cloned(),
        _ => None,
    };
    let bound_uid = match (registered, named) {
        (Some(is), Some(named)) if is != named => {
            let node = bound.as_ref().map_or("", |b| b.1.as_str());
            return Err(ApiError::conflict_on(
                "Node",
                node,
                &format!(
                    "the UID in the bound object reference ({named}) does not match the UID in \
                     record. The object might have been deleted and then recreated"
                ),
            ));
        }
        (Some(is), _) => is,
        (None, named) => named.map_or_else(new_uid, str::to_owned),
    };
    let bound_with_uid = bound
        .as_ref()
        .map(|(k, n)| (k.as_str(), n.as_str(), bound_uid.as_str()));
    let sa_uid = lock(&shared.service_account_uids)
        .entry((ns.to_owned(), name.to_owned()))
        .or_insert_with(new_uid)
        .clone();
    let token = jwt(
        (ns, name, &sa_uid),
        bound_with_uid,
        now,
        now + expiration_seconds,
    );
    // Behind the tokens given at the start: `KubeApi::token` stays the first of those.
    lock(&shared.tokens).push(token.clone());
    lock(&shared.issued).push(IssuedToken {
        namespace: ns.to_owned(),
        service_account: name.to_owned(),
        bound_uid: bound.as_ref().map(|_| bound_uid.clone()),
        bound,
        expiration_seconds,
        token: token.clone(),
    });
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

/// A token shaped as the API server's: a JWT whose claims name the service account (its UID
/// `sa_uid`) and the
/// object it is bound to (`kubernetes.io.node` or `.pod`: kind, name, UID), issued at `iat`,
/// expiring at `exp`.
/// Its signature is not one: the stand-in knows its tokens by value.
fn jwt(
    (ns, name, sa_uid): (&str, &str, &str),
    bound: Option<(&str, &str, &str)>,
    iat: u64,
    exp: u64,
) -> String {
    let mut k8s = json!({"namespace": ns, "serviceaccount": {"name": name, "uid": sa_uid}});
    if let Some((kind, object, uid)) = bound {
        let key = kind.to_ascii_lowercase();
        k8s[key] = json!({"name": object, "uid": uid});
    }
    let claims = json!({
        "aud": ["https://kubernetes.default.svc.cluster.local"],
        "iat": iat, "nbf": iat, "exp": exp,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": new_uid(),
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "kubernetes.io": k8s,
    });
    let header = r#"{"alg":"RS256","kid":"testkit"}"#;
    format!(
        "{}.{}.{}",
        base64url(header.as_bytes()),
        base64url(claims.to_string().as_bytes()),
        base64url(b"testkit-signature")
    )
}

/// Base64url without padding (RFC 4648 §5), as a JWT's parts are written.
fn base64url(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_is_rfc_4648_section_5_without_padding() {
        assert_eq!(base64url(b""), "");
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
        assert_eq!(base64url(b"foob"), "Zm9vYg");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
    }
}
