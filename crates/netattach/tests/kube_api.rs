//! The NAD and IPAMClaim types work with kube-rs's typed `Api` (multi-net spec §3, §8): this
//! compiles only if they carry the right `Resource` (namespaced scope, group, version, plural)
//! and `HasSpec`/`HasStatus` impls, and the request paths are the API server's.

use kube::api::Api;
use kube::core::Resource;
use netattach::{IPAMClaim, NetworkAttachmentDefinition};

/// Never called: building it is the test. `Api::namespaced` exists only for namespaced kinds.
#[allow(dead_code)]
fn typed_apis(client: kube::Client) -> (Api<NetworkAttachmentDefinition>, Api<IPAMClaim>) {
    (
        Api::namespaced(client.clone(), "ns1"),
        Api::namespaced(client, "ns1"),
    )
}

#[test]
fn request_paths_are_the_api_servers() {
    assert_eq!(
        NetworkAttachmentDefinition::url_path(&(), Some("ns1")),
        "/apis/k8s.cni.cncf.io/v1/namespaces/ns1/network-attachment-definitions"
    );
    assert_eq!(
        IPAMClaim::url_path(&(), Some("ns1")),
        "/apis/k8s.cni.cncf.io/v1alpha1/namespaces/ns1/ipamclaims"
    );
    assert_eq!(
        NetworkAttachmentDefinition::kind(&()),
        "NetworkAttachmentDefinition"
    );
    assert_eq!(IPAMClaim::kind(&()), "IPAMClaim");
}
