//! Device-info maps from arbitrary bytes: parsing never panics and what it accepts writes back
//! to itself. File names built from arbitrary strings never leave their directory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netattach::device_info::DeviceInfo;
use netattach::device_info_files::{cni_file_name, dp_file_name};

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = DeviceInfo::parse(data) {
        let v = info.to_value();
        let again = DeviceInfo::from_value(&v).expect("written device-info re-parses");
        assert_eq!(again, info);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let mut parts = text.splitn(3, '\u{1}');
        let (a, b, c) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        // A NUL left in a device plugin file name makes opening it fail, which is an error
        // and not an escape; the CNI file name, which plumb makes, escapes it.
        let cni_name = cni_file_name(a, b, c);
        assert!(!cni_name.contains('\0'), "{cni_name:?}");
        for name in [cni_name, dp_file_name(a, b)] {
            assert!(!name.contains('/'), "{name:?}");
            assert!(name != "." && name != ".." && !name.is_empty(), "{name:?}");
        }
        // Distinct (container ID, interface) pairs never share a name.
        if (b, c) != (c, b) {
            assert_ne!(cni_file_name(a, b, c), cni_file_name(a, c, b));
        }
    }
});
