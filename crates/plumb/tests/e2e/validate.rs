//! `plumb validate` on a catalogue of files (tests/fixtures/validate): every bad file fails
//! with a line naming the file, the object and what is wrong (each file's first line says
//! `# expect: <text>`); the good ones, and the examples, pass.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn validate(paths: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .arg("validate")
        .args(paths)
        .output()
        .expect("run plumb validate")
}

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/validate")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn every_bad_file_is_reported_with_its_reason() {
    let bad = fixtures("bad");
    assert!(bad.len() >= 9, "{bad:?}");
    for f in bad {
        let text = std::fs::read_to_string(&f).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: first line must be '# expect: ...'", f.display()));
        let out = validate(&[&f]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{}: {stdout}", f.display());
        let line = stdout
            .lines()
            .find(|l| l.contains(": error: "))
            .unwrap_or_else(|| panic!("{}: no error line: {stdout}", f.display()));
        assert!(line.starts_with(&f.display().to_string()), "{line}");
        assert!(
            line.contains(expect),
            "{}: wanted {expect:?} in {line}",
            f.display()
        );
        // `FILE[ (document N)]: OBJECT: error: WHAT`: the object is named once, not again in WHAT.
        let (head, what) = line.split_once(": error: ").unwrap();
        let object = head.rsplit(": ").next().unwrap();
        assert!(!what.contains(object), "{object} named twice: {line}");
    }
}

#[test]
fn good_files_pass_and_warnings_do_not_fail() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/standalone");
    let out = validate(&[&examples.join("nads"), &examples.join("pods")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 objects, 0 errors"));

    let good = fixtures("good");
    let paths: Vec<&Path> = good.iter().map(PathBuf::as_path).collect();
    let out = validate(&paths);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("warning: spec.config plugin 0 (bridge): capability \"portMapings\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("key \"colour\" is not in the specification"),
        "{stdout}"
    );
    let clash = stdout
        .lines()
        .find(|l| l.contains("generated-then-asked"))
        .unwrap_or_else(|| {
            panic!("no warning for a requested net1 after a generated one: {stdout}")
        });
    assert!(
        clash.contains(": warning: ")
            && clash.contains("element 2 (\"net-w\") asks for interface \"net1\"")
            && clash.contains("plumb plan"),
        "{clash}"
    );
    assert!(!stdout.contains("asked-then-generated"), "{stdout}");
}

#[test]
fn an_unwritable_stdout_is_an_error_not_a_panic() {
    // `plumb validate … | head`, or a full disk: the problems cannot be printed.
    let bad = fixtures("bad");
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .arg("validate")
        .arg(&bad[0])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .expect("run plumb validate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.contains("panicked") && stderr.contains("stdout"),
        "{stderr}"
    );
}

#[test]
fn a_directory_with_nothing_to_check_fails() {
    // A mistyped path, or manifests kept under another extension, must not pass as "valid".
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("nad.txt"),
        "kind: NetworkAttachmentDefinition\n",
    )
    .unwrap();
    let out = validate(&[d.path()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&d.path().display().to_string()) && stdout.contains(".yaml"),
        "{stdout}"
    );
}

#[test]
fn a_file_named_twice_is_checked_once() {
    // `plumb validate nads/ nads/extra.yaml`, or a shell glob that overlaps a directory: the
    // same file read twice must not make each of its NADs "defined more than once".
    let nads = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/standalone/nads");
    let file = std::fs::read_dir(&nads)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
        .unwrap();
    let alone = validate(&[&nads]);
    assert!(alone.status.success(), "{alone:?}");
    let out = validate(&[
        &nads,
        &file,
        &nads.join(".").join(file.file_name().unwrap()),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains("more than once"), "{stdout}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&alone.stderr),
        "the same objects are counted"
    );
}
