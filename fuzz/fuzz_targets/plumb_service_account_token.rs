//! The daemon's service-account token as `plumb daemon --write-kubeconfig` reads whom it names
//! (node_token.rs `identity`): a file the kubelet writes, read without checking its signature.
//! Reading it never panics, and what it takes names a service account and its namespace, each
//! as the claims gave it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb::daemon::node_token::identity;

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(who) = identity(token) else {
        return;
    };
    assert!(!who.namespace.is_empty() && !who.service_account.is_empty());
    if let Some((node, uid)) = &who.node {
        assert!(!node.is_empty());
        assert!(uid.as_ref().is_none_or(|u| !u.is_empty()));
    }
});
