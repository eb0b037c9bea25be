//! Search-list waste: a pod's resolver asks an external name first with each suffix of its
//! search list (`ndots:5` in Kubernetes: `api.example.com.default.svc.cluster.local`, ...),
//! each answered NXDOMAIN, before the name itself. Every lookup of such a name costs those
//! queries and their round trips.
//!
//! The client view (`client_view`) hands in every query sent and every one answered at its
//! client. A query answered NXDOMAIN is held a moment per client; one answered otherwise whose
//! name the held ones extend (same client address, same type, asked before it) ends a lookup
//! that wasted them. Each client is reported a second after its first such lookup ends (its
//! parallel A and AAAA lookups end together), then at most once per report interval, with what
//! it wasted since its previous report.
//!
//! A forwarder (a node cache) that passes a pod's expansions on asks them too, a moment after
//! the pod: a client that asks a question another client asked within that moment is taken
//! for a forwarder, and not reported. (Two pods asking one name at once hide the later one:
//! a finding missed, never one made up.)
use std::{
    collections::VecDeque,
    net::{IpAddr, SocketAddr},
    time::{Duration, SystemTime},
};

use super::{
    has_waited, later,
    outstanding::SentQuery,
    packet::QuestionKey,
    table::{FastHash, Table},
};
use crate::{
    finding::{Finding, SearchListFinding, SlowestSearch},
    observation::{FoldedName, Namespace, Observation},
    present::{mnemonic, names::Names},
};

/// NXDOMAIN answer code.
const NXDOMAIN: u16 = 3;

/// A resolver goes through its search list at once; an expansion asked longer than this before
/// the name itself is not part of its lookup.
const LOOKUP_LASTS_AT_MOST: Duration = Duration::from_secs(5);

/// Answers NXDOMAIN held per client: a search list has at most six suffixes, asked for A and
/// AAAA each.
const HELD_PER_CLIENT: usize = 16;

/// A client's first report waits this long after its first wasteful lookup, by when the lookup
/// of the other address family has ended too.
const LOOKUPS_SETTLE: Duration = Duration::from_secs(1);

/// A forwarder passes a query on within this long of getting it.
const PASSED_ON_WITHIN: Duration = Duration::from_millis(250);

/// Judges lookups per client, and reports each client at most once per report interval.
pub struct SearchLists {
    report_interval: Duration,
    clients: Table<IpAddr, Client, FastHash>,
    /// Clients with waste to report, by when, in that order.
    due: VecDeque<(SystemTime, IpAddr)>,
    due_capacity: usize,
    /// Who asked each question last, and when: a different client asking it a moment later is
    /// forwarding it.
    askers: Table<QuestionKey, (IpAddr, SystemTime), FastHash>,
    /// Clients seen forwarding a question.
    forwarders: Table<IpAddr, (), FastHash>,
    names: Names,
}

/// One client's recent NXDOMAIN answers, and what it has wasted since its last report.
struct Client {
    namespace: Option<Namespace>,
    held: Vec<Nxdomain>,
    /// Since the previous report (or the first query seen).
    since: SystemTime,
    queries: u64,
    wasted: u64,
    lookups: u64,
    extra: Duration,
    slowest: Option<SlowestSearch>,
    /// The server the latest lookup that wasted queries asked.
    server: Option<SocketAddr>,
    reported: Option<SystemTime>,
    /// When its next report is due, once it has waste to report.
    due: Option<SystemTime>,
}

/// A query answered NXDOMAIN at its client.
struct Nxdomain {
    name: FoldedName,
    qtype: u16,
    sent: SystemTime,
}

impl SearchLists {
    pub fn new(report_interval: Duration, capacity: usize, names: Names) -> Self {
        Self {
            report_interval,
            clients: Table::with_hasher(capacity),
            due: VecDeque::new(),
            due_capacity: capacity.max(1),
            askers: Table::with_hasher(capacity),
            forwarders: Table::with_hasher(capacity),
            names,
        }
    }

    /// `query`, not a response, left its client: if another client asked its question a moment
    /// before, its client is forwarding it.
    pub fn asked(&mut self, query: &Observation) {
        let Some(question) = &query.question else {
            return;
        };
        let client = query.src.ip();
        let key = QuestionKey::of(question);
        if let Some(&(asker, at)) = self.askers.get(&key) {
            if asker != client && !has_waited(at, PASSED_ON_WITHIN, query.ts) {
                self.forwarders.insert(client, ());
                self.clients.remove(&client);
            }
        }
        self.askers.insert(key, (client, query.ts));
    }

    /// `reply` answered `query` at its client: a query of the client's counted, an NXDOMAIN
    /// held, any other answer perhaps the end of a lookup that wasted the ones it extends.
    pub fn answered(&mut self, query: &SentQuery, reply: &Observation) {
        let address = query.client.ip();
        if self.forwarders.get(&address).is_some() {
            return;
        }
        if self.clients.get(&address).is_none() {
            self.clients.insert(address, Client::new(query, reply.ts));
        }
        let Some(client) = self.clients.refresh(&address) else {
            return;
        };
        client.queries += 1;
        let name = query.question.name.folded().as_bytes();
        if reply.rcode == NXDOMAIN {
            if client.held.len() == HELD_PER_CLIENT {
                client.held.remove(0);
            }
            client.held.push(Nxdomain {
                name: query.question.name.folded().clone(),
                qtype: query.question.qtype,
                sent: query.sent,
            });
            return;
        }
        // The wire name without its root label: an expansion starts with these bytes and goes
        // on with more labels.
        let stem = &name[..name.len().saturating_sub(1)];
        let expands = |held: &Nxdomain| {
            held.qtype == query.question.qtype
                && held.name.as_bytes().len() > name.len()
                && held.name.as_bytes().starts_with(stem)
                && held.sent <= query.sent
                && !has_waited(held.sent, LOOKUP_LASTS_AT_MOST, query.sent)
        };
        let wasted: Vec<SystemTime> = client
            .held
            .iter()
            .filter(|held| expands(held))
            .map(|held| held.sent)
            .collect();
        let Some(&first) = wasted.iter().min() else {
            return;
        };
        client.held.retain(|held| !expands(held));
        let extra = query.sent.duration_since(first).unwrap_or_default();
        let count = wasted.len() as u64;
        client.wasted += count;
        client.lookups += 1;
        client.extra += extra;
        client.server = Some(query.server.into());
        if client
            .slowest
            .as_ref()
            .is_none_or(|slowest| extra > slowest.extra)
        {
            client.slowest = Some(SlowestSearch {
                qname: query.question.name.presented(&self.names),
                qtype: query.question.qtype,
                wasted: count,
                extra,
            });
        }
        if client.due.is_none() {
            let settled = later(reply.ts, LOOKUPS_SETTLE);
            let due = match client.reported {
                Some(reported) => settled.max(later(reported, self.report_interval)),
                None => settled,
            };
            client.due = Some(due);
            if self.due.len() == self.due_capacity {
                self.due.pop_front();
            }
            self.due.push_back((due, address));
        }
    }

    /// As `Analyzer::tick`: reports the clients due by `now`.
    pub fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        while let Some(&(due, address)) = self.due.front() {
            if due > now {
                break;
            }
            self.due.pop_front();
            if let Some(client) = self.clients.get_mut(&address) {
                if client.due == Some(due) {
                    out.extend(client.report(address, due).map(Finding::SearchListWaste));
                }
            }
        }
        while self
            .askers
            .pop_stalest_if(|_, &(_, at)| has_waited(at, PASSED_ON_WITHIN, now))
            .is_some()
        {}
    }

    /// As `Analyzer::finish`: every client's waste not reported yet.
    pub fn finish(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.due.clear();
        for (address, mut client) in self.clients.drain() {
            out.extend(client.report(address, now).map(Finding::SearchListWaste));
        }
    }

    /// Entries dropped from the full table so far.
    pub fn evictions(&self) -> u64 {
        self.clients.evictions() + self.askers.evictions() + self.forwarders.evictions()
    }
}

impl Client {
    fn new(query: &SentQuery, at: SystemTime) -> Self {
        Self {
            namespace: query.client_namespace.clone(),
            held: Vec::new(),
            since: at,
            queries: 0,
            wasted: 0,
            lookups: 0,
            extra: Duration::ZERO,
            slowest: None,
            server: None,
            reported: None,
            due: None,
        }
    }

    /// The waste since the previous report, as of `at`, if there was any; the counts start
    /// again from `at`.
    fn report(&mut self, address: IpAddr, at: SystemTime) -> Option<SearchListFinding> {
        let (slowest, server) = (self.slowest.take()?, self.server?);
        let mut found = SearchListFinding {
            ts: at,
            since: self.since,
            client: address,
            client_namespace: self.namespace.clone(),
            server,
            queries: self.queries,
            wasted: self.wasted,
            lookups: self.lookups,
            extra: self.extra,
            slowest,
            summary: String::new(),
        };
        found.summary = describe(&found);
        self.since = at;
        self.queries = 0;
        self.wasted = 0;
        self.lookups = 0;
        self.extra = Duration::ZERO;
        self.reported = Some(at);
        self.due = None;
        Some(found)
    }
}

fn describe(found: &SearchListFinding) -> String {
    let client = match &found.client_namespace {
        Some(namespace) => format!("{} ({namespace})", found.client),
        None => found.client.to_string(),
    };
    let slowest = &found.slowest;
    format!(
        "{client} wasted {wasted} of its {queries} queries ({share:.0}%) on search-list \
         expansions answered NXDOMAIN in {lookups} lookups, adding {extra:.1} ms to them; the \
         slowest, {qname} {qtype}, asked {slowest_wasted} expansions first (+{slowest_ms:.1} ms): \
         ask names with a trailing dot, set `ndots: 2` in the pod's dnsConfig, or use CoreDNS \
         `autopath`",
        wasted = found.wasted,
        queries = found.queries,
        share = found.wasted_share() * 100.0,
        lookups = found.lookups,
        extra = found.extra.as_secs_f64() * 1000.0,
        qname = slowest.qname,
        qtype = mnemonic::qtype(slowest.qtype),
        slowest_wasted = slowest.wasted,
        slowest_ms = slowest.extra.as_secs_f64() * 1000.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analyzers::{client_view::ClientView, Analyzer},
        testkit::observations::*,
    };

    const SEARCH: [&str; 3] = [
        "default.svc.cluster.local.",
        "svc.cluster.local.",
        "cluster.local.",
    ];

    fn view() -> ClientView {
        ClientView::new(
            Duration::from_secs(2),
            Duration::from_secs(10),
            1024,
            Names::AsSent,
        )
    }

    /// The client's query for `name`, id `id`, at `at` ms, answered `rcode` 1 ms later.
    fn asked(name: &str, id: u16, at: u64, rcode: u16) -> Vec<Observation> {
        vec![
            query(name)
                .id(id)
                .to("169.254.25.10:53")
                .at_ms(at)
                .seen(CLIENT_OUT),
            reply(name)
                .id(id)
                .rcode(rcode)
                .from("169.254.25.10:53")
                .to("10.244.0.2:41234")
                .at_ms(at + 1)
                .seen(CLIENT_IN),
        ]
    }

    /// A lookup of `name` from `at` ms through the whole search list, 2 ms a query.
    fn lookup(name: &str, first_id: u16, at: u64) -> Vec<Observation> {
        let mut observations = Vec::new();
        for (n, suffix) in (0u16..).zip(SEARCH) {
            let expansion = format!("{name}.{suffix}");
            observations.extend(asked(&expansion, first_id + n, at + 2 * u64::from(n), 3));
        }
        observations.extend(asked(&format!("{name}."), first_id + 3, at + 6, 0));
        observations
    }

    fn wastes(findings: &[Finding]) -> Vec<&SearchListFinding> {
        findings
            .iter()
            .filter_map(|finding| match finding {
                Finding::SearchListWaste(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_lookup_through_the_search_list_is_reported_with_its_waste() {
        let findings = run(&mut view(), lookup("api.example.com", 1, 0), ms(60_000));
        let found = wastes(&findings);
        assert_eq!(found.len(), 1, "{findings:?}");
        let found = found[0];
        assert_eq!(
            (found.queries, found.wasted, found.lookups),
            (4, 3, 1),
            "{found:?}"
        );
        assert_eq!(found.extra, Duration::from_millis(6));
        assert_eq!(found.slowest.qname, "api.example.com.");
        assert_eq!(found.client.to_string(), "10.244.0.2");
        assert!(found.summary.contains("75%"), "{}", found.summary);
    }

    #[test]
    fn later_lookups_are_counted_into_one_report_per_interval() {
        let mut observations = Vec::new();
        for n in 0..5u16 {
            observations.extend(lookup(
                &format!("n{n}.example.com"),
                10 * n,
                1000 * u64::from(n),
            ));
        }
        let mut view = view();
        let mut findings = run(&mut view, observations, ms(30_000));
        view.finish(ms(30_000), &mut findings);
        let counts: Vec<(u64, u64)> = wastes(&findings)
            .iter()
            .map(|found| (found.lookups, found.wasted))
            .collect();
        assert_eq!(
            counts,
            [(1, 3), (4, 12)],
            "the first a second after its lookup, the rest a report interval later"
        );
    }

    #[test]
    fn names_answered_at_once_or_not_found_at_all_waste_nothing() {
        let mut observations = asked("kubernetes.default.svc.cluster.local.", 1, 0, 0);
        // Not found anywhere: every expansion and the name itself NXDOMAIN.
        for (n, suffix) in (2u16..).zip(SEARCH) {
            observations.extend(asked(&format!("nowhere.test.{suffix}"), n, 10, 3));
        }
        observations.extend(asked("nowhere.test.", 9, 20, 3));
        // An NXDOMAIN of another name, then an unrelated answer.
        observations.extend(asked("a.other.test.", 10, 30, 3));
        observations.extend(asked("b.test.", 11, 31, 0));
        let mut view = view();
        let mut findings = run(&mut view, observations, ms(30_000));
        view.finish(ms(30_000), &mut findings);
        assert_eq!(wastes(&findings), Vec::<&SearchListFinding>::new());
    }
}
