//! Caps on open connections: in all, and from one client network.
//!
//! A listener takes a [`ConnPermit`] for each connection it accepts and
//! holds it until the connection closes. When either cap is reached, the
//! connection is refused at once (see [`crate::listener`]): one client
//! cannot hold every file descriptor, and a flood cannot take more than
//! the cap. The per-network map has at most one entry per open connection,
//! so it is bounded by the global cap.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ipnet::IpNet;
use parking_lot::Mutex;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds its most connections.
    Full,
    /// This client network holds its most connections.
    PerClient,
}

/// The caps of one listener, the connections it holds, and what it
/// refused or closed (for metrics).
#[derive(Debug)]
pub struct ConnLimits {
    max: usize,
    max_per_client: usize,
    open: Mutex<Open>,
    /// Connections refused because the listener was full.
    pub refused_full: AtomicU64,
    /// Connections refused because their client held its share.
    pub refused_per_client: AtomicU64,
    /// Connections closed for a request head slower than the timeout.
    pub closed_slow_head: AtomicU64,
    /// Connections closed for sitting idle too long.
    pub closed_idle: AtomicU64,
    /// Connections closed for a response the client did not read.
    pub closed_slow_send: AtomicU64,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_client: HashMap<IpNet, usize>,
}

/// One open connection; dropping it gives its place back.
#[derive(Debug)]
pub struct ConnPermit {
    limits: Arc<ConnLimits>,
    /// The client network it counts against, unless exempt.
    client: Option<IpNet>,
}

impl ConnLimits {
    /// At most `max` connections, and `max_per_client` from one network.
    pub fn new(max: usize, max_per_client: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            max_per_client,
            open: Mutex::new(Open::default()),
            refused_full: AtomicU64::new(0),
            refused_per_client: AtomicU64::new(0),
            closed_slow_head: AtomicU64::new(0),
            closed_idle: AtomicU64::new(0),
            closed_slow_send: AtomicU64::new(0),
        })
    }

    /// A place for a connection from `client` (`None`: a client exempt from
    /// the per-client cap, such as a trusted proxy).
    pub fn try_acquire(self: &Arc<Self>, client: Option<IpNet>) -> Result<ConnPermit, Refused> {
        let mut open = self.open.lock();
        if open.total >= self.max {
            self.refused_full.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Full);
        }
        if let Some(net) = client {
            let n = open.by_client.entry(net).or_insert(0);
            if *n >= self.max_per_client {
                self.refused_per_client.fetch_add(1, Ordering::Relaxed);
                return Err(Refused::PerClient);
            }
            *n += 1;
        }
        open.total += 1;
        Ok(ConnPermit {
            limits: self.clone(),
            client,
        })
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.open.lock().total
    }
}

impl ConnPermit {
    /// Counts this connection against `client` too, once its client is
    /// known (a PROXY protocol header named it); refused, and counted as
    /// such, when that network holds its most connections. A permit that
    /// already counts against a client keeps it.
    pub fn count_client(&mut self, client: IpNet) -> Result<(), Refused> {
        if self.client.is_some() {
            return Ok(());
        }
        let mut open = self.limits.open.lock();
        if open.by_client.get(&client).copied().unwrap_or(0) >= self.limits.max_per_client {
            self.limits
                .refused_per_client
                .fetch_add(1, Ordering::Relaxed);
            return Err(Refused::PerClient);
        }
        *open.by_client.entry(client).or_insert(0) += 1;
        self.client = Some(client);
        Ok(())
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(net) = self.client
            && let Some(n) = open.by_client.get_mut(&net)
        {
            *n -= 1;
            if *n == 0 {
                open.by_client.remove(&net);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Option<IpNet> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn both_caps_hold_and_places_come_back() {
        let limits = ConnLimits::new(3, 2);
        let a1 = limits.try_acquire(net("192.0.2.1/32")).unwrap();
        let _a2 = limits.try_acquire(net("192.0.2.1/32")).unwrap();
        assert_eq!(
            limits.try_acquire(net("192.0.2.1/32")).unwrap_err(),
            Refused::PerClient
        );
        let _b = limits.try_acquire(net("192.0.2.2/32")).unwrap();
        assert_eq!(limits.try_acquire(None).unwrap_err(), Refused::Full);
        drop(a1);
        assert_eq!(limits.open(), 2);
        let _a3 = limits.try_acquire(net("192.0.2.1/32")).unwrap();
        assert_eq!(limits.open(), 3);
    }

    #[test]
    fn a_client_named_later_counts_like_one_known_at_once() {
        let limits = ConnLimits::new(10, 2);
        let _a = limits.try_acquire(net("192.0.2.1/32")).unwrap();
        let mut later = limits.try_acquire(None).unwrap();
        later.count_client(net("192.0.2.1/32").unwrap()).unwrap();
        assert_eq!(
            limits.try_acquire(net("192.0.2.1/32")).unwrap_err(),
            Refused::PerClient
        );
        let mut refused = limits.try_acquire(None).unwrap();
        assert_eq!(
            refused.count_client(net("192.0.2.1/32").unwrap()),
            Err(Refused::PerClient)
        );
        drop(refused);
        drop(later);
        assert_eq!(limits.open(), 1);
        let _b = limits.try_acquire(net("192.0.2.1/32")).unwrap();
    }

    #[test]
    fn exempt_clients_count_only_in_all_and_the_map_empties() {
        let limits = ConnLimits::new(10, 1);
        let held: Vec<_> = (0..5).map(|_| limits.try_acquire(None).unwrap()).collect();
        assert_eq!(limits.open(), 5);
        let one = limits.try_acquire(net("2001:db8::/64")).unwrap();
        drop(one);
        drop(held);
        assert_eq!(limits.open(), 0);
        assert!(limits.open.lock().by_client.is_empty());
    }
}
