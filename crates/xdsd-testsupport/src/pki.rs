//! A test PKI made with rcgen in a temporary directory: a CA, server certificates for
//! localhost and 127.0.0.1, and client certificates with a given identity. No key is committed.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};

/// A test CA in a temporary directory, and the certificates it signs there.
pub struct Pki {
    /// The directory every file is written to.
    pub dir: tempfile::TempDir,
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
}

/// What a client certificate names.
pub enum Id<'a> {
    /// A URI SAN (e.g. a SPIFFE id).
    Uri(&'a str),
    /// A DNS SAN.
    Dns(&'a str),
    /// The subject's common name only.
    Cn(&'a str),
}

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}

impl Pki {
    /// A CA named "xdsd test CA".
    pub fn new() -> Pki {
        Pki::named("xdsd test CA")
    }

    /// A CA of its own (another trust root).
    pub fn named(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert.pem()).expect("CA written");
        Pki {
            dir,
            ca,
            issuer: Issuer::new(params, key),
        }
    }

    /// `name` in the PKI's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A server certificate for localhost and 127.0.0.1 with this serial number, written to
    /// `<name>.pem` and `<name>.key`.
    pub fn server(&self, name: &str, serial: u64) -> Pair {
        let pair = Pair {
            cert: self.path(&format!("{name}.pem")),
            key: self.path(&format!("{name}.key")),
        };
        self.write_server(&pair, serial);
        pair
    }

    /// Writes a new server certificate and key over `pair`'s files, each replaced whole (written
    /// beside, then renamed into place), the key first.
    pub fn write_server(&self, pair: &Pair, serial: u64) {
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()])
            .expect("server names");
        params
            .distinguished_name
            .push(DnType::CommonName, "xdsd test server");
        params.serial_number = Some(SerialNumber::from(serial));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.write(params, pair);
    }

    /// A client certificate naming `id`, written to `<name>.pem` and `<name>.key`.
    pub fn client(&self, name: &str, id: Id<'_>) -> Pair {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "xdsd test client");
        match id {
            Id::Uri(uri) => params
                .subject_alt_names
                .push(SanType::URI(uri.try_into().expect("an IA5 URI"))),
            Id::Dns(dns) => params
                .subject_alt_names
                .push(SanType::DnsName(dns.try_into().expect("an IA5 name"))),
            Id::Cn(cn) => {
                params.distinguished_name = rcgen::DistinguishedName::new();
                params.distinguished_name.push(DnType::CommonName, cn);
            }
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let pair = Pair {
            cert: self.path(&format!("{name}.pem")),
            key: self.path(&format!("{name}.key")),
        };
        self.write(params, &pair);
        pair
    }

    fn write(&self, params: CertificateParams, pair: &Pair) {
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        replace(&pair.key, key.serialize_pem().as_bytes());
        replace(&pair.cert, cert.pem().as_bytes());
    }
}

/// Replaces `path` whole: written beside it, then renamed over it.
pub fn replace(path: &Path, content: &[u8]) {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, content).expect("written");
    std::fs::rename(&tmp, path).expect("renamed into place");
}
