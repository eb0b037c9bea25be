//! Packets to a pcapng file that Wireshark and tshark read, and `dnsloop analyze` reads back
//! into the same findings: the packet half of a capture bundle.
//!
//! Each interface gets one interface block with its name (`if_name`) and its role in dnsloop's
//! own format (`if_description`, see [`LinkDescription`]); each packet an enhanced packet
//! block with its direction (`epb_flags`) and nanosecond timestamp, and, when it belongs to a
//! finding, a comment saying which (`loop www.example.test.`, `unexpected source ...`,
//! `timeout ...`).
//!
//! A comment must be written with its packet, but the engine reports a finding some time after
//! the packets that prove it: a timeout `timeout` after its query, a loop once its last hop has
//! settled. So packets are held for [`PcapngOptions::hold`] before they are written, and
//! [`PcapngWriter::finding`] marks the held packets a finding names (by timestamp, addresses and
//! DNS id). A finding reported later than that names packets already written, which keep no
//! comment. The file stops growing at [`PcapngOptions::max_bytes`]: later packets are counted,
//! not written, and [`PcapngReport`] says so.
use std::{
    collections::{HashMap, VecDeque},
    io::{self, Write},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::{Duration, SystemTime},
};

use dnsloop_shared::{
    parse::{
        classify, tcp_framing, udp_message, DnsPorts, IpFamily, LinkLayer, PacketClass,
        SlicePacket, Transport,
    },
    point::Direction,
};
use pcap_file::{
    pcapng::{
        blocks::{
            enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption},
            interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption},
            section_header::{SectionHeaderBlock, SectionHeaderOption},
        },
        PcapNgWriter,
    },
    DataLink, Endianness, PcapError,
};

use crate::{
    analyzers::EngineConfig,
    finding::Finding,
    points::{InterfaceRef, LinkDescription},
    source::RawPacket,
};

/// `if_tsresol` 9: timestamps count nanoseconds.
const NANOSECONDS: u8 = 9;
/// pcapng `epb_flags`: inbound and outbound.
const EPB_INBOUND: u32 = 0b01;
const EPB_OUTBOUND: u32 = 0b10;

#[derive(Clone, Copy, Debug)]
pub struct PcapngOptions {
    /// How long packets wait for the findings that name them before they are written.
    pub hold: Duration,
    /// The file's size limit in bytes.
    pub max_bytes: u64,
    /// The ports that carry DNS, to find a packet's DNS ids.
    pub dns_ports: DnsPorts,
}

impl PcapngOptions {
    /// Holds packets as long as the engine configured by `config` may take to report a finding
    /// about them: a query's timeout is reported `timeout` plus twice `settle` after it, a
    /// loop once its re-entry settled, up to `forward_window` after the forward before it.
    pub fn hold_for(config: &EngineConfig) -> Duration {
        config.timeout.max(config.forward_window) + config.settle * 4
    }
}

/// An interface as the file records it.
#[derive(Clone, Copy, Debug)]
pub struct InterfaceRecord<'a> {
    pub name: &'a str,
    pub description: &'a LinkDescription,
}

/// What was written, and what the size limit kept out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcapngReport {
    pub bytes: u64,
    pub packets: u64,
    /// Packets written with a finding's comment.
    pub commented: u64,
    /// Packets left out once the file reached its size limit.
    pub left_out: u64,
    /// When the first packet left out was seen.
    pub full_at: Option<SystemTime>,
}

impl PcapngReport {
    /// A sentence for the bundle's notes when the size limit left packets out.
    pub fn note(&self, max_bytes: u64) -> Option<String> {
        let full_at = self.full_at?;
        Some(format!(
            "the packet file reached its limit of {max_bytes} bytes at {}: the {} packet(s) \
             seen after that are not in it; give more room to keep them",
            crate::present::time::rfc3339(full_at),
            self.left_out
        ))
    }
}

/// Identifies an interface block: the interface, its link layer, and how it is recorded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InterfaceKey {
    interface: InterfaceRef,
    link_layer: LinkLayer,
    name: String,
    description: String,
}

/// A packet waiting for its findings.
struct Held {
    packet: RawPacket,
    interface_id: u32,
    /// Its DNS messages, to match findings against; `None` if it holds none.
    messages: Option<Messages>,
    comments: Vec<String>,
}

/// The addresses and DNS ids of a packet's messages.
struct Messages {
    src: SocketAddr,
    dst: SocketAddr,
    ids: Vec<u16>,
}

pub struct PcapngWriter<W: Write> {
    out: W,
    /// Serialises blocks, which are then written to `out` if they fit.
    blocks: PcapNgWriter<Vec<u8>>,
    options: PcapngOptions,
    interfaces: HashMap<InterfaceKey, u32>,
    held: VecDeque<Held>,
    report: PcapngReport,
}

impl<W: Write> PcapngWriter<W> {
    /// Starts the file: its section header says dnsloop wrote it.
    pub fn new(out: W, options: PcapngOptions) -> io::Result<Self> {
        let section = SectionHeaderBlock {
            endianness: Endianness::native(),
            options: vec![SectionHeaderOption::UserApplication(
                format!("dnsloop {}", env!("CARGO_PKG_VERSION")).into(),
            )],
            ..SectionHeaderBlock::default()
        };
        let blocks = PcapNgWriter::with_section_header(Vec::new(), section).map_err(io_error)?;
        let mut writer = Self {
            out,
            blocks,
            options,
            interfaces: HashMap::new(),
            held: VecDeque::new(),
            report: PcapngReport::default(),
        };
        if !writer.flush_block()? {
            return Err(io::Error::other(format!(
                "a size limit of {} bytes leaves no room for the file's header",
                options.max_bytes
            )));
        }
        Ok(writer)
    }

    /// Takes `packet`, seen on `interface`; it is written once it has waited `hold` (see
    /// [`PcapngWriter::advance`]).
    pub fn packet(&mut self, packet: RawPacket, interface: InterfaceRecord<'_>) -> io::Result<()> {
        let Some(interface_id) = self.interface_id(&packet, interface)? else {
            self.leave_out(&packet);
            return Ok(());
        };
        let messages = messages(&packet, &self.options.dns_ports);
        self.held.push_back(Held {
            packet,
            interface_id,
            messages,
            comments: Vec::new(),
        });
        Ok(())
    }

    /// Marks the held packets `finding` names with a comment saying which finding.
    pub fn finding(&mut self, finding: &Finding) {
        let comment = match finding {
            Finding::Loop(found) if found.is_possible() => {
                format!("possible loop {}", found.qname)
            }
            Finding::Loop(found) => format!("loop {}", found.qname),
            Finding::UnexpectedSource(found) => format!("unexpected source {}", found.qname),
            Finding::Timeout(found) => format!("timeout {}", found.qname),
            Finding::Drop(found) => format!(
                "dropped {} as {}",
                found.qname.as_deref().unwrap_or("message"),
                found.cause.reason
            ),
            Finding::Lookup(found) => format!("slow lookup {}", found.qname),
            Finding::TruncatedNotRetried(found) => {
                format!("truncated, not retried over TCP {}", found.qname)
            }
            Finding::SearchListWaste(found) => {
                format!("search list of {}", found.client)
            }
            Finding::ServfailStorm(found) => format!("SERVFAIL storm from {}", found.server),
            Finding::FragmentedReplyLost(found) => {
                format!("reply lost to fragmentation {}", found.qname)
            }
        };
        for held in &mut self.held {
            let Some(messages) = &held.messages else {
                continue;
            };
            if names(finding, held.packet.ts, messages) && !held.comments.contains(&comment) {
                held.comments.push(comment.clone());
            }
        }
    }

    /// Time has reached `now`: writes the packets that have waited `hold`.
    pub fn advance(&mut self, now: SystemTime) -> io::Result<()> {
        while let Some(oldest) = self.held.front() {
            let waited = now
                .duration_since(oldest.packet.ts)
                .is_ok_and(|waited| waited >= self.options.hold);
            if !waited {
                break;
            }
            self.write_oldest()?;
        }
        Ok(())
    }

    /// Writes every packet still held and ends the file.
    pub fn finish(mut self) -> io::Result<PcapngReport> {
        while !self.held.is_empty() {
            self.write_oldest()?;
        }
        self.out.flush()?;
        Ok(self.report)
    }

    fn write_oldest(&mut self) -> io::Result<()> {
        let Some(held) = self.held.pop_front() else {
            return Ok(());
        };
        if self.report.full_at.is_some() {
            self.leave_out(&held.packet);
            return Ok(());
        }
        let mut options = vec![EnhancedPacketOption::Flags(
            match held.packet.seen.direction {
                Direction::Ingress => EPB_INBOUND,
                Direction::Egress => EPB_OUTBOUND,
            },
        )];
        options.extend(
            held.comments
                .iter()
                .map(|comment| EnhancedPacketOption::Comment(comment.as_str().into())),
        );
        let since_epoch = held
            .packet
            .ts
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let length = u32::try_from(held.packet.bytes.len()).unwrap_or(u32::MAX);
        self.blocks
            .write_pcapng_block(EnhancedPacketBlock {
                interface_id: held.interface_id,
                timestamp: since_epoch,
                original_len: length,
                data: held.packet.bytes.as_ref().into(),
                options,
            })
            .map_err(io_error)?;
        if self.flush_block()? {
            self.report.packets += 1;
            self.report.commented += u64::from(!held.comments.is_empty());
        } else {
            self.leave_out(&held.packet);
        }
        Ok(())
    }

    /// The id of `interface`'s block, written first if it is new; `None` when the file is
    /// full.
    fn interface_id(
        &mut self,
        packet: &RawPacket,
        interface: InterfaceRecord<'_>,
    ) -> io::Result<Option<u32>> {
        let key = InterfaceKey {
            interface: packet.seen.interface,
            link_layer: packet.link_layer,
            name: interface.name.into(),
            description: interface.description.to_string(),
        };
        if let Some(&id) = self.interfaces.get(&key) {
            return Ok(Some(id));
        }
        if self.report.full_at.is_some() {
            return Ok(None);
        }
        let id = u32::try_from(self.blocks.interfaces().len()).unwrap_or(u32::MAX);
        self.blocks
            .write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::from(linktype(packet.link_layer)),
                // No limit: the source has already cut packets to its snap length.
                snaplen: 0,
                options: vec![
                    InterfaceDescriptionOption::IfName(key.name.clone().into()),
                    InterfaceDescriptionOption::IfDescription(key.description.clone().into()),
                    InterfaceDescriptionOption::IfTsResol(NANOSECONDS),
                ],
            })
            .map_err(io_error)?;
        if !self.flush_block()? {
            return Ok(None);
        }
        self.interfaces.insert(key, id);
        Ok(Some(id))
    }

    /// Writes the block just serialised if it fits under the size limit; otherwise drops it
    /// and marks the file full. Returns whether it was written.
    fn flush_block(&mut self) -> io::Result<bool> {
        let block = std::mem::take(self.blocks.get_mut());
        let size = block.len() as u64;
        if self.report.full_at.is_some() || self.report.bytes + size > self.options.max_bytes {
            return Ok(false);
        }
        self.out.write_all(&block)?;
        self.report.bytes += size;
        Ok(true)
    }

    fn leave_out(&mut self, packet: &RawPacket) {
        if self.report.full_at.is_none() {
            tracing::warn!(
                "the packet file is full ({} bytes): later packets are left out",
                self.options.max_bytes
            );
            self.report.full_at = Some(packet.ts);
        }
        self.report.left_out += 1;
    }
}

/// Whether `finding` names the packet seen at `ts` carrying `messages`.
fn names(finding: &Finding, ts: SystemTime, messages: &Messages) -> bool {
    let carries = |src: SocketAddr, dst: SocketAddr, id: u16| {
        messages.src == src && messages.dst == dst && messages.ids.contains(&id)
    };
    match finding {
        Finding::Loop(found) => found
            .path
            .iter()
            .any(|hop| hop.ts == ts && carries(hop.src, hop.dst, hop.id)),
        Finding::UnexpectedSource(found) => {
            carries(found.client, found.expected, found.id)
                || carries(found.actual, found.client, found.id)
        }
        Finding::Timeout(found) => carries(found.client, found.server, found.id),
        // The packet dropped is the one the kernel freed: the capture holds its sightings
        // before that, at the same addresses.
        Finding::Drop(found) => carries(found.src, found.dst, found.id),
        Finding::Lookup(found) => found
            .hops
            .iter()
            .any(|hop| carries(hop.src, hop.server, hop.id)),
        Finding::TruncatedNotRetried(found) => {
            carries(found.client, found.server, found.id)
                || carries(found.server, found.client, found.id)
        }
        // Its lookups' queries, each id of its own: the client's to the server.
        Finding::SearchListWaste(found) => {
            messages.src.ip() == found.client && messages.dst == found.server
        }
        // Its answers, to every client.
        Finding::ServfailStorm(found) => messages.src == found.server,
        Finding::FragmentedReplyLost(found) => {
            carries(found.client, found.server, found.id)
                || carries(found.server, found.client, found.id)
        }
    }
}

/// The addresses and DNS ids of the messages `packet` carries.
fn messages(packet: &RawPacket, ports: &DnsPorts) -> Option<Messages> {
    let bytes = SlicePacket(&packet.bytes);
    let PacketClass::Dns(segment) = classify(&bytes, packet.link_layer, ports) else {
        return None;
    };
    let id_at = |offset: usize| {
        packet
            .bytes
            .get(offset..offset + 2)
            .map(|id| u16::from_be_bytes([id[0], id[1]]))
    };
    let ids = match segment.transport {
        Transport::Udp => id_at(udp_message(&segment).offset).into_iter().collect(),
        Transport::Tcp => tcp_framing(&bytes, &segment)
            .messages()
            .filter_map(|message| id_at(message.offset))
            .collect(),
    };
    let address = |bytes: [u8; 16], port| {
        let ip = match segment.family {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(bytes)),
        };
        SocketAddr::new(ip, port)
    };
    Some(Messages {
        src: address(segment.src, segment.sport),
        dst: address(segment.dst, segment.dport),
        ids,
    })
}

/// The pcap link type of a link layer.
pub fn linktype(link_layer: LinkLayer) -> u32 {
    match link_layer {
        LinkLayer::Ethernet => 1,
        LinkLayer::RawIp => 101,
        LinkLayer::LinuxSll => 113,
        LinkLayer::LinuxSll2 => 276,
    }
}

fn io_error(error: PcapError) -> io::Error {
    match error {
        PcapError::IoError(error) => error,
        other => io::Error::other(other),
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use dnsloop_shared::parse::Probe;
    use pcap_file::pcapng::{Block, PcapNgReader};

    use super::*;
    use crate::{
        observation::Namespace,
        points::{Role, Seen},
        testkit::observations::ms,
        testkit::samples::{a_loop, a_query as query, a_timeout, an_unexpected_source},
    };

    fn bridge() -> LinkDescription {
        LinkDescription {
            role: Role::BridgeMaster,
            namespace: None,
            gateway: None,
        }
    }

    fn options(max_bytes: u64) -> PcapngOptions {
        PcapngOptions {
            hold: Duration::from_secs(5),
            max_bytes,
            dns_ports: DnsPorts::new(&[53]),
        }
    }

    /// Writes `packets` on cni0, tells the writer `findings`, and returns the file and report.
    fn write(
        packets: &[RawPacket],
        findings: &[Finding],
        max_bytes: u64,
    ) -> (Vec<u8>, PcapngReport) {
        let mut out = Vec::new();
        let description = bridge();
        let mut writer = PcapngWriter::new(&mut out, options(max_bytes)).unwrap();
        for packet in packets {
            let interface = InterfaceRecord {
                name: "cni0",
                description: &description,
            };
            writer.packet(packet.clone(), interface).unwrap();
        }
        for finding in findings {
            writer.finding(finding);
        }
        let report = writer.finish().unwrap();
        (out, report)
    }

    /// Each packet's comments, in file order.
    fn comments(file: &[u8]) -> Vec<Vec<String>> {
        let mut reader = PcapNgReader::new(file).unwrap();
        let mut packets = Vec::new();
        while let Some(block) = reader.next_block() {
            if let Block::EnhancedPacket(packet) = block.unwrap() {
                packets.push(
                    packet
                        .options
                        .iter()
                        .filter_map(|option| match option {
                            EnhancedPacketOption::Comment(text) => Some(text.to_string()),
                            _ => None,
                        })
                        .collect(),
                );
            }
        }
        packets
    }

    #[test]
    fn packets_of_a_finding_carry_its_comment() {
        let packets = [
            // The loop's two hops, and the same forward at another time: not the hop.
            query(ms(1_001), "10.244.0.1:50000", "10.244.0.3:53", 1000),
            query(ms(1_123), "10.244.0.3:40000", "169.254.25.10:53", 2000),
            query(ms(1_500), "10.244.0.1:50000", "10.244.0.3:53", 1000),
            // The timeout's query, and the unexpected source's.
            query(ms(1_000), "10.244.0.3:5353", "10.255.0.99:53", 77),
            query(ms(1_900), "10.244.0.2:41234", "10.96.0.10:53", 4242),
            query(ms(1_950), "10.244.0.2:41234", "10.96.0.10:53", 4243),
        ];
        let findings = [a_loop(Probe::None), a_timeout(), an_unexpected_source(None)];
        let (file, report) = write(&packets, &findings, u64::MAX);
        let loop_comment = vec!["loop www.example.test.".to_owned()];
        assert_eq!(
            comments(&file),
            [
                loop_comment.clone(),
                loop_comment,
                vec![],
                vec!["timeout corp.example.".to_owned()],
                vec!["unexpected source www.example.test.".to_owned()],
                vec![],
            ]
        );
        assert_eq!(
            (report.packets, report.commented, report.left_out),
            (6, 4, 0)
        );
    }

    #[test]
    fn packets_wait_for_findings_only_as_long_as_asked() {
        let description = bridge();
        let mut out = Vec::new();
        let mut writer = PcapngWriter::new(&mut out, options(u64::MAX)).unwrap();
        let interface = InterfaceRecord {
            name: "cni0",
            description: &description,
        };
        writer
            .packet(
                query(ms(1_000), "10.244.0.3:5353", "10.255.0.99:53", 77),
                interface,
            )
            .unwrap();
        writer.advance(ms(5_999)).unwrap();
        assert_eq!(writer.held.len(), 1);
        writer.advance(ms(6_000)).unwrap();
        assert!(writer.held.is_empty());
        // Too late: the packet is already written without it.
        writer.finding(&a_timeout());
        writer.finish().unwrap();
        assert_eq!(comments(&out), [Vec::<String>::new()]);
    }

    #[test]
    fn the_size_limit_stops_the_file_and_says_so() {
        let packets: Vec<RawPacket> = (0..10)
            .map(|n| query(ms(n), "10.244.0.2:41234", "10.96.0.10:53", n as u16))
            .collect();
        let (whole, _) = write(&packets, &[], u64::MAX);
        let limit = whole.len() as u64 / 2;
        let (file, report) = write(&packets, &[], limit);
        assert!(file.len() as u64 <= limit);
        assert_eq!(report.bytes, file.len() as u64);
        assert_eq!(report.packets + report.left_out, 10);
        assert!(report.left_out > 0);
        assert_eq!(comments(&file).len() as u64, report.packets);
        let note = report.note(limit).expect("a note");
        assert!(note.contains(&format!("limit of {limit} bytes")), "{note}");
        assert_eq!(write(&packets, &[], u64::MAX).1.note(u64::MAX), None);
    }

    #[test]
    fn tshark_reads_what_it_writes() {
        let loopback = LinkDescription {
            role: Role::Loopback,
            namespace: Some(Namespace::new("pod 10.244.0.3")),
            gateway: None,
        };
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut writer = PcapngWriter::new(file.reopen().unwrap(), options(u64::MAX)).unwrap();
        let packet = query(ms(1_001), "10.244.0.1:50000", "10.244.0.3:53", 1000);
        let on_lo = RawPacket {
            seen: Seen {
                interface: InterfaceRef {
                    netns_cookie: 9,
                    ifindex: 1,
                },
                direction: Direction::Egress,
                via_gateway: false,
            },
            ..query(ms(1_002), "127.0.0.1:40000", "127.0.0.1:53", 5)
        };
        let description = bridge();
        writer
            .packet(
                packet,
                InterfaceRecord {
                    name: "cni0",
                    description: &description,
                },
            )
            .unwrap();
        writer
            .packet(
                on_lo,
                InterfaceRecord {
                    name: "lo",
                    description: &loopback,
                },
            )
            .unwrap();
        writer.finding(&a_loop(Probe::None));
        writer.finish().unwrap();
        let output = Command::new("tshark")
            .args(["-r"])
            .arg(file.path())
            .args([
                "-T",
                "fields",
                "-E",
                "separator=|",
                "-e",
                "frame.interface_name",
                "-e",
                "frame.interface_description",
                "-e",
                "dns.id",
                "-e",
                "dns.qry.name",
                "-e",
                "frame.comment",
            ])
            .output()
            .expect("tshark runs (`cargo xtask setup` installs it)");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines,
            [
                "cni0|dnsloop/2 role=bridge|0x03e8|www.example.test|loop www.example.test.",
                "lo|dnsloop/2 role=loopback ns=pod 10.244.0.3|0x0005|www.example.test|",
            ],
            "{stdout}"
        );
    }
}
