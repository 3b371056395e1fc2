//! The CustomResourceDefinitions in deploy/crds/ parse, and describe exactly the resources the
//! Rust types address (group, version, kind, plural, scope), with the schema the spec gives.

use std::path::PathBuf;

use kube_core::Resource;
use netattach::{IPAMClaim, NetworkAttachmentDefinition};
use serde_json::{Value, json};

fn crd(file: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/crds")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn check_identity<K: Resource<DynamicType = ()>>(crd: &Value, singular: &str) {
    assert_eq!(crd["apiVersion"], json!("apiextensions.k8s.io/v1"));
    assert_eq!(crd["kind"], json!("CustomResourceDefinition"));
    let spec = &crd["spec"];
    assert_eq!(
        crd["metadata"]["name"],
        json!(format!("{}.{}", K::plural(&()), K::group(&())))
    );
    assert_eq!(spec["group"], json!(K::group(&())));
    assert_eq!(spec["scope"], json!("Namespaced"));
    assert_eq!(spec["names"]["kind"], json!(K::kind(&())));
    assert_eq!(spec["names"]["plural"], json!(K::plural(&())));
    assert_eq!(spec["names"]["singular"], json!(singular));
    let versions = spec["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    let v = &versions[0];
    assert_eq!(v["name"], json!(K::version(&())));
    assert_eq!(v["served"], json!(true));
    assert_eq!(v["storage"], json!(true));
    assert_eq!(v["schema"]["openAPIV3Schema"]["type"], json!("object"));
}

#[test]
fn network_attachment_definition_crd() {
    let c = crd("network-attachment-definitions.yaml");
    check_identity::<NetworkAttachmentDefinition>(&c, "network-attachment-definition");
    assert_eq!(c["spec"]["names"]["shortNames"], json!(["net-attach-def"]));
    let v = &c["spec"]["versions"][0];
    let schema = &v["schema"]["openAPIV3Schema"]["properties"];
    // §3.1: spec.config is an optional string.
    assert_eq!(schema["spec"]["type"], json!("object"));
    assert_eq!(
        schema["spec"]["properties"]["config"]["type"],
        json!("string")
    );
    assert!(schema["spec"].get("required").is_none());
    // A NAD has no status subresource.
    assert!(v.get("subresources").is_none());
}

#[test]
fn ipamclaim_crd() {
    let c = crd("ipamclaims.yaml");
    check_identity::<IPAMClaim>(&c, "ipamclaim");
    assert_eq!(c["spec"]["names"]["listKind"], json!("IPAMClaimList"));
    let v = &c["spec"]["versions"][0];
    assert_eq!(v["subresources"], json!({"status": {}}));
    let schema = &v["schema"]["openAPIV3Schema"]["properties"];
    // §8.1.
    let spec = &schema["spec"];
    assert_eq!(spec["properties"]["interface"]["type"], json!("string"));
    assert_eq!(spec["properties"]["network"]["type"], json!("string"));
    assert_eq!(spec["required"], json!(["interface", "network"]));
    let status = &schema["status"];
    assert_eq!(
        status["properties"]["ips"],
        json!({"description": "The list of IP addresses (v4, v6) that were allocated for the pod interface",
               "type": "array", "items": {"type": "string"}})
    );
    assert_eq!(status["required"], json!(["ips"]));
}
