//! CNI versions and VERSION answers: parsing arbitrary input never panics; a parsed version
//! prints in a form that parses back to itself.
#![no_main]

use cni::version::{SUPPORTED, Version, VersionInfo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(v) = Version::parse(s) {
            let shown = v.to_string();
            let again = Version::parse(&shown)
                .unwrap_or_else(|e| panic!("{s:?} -> {shown:?} does not re-parse: {e:?}"));
            assert_eq!(again, v, "{s:?} -> {shown:?}");
            assert_eq!(v.is_supported(), SUPPORTED.contains(&v));
            assert_eq!(v.require_supported().is_ok(), v.is_supported());
            // The serde form is the Display form.
            let json = serde_json::to_string(&v).expect("a version serialises");
            assert_eq!(json, format!("\"{shown}\""));
            let de: Version = serde_json::from_str(&json).expect("a version deserialises");
            assert_eq!(de, v);
        }
    }
    if let Ok(versions) = VersionInfo::decode(data) {
        assert!(!versions.is_empty(), "decoded no versions from {data:?}");
        // A plugin's answer, re-encoded, decodes to the same list.
        let info = VersionInfo::answer("1.1.0", &versions);
        let bytes = serde_json::to_vec(&info).expect("version info serialises");
        let again = VersionInfo::decode(&bytes)
            .unwrap_or_else(|e| panic!("re-encoded version info does not decode: {e:?}"));
        assert_eq!(again, versions);
    }
});
