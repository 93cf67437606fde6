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
        let (ext, csr) = if server {
            self.request(name, "localhost", LOCAL_SERVER)
        } else {
            self.request(name, name, "extendedKeyUsage=clientAuth\n")
        };
        self.sign(name, ca, &csr, &ext, None);
    }

    /// A server certificate `<name>.crt`/`<name>.key` signed by CA `ca`
    /// for the host name `host` only (not `localhost`, not 127.0.0.1).
    pub fn server_for(&self, name: &str, ca: &str, host: &str) {
        let usage = format!("subjectAltName=DNS:{host}\nextendedKeyUsage=serverAuth\n");
        let (ext, csr) = self.request(name, host, &usage);
        self.sign(name, ca, &csr, &ext, None);
    }

    /// A server certificate `<name>.crt`/`<name>.key` for `localhost` and
    /// 127.0.0.1, signed by CA `ca`, that expired years ago: valid only in
    /// January 2020 (`openssl ca` takes past dates; `x509 -req` cannot).
    pub fn expired_server(&self, name: &str, ca: &str) {
        let (ext, csr) = self.request(name, "localhost", LOCAL_SERVER);
        std::fs::write(self.dir.join(format!("{name}.index")), "").unwrap();
        std::fs::write(self.dir.join(format!("{name}.serial")), "01\n").unwrap();
        let config = format!(
            "[ca]\ndefault_ca = past\n[past]\ndatabase = {name}.index\n\
             new_certs_dir = .\nserial = {name}.serial\ndefault_md = sha256\n\
             policy = any\n[any]\ncommonName = supplied\n"
        );
        let cnf = format!("{name}.ca.cnf");
        std::fs::write(self.dir.join(&cnf), config).unwrap();
        self.sign(name, ca, &csr, &ext, Some(&cnf));
    }

    /// A key `<name>.key` and a request `<name>.csr` for `cn`, and the
    /// extensions file `<name>.cnf` holding `extensions`; returns the
    /// names of the last two.
    fn request(&self, name: &str, cn: &str, extensions: &str) -> (String, String) {
        let (ext, key, csr) = (
            format!("{name}.cnf"),
            format!("{name}.key"),
            format!("{name}.csr"),
        );
        std::fs::write(self.dir.join(&ext), extensions).unwrap();
        let subj = format!("/CN={cn}");
        assert!(self.openssl(&[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj,
        ]));
        (ext, csr)
    }

    /// Signs `csr` with CA `ca` into `<name>.crt`, with the extensions in
    /// `ext`: valid for two days (`openssl x509 -req`), or, given the
    /// `openssl ca` config `past`, only in January 2020.
    fn sign(&self, name: &str, ca: &str, csr: &str, ext: &str, past: Option<&str>) {
        let (ca_crt, ca_key, crt) = (
            format!("{ca}.crt"),
            format!("{ca}.key"),
            format!("{name}.crt"),
        );
        let mut args = match past {
            None => vec![
                "x509",
                "-req",
                "-CA",
                &ca_crt,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-days",
                "2",
            ],
            Some(config) => vec![
                "ca",
                "-batch",
                "-notext",
                "-config",
                config,
                "-cert",
                &ca_crt,
                "-keyfile",
                &ca_key,
                "-startdate",
                "20200101000000Z",
                "-enddate",
                "20200201000000Z",
            ],
        };
        args.extend(["-in", csr, "-out", &crt, "-extfile", ext]);
        assert!(self.openssl(&args), "openssl {args:?}");
    }
}

/// The extensions of a server certificate for `localhost` and 127.0.0.1.
const LOCAL_SERVER: &str =
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
