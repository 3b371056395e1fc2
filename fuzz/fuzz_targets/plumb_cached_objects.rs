//! A pod and a NAD as the daemon's watch caches read them from the API server's lists and
//! watch events, from arbitrary bytes: reading never panics; a pod gives the plan no annotation
//! it does not read, its sandbox UID is its mirror's or its own; a NAD is served only with a
//! string (or no) `spec.config`, and keeps no annotation plumb does not read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_cluster::caches::objects::{CachedNad, CachedPod};

fuzz_target!(|data: &[u8]| {
    if let Ok(pod) = serde_json::from_slice::<CachedPod>(data) {
        let plain = pod.to_pod();
        assert!(
            (plain.annotations.keys()).all(|k| plumb_engine::plan::reads_annotation(k)),
            "{plain:?}"
        );
        let mirror =
            (pod.metadata.annotations.as_ref()).and_then(|a| a.get("kubernetes.io/config.mirror"));
        assert_eq!(
            pod.sandbox_uid(),
            mirror.or(pod.metadata.uid.as_ref()).map(String::as_str)
        );
    }
    if let Ok(nad) = serde_json::from_slice::<CachedNad>(data)
        && let Some(plain) = nad.to_nad()
    {
        let kept = plain.metadata.annotations.unwrap_or_default();
        let read = |k: &str| {
            plumb_engine::plan::reads_annotation(k)
                || k == netattach::nad::RESOURCE_NAME_ANNOTATION
                || k == "kubernetes.io/config.mirror"
        };
        assert!(kept.keys().all(|k| read(k)), "{kept:?}");
        let _ = plain.spec.config.map(|c| c.len());
    }
});
