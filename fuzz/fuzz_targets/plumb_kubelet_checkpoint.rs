//! The kubelet's device-manager checkpoint (`<plumbKubeletRootDir>/device-plugins/
//! kubelet_internal_checkpoint`, read when the PodResources socket does not exist) from
//! arbitrary bytes, as a damaged or foreign file would give it: parsing never panics, and what
//! it accepts is what the PodResources API gives: each pod's IDs per resource sorted, without
//! duplicates or blanks, and no blank UID, resource or empty list.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_engine::kubelet_checkpoint::format::parse;

fuzz_target!(|data: &[u8]| {
    let Ok(checkpoint) = parse(data) else {
        return;
    };
    for (uid, devices) in &checkpoint.pods {
        assert!(!uid.is_empty());
        assert_eq!(&checkpoint.pod_devices(uid), devices);
        for (resource, ids) in devices {
            assert!(!resource.is_empty(), "{uid}");
            assert!(!ids.is_empty(), "{uid} {resource}");
            assert!(ids.iter().all(|id| !id.is_empty()), "{uid} {resource}");
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "{uid} {resource}: {ids:?}"
            );
        }
    }
    assert!(checkpoint.registered.iter().all(|r| !r.is_empty()));
});
