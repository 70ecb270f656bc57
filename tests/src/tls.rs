//! A private CA and a certificate for `localhost` signed by it, made in process, for the tests of
//! TLS listeners (kiln-cache's and kilnd's).

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use std::path::PathBuf;

/// The files a TLS server needs and the CA its clients trust; removed on drop.
#[derive(Debug)]
pub struct TestCert {
    /// The server's certificate chain (PEM), valid for `localhost`.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA certificate (PEM) clients must trust: no system store knows it.
    pub ca_pem: Vec<u8>,
    /// The same CA as a file, for clients that take a path.
    pub ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestCert {
    pub fn localhost() -> TestCert {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Names of their own: with rcgen's default name on both, BoringSSL (grpcio) takes the
        // leaf, whose subject would equal its issuer, for a self-signed certificate.
        ca_params.distinguished_name.push(DnType::CommonName, "kiln test CA");
        let ca =
            CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key")).expect("self-sign the CA");
        let leaf_key = KeyPair::generate().expect("leaf key");
        let mut leaf_params = CertificateParams::new(vec!["localhost".to_owned()]).expect("leaf parameters");
        leaf_params.distinguished_name.push(DnType::CommonName, "localhost");
        let leaf = leaf_params.signed_by(&leaf_key, &ca).expect("sign the leaf");
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key, ca_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"), dir.path().join("ca.pem"));
        let ca_pem = ca.as_ref().pem().into_bytes();
        std::fs::write(&cert, leaf.pem()).expect("write cert");
        std::fs::write(&key, leaf_key.serialize_pem()).expect("write key");
        std::fs::write(&ca_file, &ca_pem).expect("write CA");
        TestCert { cert, key, ca_pem, ca_file, _dir: dir }
    }
}
