//! The etcd options of `xdsd serve` and `xdsd push` (docs/etcd.md): where etcd is, the prefix
//! that holds the resources, TLS and an etcd user. The password is read from a file or the
//! environment, never from a flag (which would show in `ps`).

use std::path::PathBuf;

use xdsd_etcd::EtcdOptions;

/// The variable that may hold the etcd user's password.
pub(crate) const PASSWORD_ENV: &str = "XDSD_ETCD_PASSWORD";

#[derive(clap::Args, Debug)]
pub(crate) struct EtcdArgs {
    /// Read the resources from etcd (the v3 API) at these endpoints instead of a directory:
    /// every key under --etcd-prefix holds what a resource file holds (docs/etcd.md). URLs such
    /// as http://10.0.0.1:2379 (https:// with --etcd-ca); comma-separated or repeated.
    #[arg(
        long,
        help_heading = "etcd",
        value_name = "URL[,URL...]",
        env = "XDSD_ETCD_ENDPOINTS",
        value_delimiter = ','
    )]
    pub etcd_endpoints: Vec<String>,

    /// The key prefix that holds the resources, e.g. /xdsd/ (a '/' is added when it does not end
    /// with one): the key /xdsd/clusters.yaml is the resource file clusters.yaml.
    #[arg(
        long,
        help_heading = "etcd",
        value_name = "PREFIX",
        env = "XDSD_ETCD_PREFIX"
    )]
    pub etcd_prefix: Option<String>,

    /// TLS to etcd: verify its certificate with the CA certificates (PEM) of FILE.
    #[arg(long, help_heading = "etcd", value_name = "FILE", env = "XDSD_ETCD_CA")]
    pub etcd_ca: Option<PathBuf>,

    /// Mutual TLS to etcd: present this client certificate chain (PEM); needs --etcd-key.
    #[arg(
        long,
        help_heading = "etcd",
        value_name = "FILE",
        env = "XDSD_ETCD_CERT",
        requires = "etcd_key"
    )]
    pub etcd_cert: Option<PathBuf>,

    /// The private key (PEM) of --etcd-cert.
    #[arg(
        long,
        help_heading = "etcd",
        value_name = "FILE",
        env = "XDSD_ETCD_KEY",
        requires = "etcd_cert"
    )]
    pub etcd_key: Option<PathBuf>,

    /// Authenticate to etcd as this etcd user; its password is read from --etcd-password-file or
    /// the variable XDSD_ETCD_PASSWORD (never a flag: it would show in `ps`).
    #[arg(
        long,
        help_heading = "etcd",
        value_name = "USER",
        env = "XDSD_ETCD_USER"
    )]
    pub etcd_user: Option<String>,

    /// The file holding the password of --etcd-user (its first line; a final newline is not
    /// part of it).
    #[arg(
        long,
        help_heading = "etcd",
        value_name = "FILE",
        env = "XDSD_ETCD_PASSWORD_FILE"
    )]
    pub etcd_password_file: Option<PathBuf>,
}

impl EtcdArgs {
    /// Whether any endpoint was given: etcd is the source.
    pub fn given(&self) -> bool {
        !self.etcd_endpoints.is_empty()
    }

    /// The options of the arguments, or a usage error saying what is missing or wrong.
    /// `max_value_bytes`: the largest value read (`--max-file-bytes`).
    pub fn options(&self, max_value_bytes: usize) -> Result<EtcdOptions, String> {
        if !self.given() {
            return Err("--etcd-endpoints is required".into());
        }
        if let Some(empty) = self.etcd_endpoints.iter().find(|e| e.trim().is_empty()) {
            return Err(format!("--etcd-endpoints: an empty endpoint ({empty:?})"));
        }
        let Some(prefix) = self.etcd_prefix.as_deref() else {
            return Err("--etcd-endpoints needs --etcd-prefix (e.g. /xdsd/)".into());
        };
        if prefix.is_empty() || prefix == "/" {
            return Err(format!(
                "--etcd-prefix {prefix:?}: give a prefix of its own, e.g. /xdsd/ (not the whole \
                 of etcd)"
            ));
        }
        let prefix = if prefix.ends_with('/') {
            prefix.to_string()
        } else {
            format!("{prefix}/")
        };
        let mut options = EtcdOptions::new(self.etcd_endpoints.iter().map(|e| e.trim()), prefix)
            .with_max_value_bytes(max_value_bytes);
        if let Some(ca) = &self.etcd_ca {
            options = options.with_ca(ca);
        }
        if let (Some(cert), Some(key)) = (&self.etcd_cert, &self.etcd_key) {
            options = options.with_client_cert(cert, key);
        }
        let from_env = std::env::var(PASSWORD_ENV).ok();
        match (&self.etcd_user, &self.etcd_password_file, from_env) {
            (None, None, _) => {}
            (None, Some(_), _) => {
                return Err("--etcd-password-file needs --etcd-user".into());
            }
            (Some(user), Some(file), _) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    format!(
                        "--etcd-password-file {}: cannot read it: {e}",
                        file.display()
                    )
                })?;
                let password = text.lines().next().unwrap_or_default();
                options = options.with_user(user, password);
            }
            (Some(user), None, Some(password)) => options = options.with_user(user, password),
            (Some(_), None, None) => {
                return Err(format!(
                    "--etcd-user needs a password: --etcd-password-file FILE or the variable \
                     {PASSWORD_ENV}"
                ));
            }
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(user: Option<&str>, file: Option<PathBuf>) -> EtcdArgs {
        EtcdArgs {
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            etcd_prefix: Some("/xdsd/".into()),
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_user: user.map(str::to_string),
            etcd_password_file: file,
        }
    }

    #[test]
    fn the_password_comes_from_its_file_and_a_user_needs_one() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("password");
        std::fs::write(&file, "s3cret\n").expect("written");
        let options = args(Some("xdsd"), Some(file.clone()))
            .options(1024)
            .expect("a user with a password file");
        assert_eq!(options.user(), Some("xdsd"));
        assert!(
            !format!("{options:?}").contains("s3cret"),
            "the password is never shown"
        );
        let e = args(None, Some(file)).options(1024).expect_err("no user");
        assert!(e.contains("needs --etcd-user"), "{e}");
        let e = args(Some("xdsd"), Some(dir.path().join("missing")))
            .options(1024)
            .expect_err("an unreadable file");
        assert!(e.contains("cannot read it"), "{e}");
        if std::env::var_os(PASSWORD_ENV).is_none() {
            let e = args(Some("xdsd"), None)
                .options(1024)
                .expect_err("no password");
            assert!(e.contains(PASSWORD_ENV), "{e}");
        }
    }
}
