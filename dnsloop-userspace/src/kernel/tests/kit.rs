//! What the kernel tests share: the programs of both builds loaded as `dnsloop trace` loads
//! them (`for_each_build`), run on crafted frames, and what they count and stream, read back.
use aya::{
    maps::{MapData, PerCpuArray, RingBuf},
    Ebpf, TestRun as _, TestRunOptions,
};
use dnsloop_frames::*;
use dnsloop_shared::{
    counter::Counter,
    drop::DropLayout,
    names::{EGRESS_PROGRAM, INGRESS_PROGRAM, POINT_COUNTERS_MAP},
    parse::{LinkLayer, Malformed, Transport},
    point::{mac_word, Direction, ObservationPoint, PointCounters, PointNamespaces},
    query::QueryState,
    question::Sighting,
    record::{PacketRecord, RecordContext, RingItem, StreamReason, PACKET_SNAP_MAX},
};

use dnsloop_tests::privilege::{self, Need};

use dnsloop_core::points::KernelPoint;

use crate::{
    kernel::{
        clock::MonotonicClock,
        counters::{read_global, GlobalCounts},
        point_table::{self, ethernet_point, PointTable},
        programs::{self, Build, Settings},
        unanswered::UnansweredQueries,
    },
    node::namespaces,
};

/// `TC_ACT_UNSPEC` (-1) as the kernel reports a program's return value: "carry on", the only
/// verdict the programs ever give.
pub(super) const TC_ACT_UNSPEC: u32 = u32::MAX;

/// Every network namespace gives its loopback this index.
pub(super) const LOOPBACK_IFINDEX: u32 = 1;

pub(super) const QTYPE_AAAA: u16 = 28;

/// Runs `check` on the programs of every build, each loaded by `load`: on this kernel, which
/// takes both, the build for kernels before 5.17 must find what the other finds. Nothing runs
/// where the calling test cannot (see `can_run`).
pub(super) fn for_each_build(load: impl Fn(Build) -> Option<Kernel>, check: impl Fn(Kernel)) {
    for build in Build::ALL {
        let Some(kernel) = load(build) else {
            return;
        };
        check(kernel);
    }
}

/// Loads a build's programs with `settings`.
pub(super) fn loaded(settings: Settings) -> impl Fn(Build) -> Option<Kernel> {
    move |build| Kernel::load(with_build(&settings, build))
}

/// Loads a build's programs with `settings`, telling them no point.
pub(super) fn unplaced(settings: Settings) -> impl Fn(Build) -> Option<Kernel> {
    move |build| Kernel::load_unplaced(with_build(&settings, build))
}

pub(super) fn with_build(settings: &Settings, build: Build) -> Settings {
    Settings {
        build: Some(build),
        ..settings.clone()
    }
}

/// What `dnsloop trace` loads without `--packets`.
pub(super) fn trace_settings() -> Settings {
    Settings {
        dns_ports: vec![53],
        stream_every_packet: false,
        record_every_packet: false,
        snap_len: PACKET_SNAP_MAX,
        question_table_size: Some(65536),
        query_table_size: 65536,
        ring_buffer_mib: Some(4),
        xdp_ingress: false,
        watch_drops: false,
        build: None,
    }
}

/// What `dnsloop trace --packets --snap-len SNAP_LEN` loads.
pub(super) fn every_packet(snap_len: usize) -> Settings {
    Settings {
        stream_every_packet: true,
        snap_len,
        ..trace_settings()
    }
}

/// What `dnsloop trace --record DIR` loads.
pub(super) fn recording() -> Settings {
    Settings {
        record_every_packet: true,
        ..trace_settings()
    }
}

/// An Ethernet/IPv4/UDP frame from a client to port 53 carrying a query.
pub(super) fn query_frame(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    FrameSpec {
        payload: dns_query(id, name, qtype),
        ..FrameSpec::default()
    }
    .build()
}

/// The answer to `query_frame(id, name, qtype)`, with `rcode`, back to the client.
pub(super) fn answer_frame(id: u16, name: &str, qtype: u16, rcode: u8) -> Vec<u8> {
    let mut payload = dns_response(id, name, qtype);
    payload[3] = (payload[3] & 0xf0) | rcode;
    FrameSpec {
        src: FrameSpec::default().dst,
        dst: FrameSpec::default().src,
        sport: 53,
        dport: 40000,
        payload,
        ..FrameSpec::default()
    }
    .build()
}

/// A query frame of an interface without Ethernet: it starts at the IP header.
pub(super) fn raw_ip_frame() -> Vec<u8> {
    FrameSpec {
        link: LinkLayer::RawIp,
        ..FrameSpec::default()
    }
    .build()
}

/// An Ethernet/IPv4/TCP segment to port 53 whose payload is `stream`.
pub(super) fn tcp_frame(stream: Vec<u8>) -> Vec<u8> {
    FrameSpec {
        transport: Transport::Tcp,
        payload: stream,
        ..FrameSpec::default()
    }
    .build()
}

/// The global counters after `packets` DNS packets of one message each, none of them streamed.
pub(super) fn dns_packets_of_one_message(packets: u64) -> GlobalCounts {
    counted(
        &[
            (Counter::Packets, packets),
            (Counter::DnsPackets, packets),
            (Counter::DnsMessages, packets),
        ],
        &[],
    )
}

/// The global counters after one DNS packet of `messages` messages, streamed.
pub(super) fn one_streamed_dns_packet(messages: u64) -> GlobalCounts {
    counted(
        &[
            (Counter::Packets, 1),
            (Counter::DnsPackets, 1),
            (Counter::DnsMessages, messages),
            (Counter::StreamedRecords, 1),
        ],
        &[],
    )
}

/// The global counters when only `counters` and `malformed` (in `Malformed::ALL` order) are
/// non-zero.
pub(super) fn counted(counters: &[(Counter, u64)], malformed: &[(Malformed, u64)]) -> GlobalCounts {
    let value = |counter: Counter| {
        counters
            .iter()
            .find(|(candidate, _)| *candidate == counter)
            .map_or(0, |(_, value)| *value)
    };
    GlobalCounts {
        counters: Counter::ALL
            .iter()
            .map(|&counter| (counter, value(counter)))
            .collect(),
        malformed: malformed.to_vec(),
    }
}

/// Whether the calling test can load BPF programs, which needs root (see
/// `dnsloop_tests::privilege`).
fn can_run() -> bool {
    // The test harness names each test's thread after the test.
    let current = std::thread::current();
    privilege::can_run(current.name().unwrap_or("a kernel test"), &[Need::Root])
}

/// Programs loaded for one test, with their ring buffer.
pub(super) struct Kernel {
    pub(super) ebpf: Ebpf,
    records: RingBuf<MapData>,
    snap_len: usize,
    /// The points told to the programs: the test runs' own two first, as `dnsloop trace` tells
    /// the points it watches before it attaches there.
    pub(super) points: Vec<KernelPoint>,
    table: PointTable,
}

impl Kernel {
    /// Loads the programs with `settings`; `None` when the calling test cannot run here (see
    /// `can_run`).
    pub(super) fn load(settings: Settings) -> Option<Kernel> {
        if !can_run() {
            return None;
        }
        let mut ebpf = programs::load(&settings, None, &DropLayout::NONE).unwrap_or_else(|error| {
            panic!("loading the programs: {:#}", anyhow::Error::from(error))
        });
        let records = programs::take_records(&mut ebpf).expect("the programs have a ring buffer");
        let table = PointTable::read(&ebpf).expect("reading the point table");
        let points = [Direction::Ingress, Direction::Egress]
            .map(|direction| ethernet_point(test_point(direction)))
            .to_vec();
        let mut kernel = Kernel {
            ebpf,
            records,
            snap_len: settings.snap_len,
            points,
            table,
        };
        kernel.sync_points();
        Some(kernel)
    }

    /// Loads the programs as `load` does, but tells them no point.
    fn load_unplaced(settings: Settings) -> Option<Kernel> {
        let mut kernel = Self::load(settings)?;
        kernel.points.clear();
        kernel.sync_points();
        Some(kernel)
    }

    pub(super) fn sync_points(&mut self) {
        let unplaced = self
            .table
            .sync(&mut self.ebpf, &self.points)
            .expect("writing the point table");
        assert_eq!(
            unplaced,
            [],
            "the point table has room for the test's points"
        );
    }

    /// Runs the program of `direction` on `frame` and checks that it handed the frame on as it
    /// came: the programs never drop, redirect or modify a packet.
    pub(super) fn run(&mut self, direction: Direction, frame: &[u8]) {
        let name = match direction {
            Direction::Ingress => INGRESS_PROGRAM,
            Direction::Egress => EGRESS_PROGRAM,
        };
        let program = programs::classifier(&mut self.ebpf, name).expect("the program is loaded");
        // Room to spare, so that a grown packet shows as a length mismatch, not as ENOSPC.
        let mut data_out = vec![0; frame.len() + 64];
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut data_out),
                ..TestRunOptions::default()
            })
            .unwrap_or_else(|error| {
                panic!(
                    "BPF_PROG_TEST_RUN of {name}: {:#}",
                    anyhow::Error::from(error)
                )
            });
        assert_eq!(
            result.return_value, TC_ACT_UNSPEC,
            "{name} returned another verdict"
        );
        assert_eq!(
            &data_out[..result.data_size_out as usize],
            frame,
            "{name} changed the frame"
        );
    }

    /// Tells the programs which namespaces the test runs' frames in `direction` leave and enter.
    pub(super) fn place(&mut self, direction: Direction, leaves: u32, enters: u32) {
        let point = test_point(direction);
        for known in self.points.iter_mut().filter(|known| known.point == point) {
            known.namespaces = PointNamespaces { leaves, enters };
        }
        self.sync_points();
    }

    /// Tells the programs that the test runs' frames in `direction` sent to (ingress) or by
    /// (egress) `mac` leave and enter these namespaces.
    pub(super) fn place_gateway(
        &mut self,
        direction: Direction,
        mac: [u8; 6],
        leaves: u32,
        enters: u32,
    ) {
        let point = test_point(direction);
        for known in self.points.iter_mut().filter(|known| known.point == point) {
            known.gateway_mac = mac_word(mac);
            known.via_gateway = PointNamespaces { leaves, enters };
        }
        self.sync_points();
    }

    /// The query table, as `dnsloop trace` collects it.
    pub(super) fn unanswered_queries(&mut self) -> UnansweredQueries {
        let table =
            programs::take_queries(&mut self.ebpf).expect("the programs have a query table");
        // Every query in the table is this run's.
        UnansweredQueries::new(table, MonotonicClock::anchored_now(), 0)
    }

    pub(super) fn counts(&self) -> GlobalCounts {
        read_global(&self.ebpf).expect("reading the global counters")
    }

    /// The counters of loopback in `direction`, where test runs are seen.
    pub(super) fn point_counters(&self, direction: Direction) -> PointCounters {
        let map = self
            .ebpf
            .map(POINT_COUNTERS_MAP)
            .expect("the programs have point counters");
        let counters: PerCpuArray<_, PointCounters> =
            PerCpuArray::try_from(map).expect("point counters are a per-CPU array");
        let slot = point_table::find_in_kernel(&self.ebpf, &test_point(direction))
            .expect("searching the point table")
            .unwrap_or_else(|| panic!("loopback {direction:?} is in the point table"));
        let per_cpu = counters.get(&slot, 0).expect("reading the point counters");
        per_cpu
            .iter()
            .fold(PointCounters::default(), |sum, cpu| PointCounters {
                packets: sum.packets + cpu.packets,
                dns_packets: sum.dns_packets + cpu.dns_packets,
            })
    }

    /// Tells the programs that the interface test runs are seen on (loopback) carries raw IP,
    /// as a WireGuard or tun device does.
    pub(super) fn register_loopback_as_raw_ip(&mut self) {
        let test_points = [Direction::Ingress, Direction::Egress].map(test_point);
        for known in &mut self.points {
            if test_points.contains(&known.point) {
                known.link_layer = LinkLayer::RawIp;
            }
        }
        self.sync_points();
    }

    /// What the programs take loopback's frames to start with.
    fn loopback_link(&self) -> LinkLayer {
        let ingress = test_point(Direction::Ingress);
        self.points
            .iter()
            .find(|known| known.point == ingress)
            .map_or(LinkLayer::Ethernet, |known| known.link_layer)
    }

    /// Takes every record streamed since the last call and checks that they are exactly
    /// `expected`, in order: each frame (up to the snap length) as run in its direction on
    /// loopback, streamed for its reason. Returns the records.
    pub(super) fn assert_streamed(
        &mut self,
        expected: &[(&[u8], Direction, StreamReason)],
    ) -> Vec<Streamed> {
        let records = self.take_records();
        let reasons: Vec<Option<StreamReason>> = records
            .iter()
            .map(|(streamed, _)| StreamReason::from_u8(streamed.record.reason))
            .collect();
        assert_eq!(
            records.len(),
            expected.len(),
            "streamed records (with reasons {reasons:?})"
        );
        for ((Streamed { record, .. }, bytes), &(frame, direction, reason)) in
            records.iter().zip(expected)
        {
            let captured = frame.len().min(self.snap_len);
            let what = format!("the record of a {}-byte frame", frame.len());
            assert_eq!(StreamReason::from_u8(record.reason), Some(reason), "{what}");
            assert_eq!(
                Direction::from_u8(record.direction),
                Some(direction),
                "{what}"
            );
            assert_eq!(record.ifindex, LOOPBACK_IFINDEX, "{what}");
            assert_eq!(
                record.netns_cookie,
                this_namespace_cookie(),
                "{what}: loopback names its namespace"
            );
            assert_eq!(record.link_layer, self.loopback_link() as u8, "{what}");
            assert_eq!(record.wire_len as usize, frame.len(), "{what}");
            assert_eq!(usize::from(record.captured_len), captured, "{what}");
            assert_eq!(
                &bytes[..],
                &frame[..captured],
                "{what}: followed by its bytes alone"
            );
        }
        records.into_iter().map(|(streamed, _)| streamed).collect()
    }

    /// Every record in the ring buffer, oldest first, with the bytes that follow it.
    fn take_records(&mut self) -> Vec<(Streamed, Vec<u8>)> {
        let mut records = Vec::new();
        while let Some(item) = self.records.next() {
            let RingItem {
                context,
                record,
                bytes,
            } = RingItem::read(&item).expect("a ring item as the programs write them");
            records.push((Streamed { record, context }, bytes.to_vec()));
        }
        records
    }
}

/// A streamed record, and its context if it came with one.
pub(super) struct Streamed {
    pub record: PacketRecord,
    pub context: Option<RecordContext>,
}

impl Streamed {
    /// The query the record carries; zeroed when it has no context.
    pub fn matched_query(&self) -> QueryState {
        self.context
            .map(|context| context.matched_query)
            .unwrap_or_default()
    }

    /// The sightings the record carries before it; none when it has no context.
    pub fn priors(&self) -> Vec<Sighting> {
        self.context
            .iter()
            .flat_map(|context| context.priors)
            .filter(|prior| prior.family != 0)
            .collect()
    }
}

fn this_namespace_cookie() -> u64 {
    namespaces::current_cookie().expect("reading this namespace's cookie")
}

/// Where the test runs' frames are seen in `direction`.
pub(super) fn test_point(direction: Direction) -> ObservationPoint {
    ObservationPoint::new(this_namespace_cookie(), LOOPBACK_IFINDEX, direction as u8)
}
