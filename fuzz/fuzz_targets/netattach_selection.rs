//! The `k8s.v1.cni.cncf.io/networks` annotation from arbitrary text: parsing never panics, and
//! what it accepts serialises and re-parses to the same elements, whose derived values
//! (capability args, CNI errors) can be computed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netattach::runtime_config::{capability_args, required_capabilities};
use netattach::selection;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match selection::parse(text) {
        Ok(elements) => {
            let json = serde_json::to_string(&elements).expect("elements serialise");
            let back = selection::parse(&json)
                .unwrap_or_else(|e| panic!("accepted elements do not re-parse: {e}\n{json}"));
            assert_eq!(back, elements, "round trip differs\n{json}");
            for e in &elements {
                let _ = e.network_ref("pod-ns");
                let args = capability_args(e, None, Some("/x"));
                assert!(required_capabilities(e).len() <= args.len());
            }
        }
        Err(e) => {
            let c: cni::CniError = e.into();
            assert_eq!(c.code, 7);
        }
    }
});
