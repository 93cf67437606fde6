//! Timeouts and reconnect pacing shared by every topology.

use std::time::Duration;

/// How long to wait for Redis, and how to pace reconnection.
///
/// The defaults suit a rate limiter on a local network: a request that
/// Redis cannot answer within about two seconds fails (and the caller's
/// fallback decides), and after Redis comes back, requests succeed again
/// within about a second, with at most a couple of connection attempts per
/// second per node while it is away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyOptions {
    /// How long one TCP (and TLS) connection attempt may take.
    pub connect_timeout: Duration,
    /// How long one command may wait for its reply on an open connection.
    pub response_timeout: Duration,
    /// The first reconnect delay. Each further attempt waits twice as long
    /// as the previous one, up to [`Self::reconnect_max_delay`], plus a
    /// random jitter of up to 100 % of that delay.
    pub reconnect_min_delay: Duration,
    /// The longest reconnect delay before jitter. Bounds both the time from
    /// "Redis is back" to "commands succeed" (at most twice this) and the
    /// attempt rate while Redis is down (at most one per this delay).
    pub reconnect_max_delay: Duration,
    /// Reconnect attempts in one burst. When a burst is spent, the next
    /// command starts a new one, so a long outage costs nothing but the
    /// paced attempts; keep it finite so that a dropped topology's
    /// background reconnection ends.
    pub reconnect_attempts: usize,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_millis(1000),
            response_timeout: Duration::from_millis(1000),
            reconnect_min_delay: Duration::from_millis(100),
            reconnect_max_delay: Duration::from_millis(500),
            reconnect_attempts: 12,
        }
    }
}

impl TopologyOptions {
    /// The longest one request may take through a [`Route`](super::Route):
    /// waiting for a (re)connection plus waiting for the reply.
    pub fn request_deadline(&self) -> Duration {
        self.connect_timeout.saturating_add(self.response_timeout)
    }

    /// The settings of one multiplexed connection.
    pub(crate) fn connection_config(&self) -> redis::AsyncConnectionConfig {
        redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
    }

    /// The settings of one auto-reconnecting connection.
    pub(crate) fn manager_config(&self) -> redis::aio::ConnectionManagerConfig {
        redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_min_delay(self.reconnect_min_delay)
            .set_max_delay(self.reconnect_max_delay)
            .set_exponent_base(2.0)
            .set_number_of_retries(self.reconnect_attempts)
    }
}
