//! The IPAMClaim object (multi-net spec §8): a claim on IP addresses made on behalf of an entity
//! other than a pod, referred to from a selection element's `ipam-claim-reference` (§4.1.2.1.11).
//!
//! Like the NAD, it implements kube's `Resource` (and `HasSpec`/`HasStatus`: it has a status
//! subresource, §8.1), so `kube::Api::<IPAMClaim>` works where there is a client.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::Resource;
use kube_core::object::{HasSpec, HasStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::nad::GROUP;

pub const IPAMCLAIM_VERSION: &str = "v1alpha1";
pub const IPAMCLAIM_KIND: &str = "IPAMClaim";
pub const IPAMCLAIM_PLURAL: &str = "ipamclaims";

/// `IPAMClaimSpec` (§8.2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPAMClaimSpec {
    /// The network name for which this persistent allocation was created.
    pub network: String,
    /// The pod interface name for which this allocation was created.
    pub interface: String,
}

/// `IPAMClaimStatus` (§8.2). Fields other implementations add (the NPWG `ipamclaims` project's
/// `ownerPod`, `conditions`) are kept in `extra`, so a status written back loses nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IPAMClaimStatus {
    /// The IP addresses (v4, v6) allocated for the pod interface, as written (usually CIDRs).
    /// `null` reads as none: §8.2's Go field has no `omitempty`, so Go clients write
    /// `"ips": null` until an IPAM plugin allocates (and §8.2.1's example has `ips:` empty).
    #[serde(default, deserialize_with = "cni::go_json::null_as_default")]
    pub ips: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An IPAMClaim (§8.2).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[allow(clippy::upper_case_acronyms)]
pub struct IPAMClaim {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: IPAMClaimSpec,
    #[serde(default)]
    pub status: Option<IPAMClaimStatus>,
}

impl IPAMClaim {
    pub fn new(namespace: &str, name: &str, spec: IPAMClaimSpec) -> Self {
        IPAMClaim {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    /// The allocated addresses; empty while no IPAM plugin has filled the status in.
    pub fn ips(&self) -> &[String] {
        self.status
            .as_ref()
            .map(|s| s.ips.as_slice())
            .unwrap_or(&[])
    }
}

impl Serialize for IPAMClaim {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let fields = if self.status.is_some() { 5 } else { 4 };
        let mut st = s.serialize_struct("IPAMClaim", fields)?;
        st.serialize_field("apiVersion", &format!("{GROUP}/{IPAMCLAIM_VERSION}"))?;
        st.serialize_field("kind", IPAMCLAIM_KIND)?;
        st.serialize_field("metadata", &self.metadata)?;
        st.serialize_field("spec", &self.spec)?;
        if let Some(status) = &self.status {
            st.serialize_field("status", status)?;
        }
        st.end()
    }
}

impl Resource for IPAMClaim {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(IPAMCLAIM_KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(IPAMCLAIM_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(IPAMCLAIM_PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl HasSpec for IPAMClaim {
    type Spec = IPAMClaimSpec;
    fn spec(&self) -> &IPAMClaimSpec {
        &self.spec
    }
    fn spec_mut(&mut self) -> &mut IPAMClaimSpec {
        &mut self.spec
    }
}

impl HasStatus for IPAMClaim {
    type Status = IPAMClaimStatus;
    fn status(&self) -> Option<&IPAMClaimStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<IPAMClaimStatus> {
        &mut self.status
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_the_spec_example_and_keeps_unknown_status_fields() {
        // §8.2.1, with the group this spec's CRD (§8.1) defines.
        let v = json!({
            "apiVersion": "k8s.cni.cncf.io/v1alpha1",
            "kind": "IPAMClaim",
            "metadata": {
                "name": "vm-a.tenantred.pod16367aacb67",
                "namespace": "ns1",
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "vm-a", "uid": "a0790345-4e84-4257-837a-e3d762d191ab"}]
            },
            "spec": {"network": "tenantred", "interface": "pod16367aacb67"},
            "status": {"ips": ["10.128.20.8/24", "fd10:128:20::8/64"], "ownerPod": {"name": "virt-launcher-x"}}
        });
        let c: IPAMClaim = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(c.spec.network, "tenantred");
        assert_eq!(c.spec.interface, "pod16367aacb67");
        assert_eq!(c.ips(), ["10.128.20.8/24", "fd10:128:20::8/64"]);
        assert_eq!(serde_json::to_value(&c).unwrap(), v);
        assert_eq!(
            IPAMClaim::url_path(&(), Some("ns1")),
            "/apis/k8s.cni.cncf.io/v1alpha1/namespaces/ns1/ipamclaims"
        );
    }

    #[test]
    fn a_status_with_null_ips_reads_as_no_ips() {
        // §8.2's Go type has `IPs []string `json:"ips"`` without omitempty, so a claim whose
        // IPs are not allocated yet is written `"ips": null`; §8.2.1's YAML (`ips:` with no
        // value) is the same.
        let c: IPAMClaim = serde_json::from_value(json!({
            "metadata": {"name": "vm-a.tenantred", "namespace": "ns1"},
            "spec": {"network": "tenantred", "interface": "pod16367aacb67"},
            "status": {"ips": null}
        }))
        .unwrap();
        assert!(c.ips().is_empty());
    }

    #[test]
    fn a_claim_without_status_has_no_ips_and_writes_no_status() {
        let c = IPAMClaim::new(
            "ns1",
            "vm-a.tenantred",
            IPAMClaimSpec {
                network: "tenantred".into(),
                interface: "eth1".into(),
            },
        );
        assert!(c.ips().is_empty());
        let v = serde_json::to_value(&c).unwrap();
        assert!(v.get("status").is_none(), "{v}");
        assert_eq!(v["apiVersion"], json!("k8s.cni.cncf.io/v1alpha1"));
    }
}
