//! Who the client is behind a trusted proxy, against the real binary: one
//! rule for `Forwarded`, `X-Forwarded-For` and `X-Real-IP`, and a client
//! that adds its own header never chooses its bucket.

use crate::common;

use common::{Sluice, client, send};

/// A per-IP burst of 2 behind a trusted proxy on loopback; `extra` goes
/// into `[client]`.
fn per_ip(extra: &str) -> String {
    format!(
        "[client]\ntrusted_proxies = [\"127.0.0.0/8\"]\n{extra}\n\
         [[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 2\n"
    )
}

/// Statuses of `n` requests, each with `headers(i)`.
async fn statuses(
    s: &Sluice,
    n: usize,
    headers: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<u16> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut req = client().get(s.url("/"));
        for (name, value) in headers(i) {
            req = req.header(name, value);
        }
        out.push(send(req).await.status);
    }
    out
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

/// The attack: the trusted proxy writes only `Forwarded`; the client adds
/// an `X-Forwarded-For` of its choosing, a fresh one each time. Before,
/// Sluice took the client's header and all 20 passed a limit of 2.
#[tokio::test]
async fn a_client_cannot_choose_its_address_beside_the_proxys_forwarded() {
    let s = Sluice::start_with("fwd-default", &per_ip(""));
    let got = statuses(&s, 20, |i| {
        vec![
            ("Forwarded", "for=198.51.100.7;proto=http".to_owned()),
            ("X-Forwarded-For", format!("203.0.113.{}", i + 1)),
        ]
    })
    .await;
    assert_eq!(count(&got, 200), 0, "the client chose its bucket: {got:?}");
    assert_eq!(count(&got, 400), 20, "{got:?}");
    let r = send(
        client()
            .get(s.url("/"))
            .header("Forwarded", "for=198.51.100.7")
            .header("X-Forwarded-For", "203.0.113.9"),
    )
    .await;
    assert!(
        r.problem(400)["detail"]
            .as_str()
            .is_some_and(|d| d.contains("client.forwarded_header")),
        "{:?}",
        r.json()
    );
}

/// Named, the proxy's header is the one read: the client's own is
/// ignored, and the client has its burst of 2, no more.
#[tokio::test]
async fn the_named_header_is_the_one_read() {
    let s = Sluice::start_with("fwd-named", &per_ip("forwarded_header = \"forwarded\""));
    let got = statuses(&s, 10, |i| {
        vec![
            ("Forwarded", "for=\"[2001:db8:cafe::17]:4711\"".to_owned()),
            ("X-Forwarded-For", format!("203.0.113.{}", i + 1)),
            ("X-Real-IP", format!("203.0.114.{}", i + 1)),
        ]
    })
    .await;
    assert_eq!(count(&got, 200), 2, "{got:?}");
    assert_eq!(count(&got, 429), 8, "{got:?}");
    // Another client behind the same proxy has its own bucket.
    let other = statuses(&s, 1, |_| vec![("Forwarded", "for=192.0.2.1".to_owned())]).await;
    assert_eq!(other, [200]);
}

#[tokio::test]
async fn x_real_ip_follows_the_same_rule() {
    let s = Sluice::start_with("fwd-real-ip", &per_ip("forwarded_header = \"x-real-ip\""));
    let got = statuses(&s, 6, |i| {
        vec![
            ("X-Real-IP", "198.51.100.20".to_owned()),
            ("X-Forwarded-For", format!("203.0.113.{}", i + 1)),
        ]
    })
    .await;
    assert_eq!(got, [200, 200, 429, 429, 429, 429]);
}

/// `for=unknown` and obfuscated identifiers name no address: the client is
/// the trusted proxy that wrote them, so every such request shares one
/// bucket, whatever the client wrote to the left of them.
#[tokio::test]
async fn unknown_and_obfuscated_hops_share_the_proxys_bucket() {
    let s = Sluice::start_with("fwd-unknown", &per_ip(""));
    let got = statuses(&s, 6, |i| {
        let hidden = if i % 2 == 0 { "unknown" } else { "_hidden" };
        vec![(
            "Forwarded",
            format!("for=203.0.113.{}, for={hidden}", i + 1),
        )]
    })
    .await;
    assert_eq!(got, [200, 200, 429, 429, 429, 429]);
}
