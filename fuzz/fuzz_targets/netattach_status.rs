//! network-status entries from arbitrary CNI result JSON: building never panics, and the
//! annotation written parses back to the same entries. Arbitrary annotation text is read too.
#![no_main]

use cni::{CniResult, Version};
use libfuzzer_sys::fuzz_target;
use netattach::status::{self, StatusInput};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(entries) = status::parse(text) {
            let again = status::parse(&status::to_annotation(&entries)).expect("re-parse");
            assert_eq!(again, entries);
        }
    }
    let Ok(result) = CniResult::parse(data, Version::V1_0_0) else {
        return;
    };
    let gws = ["10.0.0.1".parse().unwrap()];
    let mut built = Vec::new();
    for (is_default, route) in [
        (true, None),
        (false, Some(&[][..])),
        (false, Some(&gws[..])),
    ] {
        let entry = status::build(&StatusInput {
            name: "ns/net",
            result: Some(&result),
            ifname: "net1",
            is_default,
            default_route: route,
            device_info: None,
        });
        assert_eq!(entry.default, is_default);
        assert_eq!(entry.default_route.is_some(), route.is_some());
        assert!(entry.mac.is_none() || entry.interface.is_some());
        built.push(entry);
    }
    let text = status::to_annotation(&built);
    let back = status::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, built);
});
