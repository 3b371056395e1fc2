//! The objects the daemon's watch caches hold, cut down while they are read to the fields plumb
//! uses, so that a node's thousand pods cost little memory: a pod's name, namespace, UID,
//! resourceVersion, `deletionTimestamp`, node, `spec.hostNetwork`, the annotations the plan
//! reads (multi-net spec §4.1) and a mirror pod's static UID; a NAD's name, namespace, resourceVersion, `resourceName`
//! annotation and `spec.config` (multi-net spec §3.2, device-info spec §4.1).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::Resource;
use netattach::{NetworkAttachmentDefinition, nad};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use plumb_engine::plan::{Pod, reads_annotation};

/// A pod as the cache keeps it.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "WirePod")]
pub struct CachedPod {
    pub metadata: ObjectMeta,
    pub node_name: Option<String>,
    pub host_network: bool,
}

/// The annotation the kubelet puts on a static pod's mirror: the UID of the static pod, the
/// one its sandbox's runtime passes (`K8S_POD_UID`).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

impl CachedPod {
    /// The UID the runtime passes for this pod's sandbox: a mirror's static pod's, else its own.
    pub fn sandbox_uid(&self) -> Option<&str> {
        let m = &self.metadata;
        let mirrored = m
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIRROR_ANNOTATION));
        mirrored.or(m.uid.as_ref()).map(String::as_str)
    }

    /// The pod as the planner takes it (the mirror annotation, which the plan does not read,
    /// left out).
    pub fn to_pod(&self) -> Pod {
        let m = &self.metadata;
        Pod {
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone().unwrap_or_default(),
            annotations: (m.annotations.iter().flatten())
                .filter(|(k, _)| reads_annotation(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

/// A NAD as the cache keeps it. `spec.config` that is not a string (possible only where the CRD
/// has no schema) is kept as `Err`: the cache does not answer for it, and the GET that follows
/// gives the call the error that names it.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "WireNad")]
pub struct CachedNad {
    pub metadata: ObjectMeta,
    pub config: Result<Option<String>, ()>,
}

impl CachedNad {
    /// The NAD as the planner takes it; `None` when its `spec.config` is not a string.
    pub fn to_nad(&self) -> Option<NetworkAttachmentDefinition> {
        let config = self.config.clone().ok()?;
        Some(NetworkAttachmentDefinition {
            metadata: self.metadata.clone(),
            spec: nad::NetworkAttachmentDefinitionSpec { config },
        })
    }
}

/// What is read of an object's metadata; the rest of it (managed fields, labels, owners) is
/// skipped unread.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "kept_annotations")]
    annotations: Option<BTreeMap<String, String>>,
}

impl From<WireMeta> for ObjectMeta {
    fn from(m: WireMeta) -> ObjectMeta {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            deletion_timestamp: m.deletion_timestamp,
            annotations: m.annotations.filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        }
    }
}

#[derive(Deserialize)]
struct WirePod {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: WirePodSpec,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePodSpec {
    node_name: Option<String>,
    host_network: Option<bool>,
}

impl From<WirePod> for CachedPod {
    fn from(p: WirePod) -> CachedPod {
        CachedPod {
            metadata: p.metadata.into(),
            node_name: p.spec.node_name,
            host_network: p.spec.host_network.unwrap_or(false),
        }
    }
}

#[derive(Deserialize)]
struct WireNad {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<Value>,
}

impl From<WireNad> for CachedNad {
    fn from(n: WireNad) -> CachedNad {
        let config = match n.spec {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(mut spec)) => match spec.remove("config") {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(()),
            },
            Some(_) => Err(()),
        };
        CachedNad {
            metadata: n.metadata.into(),
            config,
        }
    }
}

/// The annotations plumb reads (the plan's, a NAD's `resourceName`, a mirror pod's static
/// UID); the others' values are skipped without being kept. A value that is not a string is
/// skipped too (the API server allows none).
fn kept_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Kept;
    impl<'de> serde::de::Visitor<'de> for Kept {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if reads_annotation(&key)
                    || key == nad::RESOURCE_NAME_ANNOTATION
                    || key == MIRROR_ANNOTATION
                {
                    if let Value::String(v) = map.next_value::<Value>()? {
                        kept.insert(key.into_owned(), v);
                    }
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(Some(kept))
        }
    }
    d.deserialize_option(Kept)
}

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Resource for CachedNad {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(nad::NAD_KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(nad::GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(nad::NAD_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(nad::NAD_PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pod_keeps_what_plumb_reads_and_nothing_else() {
        let pod: CachedPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "x"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "annotations": {
                    "k8s.v1.cni.cncf.io/networks": "net-a",
                    "v1.multus-cni.io/default-network": "kube-system/d",
                    "kubernetes.io/config.source": "file",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}",
                },
            },
            "spec": {"nodeName": "n1", "hostNetwork": true, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        assert_eq!(pod.node_name.as_deref(), Some("n1"));
        assert!(pod.host_network);
        let m = &pod.metadata;
        assert_eq!(m.resource_version.as_deref(), Some("7"));
        assert!(m.deletion_timestamp.is_some());
        assert!(m.labels.is_none() && m.managed_fields.is_none());
        let plain = pod.to_pod();
        assert_eq!((plain.namespace.as_str(), plain.name.as_str()), ("ns", "p"));
        assert_eq!(plain.uid, "u1");
        assert_eq!(
            plain.annotations.keys().collect::<Vec<_>>(),
            [
                "k8s.v1.cni.cncf.io/networks",
                "kubernetes.io/config.source",
                "v1.multus-cni.io/default-network"
            ]
        );
    }

    #[test]
    fn a_mirror_pods_sandbox_uid_is_its_static_pods() {
        let mirror: CachedPod = serde_json::from_value(json!({"metadata": {"uid": "api-uid",
            "annotations": {"kubernetes.io/config.mirror": "static-uid",
                            "kubernetes.io/config.source": "file"}}}))
        .unwrap();
        assert_eq!(mirror.sandbox_uid(), Some("static-uid"));
        assert!(
            !mirror
                .to_pod()
                .annotations
                .contains_key("kubernetes.io/config.mirror")
        );
        let plain: CachedPod =
            serde_json::from_value(json!({"metadata": {"uid": "api-uid"}})).unwrap();
        assert_eq!(plain.sandbox_uid(), Some("api-uid"));
    }

    #[test]
    fn a_nad_keeps_its_config_and_resource_name_and_a_config_not_a_string_is_not_served() {
        let nad: CachedNad = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "annotations": {
                "k8s.v1.cni.cncf.io/resourceName": "example.com/sriov", "other": "x"}},
            "spec": {"config": "{\"cniVersion\": \"1.0.0\"}", "extra": 1},
        }))
        .unwrap();
        let plain = nad.to_nad().unwrap();
        assert_eq!(plain.resource_name(), Some("example.com/sriov"));
        assert_eq!(
            plain.spec.config.as_deref(),
            Some("{\"cniVersion\": \"1.0.0\"}")
        );
        assert_eq!(plain.metadata.annotations.unwrap().len(), 1);
        let no_spec: CachedNad =
            serde_json::from_value(json!({"metadata": {"name": "b"}})).unwrap();
        assert_eq!(no_spec.to_nad().unwrap().spec.config, None);
        for spec in [json!({"config": {"not": "a string"}}), json!("text")] {
            let odd: CachedNad =
                serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": spec})).unwrap();
            assert!(odd.to_nad().is_none(), "{odd:?}");
        }
    }
}
