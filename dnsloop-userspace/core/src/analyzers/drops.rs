//! DNS messages the kernel dropped: reported by reason, place and server, and remembered for a
//! while so that a query that then times out can say where it was lost.
//!
//! A storm of drops (a full socket buffer drops every query that follows) stays a few lines:
//! the first drop for a reason, place and server is reported at once, the next ones at most
//! once per report interval with their count so far.
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::{Duration, SystemTime},
};

use super::{
    repeats::{Repeated, Repeats},
    table::Table,
};
use crate::{
    finding::{DropFinding, Finding, TimeoutFinding},
    observation::{DropCause, DropPlace, DroppedMessage},
    present::{mnemonic, names::Names},
};

/// Drops alike enough to be reported together.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct DropKey {
    reason: Arc<str>,
    place: DropPlace,
    /// The server the message went to (a query) or came from (a reply).
    server: IpAddr,
    is_response: bool,
}

/// A query, by its client's address and port and its id: the same before and after DNAT, and
/// on its reply.
type QueryRef = (SocketAddr, u16);

struct Dropped {
    at: SystemTime,
    cause: DropCause,
}

pub struct Drops {
    reports: Repeats<DropKey, DropFinding>,
    /// The latest drop of each query or of its reply.
    recent: Table<QueryRef, Dropped>,
    names: Names,
}

impl Drops {
    pub fn new(report_interval: Duration, capacity: usize, names: Names) -> Self {
        Self {
            reports: Repeats::new(report_interval, capacity),
            recent: Table::new(capacity),
            names,
        }
    }

    /// The kernel dropped `dropped`: reports it unless it repeats a drop reported lately.
    pub fn dropped(&mut self, dropped: DroppedMessage, out: &mut Vec<Finding>) {
        let (client, server) = if dropped.is_response {
            (dropped.dst, dropped.src)
        } else {
            (dropped.src, dropped.dst)
        };
        self.recent.insert(
            (client, dropped.id),
            Dropped {
                at: dropped.ts,
                cause: dropped.cause.clone(),
            },
        );
        let key = DropKey {
            reason: dropped.cause.reason.clone(),
            place: dropped.cause.place.clone(),
            server: server.ip(),
            is_response: dropped.is_response,
        };
        let report = self
            .reports
            .occurred(key, dropped.ts, || Some(finding(&dropped, &self.names)));
        out.extend(report.map(Finding::Drop));
    }

    /// Says in `timeout` where its query was dropped, if the kernel dropped it (or its reply)
    /// while it waited.
    pub fn explain(&self, timeout: &mut TimeoutFinding) {
        let sent = timeout.ts.checked_sub(timeout.waited).unwrap_or(timeout.ts);
        timeout.dropped = self
            .recent
            .get(&(timeout.client, timeout.id))
            .filter(|dropped| sent <= dropped.at && dropped.at <= timeout.ts)
            .map(|dropped| dropped.cause.clone());
        if let Some(cause) = &timeout.dropped {
            timeout.summary = format!("{}; {}", timeout.summary, lost(cause, timeout.server));
        }
    }

    /// The input has ended: the final count of every drop that repeated since its report.
    pub fn finish(&mut self, out: &mut Vec<Finding>) {
        out.extend(self.reports.unreported().map(Finding::Drop));
    }

    pub fn evictions(&self) -> u64 {
        self.reports.evictions() + self.recent.evictions()
    }
}

impl Repeated for DropFinding {
    fn repeated(&mut self, count: u64, last: SystemTime) {
        self.count = count;
        self.ts = last;
    }
}

/// The first report of drops like `dropped`.
fn finding(dropped: &DroppedMessage, names: &Names) -> DropFinding {
    let what = if dropped.is_response {
        "reply"
    } else {
        "query"
    };
    let question = dropped
        .question
        .as_ref()
        .map(|question| {
            format!(
                " for {} {}",
                question.name.presented(names),
                mnemonic::qtype(question.qtype)
            )
        })
        .unwrap_or_default();
    let summary = format!(
        "the kernel dropped a {what}{question} ({} -> {}, id {}): {}",
        dropped.src,
        dropped.dst,
        dropped.id,
        lost(&dropped.cause, dropped.dst)
    );
    DropFinding {
        ts: dropped.ts,
        cause: dropped.cause.clone(),
        src: dropped.src,
        dst: dropped.dst,
        id: dropped.id,
        is_response: dropped.is_response,
        transport: dropped.transport,
        qname: dropped
            .question
            .as_ref()
            .map(|question| question.name.presented(names)),
        qtype: dropped.question.as_ref().map(|question| question.qtype),
        count: 1,
        summary,
    }
}

/// What the drop of a packet to `dst` means, where the reason says it plainly, then the drop:
/// `nothing listens on 10.255.0.1:53 (port unreachable): dropped as NO_SOCKET in node, on lo`
fn lost(cause: &DropCause, dst: SocketAddr) -> String {
    let by = cause
        .location
        .as_ref()
        .map(|location| format!(" by {location}"))
        .unwrap_or_default();
    let meaning = match cause.reason.as_ref() {
        "NEIGH_FAILED" => {
            let asked = if dst.is_ipv4() {
                "ARP"
            } else {
                "neighbour solicitation"
            };
            format!("no host answered {asked} for {}: ", dst.ip())
        }
        "NO_SOCKET" => format!("nothing listens on {dst} (port unreachable): "),
        "SOCKET_RCVBUFF" => {
            format!("the server on {dst} fell behind (its socket buffer was full): ")
        }
        _ => String::new(),
    };
    format!(
        "{meaning}dropped as {}{by} in {}",
        cause.reason, cause.place
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        observation::{DnsName, Namespace, Question, Transport},
        testkit::observations::*,
    };

    const INTERVAL: Duration = Duration::from_secs(10);

    fn cause(reason: &str) -> DropCause {
        DropCause {
            reason: reason.into(),
            location: Some("nf_hook_slow+0x9c".into()),
            place: DropPlace {
                namespace: Some(Namespace::new("node")),
                device: Some("cni0".into()),
            },
        }
    }

    /// A query from the client pod to the CoreDNS pod, dropped at `at_ms`.
    fn dropped_query(id: u16, at_ms: u64, reason: &str) -> DroppedMessage {
        DroppedMessage {
            ts: ms(at_ms),
            cause: cause(reason),
            transport: Transport::Udp,
            src: addr("10.244.0.2:41234"),
            dst: addr("10.244.0.3:53"),
            id,
            is_response: false,
            question: Some(Question {
                name: DnsName::from_wire(&name_wire("www.example.test.")).expect("a name"),
                qtype: A,
                qclass: 1,
            }),
            fragmented: None,
        }
    }

    fn timeout(id: u16, sent_ms: u64) -> TimeoutFinding {
        TimeoutFinding {
            ts: ms(sent_ms + 2_000),
            client: addr("10.244.0.2:41234"),
            server: addr("10.96.0.10:53"),
            id,
            count: 1,
            qname: "www.example.test.".into(),
            qtype: A,
            names_under: None,
            waited: Duration::from_secs(2),
            dropped: None,
            stale_conntrack: None,
            summary: "no answer".into(),
        }
    }

    fn counts(findings: &[Finding]) -> Vec<u64> {
        findings
            .iter()
            .map(|finding| match finding {
                Finding::Drop(found) => found.count,
                other => panic!("not a drop: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_storm_of_drops_is_reported_once_then_counted() {
        let mut drops = Drops::new(INTERVAL, 1024, Names::AsSent);
        let mut out = Vec::new();
        for id in 0..100 {
            drops.dropped(
                dropped_query(id, u64::from(id) * 10, "SOCKET_RCVBUFF"),
                &mut out,
            );
        }
        assert_eq!(counts(&out), [1], "the first at once, the rest held back");
        let Finding::Drop(first) = &out[0] else {
            unreachable!()
        };
        assert_eq!(
            first.summary,
            "the kernel dropped a query for www.example.test. A (10.244.0.2:41234 -> \
             10.244.0.3:53, id 0): the server on 10.244.0.3:53 fell behind (its socket buffer was \
             full): dropped as SOCKET_RCVBUFF by nf_hook_slow+0x9c in node, on cni0"
        );
        drops.dropped(dropped_query(100, 10_000, "SOCKET_RCVBUFF"), &mut out);
        assert_eq!(
            counts(&out),
            [1, 101],
            "reported again once the interval passed"
        );
        drops.dropped(dropped_query(101, 10_010, "NETFILTER_DROP"), &mut out);
        assert_eq!(
            counts(&out),
            [1, 101, 1],
            "another reason is another finding"
        );
        drops.dropped(dropped_query(102, 10_020, "SOCKET_RCVBUFF"), &mut out);
        drops.finish(&mut out);
        assert_eq!(counts(&out), [1, 101, 1, 102], "the final count at the end");
    }

    #[test]
    fn a_timeout_says_where_its_query_was_dropped_while_it_waited() {
        let mut drops = Drops::new(INTERVAL, 1024, Names::AsSent);
        drops.dropped(dropped_query(7, 1_005, "NETFILTER_DROP"), &mut Vec::new());
        let mut found = timeout(7, 1_000);
        drops.explain(&mut found);
        assert_eq!(found.dropped, Some(cause("NETFILTER_DROP")));
        assert_eq!(
            found.summary,
            "no answer; dropped as NETFILTER_DROP by nf_hook_slow+0x9c in node, on cni0"
        );

        let mut other_id = timeout(8, 1_000);
        drops.explain(&mut other_id);
        assert_eq!(other_id.dropped, None);
        let mut sent_after_the_drop = timeout(7, 5_000);
        drops.explain(&mut sent_after_the_drop);
        assert_eq!(
            sent_after_the_drop.dropped, None,
            "the same id and port reused later is another query"
        );
    }

    #[test]
    fn a_dropped_reply_explains_its_querys_timeout() {
        let mut drops = Drops::new(INTERVAL, 1024, Names::AsSent);
        let query = dropped_query(9, 1_050, "NO_SOCKET");
        let reply = DroppedMessage {
            src: query.dst,
            dst: query.src,
            is_response: true,
            ..query
        };
        let mut out = Vec::new();
        drops.dropped(reply, &mut out);
        let Finding::Drop(found) = &out[0] else {
            unreachable!()
        };
        assert!(
            found.summary.starts_with("the kernel dropped a reply"),
            "{}",
            found.summary
        );
        let mut found = timeout(9, 1_000);
        drops.explain(&mut found);
        assert_eq!(found.dropped, Some(cause("NO_SOCKET")));
    }
}
