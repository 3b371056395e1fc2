//! NAD `spec.config` from arbitrary text: extraction never panics; an accepted configuration has
//! a name and plugins, and `cni-args` can be merged into it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netattach::NetworkAttachmentDefinition;
use netattach::nad::NadConfig;
use netattach::runtime_config::apply_cni_args;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let nad = NetworkAttachmentDefinition::new("ns1", "fuzz-net", Some(text.to_string()));
    match nad.cni_config() {
        Ok(NadConfig::Inline(list)) => {
            assert!(!list.name.is_empty());
            assert!(!list.plugins.is_empty());
            let args = serde_json::json!({"k": "v"});
            if let Ok(merged) = apply_cni_args("ns1/fuzz-net", &list, args.as_object().unwrap()) {
                for p in &merged.plugins {
                    assert_eq!(p.raw["args"]["cni"]["k"], "v");
                }
            }
        }
        Ok(NadConfig::OnDisk { name }) => assert!(text.is_empty() && name == "fuzz-net"),
        Err(e) => {
            let c: cni::CniError = e.into();
            assert!(c.msg.contains("ns1/fuzz-net"), "{c:?}");
        }
    }
});
