//! `rediss://`: Sluice talks TLS to a Redis whose certificate is signed by a
//! private CA named in `SLUICE_REDIS_CA_FILE`, and refuses (falls back)
//! when it cannot verify the certificate.

use crate::common;

use std::time::{Duration, Instant};

use common::{Sluice, client, example_path, send};
use sluice_testkit::{RedisServer, free_port, require_redis};

#[tokio::test]
async fn rediss_with_a_private_ca() {
    if !require_redis() {
        return;
    }
    // A CA and a server certificate for 127.0.0.1.
    let Some(certs) = common::certs::Certs::new("redis") else {
        return;
    };
    certs.ca("ca");
    certs.signed("server", "ca", true);
    let dir = certs.dir();
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
}
