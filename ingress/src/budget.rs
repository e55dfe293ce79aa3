//! The memory bodies may hold while they are read, before their signature is checked. Bytes are
//! reserved as they arrive (a connection that declares 256 KiB and trickles holds what it has
//! sent, not what it declared) against three limits at once: all connections together
//! (`body_budget_bytes`), one client address (`client_budget_bytes`) and one source
//! (`source_budget_bytes`). A chunk that does not fit ends its delivery at once (503), never
//! queued and never buffered; what a delivery reserved is given back when it has been answered.
//! So one address cannot hold the budget every source shares, and a flood at one source's path
//! from many addresses leaves room for the others.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The limits, in bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) total: usize,
    pub(crate) client: usize,
    pub(crate) source: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct BodyBudget {
    limits: Limits,
    held: Arc<Mutex<Held>>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    clients: HashMap<IpAddr, usize>,
    sources: HashMap<String, usize>,
}

/// Which limit a chunk did not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    Total,
    Client,
    Source,
}

impl Full {
    fn as_str(self) -> &'static str {
        match self {
            Full::Total => "total",
            Full::Client => "client",
            Full::Source => "source",
        }
    }
}

impl BodyBudget {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            held: Arc::default(),
        }
    }

    /// An empty reservation for one delivery of `source` from `client`, grown as its body
    /// arrives ([`Reservation::grow`]).
    pub(crate) fn reservation(&self, client: Option<IpAddr>, source: &str) -> Reservation {
        Reservation {
            budget: self.clone(),
            client,
            source: source.to_owned(),
            bytes: 0,
        }
    }
}

/// What one delivery holds; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: BodyBudget,
    client: Option<IpAddr>,
    source: String,
    bytes: usize,
}

impl Reservation {
    /// Reserves `bytes` more, or says which limit has no room for them now (counted).
    pub(crate) fn grow(&mut self, bytes: usize) -> Result<(), Full> {
        let limits = self.budget.limits;
        let mut held = self.budget.held.lock().unwrap_or_else(|e| e.into_inner());
        let client = self
            .client
            .map_or(0, |c| held.clients.get(&c).copied().unwrap_or(0));
        let source = held.sources.get(&self.source).copied().unwrap_or(0);
        let full = if held.total + bytes > limits.total {
            Some(Full::Total)
        } else if self.client.is_some() && client + bytes > limits.client {
            Some(Full::Client)
        } else if source + bytes > limits.source {
            Some(Full::Source)
        } else {
            None
        };
        if let Some(full) = full {
            metrics::counter!("settle_ingress_body_budget_refused_total", "limit" => full.as_str())
                .increment(1);
            return Err(full);
        }
        held.total += bytes;
        if let Some(c) = self.client {
            *held.clients.entry(c).or_default() += bytes;
        }
        *held.sources.entry(self.source.clone()).or_default() += bytes;
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut held = self.budget.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total -= self.bytes;
        if let Some(client) = self.client
            && let Some(bytes) = held.clients.get_mut(&client)
        {
            *bytes -= self.bytes;
            if *bytes == 0 {
                held.clients.remove(&client);
            }
        }
        if let Some(bytes) = held.sources.get_mut(&self.source) {
            *bytes -= self.bytes;
            if *bytes == 0 {
                held.sources.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn budget() -> BodyBudget {
        BodyBudget::new(Limits {
            total: 100,
            client: 30,
            source: 60,
        })
    }

    #[test]
    fn a_client_holds_at_most_its_share_and_others_still_fit() {
        let budget = budget();
        let mut first = budget.reservation(Some(A), "one");
        first.grow(20).expect("fits");
        let mut second = budget.reservation(Some(A), "two");
        assert_eq!(second.grow(11), Err(Full::Client), "the address' share");
        second.grow(10).expect("up to it");
        let mut other = budget.reservation(Some(B), "two");
        other.grow(30).expect("another address has its own");
        drop(first);
        let mut again = budget.reservation(Some(A), "one");
        again.grow(20).expect("given back when dropped");
        assert_eq!(budget.held.lock().expect("lock").total, 60);
    }

    #[test]
    fn a_source_holds_at_most_its_share_and_the_total_bounds_all() {
        let budget = budget();
        let mut held: Vec<Reservation> = Vec::new();
        for client in 0..2u8 {
            let mut r = budget.reservation(Some(IpAddr::from([10, 1, 0, client])), "one");
            r.grow(30).expect("fits");
            held.push(r);
        }
        let mut third = budget.reservation(Some(IpAddr::from([10, 1, 0, 9])), "one");
        assert_eq!(
            third.grow(1),
            Err(Full::Source),
            "the source's share is spent"
        );
        let mut two = budget.reservation(Some(IpAddr::from([10, 2, 0, 1])), "two");
        two.grow(30).expect("another source still fits");
        let mut last = budget.reservation(None, "other");
        assert_eq!(last.grow(11), Err(Full::Total));
        last.grow(10).expect("up to the total");
        drop(held);
        drop(two);
        drop(last);
        drop(third);
        let held = budget.held.lock().expect("lock");
        assert_eq!(held.total, 0);
        assert!(held.clients.is_empty() && held.sources.is_empty());
    }
}
