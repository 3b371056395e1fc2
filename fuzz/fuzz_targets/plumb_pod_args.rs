//! Which pod a CNI call is for (`K8S_POD_*` in the runtime's `CNI_ARGS`, `PodArgs::from_args`)
//! from arbitrary text: reading never panics; a pod it names has a namespace that is a DNS-1123
//! label and a name that is a DNS-1123 subdomain (they go into API paths), and a refusal is
//! CNI error 4 (invalid environment variables).
#![no_main]

use libfuzzer_sys::fuzz_target;
use netattach::names;
use plumb_engine::pod_args::PodArgs;

fuzz_target!(|s: &str| {
    let Ok(pairs) = cni::args::parse(s) else {
        return;
    };
    match PodArgs::from_args(&pairs) {
        Ok(Some(p)) => {
            assert!(names::validate_label(&p.namespace).is_ok(), "{p:?}");
            assert!(names::validate_subdomain(&p.name).is_ok(), "{p:?}");
            assert!(!p.to_string().contains("//"), "{p:?}");
            assert!(p.uid.as_deref() != Some(""), "{p:?}");
        }
        Ok(None) => assert!(
            ["K8S_POD_NAMESPACE", "K8S_POD_NAME"]
                .iter()
                .all(|k| cni::args::get(&pairs, k).is_none_or(str::is_empty)),
            "{pairs:?}"
        ),
        Err(e) => assert_eq!(e.code, 4, "{e}"),
    }
});
