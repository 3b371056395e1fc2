//! plumb's attachment record (`<stateDir>/<containerID>.json`, read by DEL, CHECK, GC and
//! STATUS) from arbitrary bytes, as a damaged or hand-edited file would give it: decoding never
//! panics; a record it accepts is written back and read again unchanged, and every attachment's
//! configuration lists (the delegates' and the network's own) parse or are refused, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_engine::execute::{recorded_list, recorded_network_list};
use plumb_engine::record::decode;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = decode(data) else {
        return;
    };
    let again = serde_json::to_vec(&record).expect("a decoded record serialises");
    let back = decode(&again).unwrap_or_else(|e| panic!("written back, refused: {e:?}"));
    assert_eq!(back, record);
    for a in &record.attachments {
        let _ = recorded_list(a);
        let _ = recorded_network_list(a);
    }
});
