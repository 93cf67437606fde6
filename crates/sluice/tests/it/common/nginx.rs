//! Running Debian's real nginx with a shipped `deploy/nginx/*.conf`, its
//! ports rewritten to ephemeral ones, in a private prefix directory.

use std::path::PathBuf;

use super::{RawReply, Sluice, Upstream, raw_http, unused_port};
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

    /// `deploy/nginx/auth_request.conf` in front of `upstream`, asking
    /// `sluice`'s `/v1/auth`.
    pub fn auth_request(binary: &PathBuf, sluice: &Sluice, upstream: &Upstream) -> Self {
        let control = sluice
            .control_url("")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let port = unused_port();
        Self::start(
            binary,
            "auth_request.conf",
            port,
            &[
                ("127.0.0.1:8088", format!("127.0.0.1:{port}")),
                ("127.0.0.1:8000", upstream.addr.to_string()),
                ("127.0.0.1:9090", control),
            ],
        )
    }

    /// `deploy/nginx/perimeter.conf` in front of `upstream`, with `more`
    /// replaced in it too.
    pub fn perimeter(binary: &PathBuf, upstream: &Upstream, more: &[(&str, String)]) -> Self {
        let port = unused_port();
        let mut replace = vec![
            ("127.0.0.1:8089", format!("127.0.0.1:{port}")),
            ("127.0.0.1:8000", upstream.addr.to_string()),
        ];
        replace.extend(more.iter().cloned());
        Self::start(binary, "perimeter.conf", port, &replace)
    }

    /// `line` (method and target), `Host: sluice.test` unless `fields` has
    /// a Host, then `fields` as written, on a connection of its own:
    /// nginx's answer, which must not be a 5xx (a client could cause it at
    /// will).
    pub async fn send(&self, line: &str, fields: &[&str]) -> RawReply {
        let mut head = format!("{line} HTTP/1.1\r\n");
        if !fields
            .iter()
            .any(|f| f.to_ascii_lowercase().starts_with("host:"))
        {
            head.push_str("Host: sluice.test\r\n");
        }
        for f in fields {
            head.push_str(f);
            head.push_str("\r\n");
        }
        head.push_str("Connection: close\r\n\r\n");
        let addr = format!("127.0.0.1:{}", self.port)
            .parse()
            .expect("an address");
        let r = raw_http(addr, &head).await;
        assert!(
            r.status != 0 && r.status < 500,
            "{head:?}: {}\nnginx: {}",
            r.text,
            self.error_log()
        );
        r
    }

    /// [`send`](Self::send)'s status.
    pub async fn status(&self, line: &str, fields: &[&str]) -> u16 {
        self.send(line, fields).await.status
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
