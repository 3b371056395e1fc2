//! Writing a real kubeconfig file (YAML, as `kubectl config view --raw` prints it) that points
//! at the stand-in: one cluster with the CA embedded, one context, one user.

use std::path::{Path, PathBuf};

use super::status::quote;

/// How the kubeconfig's user authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeconfigUser<'a> {
    /// `token:` with the server's first accepted token.
    Token,
    /// `tokenFile:` naming this file. If the file does not exist yet it is written with the
    /// server's first accepted token; kube-rs re-reads it at most once a minute.
    TokenFile(&'a Path),
    /// `client-certificate-data` / `client-key-data`: the client certificate signed by the
    /// server's CA (accepted when the server runs with client-certificate auth).
    ClientCertificate,
    /// No credentials at all.
    Anonymous,
}

pub(crate) struct ClusterInfo<'a> {
    pub server: &'a str,
    pub ca_pem: Option<&'a str>,
    pub token: Option<String>,
    pub client_cert_pem: Option<&'a str>,
    pub client_key_pem: Option<&'a str>,
}

pub(crate) fn write(
    dir: &Path,
    file_name: &str,
    cluster: &ClusterInfo<'_>,
    user: KubeconfigUser<'_>,
) -> PathBuf {
    let mut cluster_lines = format!("    server: {}\n", quote(cluster.server));
    if let Some(ca) = cluster.ca_pem {
        cluster_lines.push_str(&format!(
            "    certificate-authority-data: {}\n",
            base64(ca.as_bytes())
        ));
    }
    let user_block = match user {
        KubeconfigUser::Token => {
            format!(
                "  user:\n    token: {}\n",
                quote(cluster.token.as_deref().unwrap_or(""))
            )
        }
        KubeconfigUser::TokenFile(path) => {
            if !path.exists() {
                std::fs::write(path, cluster.token.as_deref().unwrap_or(""))
                    .unwrap_or_else(|e| panic!("write token file {}: {e}", path.display()));
            }
            format!(
                "  user:\n    tokenFile: {}\n",
                quote(&path.to_string_lossy())
            )
        }
        KubeconfigUser::ClientCertificate => {
            let cert = cluster
                .client_cert_pem
                .expect("client certificates need an HTTPS server");
            let key = cluster
                .client_key_pem
                .expect("client certificates need an HTTPS server");
            format!(
                "  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
                base64(cert.as_bytes()),
                base64(key.as_bytes())
            )
        }
        KubeconfigUser::Anonymous => "  user: {}\n".to_owned(),
    };
    let text = format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: testkit\n  cluster:\n{cluster_lines}\
         contexts:\n\
         - name: testkit\n  context:\n    cluster: testkit\n    user: testkit\n    namespace: default\n\
         current-context: testkit\n\
         preferences: {{}}\n\
         users:\n\
         - name: testkit\n{user_block}"
    );
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let path = dir.join(file_name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Standard base64 with padding (RFC 4648 §4), as kubeconfig `*-data` fields hold.
pub(crate) fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }
}
