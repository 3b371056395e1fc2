//! The default network's configuration file, as `plumb daemon --write-config` reads it from the
//! runtime's configuration directory (another plugin writes it, maybe half-way): judging it never
//! panics, and a configuration it takes gives a list that the plugin reads, with a default
//! network every ADD can run (conf_writer.rs `unusable`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb::conf_writer::{conflist, plumb_stdin, unusable};
use plumb::config::Config;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(conf @ Value::Object(_)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if unusable(&conf).is_some() {
        return;
    }
    let list = conflist(&Map::new(), &conf);
    let stdin = plumb_stdin(&list).expect("the written list holds plumb's entry");
    let config = Config::parse(stdin.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("the written list is refused: {}", e.msg));
    let default = serde_json::to_vec(&config.delegates[0]).unwrap();
    cni::NetworkConfigList::from_any_bytes(&default)
        .and_then(|l| l.require_plugins())
        .unwrap_or_else(|e| panic!("its default network is refused: {}", e.msg));
});
