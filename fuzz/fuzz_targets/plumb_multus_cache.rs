//! Multus's scratch cache (`<cniDir>/<containerID>`, read by DEL of a sandbox Multus attached)
//! from arbitrary bytes, as a damaged file would give it: parsing never panics, and the
//! attachments made of what it accepts are named as Multus named them, each a valid interface.
#![no_main]

use cni::Version;
use libfuzzer_sys::fuzz_target;
use plumb_engine::multus_cache::{attachments, parse};
use serde_json::Map;

fuzz_target!(|data: &[u8]| {
    let Ok(delegates) = parse(data, Version::V1_0_0) else {
        return;
    };
    for (i, a) in attachments(&delegates, "eth0", &Map::new())
        .iter()
        .enumerate()
    {
        assert!(
            cni::validate::interface_name_problem(&a.ifname).is_none(),
            "delegate {i}: {:?}",
            a.ifname
        );
        assert_eq!(a.is_default, i == 0);
    }
});
