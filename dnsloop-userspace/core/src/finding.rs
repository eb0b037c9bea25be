//! What the analyzers report, and the notice of a bundle the flight recorder makes of one.
use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_shared::parse::Probe;

use crate::observation::{
    DropCause, FragmentSizes, Namespace, Observation, Point, Question, Transport,
};
use crate::present::names::Names;

#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    Loop(LoopFinding),
    UnexpectedSource(UnexpectedSourceFinding),
    Timeout(TimeoutFinding),
    Drop(DropFinding),
    Lookup(LookupFinding),
    TruncatedNotRetried(TruncationFinding),
    SearchListWaste(SearchListFinding),
    ServfailStorm(ServfailFinding),
    FragmentedReplyLost(FragmentationFinding),
}

/// One packet of a finding's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub ts: SystemTime,
    /// Where it was seen, shared with every other sighting there: a node follows tens of
    /// thousands of queries' hops in a storm.
    pub point: Arc<Point>,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub id: u16,
    /// How the packet travelled: conntrack keys its flow by it.
    pub transport: Transport,
}

impl Hop {
    /// The sighting `obs`.
    pub fn of(obs: &Observation) -> Self {
        Self {
            ts: obs.ts,
            point: Arc::clone(&obs.point),
            src: obs.src,
            dst: obs.dst,
            id: obs.id,
            transport: obs.transport,
        }
    }
}

/// A question that re-entered a namespace along a chain of forwards.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopFinding {
    pub ts: SystemTime,
    /// When the loop was first reported.
    pub since: SystemTime,
    /// The same on every node the loop crosses: see [`LoopId`].
    pub loop_id: LoopId,
    /// Presentation format, as sent.
    pub qname: String,
    pub qtype: u16,
    /// How many times the question has re-entered a namespace so far (rounds seen).
    pub count: u64,
    /// Queries of the question that went unanswered while it looped, so far: counted here
    /// instead of reported as timeouts one by one.
    pub unanswered: u64,
    pub path: Vec<Hop>,
    /// The parts of the cycle out of sight, on other nodes, in the order they happened.
    pub off_node: Vec<OffNode>,
    /// The addresses the forwards in the cycle were sent to, in order.
    pub servers: Vec<IpAddr>,
    pub probe: Probe,
    pub summary: String,
    /// The destination NATs that conntrack applied to forwards on the path (none until an
    /// enricher looked), each once.
    pub dnat: Vec<Dnat>,
    /// Deliveries of the cycle that nothing showed were taken in: where any is, the finding is
    /// a possible loop, not a loop.
    pub unconfirmed: Vec<Unconfirmed>,
}

/// A question that stayed in `namespace`, addressed to `at`, without evidence that it was the
/// question of the cycle, taken in there: see `why`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unconfirmed {
    pub namespace: Namespace,
    pub at: SocketAddr,
    pub why: Unconfirmable,
}

/// What evidence a delivery of a possible loop lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unconfirmable {
    /// Nothing shows that the namespace holds the address (its addresses are not known, as in
    /// a capture, and no reply came from it there): the question may have been routed on, or
    /// dropped there, unseen.
    AddressNotShown,
    /// The question came back from other nodes to the namespace that had sent it off the node,
    /// with no forward between two namespaces of this node in the round: clients on other
    /// nodes asking it the same name look the same from here.
    BackAtItsSender,
    /// The capture shows the question storm across one point, not the path it goes round (see
    /// `forwarding_loop::storm`).
    PathNotShown,
}

impl Unconfirmable {
    /// A stable snake_case name for the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AddressNotShown => "address_not_shown",
            Self::BackAtItsSender => "back_at_its_sender",
            Self::PathNotShown => "path_not_shown",
        }
    }
}

impl LoopFinding {
    /// Whether part of the cycle lacks evidence: a possible loop, which pages no one.
    pub fn is_possible(&self) -> bool {
        !self.unconfirmed.is_empty()
    }

    /// Rounds per second since the loop was first reported; `None` until a second has passed.
    pub fn rounds_per_second(&self) -> Option<f64> {
        let elapsed = self.ts.duration_since(self.since).ok()?.as_secs_f64();
        (elapsed >= 1.0).then(|| self.count as f64 / elapsed)
    }
}

/// Names one loop alike on every node it crosses, so that a log pipeline can group their
/// findings: a hash of the question (folded name, type and class), which every node sees the
/// same, where ids, ports and addresses differ from node to node. FNV-1a, a fixed function of
/// those bytes, so that every build and every node computes the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoopId(pub u64);

impl LoopId {
    /// `question`'s.
    pub fn of_question(question: &Question) -> Self {
        Self::of(
            question.name.folded().as_bytes(),
            question.qtype,
            question.qclass,
        )
    }

    /// `question`'s as findings written with `names` carry it: redacted, keyed like the names
    /// (a fixed hash of the whole name would let anyone check a guessed name against it), so
    /// that nodes sharing the key still give one loop the same id.
    pub fn of_question_written(question: &Question, names: &Names) -> Self {
        let folded = question.name.folded().as_bytes();
        let (qtype, qclass) = (question.qtype.to_be_bytes(), question.qclass.to_be_bytes());
        names
            .keyed_id(&[folded, &qtype, &qclass])
            .map_or_else(|| Self::of_question(question), Self)
    }

    /// `folded_name` in wire format, lower case.
    pub fn of(folded_name: &[u8], qtype: u16, qclass: u16) -> Self {
        use std::hash::Hasher as _;
        let mut hasher = fnv::FnvHasher::default();
        hasher.write(folded_name);
        hasher.write(&qtype.to_be_bytes());
        hasher.write(&qclass.to_be_bytes());
        Self(hasher.finish())
    }
}

impl std::fmt::Display for LoopId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Where a cycle went out of sight and where it came back: a query that left the node over
/// `left_via` to `sent_to`, and the question coming back from `back_from` over `back_via`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffNode {
    pub left_via: Arc<str>,
    pub sent_to: SocketAddr,
    pub back_from: SocketAddr,
    pub back_via: Arc<str>,
}

/// A forward's destination as its sender addressed it (a `ClusterIP`) and as conntrack's DNAT
/// rewrote it (a pod): `path` and `servers` show only the latter when the DNAT happened before
/// the first hop was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dnat {
    pub service: SocketAddr,
    pub backend: SocketAddr,
}

/// A response that matched a query by id and client address/port but came from another source.
#[derive(Clone, Debug, PartialEq)]
pub struct UnexpectedSourceFinding {
    pub ts: SystemTime,
    pub client: SocketAddr,
    pub expected: SocketAddr,
    pub actual: SocketAddr,
    pub id: u16,
    pub qname: String,
    pub qtype: u16,
    /// How the query and its reply travelled: conntrack keys the flow by it.
    pub transport: Transport,
    pub conntrack: Option<ConntrackEvidence>,
    pub cause: Option<String>,
    pub summary: String,
}

/// What conntrack knew about the query's flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConntrackEvidence {
    /// Where the client sent the query (the ClusterIP, before DNAT).
    pub original_dst: SocketAddr,
    /// Where the reply was expected from after DNAT (a CoreDNS pod).
    pub reply_src: SocketAddr,
    pub unreplied: bool,
}

/// A query that got no response in time, or several to one server for one question: after the
/// first, they are counted and reported together at most once per report interval.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeoutFinding {
    /// When the (latest) query timed out.
    pub ts: SystemTime,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub id: u16,
    /// How many queries this reports: 1, or those since the previous report (`client`, `id`
    /// and `ts` are the latest one's).
    pub count: u64,
    pub qname: String,
    pub qtype: u16,
    /// When the queries counted asked other names than `qname`: the domain all their names are
    /// in, presented as `qname` is.
    pub names_under: Option<String>,
    pub waited: Duration,
    /// The kernel dropped the (latest) query, or its reply, on its way: why and where.
    pub dropped: Option<DropCause>,
    /// Conntrack still translates the (latest) query's flow to a backend nothing answers for:
    /// an entry that outlived its endpoint (an enricher's evidence).
    pub stale_conntrack: Option<ConntrackEvidence>,
    pub summary: String,
}

/// Truncated answers (TC set) that reached a client which did not ask again over TCP: the
/// first reported when judged, the others from the same server to the same client counted and
/// reported together at most once per report interval.
#[derive(Clone, Debug, PartialEq)]
pub struct TruncationFinding {
    /// When the wait for the (latest) retry ended.
    pub ts: SystemTime,
    /// The client's query that got the first truncated answer.
    pub client: SocketAddr,
    /// The namespace the client's query was first seen leaving (a pod), when watched.
    pub client_namespace: Option<Namespace>,
    /// The server the client asked, as it addressed it.
    pub server: SocketAddr,
    pub id: u16,
    /// Presentation format, as the client asked it.
    pub qname: String,
    pub qtype: u16,
    /// Bytes of the truncated answer.
    pub size: usize,
    /// How long a retry over TCP was awaited.
    pub waited: Duration,
    /// Truncated answers this reports: 1, or those not retried so far.
    pub count: u64,
    pub summary: String,
}

/// DNS replies lost to fragmentation: a reply larger than its path's MTU went in fragments, and
/// a host on its way held the first one and gave up waiting for the rest (the kernel dropped it
/// as `FRAG_REASM_TIMEOUT`, or the host said so in an ICMP "fragment reassembly time
/// exceeded"). The first from a server to a client is reported when found, the next ones at
/// most once per report interval, counted.
#[derive(Clone, Debug, PartialEq)]
pub struct FragmentationFinding {
    /// When the host gave up the (latest) reply.
    pub ts: SystemTime,
    /// Where the reply went: the query's client, as the reply was addressed.
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub id: u16,
    /// Presentation format.
    pub qname: String,
    pub qtype: u16,
    /// The reply's fragments as its first one shows them, when the drop held its headers.
    pub sizes: Option<FragmentSizes>,
    /// The UDP size the client's query advertised in its OPT record, when the query was seen.
    pub edns_udp_size: Option<u16>,
    /// Where the reply's first fragment was seen on its way, in order, when it was.
    pub seen: Vec<Hop>,
    /// Where and how the host gave it up.
    pub lost: DropCause,
    /// Replies this reports: 1, or those lost so far from this server to this client.
    pub count: u64,
    pub summary: String,
}

/// A client's lookups that went through its search list first: queries of the name with each
/// suffix, answered NXDOMAIN, before the name itself. Reported when its first such lookup ends,
/// then at most once per report interval, with what it wasted since the previous report.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchListFinding {
    pub ts: SystemTime,
    /// Since when this counts: the client's first query seen, or its previous report.
    pub since: SystemTime,
    pub client: IpAddr,
    /// The namespace its queries were first seen leaving (a pod), when watched.
    pub client_namespace: Option<Namespace>,
    /// The server its latest wasteful lookup asked, as it addressed it.
    pub server: SocketAddr,
    /// The client's queries answered in the period, wasted or not.
    pub queries: u64,
    /// Of those, the expansions answered NXDOMAIN before the name they expanded.
    pub wasted: u64,
    /// Lookups that wasted queries.
    pub lookups: u64,
    /// What the wasted queries added to those lookups, together: from each one's first
    /// expansion to its name being asked.
    pub extra: Duration,
    pub slowest: SlowestSearch,
    pub summary: String,
}

impl SearchListFinding {
    /// The share of the client's queries wasted, 0 to 1.
    pub fn wasted_share(&self) -> f64 {
        if self.queries == 0 {
            0.0
        } else {
            self.wasted as f64 / self.queries as f64
        }
    }
}

/// A server answering SERVFAIL at a high rate, with what failed behind it in the same seconds.
/// Each second of the storm counts; the first is reported at once, later ones at most once per
/// report interval.
#[derive(Clone, Debug, PartialEq)]
pub struct ServfailFinding {
    /// When the latest second counted was judged.
    pub ts: SystemTime,
    /// When the storm was first reported.
    pub since: SystemTime,
    /// The server, as its clients addressed it.
    pub server: SocketAddr,
    /// SERVFAIL answers a second over the window judged.
    pub per_second: f64,
    /// Their share of the server's answers in that window, 0 to 1.
    pub share: f64,
    /// Seconds of the storm judged so far.
    pub seconds: u64,
    /// Other servers found storming in the same seconds: in a chain of forwards, each passes
    /// the SERVFAIL of the one after it on. At most 8.
    pub also_storming: Vec<SocketAddr>,
    /// Servers whose queries timed out in the window, and how many: a forwarder's SERVFAIL is
    /// often its upstream's silence. Largest first, at most 8.
    pub timeouts_behind: Vec<(SocketAddr, u64)>,
    /// DNS packets the kernel dropped in the window, by reason. Largest first, at most 8.
    pub drops_behind: Vec<(Arc<str>, u64)>,
    pub summary: String,
}

/// The lookup a search list delayed most.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlowestSearch {
    /// The name at last asked, presentation format.
    pub qname: String,
    pub qtype: u16,
    /// Expansions asked before it.
    pub wasted: u64,
    /// From the first of them to the name being asked.
    pub extra: Duration,
}

/// DNS messages the kernel dropped for one reason at one place, to or from one server: the
/// first reported when seen, the others counted and reported together at most once per report
/// interval.
#[derive(Clone, Debug, PartialEq)]
pub struct DropFinding {
    /// When the latest message counted was dropped.
    pub ts: SystemTime,
    pub cause: DropCause,
    /// The first message's addresses, id and question.
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub id: u16,
    pub is_response: bool,
    pub transport: Transport,
    /// Presentation format; `None` for a message without a question.
    pub qname: Option<String>,
    pub qtype: Option<u16>,
    /// Messages this reports: 1, or those since the previous report for the same reason, place
    /// and server.
    pub count: u64,
    pub summary: String,
}

/// A client's query slower than `--slow`, with the chain of forwards it caused on the node and
/// the time spent at each.
#[derive(Clone, Debug, PartialEq)]
pub struct LookupFinding {
    /// When the answer reached the client.
    pub ts: SystemTime,
    /// Presentation format, as the client sent it.
    pub qname: String,
    pub qtype: u16,
    /// The client's query first, then every forward it caused, in the order they were sent.
    pub hops: Vec<LookupHop>,
    /// The index in `hops` of the one that took longest itself.
    pub slowest: usize,
    /// Forwards answered beyond the most a lookup keeps, not in `hops`.
    pub hops_left_out: u64,
    pub summary: String,
}

impl LookupFinding {
    /// The client's query.
    pub fn client_query(&self) -> &LookupHop {
        &self.hops[0]
    }
}

/// One query of a lookup: the client's, or a forward, and the time spent at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupHop {
    /// The namespace that sent it, when watched.
    pub from: Option<Namespace>,
    pub src: SocketAddr,
    /// Where it was first seen addressed to.
    pub server: SocketAddr,
    /// Where it was delivered instead, when a DNAT seen on the node sent it elsewhere.
    pub backend: Option<SocketAddr>,
    /// The namespace it was delivered to; `None` when it left the node.
    pub to: Option<Namespace>,
    /// The interface it left the node by, when it did.
    pub via: Option<Arc<str>>,
    pub id: u16,
    /// How it travelled: conntrack keys its flow by it.
    pub transport: Transport,
    pub sent: SystemTime,
    /// When its reply came back to the sender.
    pub answered: SystemTime,
    pub rcode: u16,
    /// The index in the lookup's hops of the query this one forwards; `None` for the
    /// client's.
    pub forwards: Option<usize>,
    /// Its latency less the time its own forwards were awaited: what the server it went to
    /// spent itself, or the network beyond the node.
    pub own: Duration,
}

impl LookupHop {
    /// From sent to answered.
    pub fn latency(&self) -> Duration {
        self.answered.duration_since(self.sent).unwrap_or_default()
    }
}

/// A finding that got a bundle: printed with it, so that whoever reads it knows where to look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleNotice {
    /// `loop`, `unexpected_source`, `timeout`, `drop` or `lookup`.
    pub finding: &'static str,
    pub loop_id: Option<LoopId>,
    pub qname: Option<String>,
    /// The bundle's directory.
    pub path: PathBuf,
    /// Whether the finding started the bundle; `false`: it joined one recording.
    pub started: bool,
    pub from: SystemTime,
    pub until: SystemTime,
    /// Findings with the same key that got no bundle since the last one that did.
    pub suppressed: u64,
}
