//! Certificates made at start: a CA, a server certificate for `127.0.0.1` and `localhost`
//! signed by it, and a client certificate signed by it (accepted when client-certificate auth
//! is on). rustls with the ring provider, as kube-rs is built for plumb.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;

/// The PEM material a kubeconfig embeds, and the server's TLS configuration.
pub(crate) struct TlsMaterial {
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

/// The subject of the client certificate (`CN`), as a real cluster would name the user.
pub(crate) const CLIENT_CN: &str = "plumb-test";

/// `http2`: offer `h2` by ALPN (before `http/1.1`, as the API server does).
pub(crate) fn generate(client_cert_auth: bool, http2: bool) -> TlsMaterial {
    let ca_key = KeyPair::generate().expect("generate CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "testkit-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign CA");
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().expect("generate server key");
    let mut server_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params");
    server_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .expect("sign server cert");

    let client_key = KeyPair::generate().expect("generate client key");
    let mut client_params = CertificateParams::new(Vec::<String>::new()).expect("client params");
    client_params
        .distinguished_name
        .push(DnType::CommonName, CLIENT_CN);
    client_params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client_params
        .signed_by(&client_key, &issuer)
        .expect("sign client cert");

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    let builder = if client_cert_auth {
        let mut roots = RootCertStore::empty();
        roots
            .add(ca_cert.der().clone())
            .expect("CA certificate is valid");
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            // Token-authenticated clients present no certificate; they must still connect.
            .allow_unauthenticated()
            .build()
            .expect("client verifier");
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let chain: Vec<CertificateDer<'static>> = vec![server_cert.der().clone()];
    let mut config = builder
        .with_single_cert(chain, key)
        .expect("server certificate and key match");
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };

    TlsMaterial {
        ca_pem: ca_cert.pem(),
        client_cert_pem: client_cert.pem(),
        client_key_pem: client_key.serialize_pem(),
        server_config: Arc::new(config),
    }
}
