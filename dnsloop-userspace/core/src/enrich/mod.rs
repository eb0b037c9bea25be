//! Evidence enrichment: what the node's conntrack table, neighbour table and bridge settings
//! say about a finding, and the cause they establish (for an unexpected source, or a timeout to
//! a server gone from an attached network) or the services behind the DNAT'ed forwards (for a
//! loop, and a slow lookup).
//!
//! Best effort throughout: evidence that cannot be had (no entry, no permission, a timeout) is
//! left out and logged at debug level, and the cause claims no more than the evidence shows.
mod bridge_netfilter;
mod cause;
pub mod conntrack;
mod dnat;
mod neighbour;
mod netlink_socket;
mod stale;

use std::{collections::HashMap, path::Path};

use self::{
    bridge_netfilter::{BridgeNetfilter, BridgeSysctl},
    conntrack::{ConntrackTable, QueryFlow},
};
use crate::{
    analyzers::lookup_summary,
    finding::{
        ConntrackEvidence, Dnat, LookupFinding, LoopFinding, TimeoutFinding,
        UnexpectedSourceFinding,
    },
    observation::Transport,
};

/// One per tracer. Its conntrack socket is opened on first use and stays in the network
/// namespace of the thread that first used it, and the bridge sysctls are read in the calling
/// thread's namespace: call it from a thread in the node's namespace.
#[derive(Debug, Default)]
pub struct Enricher {
    conntrack: ConntrackTable,
    /// The DNATs conntrack established for loop flows. A loop's repeat reports carry its first
    /// path, whose conntrack entries expire (UDP: ~30 s) while the loop goes on: they read the
    /// same as the first report from here.
    translated: HashMap<QueryFlow, Dnat>,
}

/// Loop flows whose translation is remembered; the table starts over when full.
const REMEMBERED_TRANSLATIONS: usize = 1024;

impl Enricher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fills `finding.conntrack` and `finding.cause`, and rewrites `finding.summary` when a
    /// cause is established.
    pub fn enrich(&mut self, finding: &mut UnexpectedSourceFinding) {
        finding.conntrack = self.conntrack_evidence(finding, finding.transport);
        let bridge = bridge_netfilter(BridgeSysctl::for_address(finding.client.ip()));
        if let Some(explanation) = cause::explain(finding, bridge) {
            finding.cause = Some(explanation.cause);
            if let Some(summary) = explanation.summary {
                finding.summary = summary;
            }
        }
    }

    /// Fills `finding.dnat` with the DNATs conntrack recorded for the path's flows, and names
    /// their services in `finding.summary`. Each report of a loop is enriched anew: repeats
    /// come from the analyzer's unenriched copy.
    pub fn enrich_loop(&mut self, finding: &mut LoopFinding) {
        finding.dnat = self.translations(dnat::flows_to_look_up(&finding.path));
        finding.summary = dnat::name_services(&finding.summary, &finding.dnat);
    }

    /// Says in `finding.summary` why its server did not answer: conntrack still translates the
    /// client's flow to a backend nothing answers for (a stale entry, `finding.stale_conntrack`),
    /// or, when the kernel has not said yet, the node's neighbour table says nothing answers ARP
    /// for the server itself. (The kernel drops such a query, `NEIGH_FAILED`, only seconds after
    /// its resolver gave up.)
    pub fn enrich_timeout(&mut self, finding: &mut TimeoutFinding) {
        if let Some(stale) = self.stale_translation(finding) {
            finding.summary = format!("{}; {}", finding.summary, stale::explain(finding, &stale));
            finding.stale_conntrack = Some(stale);
            return;
        }
        if finding.dropped.is_some() {
            return;
        }
        let server = finding.server.ip();
        match neighbour::unresolved(server) {
            Ok(Some(unresolved)) => {
                finding.summary = format!("{}; {}", finding.summary, unresolved.explain(server));
            }
            Ok(None) => {}
            Err(error) => tracing::debug!("reading the neighbour table for {server}: {error}"),
        }
    }

    /// Names the service each of `finding`'s forwards was sent to where a DNAT before its first
    /// sighting hid it (the node's own forwards to a `ClusterIP`): the hop's `server` becomes
    /// the service, its `backend` the pod it went to.
    pub fn enrich_lookup(&mut self, finding: &mut LookupFinding) {
        let translations = self.translations(dnat::lookup_flows_to_look_up(&finding.hops));
        let mut named = false;
        for hop in finding.hops.iter_mut().filter(|hop| hop.backend.is_none()) {
            if let Some(found) = translations.iter().find(|dnat| dnat.backend == hop.server) {
                hop.backend = Some(found.backend);
                hop.server = found.service;
                named = true;
            }
        }
        if named {
            finding.summary = lookup_summary(finding);
        }
    }

    /// Conntrack's entry for the timed-out query's flow, if it translates the flow to another
    /// address that the node's neighbour table cannot resolve, or that the kernel's drop of the
    /// query says is held by no one there (see `stale::BACKEND_GONE`). UDP only: a DNS client
    /// reuses a UDP flow, where a TCP connection to a gone backend is reset and made anew.
    fn stale_translation(&mut self, finding: &TimeoutFinding) -> Option<ConntrackEvidence> {
        let flow = QueryFlow {
            transport: Transport::Udp,
            client: finding.client,
            server: finding.server,
        };
        let entry = match self.conntrack.lookup(&flow) {
            Ok(entry) => entry?,
            Err(error) => {
                tracing::debug!("no conntrack entry for {flow:?}: {}", error_chain(&error));
                return None;
            }
        };
        if entry.reply_src == finding.server {
            return None;
        }
        let backend = entry.reply_src.ip();
        let dropped_as_gone = finding
            .dropped
            .as_ref()
            .is_some_and(|drop| stale::BACKEND_GONE.contains(&&*drop.reason));
        let gone =
            dropped_as_gone || neighbour::unresolved(backend).is_ok_and(|entry| entry.is_some());
        gone.then_some(entry)
    }

    /// The distinct DNATs conntrack recorded for `flows`, in their order.
    fn translations(&mut self, flows: Vec<QueryFlow>) -> Vec<Dnat> {
        let mut translations = Vec::new();
        for flow in flows {
            if let Some(&known) = self.translated.get(&flow) {
                if !translations.contains(&known) {
                    translations.push(known);
                }
                continue;
            }
            match self.conntrack.lookup_delivered(&flow) {
                Ok(Some(entry)) => {
                    let Some(found) = dnat::translation(&flow, &entry) else {
                        continue;
                    };
                    if self.translated.len() >= REMEMBERED_TRANSLATIONS {
                        self.translated.clear();
                    }
                    self.translated.insert(flow, found);
                    if !translations.contains(&found) {
                        translations.push(found);
                    }
                }
                Ok(None) => tracing::debug!("conntrack has no entry delivering {flow:?}"),
                Err(error) => {
                    tracing::debug!(
                        "no conntrack evidence for the loop's {flow:?}: {}",
                        error_chain(&error)
                    );
                    // A failed lookup may have waited the whole timeout, and the next one
                    // would most likely fail the same way.
                    break;
                }
            }
        }
        translations
    }

    fn conntrack_evidence(
        &mut self,
        finding: &UnexpectedSourceFinding,
        transport: Transport,
    ) -> Option<ConntrackEvidence> {
        let flow = QueryFlow {
            transport,
            client: finding.client,
            server: finding.expected,
        };
        match self.conntrack.lookup(&flow) {
            Ok(Some(evidence)) => Some(evidence),
            Ok(None) => {
                tracing::debug!("conntrack has no entry for {flow:?}");
                None
            }
            Err(error) => {
                tracing::debug!(
                    "no conntrack evidence for {flow:?}: {}",
                    error_chain(&error)
                );
                None
            }
        }
    }
}

/// The bridge netfilter state of the calling thread's namespace; `None` when it cannot be read.
fn bridge_netfilter(sysctl: BridgeSysctl) -> Option<BridgeNetfilter> {
    sysctl
        .read(Path::new("/"))
        .inspect_err(|error| {
            tracing::debug!("bridge netfilter state unknown: {}", error_chain(error));
        })
        .ok()
}

/// `error: its source: ...`, since debug logs are read without a backtrace.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
