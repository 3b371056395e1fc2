use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;

const FIXTURE_NAME: &str = "results-fixture-net-cnitool-f44a90ca26003b1992e5-eth0.json";

#[test]
fn an_entry_that_is_a_fifo_is_refused_at_once() {
    // A DEL reads the entry for its prevResult: a FIFO there held the call with no error.
    let d = tempfile::tempdir().unwrap();
    let cache = ResultCache::new(d.path());
    fs::create_dir_all(cache.results_dir()).unwrap();
    let path = cache.path("net", "cid", "eth0").unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = cache.read("net", "cid", "eth0").map(drop);
        let listed = cache.list(Some("cid")).map(|l| l.len());
        let _ = tx.send((read, listed));
    });
    let (read, listed) = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the cache waited on the FIFO");
    let e = read.unwrap_err();
    assert!(e.msg.contains(&path.display().to_string()), "{e}");
    assert_eq!(listed.unwrap(), 0, "a FIFO is no entry");
}

fn fixture_bytes() -> Vec<u8> {
    fs::read(format!(
        "{}/tests/fixtures/libcni/{FIXTURE_NAME}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A cache dir holding the entry cnitool wrote, under the name libcni gave it.
fn cache_with_fixture() -> (tempfile::TempDir, ResultCache) {
    let d = tempfile::tempdir().unwrap();
    let cache = ResultCache::new(d.path());
    fs::create_dir_all(cache.results_dir()).unwrap();
    fs::write(
        cache
            .results_dir()
            .join("fixture-net-cnitool-f44a90ca26003b1992e5-eth0"),
        fixture_bytes(),
    )
    .unwrap();
    (d, cache)
}

#[test]
fn reads_the_entry_cnitool_wrote() {
    let (_d, cache) = cache_with_fixture();
    let e = cache
        .read("fixture-net", "cnitool-f44a90ca26003b1992e5", "eth0")
        .unwrap()
        .unwrap();
    assert_eq!(e.netns, "/var/run/netns/fixture");
    assert_eq!(
        e.cni_args[1],
        ("K8S_POD_NAMESPACE".to_string(), "default".to_string())
    );
    assert_eq!(e.capability_args["mac"], json!("02:00:00:00:99:01"));
    let conflist = fs::read(format!(
        "{}/tests/fixtures/libcni/10-fixture.conflist",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert_eq!(e.config, conflist, "config is the conflist bytes as read");
    let r = cache
        .cached_result(
            "fixture-net",
            "cnitool-f44a90ca26003b1992e5",
            "eth0",
            Version::V0_4_0,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        r.cni_version,
        Version::V0_4_0,
        "converted to the asked version"
    );
    assert_eq!(r.ips[0].address.to_string(), "10.99.0.2/24");
}

#[test]
fn writes_the_same_shape_and_modes() {
    let (_d, cache) = cache_with_fixture();
    let e = cache
        .read("fixture-net", "cnitool-f44a90ca26003b1992e5", "eth0")
        .unwrap()
        .unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let mine = ResultCache::new(d2.path().join("cni"));
    mine.write(&e).unwrap();
    let path = mine
        .path("fixture-net", "cnitool-f44a90ca26003b1992e5", "eth0")
        .unwrap();
    // Byte-identical to what libcni wrote: same keys, same order, same base64.
    assert_eq!(fs::read(&path).unwrap(), fixture_bytes());
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&mine.results_dir()), 0o700);
    // No temporary file left behind.
    assert_eq!(fs::read_dir(mine.results_dir()).unwrap().count(), 1);
}

#[test]
fn missing_corrupt_and_legacy_entries() {
    let d = tempfile::tempdir().unwrap();
    let cache = ResultCache::new(d.path());
    assert!(cache.read("n", "c", "eth0").unwrap().is_none());
    assert!(
        cache
            .cached_result("n", "c", "eth0", Version::V1_0_0)
            .unwrap()
            .is_none()
    );
    cache.remove("n", "c", "eth0").unwrap();
    fs::create_dir_all(cache.results_dir()).unwrap();
    let p = cache.path("n", "c", "eth0").unwrap();
    fs::write(&p, b"{trunc").unwrap();
    assert_eq!(cache.read("n", "c", "eth0").unwrap_err().code, 6);
    assert_eq!(
        cache
            .cached_result("n", "c", "eth0", Version::V1_0_0)
            .unwrap_err()
            .code,
        6
    );
    // A bare result from before cniCacheV1.
    fs::write(
        &p,
        br#"{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.2.3/24"}]}"#,
    )
    .unwrap();
    let r = cache
        .cached_result("n", "c", "eth0", Version::V1_0_0)
        .unwrap()
        .unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.2.3/24");
    cache.remove("n", "c", "eth0").unwrap();
    assert!(!p.exists());
}

#[test]
fn removing_a_missing_entry_removes_what_a_killed_writer_left_of_it_and_nothing_else() {
    let d = tempfile::tempdir().unwrap();
    let cache = ResultCache::new(d.path());
    fs::create_dir_all(cache.results_dir()).unwrap();
    // A writer killed before its rename, another container's, and look-alikes.
    let left = [
        ".n-c-eth0.tmp4242",
        ".n-c2-eth0.tmp4242",
        ".n-c-eth0.tmp",
        "n-c-eth0.tmp4242",
    ];
    for name in left {
        fs::write(cache.results_dir().join(name), b"{").unwrap();
    }
    let names = || -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(cache.results_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    // An entry in place: removed alone (its ADD ended; nothing is listed).
    let entry = cache.path("n", "c", "eth0").unwrap();
    fs::write(&entry, b"{}").unwrap();
    cache.remove("n", "c", "eth0").unwrap();
    assert_eq!(names().len(), 4, "{:?}", names());
    // Missing: its writer's temporary file goes.
    cache.remove("n", "c", "eth0").unwrap();
    assert_eq!(
        names(),
        [".n-c-eth0.tmp", ".n-c2-eth0.tmp4242", "n-c-eth0.tmp4242"]
    );
}

#[test]
fn a_staged_file_is_in_place_only_once_committed() {
    let d = tempfile::tempdir().unwrap();
    let names = || -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let path = d.path().join("rec.json");
    let staged = stage(&path, b"one").unwrap();
    assert!(!path.exists());
    staged.commit_durable().unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"one");
    assert_eq!(names(), ["rec.json"]);
    // Dropped uncommitted: the old content stays and no temporary file is left.
    drop(stage(&path, b"two").unwrap());
    assert_eq!(fs::read(&path).unwrap(), b"one");
    assert_eq!(names(), ["rec.json"]);
    // A commit that cannot rename (the directory went away) is an error naming the file.
    let sub = d.path().join("sub");
    fs::create_dir(&sub).unwrap();
    let staged = stage(&sub.join("r.json"), b"x").unwrap();
    fs::remove_dir_all(&sub).unwrap();
    let e = staged.commit_durable().unwrap_err();
    assert!(e.msg.contains("r.json"), "{e}");
}

#[test]
fn a_temporary_name_another_writer_holds_is_left_to_it() {
    // Another daemon's PID 1 in its own PID namespace, or a killed writer's leftover with
    // this process's PID: its file is neither truncated nor renamed by this one.
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("token");
    let theirs = d.path().join(format!(".token.tmp{}", std::process::id()));
    fs::write(&theirs, b"theirs").unwrap();
    let first = stage(&path, b"one").unwrap();
    let second = stage(&path, b"two").unwrap();
    assert_eq!(fs::read(&theirs).unwrap(), b"theirs");
    assert_eq!(names_in(d.path()).len(), 3, "{:?}", names_in(d.path()));
    first.commit().unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"one");
    second.commit_durable().unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"two");
    assert_eq!(fs::read(&theirs).unwrap(), b"theirs");
    // One left uncommitted goes when dropped; a stand-in name is found as a leftover.
    drop(stage(&path, b"three").unwrap());
    assert_eq!(names_in(d.path()).len(), 2, "{:?}", names_in(d.path()));
    let staged = stage(&path, b"four").unwrap();
    std::mem::forget(staged);
    assert_eq!(names_in(d.path()).len(), 3, "{:?}", names_in(d.path()));
    assert_eq!(remove_staged(&path).len(), 2);
    assert_eq!(names_in(d.path()), ["token"]);
}

#[test]
fn paths_cannot_escape_the_directory() {
    let cache = ResultCache::new("/tmp/x");
    assert!(cache.path("../n", "c", "eth0").is_err());
    assert!(cache.path("n", "../../c", "eth0").is_err());
    assert!(cache.path("n", "c", "../e").is_err());
    assert!(cache.path("", "c", "eth0").is_err());
}

#[test]
fn list_filters_by_container_and_skips_junk() {
    let (_d, cache) = cache_with_fixture();
    let mut other = cache
        .read("fixture-net", "cnitool-f44a90ca26003b1992e5", "eth0")
        .unwrap()
        .unwrap();
    other.container_id = "other".into();
    cache.write(&other).unwrap();
    fs::write(cache.results_dir().join("junk-other-x"), b"nope").unwrap();
    // A writer killed before its rename left a full entry under a temporary name.
    fs::copy(
        cache.results_dir().join("fixture-net-other-eth0"),
        cache.results_dir().join(".fixture-net-other-eth0.tmp4242"),
    )
    .unwrap();
    assert_eq!(cache.list(None).unwrap().len(), 2);
    let mine = cache.list(Some("other")).unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].container_id, "other");
    assert!(cache.list(Some("nobody")).unwrap().is_empty());
    let empty = ResultCache::new("/nonexistent/plumb-test");
    assert!(empty.list(None).unwrap().is_empty());
}

/// The names of what `dir` holds, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn the_temporary_files_left_beside_a_path_are_removed_and_nothing_else() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("c1.json");
    for name in [
        ".c1.json.tmp41",
        ".c1.json.tmp7",
        ".c1.json.tmp",
        ".c1.json.tmpx",
        ".c1.json.tmp1.json.tmp3",
        ".c2.json.tmp41",
        "c1.json",
    ] {
        fs::write(d.path().join(name), "{}").unwrap();
    }
    fs::create_dir(d.path().join(".c1.json.tmp9")).unwrap();
    let removed = remove_staged(&path);
    assert_eq!(
        removed,
        [
            d.path().join(".c1.json.tmp41"),
            d.path().join(".c1.json.tmp7")
        ]
    );
    assert_eq!(
        names_in(d.path()),
        [
            ".c1.json.tmp",
            ".c1.json.tmp1.json.tmp3",
            ".c1.json.tmp9",
            ".c1.json.tmpx",
            ".c2.json.tmp41",
            "c1.json"
        ]
    );
}

#[test]
fn an_entry_name_libcni_can_write_can_be_staged_and_its_leftovers_found() {
    // 244 to 255 bytes: libcni writes such an entry in place; `.<name>.tmp<pid>` would
    // pass the 255-byte limit and fail with ENAMETOOLONG.
    let d = tempfile::tempdir().unwrap();
    let cache = ResultCache::new(d.path());
    let network = "n".repeat(255 - 1 - 64 - 1 - "eth0".len());
    let id = "c".repeat(64);
    let path = cache.path(&network, &id, "eth0").unwrap();
    assert_eq!(path.file_name().unwrap().len(), 255);
    let entry = CachedAttachment {
        network_name: network.clone(),
        container_id: id.clone(),
        if_name: "eth0".into(),
        config: br#"{"cniVersion":"1.0.0","name":"n","plugins":[]}"#.to_vec(),
        netns: "/var/run/netns/p".into(),
        cni_args: Vec::new(),
        capability_args: Map::new(),
        result: Some(json!({"cniVersion": "1.0.0"})),
    };
    cache.write(&entry).unwrap();
    assert_eq!(cache.read(&network, &id, "eth0").unwrap(), Some(entry));
    assert_eq!(
        names_in(&cache.results_dir()),
        [format!("{network}-{id}-eth0")]
    );

    // A writer killed before its rename leaves its temporary file; removing the missing
    // entry removes it, and the temporary file of another long entry stays.
    let other = cache
        .path(&format!("{network}x"), &id[1..], "eth0")
        .unwrap();
    fs::remove_file(&path).unwrap();
    let left = stage(&path, b"{}").unwrap();
    let others = stage(&other, b"{}").unwrap();
    std::mem::forget((left, others));
    let names = names_in(&cache.results_dir());
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.len() <= 255 && is_staged_name(n)));
    cache.remove(&network, &id, "eth0").unwrap();
    let kept = names_in(&cache.results_dir());
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        staged_target(&kept[0]),
        Some(&*staged_base(&other.file_name().unwrap().to_string_lossy()))
    );
    // A short name keeps the readable form; a long one is cut between characters.
    assert_eq!(staged_base("net-a-c1-eth0"), "net-a-c1-eth0");
    let accents = "é".repeat(150);
    let cut = staged_base(&accents);
    assert!(cut.len() + 15 <= 255 && cut.starts_with("éé"), "{cut}");
}

#[test]
fn sweep_removes_only_old_temporary_files_of_stage() {
    let d = tempfile::tempdir().unwrap();
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let old = |name: &str| {
        let f = fs::File::create(d.path().join(name)).unwrap();
        f.set_modified(hour_ago).unwrap();
    };
    // Left by killed writers: removed.
    old(".abc.json.tmp4242");
    old(".net-a-abc-eth0.tmp7");
    // Not stage's names, or not old, or not a file: kept.
    old("abc.json");
    old(".abc.json.tmp");
    old(".abc.json.tmp12x");
    old("abc.json.tmp12");
    old(".hidden");
    fs::File::create(d.path().join(".fresh.json.tmp99")).unwrap();
    fs::create_dir(d.path().join(".dir.tmp1")).unwrap();
    let removed = sweep_staged(d.path(), std::time::Duration::from_secs(600)).unwrap();
    assert_eq!(
        removed,
        [
            d.path().join(".abc.json.tmp4242"),
            d.path().join(".net-a-abc-eth0.tmp7")
        ]
    );
    assert_eq!(
        names_in(d.path()),
        [
            ".abc.json.tmp",
            ".abc.json.tmp12x",
            ".dir.tmp1",
            ".fresh.json.tmp99",
            ".hidden",
            "abc.json",
            "abc.json.tmp12"
        ]
    );
    assert!(
        sweep_staged(&d.path().join("missing"), std::time::Duration::ZERO)
            .unwrap()
            .is_empty()
    );
}
