//! The reference server's variables: those read for their meaning, and
//! those that have no effect in Sluice, with what to say about each.

/// Variables that have no effect in Sluice when set: what to say about
/// each.
pub(super) const IGNORED: &[(&str, &str)] = &[
    ("PROTO", "Sluice listens on TCP"),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "Sluice keeps connections open and pings idle ones",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "Sluice keeps connections open and pings idle ones",
    ),
    (
        "REDIS_POOL_SIZE",
        "Sluice multiplexes its calls on a few connections",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "Sluice batches concurrent calls by itself",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "Sluice batches concurrent calls by itself",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "Sluice batches concurrent calls by itself",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "Sluice multiplexes its calls and never waits for a pooled connection",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "Sluice starts at once on its local fallback and connects in the background",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "Sluice starts at once on its local fallback and connects in the background",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "Sluice starts at once on its local fallback and connects in the background",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "Sluice's keys expire when their window does",
    ),
    (
        "CACHE_KEY_PREFIX",
        "Sluice names its keys by a keyed hash: deployments sharing one Redis keep apart with different SLUICE_KEY_SECRETs",
    ),
    ("NEAR_LIMIT_RATIO", "the near-limit statistic uses 0.8"),
    (
        "RUNTIME_WATCH_ROOT",
        "Sluice watches the config files themselves, whatever replaces them",
    ),
    (
        "RUNTIME_IGNOREDOTFILES",
        "Sluice always skips dot files (and Kubernetes' ..data entries)",
    ),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "Sluice always starts, answering OK until the first rules come",
    ),
    (
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_BACKOFF_JITTER",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        "Sluice takes xDS messages of up to 16 MiB",
    ),
    (
        "USE_STATSD",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "STATSD_HOST",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "STATSD_PORT",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "USE_DOG_STATSD",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "EXTRA_TAGS",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "STATS_FLUSH_INTERVAL",
        "Sluice's metrics are read when scraped",
    ),
    (
        "DISABLE_STATS",
        "Sluice's metrics cost nothing until scraped",
    ),
    (
        "USE_PROMETHEUS",
        "Sluice serves its metrics on the debug port, at /metrics",
    ),
    (
        "PROMETHEUS_ADDR",
        "Sluice serves its metrics on the debug port, at /metrics",
    ),
    (
        "PROMETHEUS_PATH",
        "Sluice serves its metrics on the debug port, at /metrics",
    ),
    (
        "PROMETHEUS_MAPPER_YAML",
        "Sluice's metrics have their own names (docs/observability.md)",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "Sluice's metrics have their own names (docs/observability.md)",
    ),
    ("TRACING_ENABLED", "Sluice does not export traces"),
    ("TRACING_SERVICE_NAME", "Sluice does not export traces"),
    ("TRACING_SERVICE_NAMESPACE", "Sluice does not export traces"),
    (
        "TRACING_SERVICE_INSTANCE_ID",
        "Sluice does not export traces",
    ),
    ("TRACING_EXPORTER_PROTOCOL", "Sluice does not export traces"),
    ("TRACING_SAMPLING_RATE", "Sluice does not export traces"),
    ("MEMCACHE_HOST_PORT", "the backend is Redis"),
    ("MEMCACHE_MAX_IDLE_CONNS", "the backend is Redis"),
    ("MEMCACHE_SRV", "the backend is Redis"),
    ("MEMCACHE_SRV_REFRESH", "the backend is Redis"),
    ("MEMCACHE_TLS", "the backend is Redis"),
    ("MEMCACHE_TLS_CLIENT_CERT", "the backend is Redis"),
    ("MEMCACHE_TLS_CLIENT_KEY", "the backend is Redis"),
    ("MEMCACHE_TLS_CACERT", "the backend is Redis"),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "the backend is Redis",
    ),
    ("REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_TYPE", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_URL", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_AUTH", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_TLS", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND is off"),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "REDIS_PERSECOND is off",
    ),
    ("REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND is off"),
    (
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        "REDIS_PERSECOND is off",
    ),
];

/// The variables read for their meaning (besides [`IGNORED`]).
pub(super) const READ: &[&str] = &[
    "HOST",
    "PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_UDS",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "CONFIG_TYPE",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "BACKEND_TYPE",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_TIMEOUT",
    "REDIS_PERSECOND",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "MERGE_DOMAIN_CONFIG",
];
