//! CNI_ARGS: parsing arbitrary text never panics, and what parses joins and parses back to
//! the same pairs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    let Ok(pairs) = cni::args::parse(s) else {
        // Rejected only when some non-empty part has no '='.
        assert!(
            s.split(';').any(|p| !p.is_empty() && !p.contains('=')),
            "rejected {s:?} though every part is KEY=VALUE"
        );
        return;
    };
    for (k, v) in &pairs {
        assert!(!k.contains(';') && !k.contains('='), "bad key {k:?}");
        assert!(!v.contains(';'), "bad value {v:?}");
        assert!(cni::args::get(&pairs, k).is_some());
    }
    let joined = cni::args::join(&pairs);
    let again = cni::args::parse(&joined)
        .unwrap_or_else(|e| panic!("join of {s:?} = {joined:?} does not parse: {e:?}"));
    assert_eq!(again, pairs, "round trip of {s:?} via {joined:?}");
    assert_eq!(cni::args::join(&again), joined, "join is not stable");
});
