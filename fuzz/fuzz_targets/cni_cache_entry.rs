//! libcni result-cache entries and the base64 they hold the configuration in, from arbitrary
//! bytes (files on disk another tool may have written): decoding never panics, base64 round
//! trips, and an entry that decodes is written back to bytes that decode to the same entry.
#![no_main]

use cni::base64;
use cni::cache::{decode_entry, encode_entry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Any bytes encode to padded base64 that decodes back to them.
    let text = base64::encode(data);
    assert_eq!(text.len() % 4, 0, "unpadded encoding of {data:?}");
    assert_eq!(base64::decode(&text).as_deref(), Some(data), "{text:?}");
    // Text that decodes is padded quads: three bytes for each, less one for each '='.
    if let Ok(s) = std::str::from_utf8(data)
        && let Some(bytes) = base64::decode(s)
    {
        let pad = s.bytes().rev().take_while(|&c| c == b'=').count();
        assert!(pad <= 2, "{s:?} decoded with {pad} '='");
        assert_eq!(bytes.len(), s.len() / 4 * 3 - pad, "{s:?}");
    }

    if let Ok(entry) = decode_entry(data) {
        let bytes = encode_entry(&entry).expect("a decoded entry encodes");
        let again = decode_entry(&bytes).unwrap_or_else(|e| panic!("re-decode: {e}"));
        assert_eq!(again, entry, "an entry changed through encode and decode");
    }
});
