//! Network configuration lists and single configs from arbitrary bytes: parsing never panics,
//! and whatever parses satisfies the invariants the runtime relies on.
#![no_main]

use cni::{NetworkConfigList, validate};
use libfuzzer_sys::fuzz_target;

fn check(list: &NetworkConfigList, data: &[u8], via: &str) {
    assert!(
        validate::network_name(&list.name).is_ok(),
        "{via}: accepted invalid network name {:?}",
        list.name
    );
    assert!(
        list.cni_version.is_supported(),
        "{via}: accepted unsupported version {}",
        list.cni_version
    );
    for p in &list.plugins {
        assert!(
            validate::plugin_type(&p.plugin_type).is_ok(),
            "{via}: accepted invalid plugin type {:?}",
            p.plugin_type
        );
        // The type read out is the one in the raw object passed to the plugin.
        assert_eq!(
            p.raw.get("type").and_then(|t| t.as_str()),
            Some(p.plugin_type.as_str()),
            "{via}: plugin type differs from its raw object"
        );
        // Only boolean capabilities are accepted.
        if let Some(caps) = p.raw.get("capabilities").and_then(|c| c.as_object()) {
            assert_eq!(caps.len(), p.capabilities.len(), "{via}: capabilities lost");
        }
    }
    assert_eq!(
        list.raw.get("name").and_then(|n| n.as_str()),
        Some(list.name.as_str()),
        "{via}: name differs from the raw object"
    );
    if via == "from_bytes" {
        assert_eq!(
            list.bytes, data,
            "{via}: stored bytes differ from the input"
        );
    }
    // A list that parsed parses again from the bytes it keeps, to the same list.
    let again = NetworkConfigList::from_bytes(&list.bytes)
        .unwrap_or_else(|e| panic!("{via}: stored bytes do not re-parse: {e:?}"));
    assert_eq!(&again, list, "{via}: re-parse of stored bytes differs");
}

fuzz_target!(|data: &[u8]| {
    // What the input is as plain JSON: Some(has a `plugins` key) for an object, None otherwise.
    let object: Option<serde_json::Map<String, serde_json::Value>> =
        match serde_json::from_slice::<serde_json::Value>(data) {
            Ok(serde_json::Value::Object(m)) => Some(m),
            _ => None,
        };

    let list = NetworkConfigList::from_bytes(data);
    if let Ok(l) = &list {
        check(l, data, "from_bytes");
        assert_eq!(
            Some(&l.raw),
            object.as_ref(),
            "from_bytes: raw object differs"
        );
    }
    let conf = NetworkConfigList::from_conf_bytes(data);
    if let Ok(l) = &conf {
        check(l, data, "from_conf_bytes");
        assert_eq!(l.plugins.len(), 1, "from_conf_bytes: not a one-plugin list");
        // The single config is passed through unchanged as the list's only plugin.
        assert_eq!(
            Some(&l.plugins[0].raw),
            object.as_ref(),
            "from_conf_bytes: plugin object differs from the input"
        );
    }
    let any = NetworkConfigList::from_any_bytes(data);
    if let Ok(l) = &any {
        check(l, data, "from_any_bytes");
    }
    // from_any_bytes is exactly one of the two, chosen by the `plugins` key.
    let picked = match &object {
        None => {
            assert!(any.is_err(), "from_any_bytes accepted a non-object");
            return;
        }
        Some(m) if m.contains_key("plugins") => list.as_ref().ok(),
        Some(_) => conf.as_ref().ok(),
    };
    assert_eq!(
        any.as_ref().ok(),
        picked,
        "from_any_bytes differs from the parser it picks"
    );
});
