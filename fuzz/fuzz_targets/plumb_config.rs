//! plumb's own configuration (the runtime's stdin, Multus's keys and plumb's) from arbitrary
//! bytes: parsing never panics, a refusal carries a configuration error code (CNI spec §6: 2, 6
//! or 7), and what is accepted has a valid network name and a supported version.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_engine::config::Config;

fuzz_target!(|data: &[u8]| {
    match Config::parse(data) {
        Err(e) => assert!(
            [2, 6, 7].contains(&e.code),
            "refused with code {}: {}",
            e.code,
            e.msg
        ),
        Ok(c) => {
            assert!(cni::validate::network_name(&c.name).is_ok(), "{:?}", c.name);
            assert!(c.cni_version.is_supported(), "{}", c.cni_version);
            assert!(
                c.delegates.iter().all(|d| d.is_object()),
                "a delegate that is not an object was accepted"
            );
        }
    }
});
