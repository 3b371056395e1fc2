//! Kubernetes objects from files, for plumb without a cluster: the YAML or JSON that `kubectl
//! apply -f` takes (several documents per YAML file, `List` objects, `.yaml`/`.yml`/`.json`),
//! read with the same rules as from the API. A directory of NADs is a [`Networks`] store, so the
//! planner cannot tell it from the API server.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use cni::NetworkConfigList;
use cni::error::{CniError, ErrorCode};
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use serde::Deserialize;
use serde_json::Value;

use crate::plan::{Networks, Pod};

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
            self.kind(),
            self.qualified_name()
        )
    }
}

fn invalid(msg: String) -> CniError {
    CniError::new(ErrorCode::InvalidConfig, msg)
}

/// The largest object file read: a NAD or a pod is at most ~1.5 MiB (etcd's limit); a file
/// holds a few.
pub const MAX_OBJECT_FILE: u64 = 16 << 20;

/// Every object in `file`. Empty documents are skipped; `List` objects are unpacked. The file
/// is read bounded, and refused at once when it is no regular file (a FIFO among the NADs of
/// `plumbNadDir` would hold every ADD).
pub fn read_file(file: &Path) -> Result<Vec<FileObject>, CniError> {
    let io_error = |e: &dyn std::fmt::Display| {
        CniError::new(ErrorCode::Io, format!("{}: {e}", file.display()))
    };
    let bytes = cni::files::read_bounded(file, MAX_OBJECT_FILE).map_err(|e| io_error(&e))?;
    let text = String::from_utf8(bytes).map_err(|e| io_error(&e))?;
    parse(file, &text)
}

/// Every object in `text`, the contents of `file`, which names it in errors and, by its
/// extension, says whether it is JSON (`.json`) or YAML (anything else). Empty documents are
/// skipped; `List` objects are unpacked.
pub fn parse(file: &Path, text: &str) -> Result<Vec<FileObject>, CniError> {
    let mut out = Vec::new();
    let docs: Vec<Value> = if file.extension().is_some_and(|e| e == "json") {
        vec![
            serde_json::from_str(text)
                .map_err(|e| invalid(format!("{}: invalid JSON: {e}", file.display())))?,
        ]
    } else {
        serde_norway::Deserializer::from_str(text)
            .map(|doc| {
                Value::deserialize(doc)
                    .map_err(|e| invalid(format!("{}: invalid YAML: {e}", file.display())))
            })
            .collect::<Result<_, _>>()?
    };
    for (i, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(_) if doc["kind"] == "List" => {
                for item in doc["items"].as_array().into_iter().flatten() {
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
                    "{} (document {}): not an object but {other}",
                    file.display(),
                    i + 1
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
            return Err(invalid(format!("{o}: metadata must be a map, not {other}")));
        }
    }
    if value["metadata"]["namespace"].is_null() {
        value["metadata"]["namespace"] = Value::String("default".into());
    }
    let nad: NetworkAttachmentDefinition =
        serde_json::from_value(value).map_err(|e| invalid(format!("{o}: {e}")))?;
    nad.validate_name()
        .map_err(|e| invalid(format!("{o}: {e}")))?;
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
                    "{o}: annotation {k:?} must be a string, not {other}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(invalid(format!(
                "{o}: metadata.annotations must be a map, not {other}"
            )));
        }
    };
    // Absent, the namespace is `default` as `kubectl apply` takes it; of another type it is a
    // mistake to name, not a reason to plan for the pods of `default`.
    let text = |field: &str| match &meta[field] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(invalid(format!(
            "{o}: metadata.{field} must be a string, not {other}"
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
