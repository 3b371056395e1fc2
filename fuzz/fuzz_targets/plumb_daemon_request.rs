//! A request body the daemon reads from its socket (`shim::parse_request`), from arbitrary
//! bytes: parsing never panics, only `CNI_*` variables get through, and what it accepts is
//! written back by the shim's own encoder to the same bytes' meaning.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb::shim::{parse_request, request_body};

fuzz_target!(|data: &[u8]| {
    let Ok((env, stdin)) = parse_request(data) else {
        return;
    };
    assert!(env.keys().all(|k| k.starts_with("CNI_")), "{env:?}");
    let again = request_body(&env, stdin);
    let (env2, stdin2) = parse_request(&again).expect("the shim's own body parses");
    assert_eq!(env2, env);
    assert_eq!(stdin2, stdin);
});
