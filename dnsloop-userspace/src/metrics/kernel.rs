//! What the kernel counted: read from its maps on the tracing thread at each refresh, and
//! encoded from that snapshot on each scrape, so the maps are never shared with the server.
use std::{
    collections::BTreeMap,
    fmt,
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use anyhow::Context as _;
use dnsloop_shared::{
    counter::Counter, latency_buckets::LATENCY_BUCKETS, parse::Malformed, server::ServerStats,
};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet},
    metrics::{counter::ConstCounter, MetricType},
    registry::Unit,
};

use aya::Ebpf;

use super::{latency_histogram, servers::ServerLabels};
use crate::{
    kernel::counters::{self, GlobalCounts, PointCount},
    kernel::drops::Drops,
    kernel::programs,
    node::topology::Link,
};
use dnsloop_core::{
    doctor::ConntrackStats,
    present::mnemonic,
    source::{ip_family, socket_addr},
};

/// The kernel's counts as of one refresh.
#[derive(Debug, Default)]
pub struct KernelSnapshot {
    /// The node's watched interfaces, each direction watched.
    pub interfaces: Vec<PointCount>,
    pub global: GlobalCounts,
    /// By server label: servers past the label cap are added up under `other`.
    pub servers: BTreeMap<String, ServerAnswers>,
    /// DNS packets the kernel dropped, by reason; `None` when drops are not watched.
    pub drops: Option<Vec<(Arc<str>, u64)>>,
    /// The node's conntrack counters; `None` where they cannot be read.
    pub conntrack: Option<ConntrackStats>,
}

/// The answers of one server (or of all those labelled `other`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerAnswers {
    /// By 4-bit header rcode.
    pub rcodes: [u64; 16],
    /// In the kernel's latency buckets.
    pub latency: Box<[u64; LATENCY_BUCKETS]>,
    /// Answers with TC set.
    pub truncated: u64,
}

impl Default for ServerAnswers {
    fn default() -> Self {
        Self {
            rcodes: [0; 16],
            latency: Box::new([0; LATENCY_BUCKETS]),
            truncated: 0,
        }
    }
}

impl ServerAnswers {
    pub fn add(&mut self, stats: &ServerStats) {
        for (sum, count) in self.rcodes.iter_mut().zip(stats.rcodes) {
            *sum += count;
        }
        for (sum, count) in self.latency.iter_mut().zip(stats.latency) {
            *sum += count;
        }
        self.truncated += stats.truncated;
    }
}

impl KernelSnapshot {
    /// Reads the counters of the node's `links`; servers are labelled by `labels`, in address
    /// order.
    pub fn read(
        ebpf: &Ebpf,
        node_cookie: u64,
        links: &[Link],
        drops: Option<&Drops>,
        labels: &mut ServerLabels,
    ) -> anyhow::Result<Self> {
        let interfaces = counters::read_points(ebpf, node_cookie, links)
            .context("reading the per-interface counters")?;
        let global = counters::read_global(ebpf).context("reading the kernel counters")?;
        let answered = programs::read_servers(ebpf)
            .context("reading the kernel's answer statistics")?
            .into_iter()
            .filter_map(|(key, stats)| {
                let family = ip_family(key.family)?;
                Some((socket_addr(family, &key.address, key.port), stats))
            })
            .collect();
        let drops = drops
            .map(|drops| drops.counts(ebpf))
            .transpose()
            .context("reading the kernel's drop counters")?;
        Ok(Self {
            interfaces,
            global,
            servers: by_label(answered, labels),
            drops,
            conntrack: crate::node::conntrack::read(),
        })
    }

    fn malformed(&self, reason: Malformed) -> u64 {
        self.global
            .malformed
            .iter()
            .find(|(counted, _)| *counted == reason)
            .map_or(0, |(_, count)| *count)
    }

    fn encode(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let interface = |count: &PointCount| {
            [
                ("interface", count.ifname.clone()),
                ("direction", count.direction.as_str().to_owned()),
            ]
        };
        encode_counters(
            encoder,
            "dnsloop_packets",
            "Packets the kernel programs saw on the node's interfaces.",
            self.interfaces
                .iter()
                .map(|count| (interface(count), count.packets)),
        )?;
        encode_counters(
            encoder,
            "dnsloop_dns_packets",
            "Packets on a DNS port holding at least one DNS message, on the node's interfaces.",
            self.interfaces
                .iter()
                .map(|count| (interface(count), count.dns_packets)),
        )?;
        encode_counters(
            encoder,
            "dnsloop_malformed_packets",
            "Packets on a DNS port that could not be parsed, by reason.",
            Malformed::ALL
                .iter()
                .map(|&reason| ([("reason", reason.as_str())], self.malformed(reason))),
        )?;
        if let Some(drops) = &self.drops {
            encode_counters(
                encoder,
                "dnsloop_dns_drops",
                "DNS packets the kernel dropped on the node, by the kernel's drop reason \
                 (NETFILTER_DROP, SOCKET_RCVBUFF, NO_SOCKET, ...).",
                drops
                    .iter()
                    .map(|(reason, count)| ([("reason", reason.to_string())], *count)),
            )?;
        }
        encode_counter(
            encoder,
            "dnsloop_lost_events",
            "Packets the kernel could not hand to dnsloop because its ring buffer was full \
             (raise --ring-buffer-mib): the findings may have missed them.",
            self.global.get(Counter::LostRecords),
        )?;
        encode_counter(
            encoder,
            "dnsloop_untracked_queries",
            "New queries the kernel's query table had no room for (raise --query-table-size): \
             their answers are not timed, and their timeouts go unreported.",
            self.global.get(Counter::QueriesNotTracked),
        )?;
        encode_counters(
            encoder,
            "dnsloop_answers",
            "Answers that reached their client, by the server the query was sent to and rcode.",
            self.servers.iter().flat_map(|(server, answers)| {
                (0u16..)
                    .zip(answers.rcodes)
                    .filter(|&(_, count)| count > 0)
                    .map(move |(rcode, count)| {
                        (
                            [
                                ("server", server.clone()),
                                ("rcode", mnemonic::rcode(rcode).into_owned()),
                            ],
                            count,
                        )
                    })
            }),
        )?;
        encode_counters(
            encoder,
            "dnsloop_truncated_answers",
            "Answers with TC set (cut to fit, for the client to ask again over TCP) that reached \
             their client, by the server the query was sent to.",
            self.servers
                .iter()
                .filter(|(_, answers)| answers.truncated > 0)
                .map(|(server, answers)| ([("server", server.clone())], answers.truncated)),
        )?;
        if let Some(conntrack) = &self.conntrack {
            encode_conntrack(encoder, conntrack)?;
        }
        let mut latencies = encoder.encode_descriptor(
            "dnsloop_answer_latency",
            "From a query's first sighting to its answer reaching the client, by the server the \
             query was sent to. Bucket bounds are met to within 1/8 and the sum is estimated \
             to within 1/16, from the kernel's finer buckets.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (server, answers) in &self.servers {
            let histogram = latency_histogram::coarse(&answers.latency);
            latencies
                .encode_family(&[("server", server.as_str())])?
                .encode_histogram::<NoLabelSet>(
                    histogram.sum_seconds,
                    histogram.count,
                    &histogram.buckets,
                    None,
                )?;
        }
        Ok(())
    }
}

/// The servers' answers under their labels, labelled in address order (servers past the cap
/// add up under `other`).
pub fn by_label(
    mut answered: Vec<(SocketAddr, ServerStats)>,
    labels: &mut ServerLabels,
) -> BTreeMap<String, ServerAnswers> {
    answered.sort_by_key(|(server, _)| *server);
    let mut servers: BTreeMap<String, ServerAnswers> = BTreeMap::new();
    for (server, stats) in &answered {
        servers.entry(labels.label(*server)).or_default().add(stats);
    }
    servers
}

/// The node's conntrack counters, as the kernel keeps them since boot: every flow's.
fn encode_conntrack(encoder: &mut DescriptorEncoder, conntrack: &ConntrackStats) -> fmt::Result {
    if let Some(resolved) = conntrack.clashes_resolved {
        encode_counter(
            encoder,
            "dnsloop_conntrack_clashes_resolved",
            "Races between two packets of one new flow on two CPUs (a resolver's parallel A \
             and AAAA queries from one socket) that the node's conntrack resolved without a \
             drop, every flow's, since boot (Linux 5.6 and later).",
            resolved,
        )?;
    }
    encode_counter(
        encoder,
        "dnsloop_conntrack_insert_failed",
        "New flows' conntrack entries that lost the race to be inserted on the node, every \
         flow's, since boot.",
        conntrack.insert_failed,
    )?;
    encode_counter(
        encoder,
        "dnsloop_conntrack_drops",
        "Packets the node's conntrack dropped because their entry could not be made (a lost \
         race, a full table), every flow's, since boot: for DNS over UDP, each a 5-second \
         timeout.",
        conntrack.drop,
    )
}

/// One counter without labels.
fn encode_counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> fmt::Result {
    let family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(family)
}

/// One counter family of `samples`, each a label set and its value.
fn encode_counters<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl Iterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The latest snapshot: replaced by the tracing thread, encoded by the metrics server.
#[derive(Debug, Clone, Default)]
pub struct SharedSnapshot(Arc<Mutex<KernelSnapshot>>);

impl SharedSnapshot {
    pub fn replace(&self, snapshot: KernelSnapshot) {
        *self.lock() = snapshot;
    }

    fn lock(&self) -> MutexGuard<'_, KernelSnapshot> {
        // A snapshot is replaced whole: one left by a panicking holder is still consistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Collector for SharedSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.lock().encode(&mut encoder)
    }
}
