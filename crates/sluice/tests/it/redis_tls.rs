//! `rediss://`: Sluice talks TLS to a Redis whose certificate is signed by a
//! private CA named in `SLUICE_REDIS_CA_FILE`, and refuses (falls back)
//! when it cannot verify the certificate: one from another CA, one for
//! another host name, or one that has expired. A certificate that does not
//! verify is a connection error, as for a Redis that is not there: Sluice
//! starts on the fallback, says why in its log, retries in the background,
//! and sends that Redis no command.

use crate::common;

use std::time::{Duration, Instant};

use common::certs::Certs;
use common::{Sluice, client, example_path, send};
use sluice_testkit::{RedisServer, free_port, require_redis};

/// A Redis with a TLS port presenting `server.crt` (and a plain port, for
/// the test's own commands), and `rediss://127.0.0.1:<TLS port>`.
fn tls_redis(certs: &Certs) -> (RedisServer, String) {
    let tls_port = free_port();
    let file = |name: &str| certs.path(name).display().to_string();
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
    (redis, format!("rediss://127.0.0.1:{tls_port}"))
}

/// `sluice serve` (the quickstart) on `url`, trusting the CA `ca.crt` when
/// `trust` is set, else the public web roots only.
fn start(certs: &Certs, url: &str, trust: bool) -> Sluice {
    let ca = certs.path("ca.crt").display().to_string();
    let mut env = vec![("SLUICE_KEY_SECRET", "tls")];
    if trust {
        env.push(("SLUICE_REDIS_CA_FILE", &ca));
    }
    Sluice::start_env(
        &example_path("quickstart.toml"),
        &["--store-url", url],
        &env,
    )
}

/// Polls with fresh keys until Redis decides (a reply without
/// `Sluice-Fallback`), over TLS; panics after 20 s (a hang guard).
async fn until_redis_decides(sluice: &Sluice) {
    let client = client();
    let started = Instant::now();
    for n in 0.. {
        let key = format!("probe-{n}");
        let r = send(client.get(sluice.url("/")).header("X-Api-Key", key)).await;
        assert_eq!(r.status, 200, "{r:?}");
        if !r.has("sluice-fallback") {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "Redis never decided over TLS; log:\n{}",
            sluice.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn rediss_with_a_private_ca() {
    if !require_redis() {
        return;
    }
    // A CA and a server certificate for 127.0.0.1.
    let Some(certs) = Certs::new("redis") else {
        return;
    };
    certs.ca("ca");
    certs.signed("server", "ca", true);
    let (redis, url) = tls_redis(&certs);
    let client = client();

    // With the CA: Redis decides, over TLS.
    let trusted = start(&certs, &url, true);
    until_redis_decides(&trusted).await;
    let keys = redis.command(&["KEYS", "sluice:*"]).unwrap();
    assert!(keys.contains("sluice:{"), "the decision was stored: {keys}");

    // Without it, the certificate cannot be verified: the fallback decides.
    let untrusted = start(&certs, &url, false);
    for _ in 0..3 {
        let r = send(client.get(untrusted.url("/")).header("X-Api-Key", "k")).await;
        assert_eq!(r.header("sluice-fallback"), "local", "{r:?}");
    }
}

/// A Redis presenting the server certificate `make` writes, to a Sluice
/// that trusts the CA `ca`: for 2.5 s (the background connection retries
/// several times, 50 ms doubling to 1 s) the fallback decides every
/// request, and the status page says the breaker is open. The log names
/// the certificate's fault (`reason`, rustls's words), once per place that
/// logs it, not per retry; nothing panics; Redis ran no command but the
/// test's own `PING`s: no TLS session was ever set up. Then Redis is given
/// a good certificate (`CONFIG SET tls-cert-file`): a later try in the
/// background takes it up, and Redis decides.
async fn a_bad_certificate_is_refused(label: &str, make: impl FnOnce(&Certs), reason: &str) {
    if !require_redis() {
        return;
    }
    let Some(certs) = Certs::new(label) else {
        return;
    };
    certs.ca("ca");
    make(&certs);
    let (redis, url) = tls_redis(&certs);
    let sluice = start(&certs, &url, true);
    let client = client();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        let r = send(client.get(sluice.url("/")).header("X-Api-Key", "k")).await;
        assert!(r.status == 200 || r.status == 429, "{r:?}");
        assert_eq!(r.header("sluice-fallback"), "local", "{r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = send(client.get(sluice.control_url("/v1/status")))
        .await
        .json();
    assert_eq!(status["store"]["breaker"], "open", "{status}");

    let log = sluice.log();
    let said = log
        .matches(&format!("invalid peer certificate: {reason}"))
        .count();
    assert!(
        (1..=2).contains(&said),
        "{label}: `{reason}` said {said} times:\n{log}"
    );
    // Said as what it is: a certificate to fix, at ERROR, not an outage.
    for line in log
        .lines()
        .filter(|l| l.contains("invalid peer certificate"))
    {
        assert!(
            line.contains("ERROR") && line.contains("TLS certificate does not verify"),
            "{label}: {line}"
        );
    }
    assert!(!log.contains("panicked"), "{log}");

    let stats = redis.command(&["INFO", "commandstats"]).unwrap();
    // Only the readiness check's PINGs (this INFO is counted after it).
    let run: Vec<&str> = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_ping:"))
        .collect();
    assert!(run.is_empty(), "{label}: Redis ran commands: {run:?}");

    certs.signed("good", "ca", true);
    let (crt, key) = (certs.path("good.crt"), certs.path("good.key"));
    let (crt, key) = (crt.display().to_string(), key.display().to_string());
    let set = ["CONFIG", "SET", "tls-cert-file", &crt, "tls-key-file", &key];
    assert!(redis.command(&set).unwrap().starts_with("+OK"));
    until_redis_decides(&sluice).await;
}

#[tokio::test]
async fn rediss_refuses_a_certificate_from_another_ca() {
    let make = |c: &Certs| {
        c.ca("other");
        c.signed("server", "other", true);
    };
    a_bad_certificate_is_refused("redis-other-ca", make, "UnknownIssuer").await;
}

#[tokio::test]
async fn rediss_refuses_a_certificate_for_another_host() {
    let make = |c: &Certs| c.server_for("server", "ca", "wrong.example");
    let reason = "certificate not valid for name \"127.0.0.1\"";
    a_bad_certificate_is_refused("redis-wrong-host", make, reason).await;
}

#[tokio::test]
async fn rediss_refuses_an_expired_certificate() {
    let make = |c: &Certs| c.expired_server("server", "ca");
    a_bad_certificate_is_refused("redis-expired", make, "certificate expired").await;
}
