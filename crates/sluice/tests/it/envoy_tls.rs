//! TLS and mTLS on the Envoy service's gRPC listener (`[envoy.tls]`), with
//! certificates the test makes, and their reload.

use std::time::{Duration, Instant};

use crate::common::certs::Certs;
use crate::common::{Sluice, TempConfig};
use crate::envoy_rls::descriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const YAML: &str = "domain: tls\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n";

/// Sluice with TLS from `certs` (`server.crt`/`.key`), and mTLS when
/// `client_ca` names a CA of `certs`.
fn start(certs: &Certs, client_ca: Option<&str>) -> (Sluice, TempConfig) {
    let yaml = TempConfig::new("tls-yaml", YAML);
    let ca = client_ca
        .map(|ca| {
            format!(
                "client_ca = \"{}\"\n",
                certs.path(&format!("{ca}.crt")).display()
            )
        })
        .unwrap_or_default();
    let toml = format!(
        "[envoy]\nconfig = \"{}\"\ngrpc_listen = \"127.0.0.1:0\"\n\n[envoy.tls]\ncert = \"{}\"\nkey = \"{}\"\n{ca}",
        yaml.path().display(),
        certs.path("server.crt").display(),
        certs.path("server.key").display(),
    );
    (Sluice::start_with("envoy-tls", &toml), yaml)
}

/// A call over TLS trusting CA `trust`, as client `identity` if given:
/// whether it was answered.
async fn call(s: &Sluice, certs: &Certs, trust: &str, identity: Option<&str>) -> bool {
    let read = |name: &str| std::fs::read(certs.path(name)).unwrap();
    let mut tls = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(Certificate::from_pem(read(&format!("{trust}.crt"))));
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(
            read(&format!("{id}.crt")),
            read(&format!("{id}.key")),
        ));
    }
    let url = format!("https://127.0.0.1:{}", s.grpc.expect("grpc").port());
    let Ok(endpoint) = Channel::from_shared(url) else {
        return false;
    };
    let Ok(endpoint) = endpoint.tls_config(tls) else {
        return false;
    };
    let Ok(channel) = endpoint
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
    else {
        return false;
    };
    let mut client = RateLimitServiceClient::new(channel);
    let req = RateLimitRequest {
        domain: "tls".into(),
        descriptors: vec![descriptor(&[("user", "u")])],
        hits_addend: 0,
    };
    client.should_rate_limit(req).await.is_ok()
}

/// A call in plain text: whether it was answered.
async fn plain_call(s: &Sluice) -> bool {
    let url = format!("http://127.0.0.1:{}", s.grpc.expect("grpc").port());
    let Ok(mut client) = RateLimitServiceClient::connect(url).await else {
        return false;
    };
    let req = RateLimitRequest {
        domain: "tls".into(),
        descriptors: vec![descriptor(&[("user", "u")])],
        hits_addend: 0,
    };
    tokio::time::timeout(Duration::from_secs(5), client.should_rate_limit(req))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[tokio::test]
async fn tls_serves_clients_that_trust_the_certificate_and_reloads_it() {
    let Some(certs) = Certs::new("envoy-tls") else {
        return;
    };
    certs.ca("ca");
    certs.ca("other_ca");
    certs.signed("server", "ca", true);
    let (s, _y) = start(&certs, None);
    assert!(call(&s, &certs, "ca", None).await, "log:\n{}", s.log());
    assert!(
        !call(&s, &certs, "other_ca", None).await,
        "a client that trusts another CA"
    );
    assert!(!plain_call(&s).await, "plain text on a TLS listener");
    // A new certificate, from another CA, renamed over the old one: new
    // connections get it.
    certs.signed("next", "other_ca", true);
    for ext in ["key", "crt"] {
        std::fs::copy(
            certs.path(&format!("next.{ext}")),
            certs.path(&format!("staged.{ext}")),
        )
        .unwrap();
        std::fs::rename(
            certs.path(&format!("staged.{ext}")),
            certs.path(&format!("server.{ext}")),
        )
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !call(&s, &certs, "other_ca", None).await {
        assert!(
            Instant::now() < deadline,
            "the certificate was never reloaded; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !call(&s, &certs, "ca", None).await,
        "the old certificate is gone"
    );
    // A broken certificate file keeps the running one.
    std::fs::write(certs.path("server.crt"), "not a certificate").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !s.log().contains("gRPC TLS files do not load") {
        assert!(Instant::now() < deadline, "log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(call(&s, &certs, "other_ca", None).await);
}

#[tokio::test]
async fn mtls_requires_a_client_certificate_from_the_client_ca() {
    let Some(certs) = Certs::new("envoy-mtls") else {
        return;
    };
    certs.ca("ca");
    certs.ca("clients");
    certs.ca("strangers");
    certs.signed("server", "ca", true);
    certs.signed("envoy", "clients", false);
    certs.signed("intruder", "strangers", false);
    let (s, _y) = start(&certs, Some("clients"));
    assert!(
        call(&s, &certs, "ca", Some("envoy")).await,
        "log:\n{}",
        s.log()
    );
    assert!(!call(&s, &certs, "ca", None).await, "no client certificate");
    assert!(
        !call(&s, &certs, "ca", Some("intruder")).await,
        "a certificate of another CA"
    );
}

/// A certificate and its key replaced one after the other: a reload that
/// reads between the two renames waits for the files to settle and leaves
/// them to the next poll, instead of refusing a correct rotation (before,
/// it refused the mismatched pair and logged an error).
#[test]
fn a_reload_between_the_certificate_and_its_key_waits_for_both() {
    use sluice_envoy::tls::{ServerTls, TlsFiles};
    let Some(certs) = Certs::new("envoy-tls-settle") else {
        return;
    };
    certs.ca("ca");
    certs.signed("server", "ca", true);
    certs.signed("next", "ca", true);
    let tls = ServerTls::load(TlsFiles {
        cert: certs.path("server.crt"),
        key: certs.path("server.key"),
        client_ca: None,
    })
    .unwrap();
    let replace = |ext: &str| {
        let staged = certs.path(&format!("staged.{ext}"));
        std::fs::copy(certs.path(&format!("next.{ext}")), &staged).unwrap();
        std::fs::rename(&staged, certs.path(&format!("server.{ext}"))).unwrap();
    };
    replace("crt");
    let first = std::thread::scope(|s| {
        let reload = s.spawn(|| tls.reload());
        // The key follows while the reload waits for the files to settle.
        std::thread::sleep(Duration::from_millis(100));
        replace("key");
        reload.join().unwrap()
    });
    let first = first.expect("a rotation half done is not an error");
    let second = tls.reload().unwrap();
    assert!(first || second, "the new pair is loaded");
}
