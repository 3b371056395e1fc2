//! The kubeconfig as plumb reads it: files bounded, a proxy refused, exec credential plugins
//! and their deadline, certificate files inlined, relative paths resolved.

use super::*;

#[test]
fn a_kubeconfig_or_token_file_that_is_no_small_regular_file_is_refused_at_once() {
    // A kubeconfig path that names a huge file, a device or a FIFO (a mistake in
    // the configuration, a volume mounted wrong) must not make the CNI call read without
    // end, hold it all in memory, or wait for a writer: code 7, naming the file and why.
    let (api, dir, _) = cluster(Duration::from_secs(5));
    let huge = dir.path().join("huge");
    let mut text = std::fs::read_to_string(dir.path().join("kubeconfig")).unwrap();
    text.push_str(&format!("# {}\n", "x".repeat(2 << 20)));
    std::fs::write(&huge, &text).unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    let odd_utf16 = dir.path().join("odd-utf16");
    std::fs::write(&odd_utf16, [0xFF, 0xFE, b'a']).unwrap();
    for (path, why) in [
        (huge.as_path(), "larger than 1 MiB"),
        (Path::new("/dev/zero"), "not a regular file"),
        (fifo.as_path(), "not a regular file"),
        (odd_utf16.as_path(), "UTF-16"),
    ] {
        let started = Instant::now();
        let e = in_time(path);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{}",
            path.display()
        );
        assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
        assert!(
            e.msg.contains(&format!("kubeconfig {}", path.display())) && e.msg.contains(why),
            "{e}"
        );
    }
    // The same for the token file it names.
    let token = dir.path().join("token");
    std::fs::write(&token, api.token().unwrap()).unwrap();
    let kubeconfig = api.write_kubeconfig(
        dir.path().join("kc-token-file"),
        KubeconfigUser::TokenFile(&token),
    );
    for (path, why) in [
        (huge.as_path(), "larger than 1 MiB"),
        (Path::new("/dev/zero"), "not a regular file"),
        (fifo.as_path(), "not a regular file"),
    ] {
        let text = std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .replace(&token.display().to_string(), &path.display().to_string());
        let bad = dir.path().join("kc-bad-token-file");
        std::fs::write(&bad, text).unwrap();
        let e = in_time(&bad);
        assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
        assert!(
            e.msg.contains(&format!("tokenFile {}", path.display())) && e.msg.contains(why),
            "{e}"
        );
    }
}

/// The error of a client from `kubeconfig`, which must come within seconds.
fn in_time(kubeconfig: &Path) -> CniError {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = kubeconfig.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(KubeCluster::with_budget(&path, Duration::from_secs(5)).err());
    });
    rx.recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("{}: no answer within 5 s", kubeconfig.display()))
        .unwrap_or_else(|| panic!("{}: accepted", kubeconfig.display()))
}

/// `kubeconfig` (written for `KubeconfigUser::Token`) with its user replaced by an exec
/// credential plugin running `script` in sh, written beside it as `name`.
#[test]
fn a_kubeconfig_naming_a_proxy_is_refused_saying_so() {
    // Not kube's message, which names its cargo feature ("kube/http-proxy").
    let (_api, dir, _) = cluster(Duration::from_secs(5));
    let kubeconfig = dir.path().join("kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let proxied = kubeconfig.with_file_name("kc-proxied");
    std::fs::write(
        &proxied,
        text.replace(
            "    server: ",
            "    proxy-url: http://127.0.0.1:3128\n    server: ",
        ),
    )
    .unwrap();
    let e = KubeCluster::with_budget(&proxied, Duration::from_secs(5))
        .err()
        .expect("refused");
    assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
    assert!(
        e.msg
            .contains("proxy-url http://127.0.0.1:3128: plumb does not connect through a proxy"),
        "{e}"
    );
    // Refused before its user's credential plugin runs: one that hangs does not turn the
    // configuration error into a timeout.
    let with_exec = with_exec_user(&proxied, "kc-proxied-exec", "sleep 30");
    let started = Instant::now();
    let e = KubeCluster::with_budget(&with_exec, Duration::from_secs(5))
        .err()
        .expect("refused");
    assert!(started.elapsed() < Duration::from_secs(2), "{e}");
    assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
}

#[test]
fn an_exec_credential_plugin_may_give_a_client_certificate() {
    // plumb runs the plugin itself and puts its credential in the kubeconfig: a client
    // certificate and key (PEM, as the protocol gives them) work as a token does.
    let (api, dir, _) = cluster(Duration::from_secs(5));
    let with_cert = api.write_kubeconfig(
        dir.path().join("kc-cert"),
        KubeconfigUser::ClientCertificate,
    );
    let text = std::fs::read_to_string(&with_cert).unwrap();
    let pem = |key: &str| String::from_utf8(data_line(&text, key).1).unwrap();
    let credential = json!({"apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential", "status": {
            "clientCertificateData": pem("client-certificate"),
            "clientKeyData": pem("client-key")}});
    let answer = dir.path().join("credential.json");
    std::fs::write(&answer, credential.to_string()).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let execs = with_exec_user(
        &kubeconfig,
        "kc-exec-cert",
        &format!("cat {}", answer.display()),
    );
    let c = KubeCluster::with_budget(&execs, Duration::from_secs(5)).unwrap();
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
}

#[test]
fn a_removed_auth_provider_is_refused_before_it_runs_anything() {
    // kube-rs runs gcp's `cmd-path` with no time limit (a `sleep 100` held the call until
    // the runtime killed it); client-go removed gcp and azure in 1.26, so Multus refuses
    // them too. Refused at once, naming the provider and what to use instead.
    let (_api, dir, _) = cluster(Duration::from_secs(5));
    let kubeconfig = dir.path().join("kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let user = text.find("  user:\n    token:").unwrap();
    for name in ["gcp", "azure"] {
        let path = kubeconfig.with_file_name(format!("kc-{name}"));
        let with_provider = format!(
            "{}  user:\n    auth-provider:\n      name: {name}\n      config:\n        \
             cmd-path: /bin/sleep\n        cmd-args: \"100\"\n",
            &text[..user]
        );
        std::fs::write(&path, with_provider).unwrap();
        let started = Instant::now();
        let e = KubeCluster::with_budget(&path, Duration::from_secs(5))
            .err()
            .expect("refused");
        assert!(started.elapsed() < Duration::from_secs(2), "{e}");
        assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
        assert!(
            e.msg.contains(&format!(
                "the \"{name}\" auth-provider was removed from Kubernetes clients in 1.26"
            )),
            "{e}"
        );
    }
}

fn with_exec_user(kubeconfig: &Path, name: &str, script: &str) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let user = text.find("  user:\n    token:").unwrap();
    let exec = format!(
        "{}  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      \
         command: /bin/sh\n      args: [\"-c\", {}]\n",
        &text[..user],
        serde_json::to_string(script).unwrap()
    );
    let path = kubeconfig.with_file_name(name);
    std::fs::write(&path, exec).unwrap();
    path
}

#[test]
fn an_exec_credential_plugin_that_does_not_return_fails_the_call_within_its_budget() {
    // kube-rs runs a user's exec plugin while it builds the client, with no timeout: one
    // that hangs (its cloud's metadata endpoint down) held the CNI call until the runtime
    // killed it, with no error to show. Now: code 11 within the budget, naming the file.
    let (api, dir, _) = cluster(Duration::from_secs(5));
    let kubeconfig = dir.path().join("kubeconfig");
    let hangs = with_exec_user(&kubeconfig, "kc-exec-hangs", "sleep 30");
    let (tx, rx) = std::sync::mpsc::channel();
    let path = hangs.clone();
    let started = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(KubeCluster::with_budget(&path, Duration::from_secs(2)).err());
    });
    let e = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no answer within 10 s")
        .expect("accepted");
    assert!(started.elapsed() < Duration::from_secs(4), "{e}");
    assert_eq!(e.kind(), ErrorCode::TryAgainLater, "{e}");
    assert!(
        e.msg.contains(&hangs.display().to_string()) && e.msg.contains("exec"),
        "{e}"
    );
    // A plugin that answers is used as before.
    let credential = json!({"apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential", "status": {"token": api.token().unwrap()}});
    let answers = with_exec_user(
        &kubeconfig,
        "kc-exec-answers",
        &format!("echo '{credential}'"),
    );
    let c = KubeCluster::with_budget(&answers, Duration::from_secs(5)).unwrap();
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
}

/// The line of kubeconfig `text` giving `key` inline (`<key>-data: …`), and what it holds.
fn data_line<'a>(text: &'a str, key: &str) -> (&'a str, Vec<u8>) {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{key}-data:")))
        .unwrap();
    let data = line.split_once(':').unwrap().1.trim();
    (line, cni::base64::decode(data).unwrap())
}

#[test]
fn certificate_and_key_files_are_read_bounded_into_the_kubeconfig() {
    // The cluster's CA, the client certificate and its key named as files work as their
    // -data forms do; a FIFO or a device in their place fails at once with code 7 naming
    // the field, where kube-rs would wait for a writer or read on without end.
    let (api, dir, _) = cluster(Duration::from_secs(5));
    let kubeconfig = api.write_kubeconfig(
        dir.path().join("kc-cert"),
        KubeconfigUser::ClientCertificate,
    );
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let keys = ["certificate-authority", "client-certificate", "client-key"];
    let mut with_files = text.clone();
    for key in keys {
        let (line, data) = data_line(&text, key);
        let file = dir.path().join(key);
        std::fs::write(&file, data).unwrap();
        let indent = &line[..line.len() - line.trim_start().len()];
        with_files = with_files.replace(line, &format!("{indent}{key}: {}", file.display()));
    }
    let files = dir.path().join("kc-files");
    std::fs::write(&files, &with_files).unwrap();
    let c = KubeCluster::with_budget(&files, Duration::from_secs(5)).unwrap();
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");

    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    for key in keys {
        for bad in [fifo.as_path(), Path::new("/dev/zero")] {
            let text = with_files.replace(
                &dir.path().join(key).display().to_string(),
                &bad.display().to_string(),
            );
            let kc = dir.path().join("kc-bad");
            std::fs::write(&kc, text).unwrap();
            let e = in_time(&kc);
            assert_eq!(e.kind(), ErrorCode::InvalidConfig, "{e}");
            assert!(
                e.msg.contains(&format!("{key} {}", bad.display()))
                    && e.msg.contains("not a regular file"),
                "{key}: {e}"
            );
        }
    }
}

#[test]
fn relative_paths_in_the_kubeconfig_are_its_directorys() {
    // As kubectl and kube-rs read them: a certificate-authority or tokenFile named
    // relatively is beside the kubeconfig, whatever the plugin's working directory.
    let (api, dir, _) = cluster(Duration::from_secs(5));
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("token"), api.token().unwrap()).unwrap();
    let kubeconfig = api.write_kubeconfig(
        sub.join("kubeconfig"),
        KubeconfigUser::TokenFile(&sub.join("token")),
    );
    let mut text = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .replace(&sub.join("token").display().to_string(), "token");
    if let Some(ca) = api.ca_pem() {
        std::fs::write(sub.join("ca.crt"), ca).unwrap();
        let data = text
            .lines()
            .find(|l| l.trim_start().starts_with("certificate-authority-data:"))
            .unwrap()
            .to_string();
        text = text.replace(&data, "    certificate-authority: ca.crt");
    }
    std::fs::write(&kubeconfig, text).unwrap();
    let c = KubeCluster::with_budget(&kubeconfig, Duration::from_secs(5)).unwrap();
    assert_eq!(c.pod("default", "p", false).unwrap().unwrap().name, "p");
}
