//! The `v1.multus-cni.io/default-network` annotation (`plan::default_network_element`, read by
//! the planner and `plumb validate`) from arbitrary text: reading never panics; it is accepted
//! exactly when the selection annotation's parser reads one element from it, and that element
//! is the one returned.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netattach::selection;
use plumb::plan::default_network_element;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = selection::parse(text);
    match default_network_element(text) {
        Ok(element) => {
            assert!(!text.trim().is_empty());
            assert_eq!(parsed.as_deref().ok(), Some(std::slice::from_ref(&element)));
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
        }
    }
});
