//! A kubeconfig for plumb on the node from the daemon's own service account, kept current:
//! `plumb daemon --write-kubeconfig PATH` writes PATH, with the service account's token and CA
//! certificate beside it (`token`, `ca.crt`), and copies them again whenever the kubelet rotates
//! them (looked at every second); once a token bound to the node can be had (`node_token`), it is
//! written in the copy's place, since the pod's own token dies with the pod.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use cni::error::{CniError, ErrorCode};

use crate::daemon::conf_writer::Step;
use crate::daemon::node_token::{Event, MAX_CREDENTIAL, NodeToken};

/// The service account's files copied beside the kubeconfig, under their own names.
const CREDENTIALS: [&str; 2] = ["token", "ca.crt"];

/// Writes and keeps a kubeconfig and the credentials it names. Multus's thin installer wrote
/// its kubeconfig once, with the token inside it, so bound tokens expired under it and pods
/// failed with `Unauthorized` an hour or a year later (its most reported failure,
/// docs/multus-behaviour.md §5.1). This kubeconfig names its token by file (`tokenFile`), which
/// plumb reads again on every call, and the file is kept current. The API server is the one a
/// pod reaches, `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, as Multus's.
#[derive(Debug)]
pub struct KubeconfigWriter {
    path: PathBuf,
    service_account: PathBuf,
    server: String,
    /// The last reason for waiting, so that each is said once.
    waiting: Option<String>,
    /// Whether the kubeconfig and its credentials have been found written once.
    written: bool,
    /// The token bound to the node, written in place of the pod's copy once issued.
    node_token: NodeToken,
    /// How often the node-bound token in use is shown to the API server; never when `None`.
    token_check: Option<Duration>,
    /// Why no node-bound token could be had, as last said.
    refused: Option<String>,
    /// What to say in the daemon's log besides the step (`take_notes`).
    notes: Vec<String>,
    /// Whether a token written by a daemon before this one has been looked at (`adopt`).
    looked_at_old: bool,
    /// The kubeconfig the daemon asks for node-bound tokens through, with its pod's own token,
    /// once written (in the daemon's temporary directory, removed when the writer goes).
    own_kubeconfig: Option<PathBuf>,
}

impl Drop for KubeconfigWriter {
    fn drop(&mut self) {
        if let Some(own) = &self.own_kubeconfig {
            let _ = std::fs::remove_file(own);
        }
    }
}

impl KubeconfigWriter {
    /// A writer of `path` from the service account in `service_account`, for the API server
    /// that `env` (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`) names.
    pub fn new(
        path: PathBuf,
        service_account: PathBuf,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<KubeconfigWriter, CniError> {
        let server = in_cluster_server(&env).map_err(|name| {
            CniError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "--write-kubeconfig: {name} is not set: the API server's address comes \
                     from the environment Kubernetes gives a pod (run the daemon in one)"
                ),
            )
        })?;
        let Some(name) = path.file_name().filter(|_| path.parent().is_some()) else {
            return Err(CniError::new(
                ErrorCode::InvalidConfig,
                format!("--write-kubeconfig {}: not a file's path", path.display()),
            ));
        };
        // The credentials go beside it under these names: the kubeconfig would overwrite one
        // and name itself as it, and every call would fail.
        if CREDENTIALS.iter().any(|c| name == *c) {
            return Err(CniError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "--write-kubeconfig {}: the service account's {} is copied to that path \
                     (beside the kubeconfig): give the kubeconfig another name",
                    path.display(),
                    name.to_string_lossy()
                ),
            ));
        }
        Ok(KubeconfigWriter {
            path,
            service_account,
            server,
            waiting: None,
            written: false,
            node_token: NodeToken::default(),
            token_check: Some(crate::daemon::node_token::PROBE_EVERY),
            refused: None,
            notes: Vec::new(),
            looked_at_old: false,
            own_kubeconfig: None,
        })
    }

    /// Shows the node-bound token in use to the API server this often (`None`: never), instead
    /// of every [`crate::daemon::node_token::PROBE_EVERY`].
    pub fn checking_token_every(mut self, every: Option<Duration>) -> Self {
        self.token_check = every;
        self
    }

    /// The kubeconfig written.
    pub fn output(&self) -> &Path {
        &self.path
    }

    /// Every file written: the credentials and the kubeconfig.
    pub fn outputs(&self) -> Vec<PathBuf> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        (CREDENTIALS.iter().map(|c| dir.join(c)))
            .chain(std::iter::once(self.path.clone()))
            .collect()
    }

    /// Whether a step has found the kubeconfig and its credentials written. Not [`Step::Same`]
    /// alone, which is also a reason to wait said already.
    pub fn written(&self) -> bool {
        self.written
    }

    /// What there is to say besides the steps: why no token bound to the node could be had,
    /// once per reason.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// One look: writes the token (the one bound to the node once issued, else a copy of the
    /// service account's) and the CA certificate beside the kubeconfig when they differ from
    /// what is there, and the kubeconfig when it differs; then asks for a token bound to the
    /// node when one is due (`node_token`).
    pub fn step(&mut self) -> Step {
        let (now, wall) = (Instant::now(), SystemTime::now());
        // The pod's token, read once for this look: copied (`write`) and read for whom it
        // names.
        let pod_token = self.read_credential("token");
        let pod = match &pod_token {
            Ok(token) => crate::daemon::node_token::identity(&String::from_utf8_lossy(token))
                .map_err(|why| format!("{}: {why}", self.service_account.join("token").display())),
            Err(why) => Err(why.clone()),
        };
        // Looked at once this pod's token can be read: before, nothing could be compared.
        if !self.looked_at_old
            && let Ok(pod) = &pod
        {
            self.looked_at_old = true;
            if let Ok(old) = cni::files::read_bounded(&self.token_on_node(), MAX_CREDENTIAL) {
                self.node_token
                    .adopt(&String::from_utf8_lossy(&old), pod, (now, wall));
            }
        }
        let event = self.node_token.poll(now);
        self.note(event, now);
        let event = self.node_token.poll_probe();
        self.note(event, now);
        if let Ok(pod) = &pod {
            let event = self.node_token.check(pod);
            self.note(event, now);
        }
        let step = self.write(now, pod_token);
        let written = matches!(step, Step::Same | Step::Wrote(_));
        self.written |= written;
        if let (true, Some(every)) = (written, self.token_check) {
            let token = self.token_on_node();
            self.node_token
                .probe_if_due(now, every, (&self.path, &token));
        }
        if written && self.node_token.due(now) {
            let event = match self.own_kubeconfig() {
                Ok(own) => {
                    let pod = pod.as_ref().map_err(String::as_str);
                    self.node_token.request_if_due(now, pod, &own)
                }
                Err(why) => Some(Event::Refused(why)),
            };
            self.note(event, now);
        }
        step.said_once(&mut self.waiting)
    }

    /// The token written beside the kubeconfig, which the kubeconfig names.
    fn token_on_node(&self) -> PathBuf {
        self.path.with_file_name(CREDENTIALS[0])
    }

    /// The service account's file `name`, bounded, not empty; or what is wrong with it.
    fn read_credential(&self, name: &str) -> Result<Vec<u8>, String> {
        let path = self.service_account.join(name);
        let bytes = cni::files::read_bounded(&path, MAX_CREDENTIAL)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(format!("{} is empty", path.display()));
        }
        Ok(bytes)
    }

    /// The kubeconfig to ask for tokens through: the pod's own token and CA certificate,
    /// named where the daemon reads them, never the token written on the node (which must not
    /// be able to renew itself). Written again at every look that may ask (at most once a
    /// minute asks): a file removed meanwhile is not missed for good.
    fn own_kubeconfig(&mut self) -> Result<PathBuf, String> {
        let own = std::env::temp_dir().join(format!(
            "plumb-daemon-{}-service-account.kubeconfig",
            std::process::id()
        ));
        let kubeconfig = plumb_cluster::kube::token_kubeconfig(
            &self.server,
            &self.service_account.join("ca.crt").to_string_lossy(),
            &self.service_account.join("token").to_string_lossy(),
        );
        let bytes = kubeconfig.to_string().into_bytes();
        if !cni::files::holds(&own, &bytes) {
            cni::cache::write_atomic(&own, &bytes).map_err(|e| {
                format!(
                    "{} (the daemon needs a writable temporary directory: with \
                     readOnlyRootFilesystem, an emptyDir at /tmp)",
                    e.msg
                )
            })?;
        }
        self.own_kubeconfig = Some(own.clone());
        Ok(own)
    }

    /// A refusal said once per reason, and again after a token was issued.
    fn note(&mut self, event: Option<Event>, now: Instant) {
        match event {
            Some(Event::Refused(why)) if self.refused.as_ref() != Some(&why) => {
                let note = match self.node_token.current(now) {
                    // Refused once: its end is the next check, not its expiry.
                    Some(in_use) if in_use.doubted => format!(
                        "{}: no new token bound to the node: {why}; the one written, which the \
                         API server refused once, stays in use unless refused again at its next \
                         check, then a copy of the pod's",
                        self.path.display()
                    ),
                    Some(in_use) => format!(
                        "{}: no new token bound to the node: {why}; the one written stays in use \
                         for {} min more, then a copy of the pod's",
                        self.path.display(),
                        in_use.usable_until.duration_since(now).as_secs() / 60
                    ),
                    None => format!(
                        "{}: no token bound to the node: {why}; the token written is a copy of \
                         the pod's, which the API server refuses once this pod is gone \
                         (docs/daemon.md; deploy/node-token.yaml grants the request)",
                        self.path.display()
                    ),
                };
                self.notes.push(note);
                self.refused = Some(why);
            }
            Some(Event::Issued) => self.refused = None,
            Some(Event::Doubted(said)) => {
                self.notes.push(format!("{}: {said}", self.path.display()));
                // The new request's answer is said, even if an earlier one said the same.
                self.refused = None;
            }
            Some(Event::Unchecked(said)) => {
                self.notes.push(format!("{}: {said}", self.path.display()))
            }
            _ => {}
        }
    }

    /// Writes what differs, the token being the pod's `pod_token` as read for this look,
    /// unless a node-bound one is in use.
    fn write(&self, now: Instant, pod_token: Result<Vec<u8>, String>) -> Step {
        let dir = self.path.parent().expect("checked in new");
        let [token, ca] = CREDENTIALS;
        let mut credentials = match (pod_token, self.read_credential(ca)) {
            (Ok(t), Ok(c)) => [(token, t), (ca, c)],
            (Err(why), _) | (_, Err(why)) => return Step::Waiting(why),
        };
        let bound = self.node_token.current(now);
        if let Some(issued) = bound {
            credentials[0].1 = issued.token.clone().into_bytes();
        }
        if let Err(e) = std::fs::create_dir_all(dir) {
            return Step::Waiting(format!("cannot make {}: {e}", dir.display()));
        }
        // Relative: kubectl, kube-rs and plumb read such names from the kubeconfig's directory,
        // so the file holds no path of the daemon's container and the node reads it wherever
        // the node has it.
        let kubeconfig = plumb_cluster::kube::token_kubeconfig(&self.server, "ca.crt", "token");
        let mut kubeconfig = serde_json::to_vec_pretty(&kubeconfig).expect("JSON serializes");
        kubeconfig.push(b'\n');
        let file_name = self.path.file_name().expect("checked in new").to_owned();
        let mut changed = Vec::new();
        // The credentials first: the kubeconfig never names a file not yet there.
        for (name, bytes) in credentials
            .iter()
            .map(|(n, b)| (std::ffi::OsString::from(n), b))
            .chain(std::iter::once((file_name, &kubeconfig)))
        {
            let path = dir.join(&name);
            if cni::files::holds(&path, bytes) {
                continue;
            }
            if let Err(e) = cni::cache::write_durable(&path, bytes) {
                // The error names the file already.
                return Step::Waiting(e.msg);
            }
            changed.push(name.to_string_lossy().into_owned());
        }
        if changed.is_empty() {
            return Step::Same;
        }
        let from = match bound {
            Some(i) => format!(
                "{} with a token bound to node {} (serviceaccount {}, used for {} min)",
                changed.join(", "),
                i.node,
                i.service_account,
                i.usable_until.duration_since(now).as_secs() / 60
            ),
            None => format!(
                "{} from the service account in {}",
                changed.join(", "),
                self.service_account.display()
            ),
        };
        Step::Wrote(format!("{from}, for {}", self.server))
    }
}

/// The API server a pod reaches, from the environment Kubernetes gives it
/// (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`), as client-go's in-cluster
/// configuration takes it; or the name of the variable that is not set.
pub(super) fn in_cluster_server(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, &'static str> {
    let var = |name: &'static str| env(name).filter(|v| !v.is_empty()).ok_or(name);
    let (host, port) = (
        var("KUBERNETES_SERVICE_HOST")?,
        var("KUBERNETES_SERVICE_PORT")?,
    );
    // An IPv6 address goes in brackets in a URL.
    Ok(if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(host: &'static str) -> impl Fn(&str) -> Option<String> {
        move |name| match name {
            "KUBERNETES_SERVICE_HOST" => Some(host.to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        }
    }

    #[test]
    fn a_fifo_in_place_of_a_written_file_is_replaced_without_waiting() {
        // The writer looks at the files every second on the daemon's serving thread: a FIFO
        // read there (a stray mkfifo, or root's mistake) held every call the daemon served.
        let d = tempfile::tempdir().unwrap();
        let sa = d.path().join("sa");
        std::fs::create_dir(&sa).unwrap();
        std::fs::write(sa.join("token"), "t1").unwrap();
        std::fs::write(sa.join("ca.crt"), "CA").unwrap();
        let path = d.path().join("plumb.d/plumb.kubeconfig");
        let mut w = KubeconfigWriter::new(path.clone(), sa, env("10.0.0.1")).unwrap();
        assert!(matches!(w.step(), Step::Wrote(_)));
        let token = d.path().join("plumb.d/token");
        for f in [&token, &path] {
            std::fs::remove_file(f).unwrap();
            nix::unistd::mkfifo(f, nix::sys::stat::Mode::S_IRWXU).unwrap();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(w.step());
        });
        let step = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the step waited on a FIFO");
        assert!(
            matches!(&step, Step::Wrote(why) if why.starts_with("token, plumb.kubeconfig from")),
            "{step:?}"
        );
        assert_eq!(std::fs::read(&token).unwrap(), b"t1");
        assert!(std::fs::metadata(&path).unwrap().is_file());
    }

    #[test]
    fn the_credentials_are_copied_beside_the_kubeconfig_and_again_when_rotated() {
        let d = tempfile::tempdir().unwrap();
        let sa = d.path().join("sa");
        std::fs::create_dir(&sa).unwrap();
        let path = d.path().join("net.d/plumb.d/plumb.kubeconfig");
        let mut w = KubeconfigWriter::new(path.clone(), sa.clone(), env("fd00::1")).unwrap();
        // No token yet (the kubelet mounts it): said once, nothing written.
        assert!(matches!(w.step(), Step::Waiting(why) if why.contains("token")));
        assert_eq!(w.step(), Step::Same);
        assert!(!path.exists());

        std::fs::write(sa.join("token"), "t1").unwrap();
        std::fs::write(sa.join("ca.crt"), "CA").unwrap();
        assert!(
            matches!(w.step(), Step::Wrote(why) if why.starts_with("token, ca.crt, plumb.kubeconfig from"))
        );
        let kubeconfig: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let cluster = &kubeconfig["clusters"][0]["cluster"];
        assert_eq!(cluster["server"], "https://[fd00::1]:443");
        assert_eq!(cluster["certificate-authority"], "ca.crt");
        assert_eq!(kubeconfig["users"][0]["user"]["tokenFile"], "token");
        let dir = path.parent().unwrap();
        assert_eq!(std::fs::read(dir.join("token")).unwrap(), b"t1");
        assert_eq!(std::fs::read(dir.join("ca.crt")).unwrap(), b"CA");
        assert_eq!(w.step(), Step::Same);

        // The kubelet rotates the token: the copy follows, nothing else is written.
        std::fs::write(sa.join("token"), "t2").unwrap();
        assert!(matches!(w.step(), Step::Wrote(why) if why.starts_with("token from")));
        assert_eq!(std::fs::read(dir.join("token")).unwrap(), b"t2");
        // An empty token (mid-rotation) is not copied over a good one.
        std::fs::write(sa.join("token"), "").unwrap();
        assert!(matches!(w.step(), Step::Waiting(why) if why.contains("is empty")));
        assert_eq!(std::fs::read(dir.join("token")).unwrap(), b"t2");

        // A file that cannot be written (a directory in its place) is said once, by name.
        std::fs::write(sa.join("token"), "t3").unwrap();
        std::fs::remove_file(dir.join("token")).unwrap();
        std::fs::create_dir(dir.join("token")).unwrap();
        let Step::Waiting(why) = w.step() else {
            panic!("written over a directory")
        };
        assert_eq!(why.matches("cannot write").count(), 1, "{why}");
        assert!(
            why.contains(&dir.join("token").display().to_string()),
            "{why}"
        );
    }

    #[test]
    fn a_kubeconfig_named_as_a_credential_is_refused() {
        for name in ["token", "ca.crt"] {
            let path = PathBuf::from("/etc/cni/net.d/plumb.d").join(name);
            let e = KubeconfigWriter::new(path, "/sa".into(), env("10.96.0.1")).unwrap_err();
            assert!(
                e.msg.contains(&format!(
                    "the service account's {name} is copied to that path"
                )),
                "{e}"
            );
        }
        KubeconfigWriter::new("/d/token.kubeconfig".into(), "/sa".into(), env("10.96.0.1"))
            .unwrap();
    }

    #[test]
    fn outside_a_pod_the_daemon_says_what_is_missing() {
        let e = KubeconfigWriter::new("/k".into(), "/sa".into(), |_| None).unwrap_err();
        assert!(e.msg.contains("KUBERNETES_SERVICE_HOST is not set"), "{e}");
    }

    #[test]
    fn why_no_node_bound_token_is_said_once_per_reason_and_again_after_one_was_issued() {
        let mut w =
            KubeconfigWriter::new("/d/plumb.kubeconfig".into(), "/sa".into(), env("10.96.0.1"))
                .unwrap();
        let now = Instant::now();
        let refused = |why: &str| Some(Event::Refused(why.into()));
        w.note(refused("403 Forbidden"), now);
        w.note(refused("403 Forbidden"), now);
        assert_eq!(w.take_notes().len(), 1);
        w.note(refused("503"), now);
        w.note(None, now);
        let notes = w.take_notes();
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with(
                "/d/plumb.kubeconfig: no token bound to the node: 503; the \
                 token written is a copy of the pod's"
            ),
            "{notes:?}"
        );
        w.note(Some(Event::Issued), now);
        w.note(refused("503"), now);
        assert_eq!(w.take_notes().len(), 1);
        // The token in use refused once: the new request's refusal is said though said
        // before, and with the end the next check may bring, not its expiry.
        w.note(Some(Event::Doubted("refused once".into())), now);
        w.note(refused("503"), now);
        let notes = w.take_notes();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert_eq!(notes[0], "/d/plumb.kubeconfig: refused once");
        assert!(
            notes[1].starts_with("/d/plumb.kubeconfig: no token bound to the node: 503;"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_node_bound_token_on_the_node_is_kept_though_the_pods_token_came_late() {
        use crate::daemon::node_token::tests::{claims, epoch, jwt};
        let d = tempfile::tempdir().unwrap();
        let sa = d.path().join("sa");
        std::fs::create_dir(&sa).unwrap();
        let path = d.path().join("net.d/plumb.d/plumb.kubeconfig");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let fresh = epoch(SystemTime::now()) + 20 * 3600;
        let on_node = jwt(&claims(Some("node-1"), false, fresh));
        let token = path.parent().unwrap().join("token");
        std::fs::write(&token, &on_node).unwrap();
        // The API server named cannot be reached: the renewal fails in the background.
        let mut w = KubeconfigWriter::new(path.clone(), sa.clone(), env("192.0.2.1")).unwrap();
        assert!(matches!(w.step(), Step::Waiting(why) if why.contains("token")));
        std::fs::write(sa.join("token"), jwt(&claims(Some("node-1"), true, fresh))).unwrap();
        std::fs::write(sa.join("ca.crt"), "CA").unwrap();
        assert!(
            matches!(w.step(), Step::Wrote(why) if why.contains("with a token bound to node node-1"))
        );
        assert_eq!(std::fs::read_to_string(&token).unwrap(), on_node);
    }
}
