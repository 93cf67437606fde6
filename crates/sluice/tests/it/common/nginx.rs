//! Running Debian's real nginx with a shipped `deploy/nginx/*.conf`, its
//! ports rewritten to ephemeral ones, in a private prefix directory.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nginx binary, or `None` when it is not installed. Tests skip then,
/// unless `SLUICE_REQUIRE_NGINX` is set (as `scripts/test` does, after
/// installing it), when a missing nginx is a failure.
pub fn binary() -> Option<PathBuf> {
    let found = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("SLUICE_REQUIRE_NGINX").is_none(),
            "nginx is required (SLUICE_REQUIRE_NGINX is set) but not installed"
        );
        eprintln!("nginx not installed: skipping (scripts/test installs it)");
    }
    found
}

/// A running nginx; stopped on drop.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    /// The port clients connect to.
    pub port: u16,
}

impl Nginx {
    /// Starts `binary` with the shipped site config `deploy/nginx/<site>`,
    /// after replacing each `(from, to)` in it; clients use `port`.
    pub fn start(binary: &PathBuf, site: &str, port: u16, replace: &[(&str, String)]) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut text = std::fs::read_to_string(root.join("deploy/nginx").join(site))
            .expect("read the shipped nginx config");
        for (from, to) in replace {
            assert!(text.contains(from), "`{from}` not in {site}");
            text = text.replace(from, to);
        }
        let dir =
            std::env::temp_dir().join(format!("sluice-nginx-{}-{}", std::process::id(), port));
        std::fs::create_dir_all(&dir).expect("nginx prefix dir");
        std::fs::write(dir.join("site.conf"), text).expect("write the site");
        let d = dir.display();
        let main = format!(
            "worker_processes 1;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {d}/body;\n\
               proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n\
               uwsgi_temp_path {d}/uwsgi;\n\
               scgi_temp_path {d}/scgi;\n\
               include {d}/site.conf;\n\
             }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), main).expect("write nginx.conf");
        let child = Command::new(binary)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let nginx = Self { child, dir, port };
        nginx.wait_ready();
        nginx
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not start: {}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// nginx's error log.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// The URL of `path` on nginx.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
