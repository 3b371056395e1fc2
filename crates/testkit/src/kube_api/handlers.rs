//! Routing and the read side: which handler a request goes to, the discovery documents, GET
//! and LIST (selectors, pagination, metadata-only answers). The writes are in `writes.rs`, WATCH
//! in `watch.rs`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::faults::{LoggedRequest, query_pairs};
use super::resources::{Resource, Route};
use super::selector::Selector;
use super::server::{Reply, Shared, lock};
use super::status::ApiError;
use super::store::name_of;
use super::{watch, writes};

/// One request, as the handlers see it.
pub(crate) struct Call<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub params: Vec<(String, String)>,
    pub content_type: Option<&'a str>,
    pub accept: Option<&'a str>,
    pub body: &'a [u8],
}

impl<'a> Call<'a> {
    pub(crate) fn new(req: &'a LoggedRequest, accept: Option<&'a str>, body: &'a [u8]) -> Call<'a> {
        Call {
            method: &req.method,
            path: &req.path,
            params: query_pairs(&req.query),
            content_type: req.content_type.as_deref(),
            accept,
            body,
        }
    }

    pub(crate) fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.param(key), Some("true" | "1"))
    }

    /// `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`, as
    /// kube-rs's `get_metadata`, `list_metadata` and `watch_metadata` send.
    pub(crate) fn metadata_only(&self) -> bool {
        self.accept
            .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
    }

    pub(crate) fn dry_run(&self) -> bool {
        self.param("dryRun") == Some("All")
    }
}

/// Paths the default RBAC rules open to unauthenticated users (`system:public-info-viewer`).
pub(crate) fn is_public(path: &str) -> bool {
    matches!(Route::parse(path), Route::Version | Route::Health)
}

pub(crate) fn dispatch(shared: &Arc<Shared>, call: &Call<'_>) -> Reply {
    let route = Route::parse(call.path);
    let result = match (&route, call.method) {
        (Route::Collection { .. } | Route::Object { .. }, _) => resource(shared, route, call),
        (Route::TokenRequest { ns, name }, "POST") => super::tokens::create(shared, ns, name, call),
        (Route::TokenRequest { .. }, _) => Err(ApiError::method_not_allowed()),
        (Route::Node(name), "GET") => node(shared, name),
        (Route::Node(_), _) => Err(ApiError::method_not_allowed()),
        (Route::NotFound, _) => Err(ApiError::path_not_found()),
        (_, "GET") => Ok(discovery(shared, route)),
        _ => Err(ApiError::method_not_allowed()),
    };
    result.unwrap_or_else(|e| Reply::error(&e))
}

/// A Node registered with `register_node`, as the API server answers a GET of it (metadata
/// only: the stand-in keeps no Node spec or status).
fn node(shared: &Shared, name: &str) -> Result<Reply, ApiError> {
    let uid = lock(&shared.node_uids).get(name).cloned();
    let uid = uid.ok_or_else(|| ApiError::node_not_found(name))?;
    let node = json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "uid": uid, "resourceVersion": "1"},
    });
    Ok(Reply::json(200, node.to_string()))
}

fn discovery(shared: &Shared, route: Route) -> Reply {
    let doc = match route {
        Route::Version => json!({
            "major": "1", "minor": "34",
            "emulationMajor": "1", "emulationMinor": "34",
            "minCompatibilityMajor": "1", "minCompatibilityMinor": "33",
            "gitVersion": "v1.34.0", "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean", "buildDate": "2025-08-27T00:00:00Z",
            "goVersion": "go1.24.6", "compiler": "gc", "platform": "linux/amd64",
        }),
        Route::Health => return Reply::text(200, "ok"),
        Route::CoreVersions => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}],
        }),
        Route::Groups => Resource::groups(),
        Route::Group(name) => {
            let groups = Resource::groups();
            let found = groups["groups"]
                .as_array()
                .and_then(|gs| gs.iter().find(|g| g["name"] == name.as_str()));
            match found {
                Some(group) => {
                    let mut group = group.clone();
                    group["kind"] = json!("APIGroup");
                    group["apiVersion"] = json!("v1");
                    group
                }
                None => return Reply::error(&ApiError::path_not_found()),
            }
        }
        Route::GroupVersion(group, version) => match Resource::discovery(&group, &version) {
            Some(doc) => doc,
            None => return Reply::error(&ApiError::path_not_found()),
        },
        Route::Collection { .. }
        | Route::Object { .. }
        | Route::TokenRequest { .. }
        | Route::Node(_)
        | Route::NotFound => {
            return Reply::error(&ApiError::path_not_found());
        }
    };
    Reply::value(200, &doc)
}

fn resource(shared: &Arc<Shared>, route: Route, call: &Call<'_>) -> Result<Reply, ApiError> {
    match route {
        Route::Collection { res, ns } => match call.method {
            "GET" if call.flag("watch") => watch::start(shared, res, ns, call).map(Reply::stream),
            "GET" => list(shared, res, ns.as_deref(), call),
            // A cluster-scoped collection is where its objects are created (namespace `""`);
            // the all-namespaces collection of a namespaced resource is only read.
            "POST" => match ns {
                Some(ns) => writes::create(shared, res, &ns, call),
                None if !res.is_namespaced() => writes::create(shared, res, "", call),
                None => Err(ApiError::method_not_allowed()),
            },
            // Namespaces have no deletecollection verb, as on the API server.
            "DELETE" => match ns {
                Some(ns) => writes::delete_collection(shared, res, &ns, call),
                None => Err(ApiError::method_not_allowed()),
            },
            _ => Err(ApiError::method_not_allowed()),
        },
        Route::Object {
            res,
            ns,
            name,
            status,
        } => match call.method {
            "GET" => get(shared, res, &ns, &name, call),
            "PUT" => writes::update(shared, res, &ns, &name, status, call),
            "PATCH" => writes::patch(shared, res, &ns, &name, status, call),
            "DELETE" if !status => writes::delete(shared, res, &ns, &name, call),
            _ => Err(ApiError::method_not_allowed()),
        },
        _ => Err(ApiError::path_not_found()),
    }
}

/// The object as the client asked for it: whole, or only its metadata.
pub(crate) fn render(obj: &Value, call: &Call<'_>) -> Value {
    if call.metadata_only() {
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
    } else {
        obj.clone()
    }
}

fn get(
    shared: &Shared,
    res: Resource,
    ns: &str,
    name: &str,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let store = lock(&shared.store);
    let obj = store
        .get(res, ns, name)
        .ok_or_else(|| ApiError::not_found(res, name))?;
    Ok(Reply::value(200, &render(obj, call)))
}

/// The field selectors the API server supports (pods: `pod.ToSelectableFields`; events:
/// `event.ToSelectableFields`; namespaces: `NamespaceToSelectableFields`, less its legacy
/// `name`; custom resources without `selectableFields`: name and namespace). Cluster-scoped
/// objects have no `metadata.namespace` to select on.
fn supported_field(res: Resource, field: &str) -> bool {
    if field == "metadata.name" || (field == "metadata.namespace" && res.is_namespaced()) {
        return true;
    }
    match res {
        Resource::Pods => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.podIPs"
                | "status.nominatedNodeName"
        ),
        Resource::Events => {
            field.starts_with("involvedObject.")
                || matches!(field, "reason" | "reportingComponent" | "source" | "type")
        }
        Resource::EventsV1 => {
            field.starts_with("regarding.")
                || matches!(field, "reason" | "reportingController" | "type")
        }
        Resource::Namespaces => field == "status.phase",
        Resource::NetworkAttachmentDefinitions | Resource::IpamClaims => false,
    }
}

pub(crate) fn selector(res: Resource, call: &Call<'_>) -> Result<Selector, ApiError> {
    let fields = call.param("fieldSelector");
    if let Some(fields) = fields {
        for term in fields.split(',').filter(|t| !t.trim().is_empty()) {
            let key = term.split(['=', '!']).next().unwrap_or("").trim();
            if !supported_field(res, key) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            }
        }
    }
    Selector::parse(call.param("labelSelector"), fields).map_err(ApiError::bad_request)
}

/// Continue tokens are opaque to clients; this one is the hex of the last key served.
fn continue_token(ns: &str, name: &str) -> String {
    format!("{ns}\0{name}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn parse_continue(token: &str) -> Option<(String, String)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (ns, name) = text.split_once('\0')?;
    Some((ns.to_owned(), name.to_owned()))
}

fn list(
    shared: &Shared,
    res: Resource,
    ns: Option<&str>,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let sel = selector(res, call)?;
    let limit = match call.param("limit") {
        None | Some("") => 0,
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?,
    };
    let after = match call.param("continue") {
        None | Some("") => None,
        Some(t) => Some(parse_continue(t).ok_or_else(|| {
            ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
        })?),
    };
    let store = lock(&shared.store);
    let matching: Vec<&Value> = store
        .list(res, ns)
        .into_iter()
        .filter(|o| {
            after.as_ref().is_none_or(|(ans, aname)| {
                let ons = o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                (ons, name_of(o)) > (ans.as_str(), aname.as_str())
            })
        })
        .filter(|o| sel.matches(o))
        .collect();
    let mut meta = Map::new();
    meta.insert(
        "resourceVersion".into(),
        json!(store.resource_version().to_string()),
    );
    let served = if limit > 0 && matching.len() > limit {
        let last = matching[limit - 1];
        let last_ns = last
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        meta.insert(
            "continue".into(),
            json!(continue_token(last_ns, name_of(last))),
        );
        if call.param("labelSelector").is_none() && call.param("fieldSelector").is_none() {
            meta.insert("remainingItemCount".into(), json!(matching.len() - limit));
        }
        &matching[..limit]
    } else {
        &matching[..]
    };
    let items: Vec<Value> = served
        .iter()
        .map(|o| {
            let mut item = render(o, call);
            // Built-in types are encoded without type meta inside a list; unstructured custom
            // resources keep theirs.
            if res.is_builtin()
                && !call.metadata_only()
                && let Value::Object(m) = &mut item
            {
                m.remove("kind");
                m.remove("apiVersion");
            }
            item
        })
        .collect();
    let (kind, api_version) = if call.metadata_only() {
        (
            "PartialObjectMetadataList".to_owned(),
            "meta.k8s.io/v1".to_owned(),
        )
    } else {
        (format!("{}List", res.kind()), res.api_version())
    };
    Ok(Reply::value(
        200,
        &json!({"kind": kind, "apiVersion": api_version, "metadata": meta, "items": items}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let t = continue_token("ns", "pod-1");
        assert_eq!(parse_continue(&t), Some(("ns".into(), "pod-1".into())));
        assert_eq!(parse_continue("zz"), None);
        assert_eq!(parse_continue("abc"), None);
        assert_eq!(parse_continue("ff"), None);
    }
}
