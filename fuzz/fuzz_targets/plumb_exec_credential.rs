//! An exec credential plugin's answer (its stdout, `users[].user.exec` in the kubeconfig, at
//! most `MAX_OUTPUT` bytes, JSON or YAML) from arbitrary bytes, as a broken or hostile plugin
//! would print it: reading it never panics nor hangs; what is accepted is an answer of the one
//! apiVersion asked for, holding a token or a certificate with its key, none of them empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_cluster::kube::exec_credential::{MAX_OUTPUT, credential};

const API_VERSIONS: [&str; 2] = [
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];

fuzz_target!(|data: &[u8]| {
    // The plugin's output is read up to MAX_OUTPUT bytes, and refused past it.
    if data.len() > MAX_OUTPUT {
        return;
    }
    let mut accepted = 0;
    for api_version in API_VERSIONS {
        match credential(data, api_version) {
            Ok(c) => {
                accepted += 1;
                assert!(
                    c.token.is_some() || c.client_certificate_data.is_some(),
                    "{c:?}"
                );
                assert_eq!(
                    c.client_certificate_data.is_some(),
                    c.client_key_data.is_some(),
                    "{c:?}"
                );
                for v in [&c.token, &c.client_certificate_data, &c.client_key_data]
                    .into_iter()
                    .flatten()
                {
                    assert!(!v.is_empty(), "{c:?}");
                }
            }
            Err(why) => assert!(!why.is_empty()),
        }
    }
    // An answer has one apiVersion.
    assert!(accepted <= 1, "accepted for both apiVersions");
});
