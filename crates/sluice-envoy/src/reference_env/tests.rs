use super::*;
use sluice_policy::Deployment;

fn read(vars: &[(&str, &str)]) -> Result<ReferenceEnv, EnvError> {
    ReferenceEnv::read(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
}

/// The environment's config, compiled as `sluice serve` compiles a file.
fn deployment(env: &ReferenceEnv) -> Deployment {
    Deployment::from_toml("<environment>", &env.toml)
        .unwrap_or_else(|e| panic!("{e}\n{}", env.toml))
}

const TCP: [(&str, &str); 2] = [("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis.ns:6379")];

#[test]
fn the_reference_defaults_give_its_ports_and_runtime_directory() {
    let env = read(&TCP).unwrap();
    let d = deployment(&env);
    assert_eq!(d.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(d.control_listen.to_string(), "0.0.0.0:6070");
    let e = d.envoy.unwrap();
    assert_eq!(e.grpc_listen.to_string(), "0.0.0.0:8081");
    assert_eq!(
        e.configs,
        [std::path::PathBuf::from("/srv/runtime_data/current/config")]
    );
    assert!(e.compat && !e.merge_domains && !e.response_dynamic_metadata && !e.response_headers);
    assert_eq!(d.store.url.unwrap().to_string(), "redis://redis.ns:6379");
    assert_eq!((env.log_level, env.log_json), ("warn", false));
    assert_eq!(
        env.health,
        HealthSettings {
            needs_config: false,
            redis: true,
            redis_active_check: false
        }
    );
    // USE_STATSD is on by default there: said once.
    assert_eq!(env.warnings.len(), 1, "{:?}", env.warnings);
    assert!(env.warnings[0].contains("USE_STATSD"));
}

#[test]
fn every_setting_with_a_meaning_is_followed() {
    let env = read(&[
        ("REDIS_SOCKET_TYPE", "TCP"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", "r1:7000,r2:7001"),
        ("REDIS_AUTH", "app:p@ss:w/rd"),
        ("REDIS_TLS", "true"),
        ("REDIS_TIMEOUT", "250ms"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ("HOST", "127.0.0.1"),
        ("PORT", "18080"),
        ("GRPC_HOST", "::1"),
        ("GRPC_PORT", "18081"),
        ("DEBUG_PORT", "16070"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("MERGE_DOMAIN_CONFIG", "true"),
        ("SHADOW_MODE", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "1"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
        ("LOG_LEVEL", "debug"),
        ("LOG_FORMAT", "json"),
        ("USE_STATSD", "false"),
        ("PATH", "/usr/bin"),
    ])
    .unwrap();
    let d = deployment(&env);
    assert_eq!(d.listen.to_string(), "127.0.0.1:18080");
    assert_eq!(d.control_listen.to_string(), "0.0.0.0:16070");
    let e = d.envoy.unwrap();
    assert_eq!(e.grpc_listen.to_string(), "[::1]:18081");
    assert_eq!(
        e.configs,
        [std::path::PathBuf::from("/data/ratelimit/config")]
    );
    assert!(e.merge_domains && e.response_dynamic_metadata && e.response_headers && e.shadow_mode);
    let url = d.store.url.unwrap();
    assert_eq!(url.to_string(), "rediss+cluster://app:***@r1:7000,r2:7001");
    assert_eq!(
        d.store.shared.timeout,
        std::time::Duration::from_millis(250)
    );
    assert!(d.store.shared.over_limit_cache);
    assert_eq!((env.log_level, env.log_json), ("debug", true));
    assert_eq!(
        env.health,
        HealthSettings {
            needs_config: true,
            redis: true,
            redis_active_check: true
        }
    );
    assert!(env.warnings.is_empty(), "{:?}", env.warnings);
}

#[test]
fn a_sentinel_url_names_its_master_then_its_sentinels() {
    let env = read(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "SENTINEL"),
        ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
        ("REDIS_AUTH", "secret"),
    ])
    .unwrap();
    assert_eq!(
        deployment(&env).store.url.unwrap().to_string(),
        "redis+sentinel://:***@s1:26379,s2:26379/mymaster"
    );
    // The Sentinels' own password, and a CA for TLS, complete the URL.
    let env = read(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "SENTINEL"),
        ("REDIS_URL", "mymaster,s1:26379"),
        ("REDIS_SENTINEL_AUTH", "s3cret"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", "/etc/redis/ca.pem"),
    ])
    .unwrap();
    let Some(sluice_store_url::StoreUrl::Sentinel {
        sentinels,
        master_auth,
        ..
    }) = env.store_url
    else {
        panic!("not a Sentinel URL")
    };
    assert_eq!(sentinels[0].password.as_deref(), Some("s3cret"));
    let ca = Some(std::path::PathBuf::from("/etc/redis/ca.pem"));
    assert_eq!((&sentinels[0].ca_file, &master_auth.ca_file), (&ca, &ca));
}

#[test]
fn the_memory_backend_and_an_xds_server() {
    let env = read(&[
        ("BACKEND_TYPE", "memory"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "xds.ns:18000"),
        ("CONFIG_GRPC_XDS_NODE_ID", "rls-1"),
    ])
    .unwrap();
    let d = deployment(&env);
    assert!(d.store.url.is_none());
    assert!(!env.health.redis);
    let x = d.envoy.unwrap().xds.unwrap();
    assert_eq!(
        (x.server.as_str(), x.node_id.as_str()),
        ("http://xds.ns:18000", "rls-1")
    );
}

#[test]
fn ignored_settings_are_named_in_a_warning() {
    let mut vars = TCP.to_vec();
    vars.extend([
        ("USE_STATSD", "false"),
        ("REDIS_POOL_SIZE", "20"),
        ("CACHE_KEY_PREFIX", "team-a:"),
        ("USE_PROMETHEUS", "true"),
    ]);
    let env = read(&vars).unwrap();
    let names: Vec<&str> = env
        .warnings
        .iter()
        .map(|w| w.split('=').next().unwrap())
        .collect();
    assert_eq!(
        names,
        ["REDIS_POOL_SIZE", "CACHE_KEY_PREFIX", "USE_PROMETHEUS"]
    );
}

#[test]
fn a_value_sluice_cannot_honour_is_an_error_naming_its_variable() {
    let err = |extra: &[(&str, &str)]| {
        let mut vars = TCP.to_vec();
        vars.extend_from_slice(extra);
        read(&vars).unwrap_err()
    };
    // The reference server's default socket is a unix one.
    assert_eq!(read(&[]).unwrap_err().variable, "REDIS_SOCKET_TYPE");
    for (name, value) in [
        ("BACKEND_TYPE", "memcache"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_TYPE", "RING"),
        ("REDIS_TLS", "maybe"),
        ("PORT", "80800"),
        ("HOST", ""),
        ("GRPC_UDS", "/tmp/rls.sock"),
        ("LOG_LEVEL", "loud"),
        ("LOG_FORMAT", "xml"),
        ("CONFIG_TYPE", "CONSUL"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("QUOTA_MODE", "true"),
        ("REDIS_TIMEOUT", "soon"),
        ("REDIS_URL", "redis://r:6379"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "-1"),
    ] {
        let e = err(&[(name, value)]);
        assert_eq!(e.variable, name, "{e}");
        assert!(e.to_string().starts_with(&format!("{name}=")), "{e}");
    }
    // A secret is not shown.
    let e = err(&[("REDIS_TYPE", "SENTINEL"), ("REDIS_AUTH", "hunter2")]);
    assert_eq!(e.variable, "REDIS_URL");
    let e = err(&[("REDIS_AUTH", "hunter2"), ("REDIS_URL", "a:1,b:2")]);
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn a_toml_string_escapes_what_toml_must() {
    assert_eq!(quoted("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
}
