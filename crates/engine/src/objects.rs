//! Kubernetes objects from files, for plumb without a cluster: the YAML or JSON that `kubectl
//! apply -f` takes (several documents per YAML file, `List` objects, `.yaml`/`.yml`/`.json`),
//! read with the same rules as from the API. A directory of NADs is a [`Networks`] store, so the
//! planner cannot tell it from the API server.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use cni::NetworkConfigList;
use cni::error::{CniError, ErrorCode};
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use serde::de::DeserializeSeed;
use serde_json::Value;

use crate::plan::{Networks, Pod};
use cni::quote;

/// One object read from a file, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct FileObject {
    pub file: PathBuf,
    /// 1-based position of the document in the file.
    pub document: usize,
    pub value: Value,
}

impl FileObject {
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or("")
    }

    /// `namespace/name` (namespace `default` when unset, as kubectl applies it).
    pub fn qualified_name(&self) -> String {
        format!(
            "{}/{}",
            self.value["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default"),
            self.value["metadata"]["name"].as_str().unwrap_or("")
        )
    }
}

impl fmt::Display for FileObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (document {}): {} {}",
            self.file.display(),
            self.document,
            cut(self.kind()),
            cut(&self.qualified_name())
        )
    }
}

/// `text`, cut after [`quote::VALUE`] bytes, saying how long it was: a document can be megabytes
/// (a JSON file can have 8 MiB), and a wrong value is recognised by its start.
fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    quote::cut(text, quote::VALUE)
}

/// A parser's message about a file, cut (see [`quote::MESSAGE`]).
fn message(e: &dyn fmt::Display) -> String {
    quote::cut(&e.to_string(), quote::MESSAGE).into_owned()
}

/// A value of a file as an error quotes it: its JSON, cut (see [`cut`]).
fn shown(value: &Value) -> String {
    cut(&value.to_string()).into_owned()
}

fn invalid(msg: String) -> CniError {
    CniError::new(ErrorCode::InvalidConfig, msg)
}

/// The largest JSON object file read: a NAD or a pod is at most ~1.5 MiB (etcd's limit); a
/// file holds a few. The bound is the memory a file can take to read: up to 32 times its size
/// as `serde_json` values (measured 2026-11-25 with `plumb validate` under `/usr/bin/time`:
/// 16 MiB of `[1,1,…]` peaked at 529 MB, where this bound's 8 MiB take about 265 MB).
pub const MAX_JSON_FILE: u64 = 8 << 20;

/// The largest YAML object file read. The YAML parser keeps an event of some 170 bytes for
/// every node of a document before it builds a value, so a YAML file can take 80 times its
/// size (measured as above: 2 MiB of `[1,1,…]` or `[[],[],…]` peaked at 160–170 MB, 4 MiB at
/// 337 MB, and at the 16 MiB that bounded YAML before, 1.2–2.4 GB, in every ADD that read
/// such a file from `plumbNadDir`). 4 MiB still holds any one object and some thousand NADs;
/// a bigger export is split, or written as JSON.
pub const MAX_YAML_FILE: u64 = 4 << 20;

/// Whether `file` is read as JSON (by its extension, `.json`) rather than YAML.
fn is_json(file: &Path) -> bool {
    file.extension().is_some_and(|e| e == "json")
}

/// Every object in `file`. Empty documents are skipped; `List` objects are unpacked. The file
/// is read bounded ([`MAX_JSON_FILE`], [`MAX_YAML_FILE`]), and refused at once when it is no
/// regular file (a FIFO among the NADs of `plumbNadDir` would hold every ADD).
pub fn read_file(file: &Path) -> Result<Vec<FileObject>, CniError> {
    let io_error = |e: &dyn std::fmt::Display| {
        CniError::new(ErrorCode::Io, format!("{}: {e}", file.display()))
    };
    let limit = if is_json(file) {
        MAX_JSON_FILE
    } else {
        MAX_YAML_FILE
    };
    let bytes = cni::files::read_bounded(file, limit).map_err(|e| io_error(&e))?;
    let text = String::from_utf8(bytes).map_err(|e| io_error(&e))?;
    parse(file, &text)
}

/// Every object in `text`, the contents of `file`, which names it in errors and, by its
/// extension, says whether it is JSON (`.json`) or YAML (anything else). Empty documents are
/// skipped; `List` objects are unpacked.
pub fn parse(file: &Path, text: &str) -> Result<Vec<FileObject>, CniError> {
    let mut out = Vec::new();
    let docs: Vec<Value> = if is_json(file) {
        vec![
            serde_json::from_str(text)
                .map_err(|e| invalid(format!("{}: invalid JSON: {e}", file.display())))?,
        ]
    } else {
        if let Some(problem) = crate::yaml::nesting_problem(text) {
            return Err(invalid(format!(
                "{}: invalid YAML: {problem}",
                file.display()
            )));
        }
        let left = Cell::new(crate::yaml::budget(text.len()));
        serde_norway::Deserializer::from_str(text)
            .map(|doc| {
                crate::yaml::Bounded { left: &left }
                    .deserialize(doc)
                    .map_err(|e| invalid(format!("{}: invalid YAML: {e}", file.display())))
            })
            .collect::<Result<_, _>>()?
    };
    for (i, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(_) if doc["kind"] == "List" => {
                // As kubectl: a List's items are objects. One that is not (an item indented
                // into a string, say) was skipped, and the NAD it was went missing unsaid.
                let items = match &doc["items"] {
                    Value::Null => &[][..],
                    Value::Array(items) => items,
                    other => {
                        return Err(invalid(format!(
                            "{} (document {}): the List's items must be a list, not {}",
                            file.display(),
                            i + 1,
                            shown(other)
                        )));
                    }
                };
                for (j, item) in items.iter().enumerate() {
                    if !item.is_object() {
                        return Err(invalid(format!(
                            "{} (document {}): item {} of the List is not an object but {}",
                            file.display(),
                            i + 1,
                            j + 1,
                            shown(item)
                        )));
                    }
                    out.push(FileObject {
                        file: file.to_path_buf(),
                        document: i + 1,
                        value: item.clone(),
                    });
                }
            }
            Value::Object(_) => out.push(FileObject {
                file: file.to_path_buf(),
                document: i + 1,
                value: doc,
            }),
            other => {
                return Err(invalid(format!(
                    "{} (document {}): not an object but {}",
                    file.display(),
                    i + 1,
                    shown(&other)
                )));
            }
        }
    }
    Ok(out)
}

/// Every object in the files `paths` name, directories read one level deep (their `.yaml`,
/// `.yml` and `.json` files, sorted by name).
pub fn read_paths(paths: &[PathBuf]) -> Result<Vec<FileObject>, CniError> {
    let mut out = Vec::new();
    for f in files_of(paths)? {
        out.extend(read_file(&f)?);
    }
    Ok(out)
}

/// The files `paths` name, directories expanded one level deep (their `.yaml`, `.yml` and
/// `.json` files, sorted by name).
pub fn files_of(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CniError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| CniError::new(ErrorCode::Io, format!("{}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
                })
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// A NAD object, as the API would return it.
pub fn nad_of(o: &FileObject) -> Result<NetworkAttachmentDefinition, CniError> {
    let mut value = o.value.clone();
    // Indexing a JSON value to assign panics unless it is an object (or null): a file's
    // `metadata: oops` must be an error naming the file, never a panic of the CNI call.
    match &value["metadata"] {
        Value::Object(_) | Value::Null => {}
        other => {
            return Err(invalid(format!(
                "{o}: metadata must be a map, not {}",
                shown(other)
            )));
        }
    }
    if value["metadata"]["namespace"].is_null() {
        value["metadata"]["namespace"] = Value::String("default".into());
    }
    let nad: NetworkAttachmentDefinition =
        serde_json::from_value(value).map_err(|e| invalid(format!("{o}: {}", message(&e))))?;
    nad.validate_name()
        .map_err(|e| invalid(format!("{o}: {}", message(&e))))?;
    Ok(nad)
}

/// A pod object as the planner takes it (namespace `default` when unset).
pub fn pod_of(o: &FileObject) -> Result<Pod, CniError> {
    let meta = &o.value["metadata"];
    let name = meta["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid(format!("{o}: the pod has no metadata.name")))?;
    let annotations = match &meta["annotations"] {
        Value::Null => BTreeMap::new(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(invalid(format!(
                    "{o}: annotation {:?} must be a string, not {}",
                    cut(k),
                    shown(other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(invalid(format!(
                "{o}: metadata.annotations must be a map, not {}",
                shown(other)
            )));
        }
    };
    // Absent, the namespace is `default` as `kubectl apply` takes it; of another type it is a
    // mistake to name, not a reason to plan for the pods of `default`.
    let text = |field: &str| match &meta[field] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(invalid(format!(
            "{o}: metadata.{field} must be a string, not {}",
            shown(other)
        ))),
    };
    Ok(Pod {
        namespace: text("namespace")?.unwrap_or_else(|| "default".into()),
        name: name.to_string(),
        uid: text("uid")?.unwrap_or_default(),
        annotations,
    })
}

/// NADs from files, configuration files from plumb's `confDir`: a [`Networks`] without a
/// cluster.
pub struct FileNetworks {
    nads: BTreeMap<String, NetworkAttachmentDefinition>,
    conf: crate::networks::NodeNetworks<'static>,
}

impl FileNetworks {
    /// The NADs among `objects` (other kinds are ignored). A NAD defined twice is an error
    /// naming both places, as `kubectl apply` would silently keep the last.
    pub fn new(objects: &[FileObject], conf_dir: PathBuf) -> Result<FileNetworks, CniError> {
        let mut nads = BTreeMap::new();
        let mut seen: BTreeMap<String, &FileObject> = BTreeMap::new();
        for o in objects
            .iter()
            .filter(|o| o.kind() == netattach::nad::NAD_KIND)
        {
            let key = o.qualified_name();
            if let Some(first) = seen.insert(key.clone(), o) {
                return Err(invalid(format!(
                    "network-attachment-definition {key} is defined twice: in {} and in {}",
                    first.file.display(),
                    o.file.display()
                )));
            }
            nads.insert(key, nad_of(o)?);
        }
        Ok(FileNetworks {
            nads,
            conf: crate::networks::NodeNetworks {
                cluster: None,
                conf_dir,
            },
        })
    }

    /// From the files in `dir` (or `dir` itself when it is a file).
    pub fn from_dir(dir: &Path, conf_dir: PathBuf) -> Result<FileNetworks, CniError> {
        FileNetworks::new(&read_paths(&[dir.to_path_buf()])?, conf_dir)
    }
}

impl Networks for FileNetworks {
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        Ok(self.nads.get(&r.to_string()).cloned())
    }

    fn conf_by_name(&self, name: &str) -> Result<Option<NetworkConfigList>, CniError> {
        self.conf.conf_by_name(name)
    }

    fn conf_at(&self, path: &Path) -> Result<NetworkConfigList, CniError> {
        self.conf.conf_at(path)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[test]
    fn several_documents_lists_and_json() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {name: net-a}\nspec:\n  config: '{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}'\n\
             ---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: k8s.cni.cncf.io/v1\n  \
             kind: NetworkAttachmentDefinition\n  metadata: {name: net-b, namespace: ns2}\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("p.json"),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","annotations":{"k8s.v1.cni.cncf.io/networks":"net-a"}}}"#,
        )
        .unwrap();
        std::fs::write(d.path().join("ignored.txt"), "not read").unwrap();
        let objects = read_paths(&[d.path().to_path_buf()]).unwrap();
        let names: Vec<String> = objects.iter().map(|o| o.qualified_name()).collect();
        assert_eq!(names, ["default/net-a", "ns2/net-b", "default/web"]);
        let nets = FileNetworks::new(&objects, d.path().join("conf")).unwrap();
        let a = nets
            .nad(&NetworkRef::new("default", "net-a"))
            .unwrap()
            .unwrap();
        assert!(matches!(
            a.cni_config(),
            Ok(netattach::NadConfig::Inline(_))
        ));
        assert!(
            nets.nad(&NetworkRef::new("default", "net-b"))
                .unwrap()
                .is_none()
        );
        let pod = pod_of(&objects[2]).unwrap();
        assert_eq!(pod.namespace, "default");
        assert_eq!(pod.annotations["k8s.v1.cni.cncf.io/networks"], "net-a");
    }

    #[test]
    fn an_object_file_that_is_a_fifo_is_refused_at_once() {
        // The NADs of `plumbNadDir` are read on every ADD: a FIFO among them held the call.
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("nads.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = d.path().to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(read_paths(&[path]).map(drop));
        });
        let e = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("reading the NAD files waited on the FIFO")
            .unwrap_err();
        assert!(e.msg.contains("nads.yaml") && e.msg.contains("FIFO"), "{e}");
    }

    #[test]
    fn object_files_are_bounded_by_the_memory_their_kind_takes_to_read() {
        // A YAML file can take 80 times its size to read, JSON about 32: 16 MiB of YAML
        // among the NADs of `plumbNadDir` took 1.2-2.4 GB in every ADD. Each kind is read up
        // to its own bound, to the byte, and refused past it with the file and the bound named.
        let d = tempfile::tempdir().unwrap();
        let sized = |name: &str, head: &str, tail: &str, size: u64| {
            let f = d.path().join(name);
            let pad = size as usize - head.len() - tail.len();
            std::fs::write(&f, format!("{head}{}{tail}", "a".repeat(pad))).unwrap();
            f
        };
        for (name, head, tail, limit, said) in [
            (
                "big.yaml",
                "kind: Pod\nmetadata: {name: p}\nx: ",
                "\n",
                MAX_YAML_FILE,
                "larger than 4 MiB",
            ),
            (
                "big.json",
                r#"{"kind":"Pod","metadata":{"name":"p"},"x":""#,
                "\"}",
                MAX_JSON_FILE,
                "larger than 8 MiB",
            ),
        ] {
            let f = sized(name, head, tail, limit);
            let objects = read_file(&f).unwrap();
            assert_eq!(objects[0].qualified_name(), "default/p");
            let f = sized(name, head, tail, limit + 1);
            let e = read_file(&f).unwrap_err();
            assert!(e.msg.contains(name) && e.msg.contains(said), "{e}");
        }
    }

    #[test]
    fn bad_files_name_the_file_and_document() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("bad.yaml");
        std::fs::write(&f, "kind: [unclosed").unwrap();
        let e = read_file(&f).unwrap_err();
        assert!(e.msg.contains("bad.yaml") && e.msg.contains("YAML"), "{e}");
        std::fs::write(&f, "- 1\n- 2\n").unwrap();
        assert!(read_file(&f).unwrap_err().msg.contains("document 1"));
        std::fs::write(
            &f,
            "kind: NetworkAttachmentDefinition\nmetadata: {name: Bad_Name}\n",
        )
        .unwrap();
        let objects = read_file(&f).unwrap();
        let e = FileNetworks::new(&objects, d.path().into()).err().unwrap();
        assert!(e.msg.contains("Bad_Name"), "{e}");
        let twice = [objects[0].clone(), objects[0].clone()];
        let mut ok = twice.clone();
        for o in &mut ok {
            o.value["metadata"]["name"] = Value::String("good".into());
        }
        let e = FileNetworks::new(&ok, d.path().into()).err().unwrap();
        assert!(e.msg.contains("defined twice"), "{e}");
        // A pod's namespace of the wrong type is named, not taken for `default`.
        std::fs::write(&f, "kind: Pod\nmetadata: {name: p, namespace: 5}\n").unwrap();
        let e = pod_of(&read_file(&f).unwrap()[0]).unwrap_err();
        assert!(
            e.msg.contains("bad.yaml") && e.msg.contains("metadata.namespace must be a string"),
            "{e}"
        );
        assert_eq!(e.code, 7);
    }

    #[test]
    fn yaml_aliases_repeating_more_than_the_file_holds_are_refused_naming_the_file() {
        // One anchor of 2,500 items and 2,500 aliases to it: 18 KB that unfolds to 6.25
        // million values (100 KB of the same ran `plumb validate` out of memory).
        // serde_norway's own limit (100 alias jumps per event) lets it through.
        let n = 2500;
        let quadratic = format!(
            "kind: NetworkAttachmentDefinition\nmetadata: {{name: q}}\nx: &a [{}]\ny: [{}]\n",
            vec!["x"; n].join(","),
            vec!["*a"; n].join(",")
        );
        // The classic: 9 levels of 9 aliases, refused by serde_norway's limit already.
        let mut laughs = String::from("kind: Pod\nmetadata: {name: lol}\nl0: &l0 [lol,lol]\n");
        for i in 1..10 {
            laughs += &format!(
                "l{i}: &l{i} [{}]\n",
                vec![format!("*l{}", i - 1); 9].join(",")
            );
        }
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("laughs.yaml");
        for (text, why) in [
            (quadratic, "a \"billion laughs\"?"),
            (laughs, "repetition limit exceeded"),
        ] {
            std::fs::write(&f, &text).unwrap();
            let e = read_file(&f).unwrap_err();
            assert_eq!(e.code, 7, "{e}");
            assert!(
                e.msg.contains("laughs.yaml: invalid YAML") && e.msg.contains(why),
                "{e}"
            );
        }
    }

    #[test]
    fn nads_sharing_one_large_config_by_alias_are_read() {
        // 120 NADs whose `config` is one 10 KB string, given once and aliased: 20 KB that
        // unfold to 1.2 MB, far from a "billion laughs" (1 MiB of slack refused it).
        let config = format!(
            "{{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\",\"x\":\"{}\"}}",
            "y".repeat(10_000)
        );
        let mut text = format!(
            "kind: List\nitems:\n- kind: NetworkAttachmentDefinition\n  metadata: {{name: n0}}\n  spec: {{config: &c '{config}'}}\n"
        );
        for i in 1..120 {
            text += &format!(
                "- kind: NetworkAttachmentDefinition\n  metadata: {{name: n{i}}}\n  spec: {{config: *c}}\n"
            );
        }
        let objects = parse(Path::new("shared.yaml"), &text).unwrap();
        assert_eq!(objects.len(), 120);
        assert_eq!(objects[119].value["spec"]["config"], Value::String(config));
    }

    #[test]
    fn yaml_nested_deeper_than_any_reader_takes_is_refused_before_it_is_parsed() {
        // 1,001 levels are refused, naming the line, whether as flow collections or as block
        // sequences begun on one line. (A 16 MiB file of `[` took 65 s and 2.7 GB to be refused
        // by serde_norway's recursion limit.)
        let deep_flow = format!("kind: Pod\nmetadata:\n  x: {}", "[".repeat(1001));
        let deep_block = format!("kind: Pod\n\nx:\n{}a\n", "- ".repeat(1001));
        for (text, line) in [(deep_flow, 3), (deep_block, 4)] {
            let e = parse(Path::new("deep.yaml"), &text).unwrap_err();
            assert_eq!(e.code, 7, "{e}");
            assert_eq!(
                e.msg,
                format!(
                    "deep.yaml: invalid YAML: line {line}: collections nested more than 1000 \
                     deep (plumb reads at most 128 levels)"
                ),
            );
        }
        // Brackets in quoted scalars, comments and plain scalars are not collections.
        let many = "[".repeat(1500);
        let fine = format!(
            "kind: Pod\n# {many}\nmetadata:\n  name: p\n  annotations:\n    a: '{many}'\n    \
             b: \"{many}\\\"{many}\"\n    c: x{many}\n    d: 'it''s {many}'\n    e: |\n      \
             {{\"plugins\": [{{\"type\": \"bridge\"}}]}}\n"
        );
        let objects = parse(Path::new("fine.yaml"), &fine).unwrap();
        assert_eq!(
            objects[0].value["metadata"]["annotations"]["c"],
            format!("x{many}")
        );
        assert_eq!(crate::yaml::nesting_problem(&fine), None);
    }

    #[test]
    fn yaml_with_a_few_aliases_reads_as_before() {
        // What the bounded reader makes is what serde_json's own `Value` makes of the YAML.
        let text = "---\nkind: List\nitems:\n- &nad {kind: NetworkAttachmentDefinition, \
                    metadata: {name: a}, spec: {config: ''}}\n- *nad\n---\n\
                    kind: Pod\nmetadata:\n  name: p\n  labels: &l {a: '1', 2: x, 'on': yes}\n  \
                    annotations: *l\nn: [1, -2, 3.5, .nan, ~, null, true, \
                    0x1f, 1e3, '', \"\\u00e9\"]\n---\n";
        let objects = parse(Path::new("a.yaml"), text).unwrap();
        let expected: Vec<Value> = serde_norway::Deserializer::from_str(text)
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .flat_map(|v| match v["items"].as_array() {
                Some(items) => items.clone(),
                None => vec![v],
            })
            .collect();
        let got: Vec<Value> = objects.into_iter().map(|o| o.value).collect();
        assert_eq!(got, expected);
        assert_eq!(got.len(), 3);
        assert_eq!(got[2]["metadata"]["annotations"]["2"], "x");
    }

    #[test]
    fn a_list_item_that_is_not_an_object_is_an_error_not_skipped() {
        // Found by the plumb_objects fuzz target: a NAD of a List indented into a string was
        // skipped, and `plumb validate` said nothing of it.
        for (text, why) in [
            (
                "kind: List\nitems:\n- kind: Pod\n  metadata: {name: p}\n- 'kind: NetworkAttachmentDefinition'\n",
                "objects.yaml (document 1): item 2 of the List is not an object but \"kind: NetworkAttachmentDefinition\"",
            ),
            (
                "---\n---\nkind: List\nitems:\n-\n",
                "objects.yaml (document 2): item 1 of the List is not an object but null",
            ),
            (
                "kind: List\nitems: {kind: Pod}\n",
                "objects.yaml (document 1): the List's items must be a list, not {\"kind\":\"Pod\"}",
            ),
        ] {
            let e = parse(Path::new("objects.yaml"), text).unwrap_err();
            assert_eq!((e.code, e.msg.as_str()), (7, why), "{text}");
        }
        // A List without items holds nothing.
        assert_eq!(
            parse(Path::new("objects.yaml"), "kind: List\n").unwrap(),
            []
        );
    }

    #[test]
    fn errors_quote_the_start_of_a_long_value_not_all_of_it() {
        // A 1 MB document that is no object, a pod with 1 MB annotations and a 1 MB name: each
        // problem line quoted all of it.
        let big = "x".repeat(1 << 20);
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("big.yaml");
        std::fs::write(&f, format!("[{big}]\n")).unwrap();
        let e = read_file(&f).unwrap_err();
        assert!(
            e.msg.ends_with(&format!(
                "big.yaml (document 1): not an object but [\"{}… (1048580 bytes)",
                "x".repeat(98)
            )),
            "{}",
            &e.msg[..e.msg.len().min(300)]
        );
        std::fs::write(
            &f,
            format!("kind: Pod\nmetadata: {{name: {big}, annotations: [{big}]}}\n"),
        )
        .unwrap();
        let objects = read_file(&f).unwrap();
        let e = pod_of(&objects[0]).unwrap_err();
        assert!(e.msg.len() < 500, "{}", &e.msg[..e.msg.len().min(600)]);
        assert!(
            e.msg.contains(&format!(
                "Pod default/{}… (1048584 bytes): metadata.annotations must be a map, not [\"xxx",
                "x".repeat(92)
            )),
            "{e}"
        );
        // serde's messages quote the value they refuse whole.
        std::fs::write(
            &f,
            format!("kind: NetworkAttachmentDefinition\nmetadata: {{name: n}}\nspec: {big}\n"),
        )
        .unwrap();
        let objects = read_file(&f).unwrap();
        let e = nad_of(&objects[0]).unwrap_err();
        assert!(e.msg.len() < 600, "{}", &e.msg[..e.msg.len().min(700)]);
        assert!(
            e.msg
                .contains("NetworkAttachmentDefinition default/n: invalid type: string \"xxx"),
            "{e}"
        );
        assert!(e.msg.ends_with(" bytes)"), "{e}");
    }

    #[test]
    fn a_nad_whose_metadata_is_not_a_map_is_an_error_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("nad.yaml");
        for metadata in ["oops", "[a, b]", "5"] {
            std::fs::write(
                &f,
                format!("kind: NetworkAttachmentDefinition\nmetadata: {metadata}\n"),
            )
            .unwrap();
            let objects = read_file(&f).unwrap();
            let e = nad_of(&objects[0]).unwrap_err();
            assert_eq!(e.code, 7, "{metadata}: {e}");
            assert!(
                e.msg.contains("nad.yaml") && e.msg.contains("metadata"),
                "{metadata}: {e}"
            );
            assert!(FileNetworks::new(&objects, d.path().into()).is_err());
        }
    }
}
