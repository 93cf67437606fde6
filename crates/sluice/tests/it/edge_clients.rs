//! Who a client is, against the real binary: IPv6 clients are their /64
//! (or what `client.ipv6_prefix` says), an IPv4-mapped address is its IPv4
//! client, and a request with two different keys is refused.

use crate::common;

use common::{Sluice, client, example_path, raw_http, send};

/// Per-IP burst of 5, behind a trusted proxy on loopback.
fn per_ip(prefix: Option<u8>) -> String {
    let prefix = prefix.map_or(String::new(), |p| format!("ipv6_prefix = {p}\n"));
    format!(
        "[client]\ntrusted_proxies = [\"127.0.0.0/8\"]\n{prefix}\n\
         [[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 5\n"
    )
}

async fn from(s: &Sluice, client_ip: &str) -> u16 {
    send(
        client()
            .get(s.url("/"))
            .header("X-Forwarded-For", client_ip),
    )
    .await
    .status
}

#[tokio::test]
async fn fifty_addresses_of_one_slash_64_share_one_bucket() {
    let s = Sluice::start_with("ipv6-64", &per_ip(None));
    let mut admitted = 0;
    for i in 1..=50 {
        if from(&s, &format!("2001:db8:aa:bb::{i:x}")).await == 200 {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5, "one /64 is one client");
    // Another /64 has its own bucket.
    assert_eq!(from(&s, "2001:db8:aa:bc::1").await, 200);
}

#[tokio::test]
async fn a_slash_128_prefix_keys_each_address() {
    let s = Sluice::start_with("ipv6-128", &per_ip(Some(128)));
    for i in 1..=20 {
        assert_eq!(from(&s, &format!("2001:db8:aa:bb::{i:x}")).await, 200);
    }
}

#[tokio::test]
async fn an_ipv4_mapped_address_is_its_ipv4_client() {
    let s = Sluice::start_with("ipv6-mapped", &per_ip(None));
    for i in 0..6 {
        let ip = if i % 2 == 0 {
            "192.0.2.10"
        } else {
            "::ffff:192.0.2.10"
        };
        let want = if i < 5 { 200 } else { 429 };
        assert_eq!(from(&s, ip).await, want, "request {i} from {ip}");
    }
}

#[tokio::test]
async fn a_deny_entry_for_one_address_denies_its_slash_64() {
    let s = Sluice::start_with(
        "ipv6-deny",
        &format!(
            "{}\n[access]\ndeny_cidrs = [\"2001:db8:aa:bb::7/128\"]\n",
            per_ip(None)
        ),
    );
    assert_eq!(from(&s, "2001:db8:aa:bb::8").await, 403);
    assert_eq!(from(&s, "2001:db8:aa:bc::8").await, 200);
}

#[tokio::test]
async fn two_different_api_keys_are_refused_and_two_equal_ones_pass() {
    let s = Sluice::start(&example_path("quickstart.toml"));
    let two = |a: &str, b: &str| {
        format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: {a}\r\nX-Api-Key: {b}\r\nConnection: close\r\n\r\n"
        )
    };
    let r = raw_http(s.data, &two("alice", "demo-pro-key")).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("ambiguous"), "{}", r.text);
    let r = raw_http(s.data, &two("alice", "alice")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // The same through the check API (names differ only in case).
    let r = send(client().post(s.control_url("/v1/check")).body(
        r#"{"path":"/","headers":{"X-Api-Key":"alice","x-api-key":"bob"},"client_ip":"192.0.2.1"}"#,
    ))
    .await;
    r.problem(400);
}
