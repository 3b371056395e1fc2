//! The `v1.multus-cni.io/default-network` annotation (`plan::default_network_element`, read by
//! the planner and `plumb validate`) from arbitrary text: reading never panics; it is accepted
//! exactly when `selection::parse_default_network` (the selection annotation's formats, without
//! the rules for secondary attachments) reads one element from it, and that element is the one
//! returned; what the networks annotation's parser accepts, it accepts too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netattach::selection;
use plumb_engine::plan::default_network_element;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = selection::parse_default_network(text);
    let strict = selection::parse(text);
    match default_network_element(text) {
        Ok(element) => {
            assert!(!text.trim().is_empty());
            assert_eq!(parsed.as_deref().ok(), Some(std::slice::from_ref(&element)));
            if let Ok(strict) = &strict {
                assert_eq!(strict.as_slice(), std::slice::from_ref(&element));
            }
            let r = element.network_ref("pod-ns");
            assert!(!r.name.is_empty(), "{element:?}");
        }
        Err(why) => {
            assert!(!why.is_empty());
            if !text.trim().is_empty()
                && let Ok(elements) = parsed
            {
                assert_ne!(elements.len(), 1, "{why}");
            }
            if let Ok(elements) = strict {
                assert_ne!(
                    elements.len(),
                    1,
                    "the networks annotation's parser read it: {why}"
                );
            }
        }
    }
});
