//! `plumb daemon --write-config`'s two inputs together: the operator's template and the default
//! network's configuration, as the daemon reads it from the runtime's configuration directory
//! (another plugin writes it, maybe half-way). The input is the configuration alone (an object)
//! or `[template, configuration]`. Judging either never panics; a template the daemon takes
//! (checked at its start against a stand-in network, conf_writer.rs `template_keys`) and a
//! configuration it takes (`unusable`) give a list that the plugin reads, whose default network
//! is the configuration itself, with its plugins' capabilities, and every ADD can run it.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use plumb::daemon::conf_writer::{conflist, plumb_stdin, template_keys, unusable};
use plumb_engine::config::Config;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let (template, conf) = match serde_json::from_slice::<Value>(data) {
        Ok(conf @ Value::Object(_)) => (Map::new(), conf),
        Ok(Value::Array(pair)) if pair.len() == 2 => {
            let template = serde_json::to_vec(&pair[0]).unwrap();
            let Ok((keys, _)) = template_keys(&template, Some(Path::new("/run/plumb/plumb.sock")))
            else {
                return;
            };
            (keys, pair[1].clone())
        }
        _ => return,
    };
    if !conf.is_object() || unusable(&conf).is_some() {
        return;
    }
    let list = conflist(&template, &conf);
    let stdin = plumb_stdin(&list).expect("the written list holds plumb's entry");
    let config = Config::parse(stdin.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("the written list is refused: {}", e.msg));
    // The default network is the configuration itself: no template key overrides it.
    assert!(
        config.cluster_network.is_none(),
        "clusterNetwork from the template"
    );
    let default = serde_json::to_value(&config.delegates[0]).unwrap();
    assert_eq!(
        default, conf,
        "the default network is not the configuration"
    );
    // Every capability its plugins declare is declared as plumb's (the template may turn one
    // off, in any case), so that the runtime passes its arguments.
    let plugins = match conf.get("plugins") {
        Some(Value::Array(p)) => p.clone(),
        _ => vec![conf.clone()],
    };
    for plugin in &plugins {
        if let Some(Value::Object(caps)) = plugin.get("capabilities") {
            for (k, v) in caps {
                assert!(
                    v != &Value::Bool(true)
                        || config
                            .capabilities
                            .keys()
                            .any(|c| c.eq_ignore_ascii_case(k)),
                    "capability {k:?} not declared"
                );
            }
        }
    }
    cni::NetworkConfigList::from_any_bytes(&serde_json::to_vec(&default).unwrap())
        .and_then(|l| l.require_plugins())
        .unwrap_or_else(|e| panic!("its default network is refused: {}", e.msg));
});
