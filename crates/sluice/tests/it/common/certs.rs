//! Test certificates, made with `openssl`: private CAs, server certificates
//! for 127.0.0.1 and `localhost`, and client certificates.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory of certificates, removed on drop.
#[derive(Debug)]
pub struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// A fresh directory; `None` (after saying so) when `openssl` is not
    /// installed and `SLUICE_REQUIRE_REDIS` (CI) is not set.
    pub fn new(label: &str) -> Option<Self> {
        let dir = std::env::temp_dir().join(format!(
            "sluice-certs-{}-{label}-{}",
            std::process::id(),
            sluice_testkit::free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let certs = Self { dir };
        if certs.openssl(&["version"]) {
            return Some(certs);
        }
        assert!(
            std::env::var_os("SLUICE_REQUIRE_REDIS").is_none(),
            "openssl is required to make the test certificates"
        );
        eprintln!("skipping: openssl is not available");
        None
    }

    /// A file of the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn openssl(&self, args: &[&str]) -> bool {
        Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// A CA: `<name>.crt` and `<name>.key`.
    pub fn ca(&self, name: &str) {
        let (crt, key, subj) = (
            format!("{name}.crt"),
            format!("{name}.key"),
            format!("/CN={name}"),
        );
        assert!(self.openssl(&[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &crt,
            "-days", "2", "-subj", &subj,
        ]));
    }

    /// A certificate `<name>.crt`/`<name>.key` signed by CA `ca`, for
    /// `localhost` and 127.0.0.1 (a server), or for a client.
    pub fn signed(&self, name: &str, ca: &str, server: bool) {
        let ext = format!("{name}.cnf");
        let usage = if server {
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
        } else {
            "extendedKeyUsage=clientAuth\n"
        };
        std::fs::write(self.dir.join(&ext), usage).unwrap();
        let (crt, key, csr) = (
            format!("{name}.crt"),
            format!("{name}.key"),
            format!("{name}.csr"),
        );
        let subj = format!("/CN={}", if server { "localhost" } else { name });
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        assert!(self.openssl(&[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj,
        ]));
        assert!(self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]));
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
