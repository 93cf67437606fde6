//! Store URL parsing, the password fallback and redaction.

#![allow(clippy::unwrap_used)]

use sluice_redis::url::{
    BadUrl, CA_FILE_ENV, MasterAuth, NodeAddr, PASSWORD_ENV, SENTINEL_PASSWORD_ENV, StoreUrl,
};

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(s: &str) -> StoreUrl {
    StoreUrl::parse_with_env(s, no_env).unwrap()
}

/// The `BadUrl` fields of a failed parse.
fn bad(s: &str) -> (String, String) {
    match StoreUrl::parse_with_env(s, no_env) {
        Err(BadUrl { url, reason }) => (url, reason),
        other => panic!("{s}: expected BadUrl, got {other:?}"),
    }
}

fn node(host: &str, port: u16) -> NodeAddr {
    NodeAddr::new(host, port)
}

#[test]
fn single_node() {
    assert_eq!(
        parse("redis://127.0.0.1:6380"),
        StoreUrl::Single(node("127.0.0.1", 6380))
    );
    assert_eq!(
        parse("redis://localhost"),
        StoreUrl::Single(node("localhost", 6379))
    );
    let StoreUrl::Single(n) = parse("rediss://alice:s3cret@cache.example:6390/4") else {
        panic!()
    };
    assert!(n.tls);
    assert_eq!(n.username.as_deref(), Some("alice"));
    assert_eq!(n.password.as_deref(), Some("s3cret"));
    assert_eq!(n.db, 4);
    assert_eq!((n.host.as_str(), n.port), ("cache.example", 6390));
}

#[test]
fn password_only_and_ipv6() {
    let StoreUrl::Single(n) = parse("redis://:pw@[::1]:7000/") else {
        panic!()
    };
    assert_eq!(n.username, None);
    assert_eq!(n.password.as_deref(), Some("pw"));
    assert_eq!((n.host.as_str(), n.port, n.db), ("::1", 7000, 0));
}

#[test]
fn percent_decoded_credentials() {
    let StoreUrl::Single(n) = parse("redis://us%65r:p%40ss%3Aw%2Frd%25@h:1") else {
        panic!()
    };
    assert_eq!(n.username.as_deref(), Some("user"));
    assert_eq!(n.password.as_deref(), Some("p@ss:w/rd%"));
}

#[test]
fn an_unencoded_at_sign_in_the_password_still_parses() {
    let StoreUrl::Single(n) = parse("redis://u:p@ss@h:1") else {
        panic!()
    };
    assert_eq!(n.password.as_deref(), Some("p@ss"));
    assert_eq!(n.host, "h");
}

#[test]
fn password_from_the_environment_when_the_url_has_none() {
    let env = |name: &str| (name == PASSWORD_ENV).then(|| "from-env".to_owned());
    let StoreUrl::Single(n) = StoreUrl::parse_with_env("redis://h:1", env).unwrap() else {
        panic!()
    };
    assert_eq!(n.password.as_deref(), Some("from-env"));
    // The URL's own password wins.
    let StoreUrl::Single(n) = StoreUrl::parse_with_env("redis://:url@h:1", env).unwrap() else {
        panic!()
    };
    assert_eq!(n.password.as_deref(), Some("url"));
    // A user name without a password also takes the environment's.
    let StoreUrl::Single(n) = StoreUrl::parse_with_env("redis://bob@h:1", env).unwrap() else {
        panic!()
    };
    assert_eq!(n.username.as_deref(), Some("bob"));
    assert_eq!(n.password.as_deref(), Some("from-env"));
}

#[test]
fn cluster_seeds() {
    let url = parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001,10.0.0.3");
    let StoreUrl::Cluster(seeds) = &url else {
        panic!()
    };
    assert_eq!(seeds.len(), 3);
    assert_eq!(seeds[2].port, 6379);
    assert!(
        seeds
            .iter()
            .all(|s| s.password.as_deref() == Some("pw") && !s.tls)
    );
    let StoreUrl::Cluster(seeds) = parse("rediss+cluster://a:1,b:2") else {
        panic!()
    };
    assert!(seeds.iter().all(|s| s.tls));
}

#[test]
fn shards_share_the_database() {
    let StoreUrl::Shards(nodes) = parse("redis+shards://a:1,b:2,c:3/2") else {
        panic!()
    };
    assert_eq!(
        nodes
            .iter()
            .map(|n| (n.host.as_str(), n.port, n.db))
            .collect::<Vec<_>>(),
        [("a", 1, 2), ("b", 2, 2), ("c", 3, 2)]
    );
}

#[test]
fn sentinel_master_and_credentials() {
    let env = |name: &str| match name {
        SENTINEL_PASSWORD_ENV => Some("sentinel-pw".to_owned()),
        CA_FILE_ENV => Some("/etc/ca.pem".to_owned()),
        _ => None,
    };
    let url = StoreUrl::parse_with_env(
        "rediss+sentinel://u:master-pw@s1,s2:26380/my%20master/3",
        env,
    )
    .unwrap();
    let StoreUrl::Sentinel {
        sentinels,
        master,
        master_auth,
    } = url
    else {
        panic!()
    };
    assert_eq!(master, "my master");
    assert_eq!(
        sentinels
            .iter()
            .map(|s| (s.host.as_str(), s.port))
            .collect::<Vec<_>>(),
        [("s1", 26379), ("s2", 26380)]
    );
    assert!(sentinels.iter().all(|s| s.tls
        && s.password.as_deref() == Some("sentinel-pw")
        && s.ca_file.as_deref() == Some(std::path::Path::new("/etc/ca.pem"))));
    assert_eq!(
        master_auth,
        MasterAuth {
            username: Some("u".into()),
            password: Some("master-pw".into()),
            db: 3,
            tls: true,
            ca_file: Some("/etc/ca.pem".into()),
        }
    );
    // Without TLS the CA file is not read.
    let plain = StoreUrl::parse_with_env("redis://h:1", env).unwrap();
    assert!(plain.nodes()[0].ca_file.is_none());
}

#[test]
fn errors_say_what_is_wrong() {
    let cases = [
        ("localhost:6379", "missing scheme"),
        ("http://h:1", "unknown scheme"),
        ("redis://", "empty host"),
        ("redis://h:0", "not a number in 1..=65535"),
        ("redis://h:99999", "not a number in 1..=65535"),
        ("redis://h:x", "not a number"),
        ("redis://a:1,b:2", "names one node"),
        ("redis://h:1/x", "database `x`"),
        ("redis://h:1/-1", "database `-1`"),
        ("redis://h:1/0/1", "too many path segments"),
        ("redis://h:1?timeout=1", "query parameters"),
        ("redis://h:1#insecure", "fragments"),
        ("redis+cluster://a:1/1", "only database 0"),
        ("redis+shards://a:1,a:1", "listed twice"),
        ("redis+shards://a:1,,b:2", "empty host"),
        ("redis+sentinel://s1:26379", "missing master name"),
        ("redis+sentinel://s1/m/1/2", "too many path segments"),
        ("redis://h%20x:1", "cannot have"),
        ("redis://[::1:1", "missing `]`"),
        ("redis://[zz]:1", "not an IPv6 address"),
    ];
    for (url, expected) in cases {
        let (_, reason) = bad(url);
        assert!(
            reason.contains(expected),
            "{url}: reason `{reason}` lacks `{expected}`"
        );
    }
}

#[test]
fn errors_never_show_the_password() {
    for url in [
        "redis://u:hunter2@h:0",
        "redis://:hunter2@a:1,b:2",
        "redis+cluster://:hunter2@a:1/5",
        "redis://u:hunter2%zz@h:1",
        "redis://:hunter2@h:1?x=1",
        "ftp://u:hunter2@h",
        "u:hunter2@h:1",
    ] {
        let err = StoreUrl::parse_with_env(url, no_env).unwrap_err();
        let (shown, reason) = bad(url);
        for text in [
            shown.as_str(),
            reason.as_str(),
            &err.to_string(),
            &format!("{err:?}"),
        ] {
            assert!(!text.contains("hunter2"), "{url}: leaked in `{text}`");
        }
        assert!(
            shown.contains("***"),
            "{url}: `{shown}` does not mark the redaction"
        );
    }
}

#[test]
fn display_and_debug_redact() {
    let env = |name: &str| (name == PASSWORD_ENV).then(|| "env-secret".to_owned());
    for url in [
        "redis://u:hunter2@h:1/2",
        "rediss+cluster://:hunter2@a:1,b:2",
        "redis+shards://u:hunter2@a:1,b:2",
        "redis+sentinel://u:hunter2@s1:1/m",
    ] {
        let parsed = StoreUrl::parse_with_env(url, no_env).unwrap();
        let (display, debug) = (parsed.to_string(), format!("{parsed:?}"));
        assert!(
            !display.contains("hunter2") && display.contains("***"),
            "{display}"
        );
        assert!(
            !debug.contains("hunter2") && debug.contains("***"),
            "{debug}"
        );
    }
    let parsed = StoreUrl::parse_with_env("redis://h:1", env).unwrap();
    assert_eq!(parsed.to_string(), "redis://:***@h:1");
    assert!(!format!("{parsed:?}").contains("env-secret"));
}

#[test]
fn display_is_canonical() {
    assert_eq!(parse("REDIS://h").to_string(), "redis://h:6379");
    assert_eq!(
        parse("redis+shards://a:1,b:2/0").to_string(),
        "redis+shards://a:1,b:2"
    );
    assert_eq!(
        parse("redis+sentinel://s1,[::1]:5/m").to_string(),
        "redis+sentinel://s1:26379,[::1]:5/m"
    );
}

#[test]
fn from_str_parses() {
    // FromStr reads the real environment; only check what does not depend on it.
    let url: StoreUrl = "redis+shards://a:1,b:2".parse().unwrap();
    assert_eq!(url.nodes().len(), 2);
    assert!("nonsense".parse::<StoreUrl>().is_err());
}
