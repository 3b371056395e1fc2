//! CNI results from arbitrary bytes: parsing and conversion to every supported version never
//! panic, and every converted result serialises and parses back to itself.
#![no_main]

use cni::CniResult;
use cni::version::{SUPPORTED, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(result) = CniResult::parse(data, Version::V1_0_0) else {
        return;
    };
    assert!(
        result.cni_version.is_supported(),
        "parsed a result of unsupported version {}",
        result.cni_version
    );
    for target in SUPPORTED {
        let Ok(converted) = result.convert_to(target) else {
            // Only going down to 0.1.0/0.2.0 without an address may fail.
            assert!(
                target < Version::V0_3_0,
                "conversion {} -> {target} failed",
                result.cni_version
            );
            continue;
        };
        assert_eq!(
            converted.cni_version, target,
            "conversion kept the wrong version"
        );
        let json = converted
            .to_json()
            .unwrap_or_else(|e| panic!("to_json of a {target} result failed: {e:?}"));
        let back = CniResult::parse(json.as_bytes(), Version::V1_0_0)
            .unwrap_or_else(|e| panic!("{target} JSON does not re-parse: {e:?}\n{json}"));
        assert_eq!(
            back.cni_version, target,
            "re-parsed version differs\n{json}"
        );
        assert_eq!(back, converted, "{target} round trip differs\n{json}");
        // Converting to the version a result already has changes nothing.
        let same = converted
            .convert_to(target)
            .unwrap_or_else(|e| panic!("converting a {target} result to {target}: {e:?}"));
        assert_eq!(same, converted, "convert_to({target}) is not idempotent");
    }
});
