//! The writes: create (POST), replace (PUT), PATCH, DELETE and delete-collection on the served
//! resources and their `status` subresources. Each follows the API server's generic registry
//! (`k8s.io/apiserver/pkg/registry/generic/registry/store.go`) and the resource's strategy (pod,
//! event, custom resource); every check and write of one request happens under one lock, as one
//! etcd transaction would.

use serde_json::{Value, json};

use super::handlers::{Call, render, selector};
use super::patch::{self, JsonPatchError, PatchType};
use super::resources::Resource;
use super::server::{Reply, Shared};
use super::status::{ApiError, Cause, MODIFIED, quote};
use super::store::{self, Store, metadata_mut, name_of, name_suffix, resource_version_of};

/// The media types a create or replace body may have (built-in types also take protobuf).
fn check_body_type(res: Resource, call: &Call<'_>) -> Result<(), ApiError> {
    let media = call
        .content_type
        .map(|c| c.split(';').next().unwrap_or("").trim());
    match media {
        // No Content-Type: the server takes its first serializer, JSON.
        None | Some("" | "application/json" | "application/yaml") => Ok(()),
        Some(_) if res.is_builtin() => Err(ApiError::unsupported_media_type(&[
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
        ])),
        Some(_) => Err(ApiError::unsupported_media_type(&[
            "application/json",
            "application/yaml",
        ])),
    }
}

/// The body of a create or replace, as an object of this resource.
fn parse_object(res: Resource, call: &Call<'_>) -> Result<Value, ApiError> {
    check_body_type(res, call)?;
    let obj: Value = serde_json::from_slice(call.body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; json parse error: json: cannot unmarshal non-object into Go value of type \
             struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }",
        ));
    }
    check_type_meta(res, &obj)?;
    Ok(obj)
}

/// A body may leave out apiVersion and kind (they default from the URL) but must not name
/// another type.
fn check_type_meta(res: Resource, obj: &Value) -> Result<(), ApiError> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if !api_version.is_empty() && api_version != res.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            res.api_version()
        )));
    }
    if !kind.is_empty() && kind != res.kind() {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            res.kind()
        )));
    }
    Ok(())
}

fn invalid(res: Resource, name: &str, field: &str, reason: &str, message: String) -> ApiError {
    ApiError::invalid(
        res.kind(),
        res.group(),
        name,
        vec![Cause {
            reason: reason.to_owned(),
            message,
            field: field.to_owned(),
        }],
    )
}

/// `IsDNS1123Subdomain`, the rule for the names of every resource served here.
fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn check_name(res: Resource, name: &str) -> Result<(), ApiError> {
    if res == Resource::Namespaces {
        return check_label_name(res, name);
    }
    if valid_name(name) {
        return Ok(());
    }
    Err(invalid(
        res,
        name,
        "metadata.name",
        "FieldValueInvalid",
        format!(
            "Invalid value: {}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character (e.g. \
             'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            quote(name)
        ),
    ))
}

/// Namespace names are DNS labels (`ValidateNamespaceName`, `IsDNS1123Label`): one cause per
/// rule broken, as the API server lists them.
fn check_label_name(res: Resource, name: &str) -> Result<(), ApiError> {
    let label = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let mut messages = Vec::new();
    if name.len() > 63 {
        messages.push("must be no more than 63 characters".to_owned());
    }
    if !label(name) {
        messages.push(if name.split('.').all(label) {
            "must not contain dots".to_owned()
        } else {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
             '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .to_owned()
        });
    }
    if messages.is_empty() {
        return Ok(());
    }
    let causes = messages
        .into_iter()
        .map(|m| Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {m}", quote(name)),
            field: "metadata.name".into(),
        })
        .collect();
    Err(ApiError::invalid(res.kind(), res.group(), name, causes))
}

/// Pods (since `PodObservedGenerationTracking`) and custom resources count changes outside
/// metadata and status in `metadata.generation`; events and namespaces do not.
fn tracks_generation(res: Resource) -> bool {
    !matches!(
        res,
        Resource::Events | Resource::EventsV1 | Resource::Namespaces
    )
}

/// The label every namespace carries (`SetDefaults_Namespace`, set on each write), so that a
/// selector can name one namespace.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

fn default_namespace_label(obj: &mut Value) {
    let name = name_of(obj).to_owned();
    let meta = metadata_mut(obj);
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    labels[NAMESPACE_NAME_LABEL] = json!(name);
}

fn meta_str<'v>(obj: &'v Value, field: &str) -> Option<&'v str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// What a new object gets before it is stored (`rest.BeforeCreate` and the strategies'
/// `PrepareForCreate`): the system fields are the server's, the status of a resource with a
/// status subresource is not the client's to set. A cluster-scoped object loses any namespace
/// the body names.
fn prepare_create(
    res: Resource,
    ns: &str,
    url_name: Option<&str>,
    mut obj: Value,
) -> Result<Value, ApiError> {
    if let Some(body_ns) = meta_str(&obj, "namespace")
        && body_ns != ns
        && res.is_namespaced()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let generate = meta_str(&obj, "generateName").map(str::to_owned);
    let meta = metadata_mut(&mut obj);
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if let Some(url_name) = url_name {
        if !name.is_empty() && name != url_name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({url_name})"
            )));
        }
        name = url_name.to_owned();
    }
    if name.is_empty() {
        match generate {
            Some(prefix) => name = format!("{prefix}{}", name_suffix()),
            None => {
                return Err(invalid(
                    res,
                    "",
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required".to_owned(),
                ));
            }
        }
    }
    check_name(res, &name)?;
    if meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|rv| !rv.is_empty())
    {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    meta.insert("name".into(), json!(name));
    if res.is_namespaced() {
        meta.insert("namespace".into(), json!(ns));
    } else {
        meta.remove("namespace");
    }
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "managedFields",
    ] {
        meta.remove(field);
    }
    if tracks_generation(res) {
        meta.insert("generation".into(), json!(1));
    }
    if res == Resource::Namespaces {
        default_namespace_label(&mut obj);
    }
    if let Value::Object(m) = &mut obj {
        match res {
            Resource::Pods => {
                m.insert("status".into(), json!({"phase": "Pending"}));
            }
            // The namespace strategy: active, and held by the `kubernetes` finalizer (which
            // the stand-in's deletes do not wait for).
            Resource::Namespaces => {
                m.insert("status".into(), json!({"phase": "Active"}));
                let spec = m.entry("spec").or_insert_with(|| json!({}));
                if !spec.is_object() {
                    *spec = json!({});
                }
                let finalizers = &mut spec["finalizers"];
                match finalizers.as_array_mut() {
                    Some(f) if f.contains(&json!("kubernetes")) => {}
                    Some(f) => f.push(json!("kubernetes")),
                    None => *finalizers = json!(["kubernetes"]),
                }
            }
            _ if res.has_status() => {
                m.remove("status");
            }
            _ => {}
        }
    }
    Ok(obj)
}

/// Stores a prepared object (or, for a dry run, only shows it), then carries out a pending
/// deletion that the write released: the last finalizer of a deleted object removed.
fn commit(store: &mut Store, res: Resource, ns: &str, obj: Value, dry_run: bool) -> Value {
    if dry_run {
        return obj;
    }
    let deleting =
        obj.pointer("/metadata/deletionTimestamp").is_some() && finalizers(&obj).is_empty();
    let name = name_of(&obj).to_owned();
    let stored = store.write(res, ns, obj);
    if deleting {
        store.delete(res, ns, &name).unwrap_or(stored)
    } else {
        stored
    }
}

fn finalizers(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub(crate) fn create(
    shared: &Shared,
    res: Resource,
    ns: &str,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let obj = prepare_create(res, ns, None, parse_object(res, call)?)?;
    shared.write(|store| {
        let name = name_of(&obj).to_owned();
        if store.get(res, ns, &name).is_some() {
            return Err(ApiError::already_exists(res, &name));
        }
        let stored = commit(store, res, ns, obj, call.dry_run());
        Ok(Reply::value(201, &render(&stored, call)))
    })
}

/// The part of an object whose changes bump `metadata.generation`.
fn generation_part(res: Resource, obj: &Value) -> Value {
    let mut part = obj.clone();
    if let Value::Object(m) = &mut part {
        m.remove("metadata");
        if res.has_status() {
            m.remove("status");
        }
    }
    part
}

/// What an update may change (`rest.BeforeUpdate` and the strategies' `PrepareForUpdate`):
/// system metadata stays the server's; through the main resource the status cannot change,
/// through `status` only the status can (for pods, also labels and annotations: only spec and
/// owner references are reset, which is what lets Multus write network-status via
/// `pods/status`).
fn prepare_update(
    res: Resource,
    status: bool,
    old: &Value,
    mut new: Value,
) -> Result<Value, ApiError> {
    let name = name_of(old).to_owned();
    let old_uid = meta_str(old, "uid").unwrap_or("").to_owned();
    if let Some(uid) = meta_str(&new, "uid")
        && uid != old_uid
    {
        return Err(invalid(
            res,
            &name,
            "metadata.uid",
            "FieldValueInvalid",
            format!("Invalid value: {}: field is immutable", quote(uid)),
        ));
    }
    if status && !res.is_builtin() {
        let status_value = new.get("status").cloned();
        new = old.clone();
        if let Value::Object(m) = &mut new {
            match status_value {
                Some(s) => m.insert("status".into(), s),
                None => m.remove("status"),
            };
        }
    } else if let (Value::Object(n), Value::Object(o)) = (&mut new, old) {
        // Namespaces keep their status too (`namespaceStrategy.PrepareForUpdate`), though the
        // stand-in serves no `namespaces/status` to change it: `KubeApi::put` does.
        let carried: &[&str] = if status {
            &["spec"]
        } else if res.has_status() || res == Resource::Namespaces {
            &["status"]
        } else {
            &[]
        };
        for field in carried {
            match o.get(*field) {
                Some(v) => n.insert((*field).to_owned(), v.clone()),
                None => n.remove(*field),
            };
        }
    }
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta = metadata_mut(&mut new);
    let mut carried = vec![
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
        "generation",
        "namespace",
        "name",
    ];
    if status && res == Resource::Pods {
        carried.push("ownerReferences");
    }
    for field in carried {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.to_owned(), v.clone()),
            None => meta.remove(field),
        };
    }
    meta.remove("managedFields");
    store::set_type_meta(&mut new, res);
    if res == Resource::Namespaces {
        default_namespace_label(&mut new);
    }
    if tracks_generation(res) && generation_part(res, &new) != generation_part(res, old) {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        metadata_mut(&mut new).insert("generation".into(), json!(generation + 1));
    }
    Ok(new)
}

/// Writes an updated object unless nothing changed: the API server skips no-op updates, so the
/// resourceVersion stays and watches see nothing.
fn commit_update(
    store: &mut Store,
    res: Resource,
    ns: &str,
    old: &Value,
    new: Value,
    dry_run: bool,
) -> Value {
    if new == *old {
        old.clone()
    } else {
        commit(store, res, ns, new, dry_run)
    }
}

pub(crate) fn update(
    shared: &Shared,
    res: Resource,
    ns: &str,
    name: &str,
    status: bool,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let obj = parse_object(res, call)?;
    if let Some(body_name) = meta_str(&obj, "name")
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if let Some(body_ns) = meta_str(&obj, "namespace")
        && body_ns != ns
        && res.is_namespaced()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    shared.write(|store| {
        let Some(old) = store.get(res, ns, name).cloned() else {
            // Events are the one served type whose strategy allows create-on-update.
            if matches!(res, Resource::Events | Resource::EventsV1) && !status {
                let obj = prepare_create(res, ns, Some(name), obj)?;
                let stored = commit(store, res, ns, obj, call.dry_run());
                return Ok(Reply::value(201, &render(&stored, call)));
            }
            return Err(ApiError::not_found(res, name));
        };
        match resource_version_of(&obj) {
            Some(rv) if Some(rv) != resource_version_of(&old) => {
                return Err(ApiError::conflict(res, name, MODIFIED));
            }
            Some(_) => {}
            // Pods and events allow unconditional updates; custom resources do not.
            None if !res.is_builtin() => {
                return Err(invalid(
                    res,
                    name,
                    "metadata.resourceVersion",
                    "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update".to_owned(),
                ));
            }
            None => {}
        }
        let new = prepare_update(res, status, &old, obj)?;
        let stored = commit_update(store, res, ns, &old, new, call.dry_run());
        Ok(Reply::value(200, &render(&stored, call)))
    })
}

pub(crate) fn patch(
    shared: &Shared,
    res: Resource,
    ns: &str,
    name: &str,
    status: bool,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let patch_type = call
        .content_type
        .and_then(PatchType::from_content_type)
        .filter(|t| *t != PatchType::Strategic || res.is_builtin())
        .ok_or_else(|| ApiError::unsupported_media_type(res.patch_types()))?;
    if patch_type == PatchType::Apply && call.param("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        ));
    }
    let body: Value = serde_json::from_slice(call.body).map_err(|e| match patch_type {
        // The stand-in reads apply bodies as JSON only (kube-rs sends JSON).
        PatchType::Apply => ApiError::bad_request(format!(
            "error decoding YAML: {e} (testkit reads apply bodies as JSON)"
        )),
        PatchType::Json => ApiError::bad_request(format!("error decoding patch: {e}")),
        _ => ApiError::bad_request(format!("error decoding patch: {e}")),
    })?;
    if patch_type == PatchType::Apply {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "error decoding YAML: the applied configuration must be an object",
            ));
        }
        let has_type = body
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
            && body
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
        if !has_type {
            return Err(ApiError::bad_request(format!(
                "invalid object type: {}, Kind={}",
                body.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                body.get("kind").and_then(Value::as_str).unwrap_or("")
            )));
        }
        check_type_meta(res, &body)?;
    }
    shared.write(|store| {
        let Some(old) = store.get(res, ns, name).cloned() else {
            // Server-side apply creates what does not exist yet.
            if patch_type == PatchType::Apply && !status {
                let obj = prepare_create(res, ns, Some(name), body)?;
                let stored = commit(store, res, ns, obj, call.dry_run());
                return Ok(Reply::value(201, &render(&stored, call)));
            }
            return Err(ApiError::not_found(res, name));
        };
        let mut patched = old.clone();
        match patch_type {
            PatchType::Merge => patch::merge(&mut patched, &body),
            PatchType::Strategic => {
                patch::strategic(&mut patched, &body).map_err(ApiError::bad_request)?
            }
            PatchType::Json => patch::json_patch(&mut patched, &body).map_err(|e| match e {
                JsonPatchError::Decode(m) => ApiError::bad_request(m),
                JsonPatchError::Apply(_) => ApiError::patch_unprocessable(),
            })?,
            PatchType::Apply => patch::apply(&mut patched, &body),
        }
        if !patched.is_object() {
            return Err(ApiError::bad_request("the patched object is not an object"));
        }
        if name_of(&patched) != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                name_of(&patched)
            )));
        }
        // A resourceVersion in the patch is a precondition (optimistic concurrency).
        if let Some(rv) = resource_version_of(&patched)
            && Some(rv) != resource_version_of(&old)
        {
            return Err(ApiError::conflict(res, name, MODIFIED));
        }
        let new = prepare_update(res, status, &old, patched)?;
        let stored = commit_update(store, res, ns, &old, new, call.dry_run());
        Ok(Reply::value(200, &render(&stored, call)))
    })
}

/// `DeleteOptions` from the body; only preconditions and dryRun matter here.
fn delete_options(call: &Call<'_>) -> Result<Value, ApiError> {
    if call.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(call.body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

fn check_preconditions(
    res: Resource,
    name: &str,
    obj: &Value,
    opts: &Value,
) -> Result<(), ApiError> {
    let pre = |k: &str| {
        opts.pointer(&format!("/preconditions/{k}"))
            .and_then(Value::as_str)
    };
    if let Some(uid) = pre("uid")
        && Some(uid) != meta_str(obj, "uid")
    {
        let why = format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta_str(obj, "uid").unwrap_or("")
        );
        return Err(ApiError::conflict(res, name, &why));
    }
    if let Some(rv) = pre("resourceVersion")
        && Some(rv) != resource_version_of(obj)
    {
        let why = format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            resource_version_of(obj).unwrap_or("")
        );
        return Err(ApiError::conflict(res, name, &why));
    }
    Ok(())
}

/// Deletes one object, or with finalizers marks it deleted (`deletionTimestamp`) and leaves it
/// for whoever owns the finalizers. Returns the object and whether it is gone.
fn delete_one(
    store: &mut Store,
    res: Resource,
    ns: &str,
    obj: &Value,
    dry_run: bool,
) -> (Value, bool) {
    let name = name_of(obj).to_owned();
    if !finalizers(obj).is_empty() {
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            return (obj.clone(), false);
        }
        let mut marked = obj.clone();
        let meta = metadata_mut(&mut marked);
        meta.insert("deletionTimestamp".into(), json!(store::now_rfc3339()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        if dry_run {
            return (marked, false);
        }
        return (store.write(res, ns, marked), false);
    }
    if dry_run {
        return (obj.clone(), true);
    }
    (
        store.delete(res, ns, &name).unwrap_or_else(|| obj.clone()),
        true,
    )
}

pub(crate) fn delete(
    shared: &Shared,
    res: Resource,
    ns: &str,
    name: &str,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let opts = delete_options(call)?;
    let dry_run = call.dry_run()
        || opts
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.contains(&json!("All")));
    shared.write(|store| {
        let old = store.get(res, ns, name).cloned().ok_or_else(|| ApiError::not_found(res, name))?;
        check_preconditions(res, name, &old, &opts)?;
        let (obj, gone) = delete_one(store, res, ns, &old, dry_run);
        // The pod and namespace strategies return the deleted object; the others answer a
        // success Status once the object is gone.
        if gone && !matches!(res, Resource::Pods | Resource::Namespaces) {
            let mut details = json!({"name": name, "group": res.group(), "kind": res.plural(), "uid": meta_str(&old, "uid").unwrap_or("")});
            if res.group().is_empty()
                && let Value::Object(d) = &mut details
            {
                d.remove("group");
            }
            return Ok(Reply::value(
                200,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
            ));
        }
        Ok(Reply::value(200, &render(&obj, call)))
    })
}

pub(crate) fn delete_collection(
    shared: &Shared,
    res: Resource,
    ns: &str,
    call: &Call<'_>,
) -> Result<Reply, ApiError> {
    let sel = selector(res, call)?;
    let opts = delete_options(call)?;
    let dry_run = call.dry_run()
        || opts
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.contains(&json!("All")));
    shared.write(|store| {
        let targets: Vec<Value> = store
            .list(res, Some(ns))
            .into_iter()
            .filter(|o| sel.matches(o))
            .cloned()
            .collect();
        let items: Vec<Value> = targets
            .iter()
            .map(|o| delete_one(store, res, ns, o, dry_run).0)
            .collect();
        let rv = store.resource_version().to_string();
        Ok(Reply::value(
            200,
            &json!({"kind": format!("{}List", res.kind()), "apiVersion": res.api_version(),
                    "metadata": {"resourceVersion": rv}, "items": items}),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_subdomains() {
        for ok in ["a", "pod-1", "a.b.c", "0abc", "kube-rs.17a2b3c4d5e6f7a8"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", "a_b", ".a", &"a".repeat(254)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn namespace_names_are_dns_labels() {
        assert!(check_name(Resource::Namespaces, "team-a").is_ok());
        let causes = |name: &str| -> Vec<String> {
            let err = check_name(Resource::Namespaces, name).unwrap_err();
            assert_eq!(err.code, 422);
            err.details
                .unwrap()
                .causes
                .into_iter()
                .map(|c| c.message)
                .collect()
        };
        assert_eq!(
            causes("a.b"),
            ["Invalid value: \"a.b\": must not contain dots"]
        );
        assert_eq!(causes(&"a".repeat(64)).len(), 1);
        assert!(causes("Team")[0].contains("RFC 1123 label"));
        // Other resources keep subdomain names.
        assert!(check_name(Resource::Pods, "a.b").is_ok());
    }

    #[test]
    fn a_created_namespace_is_active_unnamespaced_and_labelled() {
        let body = json!({"metadata": {"name": "team-a", "namespace": "stray",
            "labels": {"plumb.example/dynamic": "true"}}, "spec": {"finalizers": ["x"]}});
        let ns = prepare_create(Resource::Namespaces, "", None, body).unwrap();
        assert!(ns["metadata"].get("namespace").is_none(), "{ns}");
        assert!(ns["metadata"].get("generation").is_none(), "{ns}");
        assert_eq!(
            ns["metadata"]["labels"],
            json!({"plumb.example/dynamic": "true", "kubernetes.io/metadata.name": "team-a"})
        );
        assert_eq!(ns["spec"]["finalizers"], json!(["x", "kubernetes"]));
        assert_eq!(ns["status"], json!({"phase": "Active"}));

        // An update may change labels, not the status or the name label.
        let mut new = ns.clone();
        new["metadata"]["labels"] = json!({"plumb.example/dynamic": "false"});
        new["status"] = json!({"phase": "Terminating"});
        let updated = prepare_update(Resource::Namespaces, false, &ns, new).unwrap();
        assert_eq!(
            updated["metadata"]["labels"],
            json!({"plumb.example/dynamic": "false", "kubernetes.io/metadata.name": "team-a"})
        );
        assert_eq!(updated["status"], ns["status"]);
        assert!(updated["metadata"].get("namespace").is_none());
    }

    #[test]
    fn status_updates_keep_what_the_strategy_keeps() {
        let old = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "5", "generation": 1,
                         "ownerReferences": [{"name": "rs"}]},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}});
        let mut new = old.clone();
        new["spec"]["nodeName"] = json!("n2");
        new["status"]["phase"] = json!("Running");
        new["metadata"]["annotations"] = json!({"a": "b"});
        new["metadata"]["ownerReferences"] = json!([]);
        let through_status = prepare_update(Resource::Pods, true, &old, new.clone()).unwrap();
        assert_eq!(through_status["spec"]["nodeName"], "n1");
        assert_eq!(through_status["status"]["phase"], "Running");
        assert_eq!(through_status["metadata"]["annotations"]["a"], "b");
        assert_eq!(
            through_status["metadata"]["ownerReferences"],
            old["metadata"]["ownerReferences"]
        );
        assert_eq!(through_status["metadata"]["generation"], 1);
        let through_main = prepare_update(Resource::Pods, false, &old, new.clone()).unwrap();
        assert_eq!(through_main["spec"]["nodeName"], "n2");
        assert_eq!(through_main["status"]["phase"], "Pending");
        assert_eq!(through_main["metadata"]["generation"], 2);

        let claim = json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "5", "generation": 1},
            "spec": {"network": "n", "interface": "eth1"}});
        let mut new = claim.clone();
        new["spec"]["network"] = json!("other");
        new["metadata"]["labels"] = json!({"x": "y"});
        new["status"] = json!({"ips": ["10.0.0.1/24"]});
        let through_status = prepare_update(Resource::IpamClaims, true, &claim, new).unwrap();
        assert_eq!(through_status["spec"], claim["spec"]);
        assert!(through_status["metadata"].get("labels").is_none());
        assert_eq!(through_status["status"]["ips"][0], "10.0.0.1/24");

        let mut wrong_uid = claim.clone();
        wrong_uid["metadata"]["uid"] = json!("other");
        let err = prepare_update(Resource::IpamClaims, false, &claim, wrong_uid).unwrap_err();
        assert_eq!(err.code, 422);
    }
}
