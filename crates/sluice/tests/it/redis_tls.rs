//! `rediss://`: Sluice talks TLS to a Redis whose certificate is signed by a
//! private CA named in `SLUICE_REDIS_CA_FILE`, and refuses (falls back)
//! when it cannot verify the certificate.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Sluice, client, example_path, send};
use sluice_testkit::{RedisServer, free_port, require_redis};

/// A CA and a server certificate for 127.0.0.1, made with `openssl`.
fn make_certs(dir: &Path) -> bool {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=sluice-test-ca",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ])
}

#[tokio::test]
async fn rediss_with_a_private_ca() {
    if !require_redis() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sluice-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if !make_certs(&dir) {
        assert!(
            std::env::var_os("SLUICE_REQUIRE_REDIS").is_none(),
            "openssl is required to make the test certificates"
        );
        eprintln!("skipping: openssl is not available");
        return;
    }
    let tls_port = free_port();
    let file = |name: &str| dir.join(name).display().to_string();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &file("server.crt"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.crt"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let config = example_path("quickstart.toml");
    let client = client();

    // With the CA: Redis decides, over TLS.
    let trusted = Sluice::start_env(
        &config,
        &["--store-url", &url],
        &[
            ("SLUICE_KEY_SECRET", "tls"),
            ("SLUICE_REDIS_CA_FILE", &file("ca.crt")),
        ],
    );
    let started = Instant::now();
    loop {
        let r = send(client.get(trusted.url("/")).header("X-Api-Key", "k")).await;
        assert_eq!(r.status, 200);
        if !r.has("sluice-fallback") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "Redis never decided over TLS"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys = redis.command(&["KEYS", "sluice:*"]).unwrap();
    assert!(keys.contains("sluice:{"), "the decision was stored: {keys}");

    // Without it, the certificate cannot be verified: the fallback decides.
    let untrusted = Sluice::start_env(
        &config,
        &["--store-url", &url],
        &[("SLUICE_KEY_SECRET", "tls")],
    );
    for _ in 0..3 {
        let r = send(client.get(untrusted.url("/")).header("X-Api-Key", "k")).await;
        assert_eq!(r.header("sluice-fallback"), "local", "{r:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
