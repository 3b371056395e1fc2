//! Kubernetes objects from files (`plumb validate`, `plan`, `attach`, and the NADs of
//! `plumbNadDir`, read on every ADD), from arbitrary text as a broken or hostile file would give
//! it, read as YAML (several documents, anchors and aliases) and as JSON: reading never panics
//! nor hangs nor takes memory without bound; every object read is a JSON object; NADs and pods
//! are made of them, and checked by `plumb validate`, without a panic, each problem naming the
//! file.
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use plumb::cli::validate::validate;
use plumb_engine::objects::{FileNetworks, nad_of, parse, pod_of};
use plumb_engine::yaml::nesting_problem;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // What the nesting bound refuses before parsing, the YAML parser refuses too (it reads at
    // most 128 levels): the bound never turns a readable file away.
    if nesting_problem(text).is_some() {
        let parsed: Result<Vec<serde_json::Value>, _> = serde_norway::Deserializer::from_str(text)
            .map(serde::Deserialize::deserialize)
            .collect();
        assert!(parsed.is_err(), "refused as too deep, yet readable");
    }
    for file in ["objects.yaml", "objects.json"] {
        let objects = match parse(Path::new(file), text) {
            Ok(o) => o,
            Err(e) => {
                assert!(e.msg.contains(file), "{e}");
                continue;
            }
        };
        for o in &objects {
            assert!(o.value.is_object(), "{o}: {:?}", o.value);
            assert!(o.document >= 1, "{o}");
            // Whatever its kind: each refuses what it cannot make, with the file's name.
            match nad_of(o) {
                Ok(nad) => drop(nad.cni_config()),
                Err(e) => assert!(e.msg.contains(file), "{e}"),
            }
            match pod_of(o) {
                Ok(pod) => assert!(!pod.name.is_empty()),
                Err(e) => assert!(e.msg.contains(file), "{e}"),
            }
        }
        for p in validate(&objects) {
            assert!(p.object.starts_with(file), "{p}");
            assert!(!p.message.is_empty(), "{p}");
        }
        let _ = FileNetworks::new(&objects, PathBuf::from("/nonexistent/plumb-fuzz"));
    }
});
