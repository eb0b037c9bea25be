//! `--metrics-addr`: Prometheus metrics while `dnsloop trace` runs, for a node's scraper to
//! aggregate; dnsloop keeps no history of its own.
//!
//! Findings are counted by a sink wrapped around the output (`findings`). What the kernel
//! counted is read into a snapshot every [`REFRESH_INTERVAL`] on the tracing thread, which owns
//! the maps (`kernel`), and encoded from that snapshot on each scrape (`http`). Every label is
//! bounded: interfaces, directions, malformed reasons, rcodes, and at most
//! [`servers::MAX_SERVER_LABELS`] servers; never a name asked about.
mod address;
mod findings;
mod http;
mod kernel;
mod lacks;
mod latency_histogram;
mod servers;

use std::{cell::RefCell, io, net::SocketAddr, rc::Rc, sync::Arc, time::Duration};

use prometheus_client::registry::Registry;
use thiserror::Error;
use tokio::{net::TcpListener, task::JoinHandle};

pub use address::parse_listen_address;

use self::{
    findings::{CountingSink, FindingCounts},
    kernel::{KernelSnapshot, SharedSnapshot},
    lacks::KernelLacks,
    servers::{ServerLabels, MAX_SERVER_LABELS},
};
use aya::Ebpf;

use crate::{
    kernel::{drops::Drops, features::Lack},
    node::topology::Link,
};
use dnsloop_core::sink::Sink;

/// How often the kernel's counters are read for the scrapes: how stale they may be.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("cannot serve metrics on {address}: port in use; choose another with --metrics-addr")]
    InUse { address: SocketAddr },
    #[error("cannot serve metrics on {address} (choose another with --metrics-addr)")]
    Bind {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// The metrics of one trace, served until dropped.
pub struct Exporter {
    address: SocketAddr,
    findings: FindingCounts,
    lacks: KernelLacks,
    servers: Rc<RefCell<ServerLabels>>,
    snapshot: SharedSnapshot,
    server: JoinHandle<()>,
}

impl Exporter {
    /// Listens on `address` and answers scrapes from a task on the current runtime.
    pub async fn start(address: SocketAddr) -> Result<Self, ServeError> {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| match source.kind() {
                io::ErrorKind::AddrInUse => ServeError::InUse { address },
                _ => ServeError::Bind { address, source },
            })?;
        // Port 0 is the kernel's choice: say which one it made.
        let address = listener.local_addr().unwrap_or(address);
        let (registry, findings, lacks, snapshot) = registry();
        let server = tokio::spawn(http::serve(listener, Arc::new(registry)));
        Ok(Self {
            address,
            findings,
            lacks,
            servers: Rc::new(RefCell::new(ServerLabels::new(MAX_SERVER_LABELS))),
            snapshot,
            server,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}{}", self.address, http::PATH)
    }

    /// Serves what this kernel lacks (see `kernel::features`).
    pub fn note_lacks(&self, lacks: &[Lack]) {
        self.lacks.note(lacks);
    }

    /// `sink`, with every finding written to it counted.
    pub fn count_findings<'a>(&self, sink: Box<dyn Sink + 'a>) -> Box<dyn Sink + 'a> {
        Box::new(CountingSink::new(
            sink,
            self.findings.clone(),
            self.servers.clone(),
        ))
    }

    /// Reads what the kernel counted on the node's `links` (the node's namespace has cookie
    /// `node_cookie`), for the next scrapes. A failed read keeps the previous numbers: tracing
    /// goes on.
    pub fn refresh(&self, ebpf: &Ebpf, node_cookie: u64, links: &[Link], drops: Option<&Drops>) {
        let servers = &mut self.servers.borrow_mut();
        match KernelSnapshot::read(ebpf, node_cookie, links, drops, servers) {
            Ok(snapshot) => self.snapshot.replace(snapshot),
            Err(error) => tracing::warn!("metrics: {error:#}; serving the previous numbers"),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The registry every metric is in, and the handles that fill it.
fn registry() -> (Registry, FindingCounts, KernelLacks, SharedSnapshot) {
    let mut registry = Registry::default();
    let findings = FindingCounts::register(&mut registry);
    let lacks = KernelLacks::register(&mut registry);
    let snapshot = SharedSnapshot::default();
    registry.register_collector(Box::new(snapshot.clone()));
    (registry, findings, lacks, snapshot)
}

#[cfg(test)]
mod tests;
