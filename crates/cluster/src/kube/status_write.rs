//! The pod's `k8s.v1.cni.cncf.io/network-status` annotation written (multi-net spec §5): one
//! merge PATCH of `pods/status`, or a read and an update where plumb may not PATCH (Multus's
//! RBAC), made on the condition that the pod is still the one with the runtime's UID, and an
//! answer about another object refused.

use cni::error::{CniError, ErrorCode};
use plumb_engine::plan::Pod;
use serde_json::{Value, json};

use super::*;

impl KubeCluster {
    /// The network-status annotation written with one merge PATCH of pods/status.
    pub(super) fn patch_network_status(&self, pod: &Pod, value: &str) -> Result<Value, Failure> {
        let mut patch = json!({"metadata": {"annotations": {
            netattach::NETWORK_STATUS_ANNOTATION: value
        }}});
        // A UID in the patch is a precondition: a pod recreated under the same name since
        // (another UID) gets a 409 instead of this sandbox's status. Not for a static pod: the
        // UID the runtime knows it by (when its annotations came from the runtime) is the
        // kubelet's, not its mirror's, and the API would refuse every patch.
        if checks_uid(pod) {
            patch["metadata"]["uid"] = json!(pod.uid);
        }
        let params = PatchParams::default();
        let patch = Patch::Merge(&patch);
        let (params, patch) = (&params, &patch);
        let http2 = &self.http2;
        self.with_retries(false, |client| async move {
            let api = Api::<KubePod>::namespaced(client.clone(), &pod.namespace);
            let request = ApiRequest::new(api.resource_url())
                .patch_subresource("status", &pod.name, params, patch);
            send::<Value>(&client, request, http2).await
        })
    }

    /// The network-status annotation written as Multus writes it: the pod read, then put back
    /// to pods/status with the annotation set, read again if it changed in between (409). The
    /// pod goes back as the API server sent it, every field kept, including those newer than
    /// plumb's Kubernetes types (a typed copy would clear them).
    pub(super) fn update_network_status(
        &self,
        pod: &Pod,
        value: &str,
        what: &str,
    ) -> Result<Value, CniError> {
        let what = format!("{what} (by update: the PATCH was forbidden)");
        let fail = |e: &Failure| cni_error(&self.server, &what, e);
        let http2 = &self.http2;
        for _ in 0..MAX_UPDATE_CONFLICTS {
            let mut current: Value = self
                .with_retries(false, |client| async move {
                    let api = Api::<KubePod>::namespaced(client.clone(), &pod.namespace);
                    let request =
                        ApiRequest::new(api.resource_url()).get(&pod.name, &GetParams::default());
                    send::<Value>(&client, request, http2).await
                })
                .map_err(|e| fail(&e))?;
            answers_for(&what, name_of(&current), (&pod.namespace, &pod.name))?;
            let meta = current
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| {
                    CniError::new(
                        ErrorCode::Io,
                        format!("{what}: the pod read has no metadata"),
                    )
                })?;
            // What the PATCH's UID precondition does: this sandbox's status is not written
            // onto a pod recreated under the same name.
            let uid = meta.get("uid").and_then(Value::as_str).unwrap_or_default();
            if checks_uid(pod) && uid != pod.uid {
                return Err(recreated(&what, pod, &format!("its UID is {uid}")));
            }
            let annotations = meta.entry("annotations").or_insert(Value::Null);
            if !annotations.is_object() {
                *annotations = json!({});
            }
            annotations[netattach::NETWORK_STATUS_ANNOTATION] = json!(value);
            let body = serde_json::to_vec(&current)
                .map_err(|e| CniError::new(ErrorCode::Internal, format!("{what}: {e}")))?;
            let body = &body;
            let put = self.with_retries(false, |client| async move {
                let api = Api::<KubePod>::namespaced(client.clone(), &pod.namespace);
                let request = ApiRequest::new(api.resource_url()).replace_subresource(
                    "status",
                    &pod.name,
                    &PostParams::default(),
                    body.clone(),
                );
                send::<Value>(&client, request, http2).await
            });
            match put {
                // Changed since it was read (the kubelet writes its status too): again.
                Err(e) if e.is_status(409) => continue,
                put => return put.map_err(|e| fail(&e)),
            }
        }
        Err(CniError::new(
            ErrorCode::TryAgainLater,
            format!("{what}: the pod changed {MAX_UPDATE_CONFLICTS} times while it was written"),
        ))
    }
}

/// The namespace and name of an API object as JSON (empty when missing).
pub(super) fn name_of(object: &Value) -> (&str, &str) {
    let meta = &object["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default(),
    )
}

/// Whether a write of `pod`'s status is made on the condition that the API's pod has the
/// runtime's UID: not for a static pod, whose API object (a mirror) has another UID.
pub(super) fn checks_uid(pod: &Pod) -> bool {
    !pod.uid.is_empty() && !pod.is_static()
}

/// An answer about another object than the one asked for (a proxy's mistake, or worse) is not
/// used: plumb would patch, or plan from, the wrong object.
pub(super) fn answers_for(
    what: &str,
    got: (&str, &str),
    asked: (&str, &str),
) -> Result<(), CniError> {
    if got == asked {
        return Ok(());
    }
    Err(CniError::new(
        ErrorCode::Io,
        format!(
            "Kubernetes API: {what}: the answer is about {}/{}, not the object asked for",
            cni::quote::cut(got.0, MAX_NAME),
            cni::quote::cut(got.1, MAX_NAME)
        ),
    ))
}
