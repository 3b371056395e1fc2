//! The files an API client was built from, with what each held then: the kubeconfig and every
//! file of it that plumb read (the current user's token file, certificates and keys, the
//! cluster's CA). The daemon keeps a client across calls, and uses it again only while every one
//! of these files still holds exactly what it held when the client was built ([`Sources`]).

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cni::files;

/// In thin mode a client lives for one CNI call, so every call reads these files anew and a
/// rotated service-account token is always the current one. A client the daemon kept is used
/// again only while [`Sources::unchanged`]: a token rotated, a certificate renewed or the
/// kubeconfig rewritten (Multus's entrypoint rewrites it) gives the next call a new client; and
/// so does a credential an exec plugin gave that is about to expire.
#[derive(Debug, Default)]
pub struct Sources {
    files: Vec<(PathBuf, Vec<u8>)>,
    /// When the credential an exec plugin gave expires (`exec_credential`).
    valid_until: Option<SystemTime>,
}

/// How long before its credential expires a client is no longer used: a call that took it
/// just before would see it refused part-way.
const EXPIRES_SOON: Duration = Duration::from_secs(60);

impl Sources {
    /// The bytes of `path` (at most `limit`, as [`files::read_bounded`]), remembered.
    pub fn read(&mut self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        let bytes = files::read_bounded(path, limit)?;
        self.files.push((path.to_path_buf(), bytes.clone()));
        Ok(bytes)
    }

    /// The credential expires at `at`.
    pub fn valid_until(&mut self, at: SystemTime) {
        self.valid_until = Some(at);
    }

    /// Whether every file still holds what it held when it was read, and the credential is not
    /// about to expire. A file gone, unreadable or grown counts as changed.
    pub fn unchanged(&self) -> bool {
        let expiring = self
            .valid_until
            .is_some_and(|at| SystemTime::now() + EXPIRES_SOON >= at);
        !expiring
            && self.files.iter().all(|(path, was)| {
                files::read_bounded(path, was.len() as u64).is_ok_and(|now| now == *was)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_rewritten_removed_or_grown_is_a_change_and_the_same_bytes_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "abc").unwrap();
        let mut sources = Sources::default();
        assert_eq!(sources.read(&token, 100).unwrap(), b"abc");
        assert!(sources.unchanged());
        // Written again with the same bytes (a kubeconfig regenerated identically): unchanged.
        std::fs::write(&token, "abc").unwrap();
        assert!(sources.unchanged());
        std::fs::write(&token, "abd").unwrap();
        assert!(!sources.unchanged(), "a rotated token is a change");
        std::fs::write(&token, "abcd").unwrap();
        assert!(!sources.unchanged(), "a longer file is a change");
        std::fs::remove_file(&token).unwrap();
        assert!(!sources.unchanged(), "a file gone is a change");
    }

    #[test]
    fn a_credential_about_to_expire_is_a_change() {
        let mut sources = Sources::default();
        sources.valid_until(SystemTime::now() + Duration::from_secs(3600));
        assert!(sources.unchanged());
        sources.valid_until(SystemTime::now() + Duration::from_secs(30));
        assert!(!sources.unchanged());
    }
}
