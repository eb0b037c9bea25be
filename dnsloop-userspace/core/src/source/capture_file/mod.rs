//! Capture files as a packet source: pcap and pcapng, as tcpdump, dumpcap and `dnsloop` write
//! them (read with the `pcap-file` crate).
//!
//! [`CaptureFile`] yields each packet with what the file says about it: its interface, the
//! direction when the file records one (pcapng `epb_flags`, the Linux cooked header's packet
//! type), and its timestamp in the file's resolution. Where the file does not say which
//! namespaces a packet left and entered, [`placement`] works it out.
//!
//! A file is never trusted: a damaged or cut-short record ends the reading, and what came
//! before it is still analysed ([`CaptureFile::stopped`]).
mod cooked;
pub mod link_names;
pub mod order;
pub mod placement;
#[cfg(test)]
mod tests;

use std::{
    fmt,
    fs::File,
    io::{self, BufReader, Read},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use dnsloop_shared::{parse::LinkLayer, point::Direction};
use pcap_file::{
    pcap::{PcapHeader, PcapReader},
    pcapng::{
        blocks::{
            enhanced_packet::EnhancedPacketOption,
            interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption},
            interface_statistics::InterfaceStatisticsOption,
        },
        Block, PcapNgReader,
    },
    PcapError, TsResolution,
};
use thiserror::Error;

use self::cooked::{Cooked, Origin, LOOPBACK_NAME};
use super::RawPacket;
use crate::points::{InterfaceRef, Seen};

/// Why a capture file cannot be read, or could be read only in part.
#[derive(Debug, Error)]
pub enum CaptureError {
    #[error("cannot open {path}: check the path and that you may read it")]
    Open {
        path: DisplayPath,
        #[source]
        source: io::Error,
    },
    #[error("{path} is empty: it holds no capture (was the capture stopped before it started?)")]
    Empty { path: DisplayPath },
    #[error(
        "{path} is not a pcap or pcapng capture ({what}): give dnsloop a file written by \
         `tcpdump -w`, dumpcap/Wireshark or `dnsloop capture`"
    )]
    NotACapture { path: DisplayPath, what: String },
    #[error(
        "{path} starts like a {format} capture but its header is damaged or cut short ({detail}): \
         it holds no packet dnsloop can read"
    )]
    BadHeader {
        path: DisplayPath,
        format: Format,
        detail: String,
    },
    #[error(
        "{path} ends in a damaged or cut-short record after {packets} packet(s) ({detail}): \
         everything before it was analysed; if the capture was still being written, analyse \
         it again once it is complete"
    )]
    Stopped {
        path: DisplayPath,
        packets: u64,
        detail: String,
    },
}

/// A path as the errors show it.
#[derive(Clone, Debug)]
pub struct DisplayPath(PathBuf);

impl fmt::Display for DisplayPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.display())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Pcap,
    PcapNg,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pcap => "pcap",
            Self::PcapNg => "pcapng",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `interfaces`, a file's, are every interface of the namespace it was captured in:
/// Linux writes its cooked format for `-i any` alone, and a file holding only cooked packets
/// was captured so.
pub fn shows_every_interface(interfaces: &[CaptureInterface]) -> bool {
    !interfaces.is_empty()
        && interfaces.iter().all(|interface| {
            [cooked::LINKTYPE_LINUX_SLL, cooked::LINKTYPE_LINUX_SLL2].contains(&interface.linktype)
        })
}

/// An interface packets were captured on, as the file describes it. A cooked capture of
/// `-i any` in format v2 names each packet's interface by number: each number is an interface
/// of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureInterface {
    /// The interface's name when the file gives one (pcapng `if_name`; `lo` for a cooked
    /// packet from a loopback device).
    pub name: Option<String>,
    /// Its pcapng `if_description`: `dnsloop` writes the interface's role there.
    pub description: Option<String>,
    /// The pcap link type (`LINKTYPE_*`) of its packets.
    pub linktype: u32,
    /// The link layer dnsloop reads its packets as; `None` for one it does not know.
    pub link_layer: Option<LinkLayer>,
    /// The kernel's number for it, from a cooked v2 header.
    pub ifindex: Option<u32>,
}

impl CaptureInterface {
    /// How findings name it: its own name, else `ifindex N` (cooked v2), `any` (cooked v1
    /// `-i any`) or `interface N` (the file's Nth interface).
    pub fn display_name(&self, index: usize) -> String {
        match (&self.name, self.ifindex, self.linktype) {
            (Some(name), ..) => name.clone(),
            (None, Some(ifindex), _) => format!("ifindex {ifindex}"),
            (None, None, cooked::LINKTYPE_LINUX_SLL) => "any".into(),
            (None, None, _) => format!("interface {index}"),
        }
    }
}

/// One packet as the file holds it.
#[derive(Clone, Debug)]
pub struct CapturedPacket {
    /// `packet.interface.ifindex` is the index of its [`CaptureInterface`]; `packet.direction`
    /// is `direction`, or ingress when the file does not say (see [`placement`]).
    pub packet: RawPacket,
    /// The direction the file records, if any.
    pub direction: Option<Direction>,
}

/// Link types dnsloop reads, by `LINKTYPE_*` number.
const LINKTYPE_NULL: u32 = 0;
const LINKTYPE_ETHERNET: u32 = 1;
const LINKTYPE_RAW: u32 = 101;
/// BSD loopback, network byte order (`LINKTYPE_NULL` is host byte order).
const LINKTYPE_LOOP: u32 = 108;
const LINKTYPE_IPV4: u32 = 228;
const LINKTYPE_IPV6: u32 = 229;
/// The address family word in front of a BSD loopback packet.
const BSD_LOOPBACK_HEADER_LEN: usize = 4;

/// How dnsloop reads a link type: as which link layer, after skipping how many bytes.
fn link_layer_of(linktype: u32) -> Option<(LinkLayer, usize)> {
    match linktype {
        LINKTYPE_ETHERNET => Some((LinkLayer::Ethernet, 0)),
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => Some((LinkLayer::RawIp, 0)),
        cooked::LINKTYPE_LINUX_SLL => Some((LinkLayer::LinuxSll, 0)),
        cooked::LINKTYPE_LINUX_SLL2 => Some((LinkLayer::LinuxSll2, 0)),
        // The IP version nibble tells the family; the family word is not needed.
        LINKTYPE_NULL | LINKTYPE_LOOP => Some((LinkLayer::RawIp, BSD_LOOPBACK_HEADER_LEN)),
        _ => None,
    }
}

/// pcapng `if_tsresol` when absent: microseconds.
const DEFAULT_TSRESOL: u8 = 6;
/// pcapng `epb_flags` bits 0-1: the direction.
const EPB_DIRECTION_MASK: u32 = 0b11;
const EPB_INBOUND: u32 = 0b01;
const EPB_OUTBOUND: u32 = 0b10;

/// A pcapng interface description block, as far as packets need it.
struct InterfaceBlock {
    name: Option<String>,
    description: Option<String>,
    linktype: u32,
    snaplen: u32,
    tsresol: u8,
    tsoffset: i64,
}

enum Reader {
    Pcap(Box<PcapReader<BufReader<File>>>, PcapHeader),
    PcapNg(Box<PcapNgReader<BufReader<File>>>),
}

/// An open capture file, read packet by packet.
pub struct CaptureFile {
    path: PathBuf,
    format: Format,
    reader: Reader,
    /// The current section's interface blocks (the pcap header counts as one).
    blocks: Vec<InterfaceBlock>,
    interfaces: Vec<CaptureInterface>,
    /// Which interface a block's packets go to: by block (counted over the whole file) and,
    /// for cooked captures, the packet's interface number or loopback hardware type.
    by_origin: foldhash::HashMap<(usize, Origin), u32>,
    /// Blocks of earlier sections, so that a new section's interfaces get numbers of their own.
    earlier_blocks: usize,
    /// The timestamp of the last packet read: a simple packet block has none of its own.
    last_ts: SystemTime,
    /// The latest time the file says its capture was still running (pcapng statistics).
    end: Option<SystemTime>,
    packets: u64,
    skipped: u64,
    stopped: Option<CaptureError>,
}

impl CaptureFile {
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let display = || DisplayPath(path.to_owned());
        let open = || {
            File::open(path).map_err(|source| CaptureError::Open {
                path: display(),
                source,
            })
        };
        let mut magic = [0u8; 4];
        let held = read_up_to(&mut open()?, &mut magic).map_err(|source| CaptureError::Open {
            path: display(),
            source,
        })?;
        let format = match (held, magic) {
            (0, _) => return Err(CaptureError::Empty { path: display() }),
            (4, [0xa1, 0xb2, 0xc3, 0xd4] | [0xd4, 0xc3, 0xb2, 0xa1])
            | (4, [0xa1, 0xb2, 0x3c, 0x4d] | [0x4d, 0x3c, 0xb2, 0xa1]) => Format::Pcap,
            (4, [0x0a, 0x0d, 0x0d, 0x0a]) => Format::PcapNg,
            _ => {
                return Err(CaptureError::NotACapture {
                    path: display(),
                    what: what_it_is(&magic[..held]),
                })
            }
        };
        let bad_header = |error: PcapError| CaptureError::BadHeader {
            path: display(),
            format,
            detail: describe(&error),
        };
        let file = BufReader::new(open()?);
        let (reader, blocks) = match format {
            Format::Pcap => {
                let reader = PcapReader::new(file).map_err(bad_header)?;
                let header = reader.header();
                let block = InterfaceBlock {
                    name: None,
                    description: None,
                    linktype: u32::from(header.datalink),
                    snaplen: header.snaplen,
                    tsresol: match header.ts_resolution {
                        TsResolution::MicroSecond => 6,
                        TsResolution::NanoSecond => 9,
                    },
                    tsoffset: 0,
                };
                (Reader::Pcap(Box::new(reader), header), vec![block])
            }
            Format::PcapNg => (
                Reader::PcapNg(Box::new(PcapNgReader::new(file).map_err(bad_header)?)),
                Vec::new(),
            ),
        };
        Ok(Self {
            path: path.to_owned(),
            format,
            reader,
            blocks,
            interfaces: Vec::new(),
            by_origin: foldhash::HashMap::default(),
            earlier_blocks: 0,
            last_ts: SystemTime::UNIX_EPOCH,
            end: None,
            packets: 0,
            skipped: 0,
            stopped: None,
        })
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Every interface met so far, in the order their first packet came.
    pub fn interfaces(&self) -> &[CaptureInterface] {
        &self.interfaces
    }

    /// Packets read so far, skipped ones included.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Packets read but not yielded: of a link type dnsloop does not read (the interface's
    /// `link_layer` is `None`), or of an interface the file never described.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Why reading stopped before the end of the file, if it did.
    pub fn stopped(&self) -> Option<&CaptureError> {
        self.stopped.as_ref()
    }

    /// The latest time the file says its capture ran until (pcapng interface statistics), if
    /// later than its last packet.
    pub fn end(&self) -> Option<SystemTime> {
        self.end
    }

    /// The next packet, or `None` at the end of the file or at a record that cannot be read
    /// (then [`CaptureFile::stopped`] says why).
    pub fn next_packet(&mut self) -> Option<CapturedPacket> {
        if self.stopped.is_some() {
            return None;
        }
        loop {
            let next = match &mut self.reader {
                Reader::Pcap(reader, header) => {
                    let header = *header;
                    match reader.next_raw_packet()? {
                        Ok(raw) => {
                            let ts = Duration::new(
                                u64::from(raw.ts_sec),
                                match header.ts_resolution {
                                    TsResolution::MicroSecond => raw.ts_frac.saturating_mul(1000),
                                    TsResolution::NanoSecond => raw.ts_frac,
                                },
                            );
                            Ok(Some(Record {
                                block: 0,
                                ts: RecordTime::At(SystemTime::UNIX_EPOCH.checked_add(ts)),
                                data: raw.data.into_owned(),
                                flags: None,
                            }))
                        }
                        Err(error) => Err(error),
                    }
                }
                Reader::PcapNg(reader) => match reader.next_block()? {
                    Ok(block) => Ok(take_block(
                        block,
                        &mut self.blocks,
                        &mut self.earlier_blocks,
                        &mut self.end,
                    )),
                    Err(error) => Err(error),
                },
            };
            match next {
                Ok(Some(record)) => {
                    if let Some(packet) = self.packet(record) {
                        return Some(packet);
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    self.stopped = Some(CaptureError::Stopped {
                        path: DisplayPath(self.path.clone()),
                        packets: self.packets,
                        detail: describe(&error),
                    });
                    return None;
                }
            }
        }
    }

    /// Turns a record into a packet of its interface; `None` for one dnsloop cannot read (see
    /// [`CaptureFile::skipped`]).
    fn packet(&mut self, record: Record) -> Option<CapturedPacket> {
        self.packets += 1;
        let Some(block) = self.blocks.get(record.block) else {
            self.skipped += 1;
            return None;
        };
        let ts = match record.ts {
            RecordTime::At(ts) => ts,
            RecordTime::Ticks(ticks) => packet_time(block, ticks),
            RecordTime::Unknown => None,
        };
        let ts = ts
            .map(|ts| shift(ts, block.tsoffset))
            .unwrap_or(self.last_ts);
        self.last_ts = ts;
        let layer = link_layer_of(block.linktype);
        let mut data = record.data;
        if let Some((_, skip)) = layer {
            data.drain(..skip.min(data.len()));
        }
        let cooked = Cooked::read(block.linktype, &data);
        let origin = (self.earlier_blocks + record.block, cooked.origin());
        let index = match self.by_origin.get(&origin) {
            Some(&index) => index,
            None => {
                let index = u32::try_from(self.interfaces.len()).unwrap_or(u32::MAX);
                self.interfaces.push(CaptureInterface {
                    name: if cooked.is_loopback() {
                        Some(LOOPBACK_NAME.into())
                    } else {
                        block.name.clone().filter(|name| name != "any")
                    },
                    description: block.description.clone(),
                    linktype: block.linktype,
                    link_layer: layer.map(|(layer, _)| layer),
                    ifindex: cooked.ifindex(),
                });
                self.by_origin.insert(origin, index);
                index
            }
        };
        let Some((link_layer, _)) = layer else {
            self.skipped += 1;
            return None;
        };
        let direction = record.flags.and_then(epb_direction).or(cooked.direction());
        Some(CapturedPacket {
            packet: RawPacket {
                ts,
                seen: Seen {
                    interface: InterfaceRef {
                        netns_cookie: 0,
                        ifindex: index,
                    },
                    direction: direction.unwrap_or(Direction::Ingress),
                    // The placement reads it from the frame's MACs (see `Placement::place`).
                    via_gateway: false,
                },
                link_layer,
                bytes: bytes::Bytes::from(data),
                matched_query: None,
                priors: Vec::new(),
                recorder_only: false,
            },
            direction,
        })
    }
}

/// A packet record, whichever block or format it came from.
struct Record {
    /// The index of its interface block in the current section.
    block: usize,
    ts: RecordTime,
    data: Vec<u8>,
    flags: Option<u32>,
}

enum RecordTime {
    /// A pcap record's time, `None` if beyond any clock.
    At(Option<SystemTime>),
    /// A pcapng count in its interface's resolution, as `pcap-file` hands it (see
    /// [`packet_time`]).
    Ticks(Duration),
    /// None of its own (a simple packet block): the previous packet's.
    Unknown,
}

/// Takes in a pcapng block: interface blocks are remembered, a new section starts a new set
/// of them, packets become records.
fn take_block(
    block: Block<'_>,
    blocks: &mut Vec<InterfaceBlock>,
    earlier_blocks: &mut usize,
    end: &mut Option<SystemTime>,
) -> Option<Record> {
    match block {
        Block::SectionHeader(_) => {
            *earlier_blocks += blocks.len();
            blocks.clear();
            None
        }
        Block::InterfaceDescription(description) => {
            blocks.push(interface_block(&description));
            None
        }
        Block::EnhancedPacket(packet) => {
            let flags = packet.options.iter().find_map(|option| match option {
                EnhancedPacketOption::Flags(flags) => Some(*flags),
                _ => None,
            });
            Some(Record {
                block: usize::try_from(packet.interface_id).unwrap_or(usize::MAX),
                ts: RecordTime::Ticks(packet.timestamp),
                data: packet.data.into_owned(),
                flags,
            })
        }
        Block::SimplePacket(packet) => {
            // Simple packets belong to the first interface, and hold the packet padded to 32
            // bits: its captured length is the smaller of its length and the snap length.
            let info = blocks.first()?;
            let snaplen = if info.snaplen == 0 {
                u32::MAX
            } else {
                info.snaplen
            };
            let held = usize::try_from(packet.original_len.min(snaplen)).unwrap_or(usize::MAX);
            let mut data = packet.data.into_owned();
            data.truncate(held);
            Some(Record {
                block: 0,
                ts: RecordTime::Unknown,
                data,
                flags: None,
            })
        }
        Block::InterfaceStatistics(statistics) => {
            let info = usize::try_from(statistics.interface_id)
                .ok()
                .and_then(|block| blocks.get(block));
            for option in &statistics.options {
                if let (InterfaceStatisticsOption::IsbEndTime(ticks), Some(info)) = (option, info) {
                    let ticks = Duration::from_nanos(*ticks);
                    if let Some(at) = packet_time(info, ticks) {
                        *end = Some(end.map_or(at, |end| end.max(at)));
                    }
                }
            }
            None
        }
        _ => None,
    }
}

fn interface_block(block: &InterfaceDescriptionBlock<'_>) -> InterfaceBlock {
    let mut info = InterfaceBlock {
        name: None,
        description: None,
        linktype: u32::from(block.linktype),
        snaplen: block.snaplen,
        tsresol: DEFAULT_TSRESOL,
        tsoffset: 0,
    };
    for option in &block.options {
        match option {
            InterfaceDescriptionOption::IfName(name) => info.name = Some(name.to_string()),
            InterfaceDescriptionOption::IfDescription(text) => {
                info.description = Some(text.to_string())
            }
            InterfaceDescriptionOption::IfTsResol(resolution) => info.tsresol = *resolution,
            InterfaceDescriptionOption::IfTsOffset(offset) => {
                info.tsoffset = i64::from_ne_bytes(offset.to_ne_bytes())
            }
            _ => {}
        }
    }
    info
}

/// The time of a pcapng timestamp. `pcap-file` hands the raw 64-bit count as nanoseconds;
/// it counts units of the interface's `if_tsresol` (10^-n s, or 2^-n s with the top bit set).
fn packet_time(block: &InterfaceBlock, raw: Duration) -> Option<SystemTime> {
    let ticks = raw.as_nanos();
    let exponent = u32::from(block.tsresol & 0x7f);
    let nanos = if block.tsresol & 0x80 == 0 {
        if exponent <= 9 {
            ticks.checked_mul(10u128.checked_pow(9 - exponent)?)?
        } else {
            ticks / 10u128.checked_pow(exponent - 9)?
        }
    } else {
        ticks.checked_mul(1_000_000_000)? >> exponent.min(127)
    };
    let nanos = u64::try_from(nanos).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_nanos(nanos))
}

/// `ts` moved by `if_tsoffset` seconds.
fn shift(ts: SystemTime, offset_seconds: i64) -> SystemTime {
    let by = Duration::from_secs(offset_seconds.unsigned_abs());
    let moved = if offset_seconds >= 0 {
        ts.checked_add(by)
    } else {
        ts.checked_sub(by)
    };
    moved.unwrap_or(ts)
}

fn epb_direction(flags: u32) -> Option<Direction> {
    match flags & EPB_DIRECTION_MASK {
        EPB_INBOUND => Some(Direction::Ingress),
        EPB_OUTBOUND => Some(Direction::Egress),
        _ => None,
    }
}

/// Reads into `buffer` until it is full or the input ends; returns how much it holds.
fn read_up_to(input: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut held = 0;
    while held < buffer.len() {
        match input.read(&mut buffer[held..]) {
            Ok(0) => break,
            Ok(read) => held += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(held)
}

/// What a file that is not a capture seems to be, from its first bytes.
fn what_it_is(start: &[u8]) -> String {
    match start {
        [0x1f, 0x8b, ..] => "it is gzip-compressed: gunzip it first".into(),
        [b'P', b'K', ..] => "it is a zip archive: unzip it first".into(),
        _ if start
            .iter()
            .all(|byte| byte.is_ascii_graphic() || byte.is_ascii_whitespace()) =>
        {
            "it starts with text".into()
        }
        _ => format!("it starts with bytes {start:02x?}"),
    }
}

/// An error of the `pcap-file` crate, said plainly.
fn describe(error: &PcapError) -> String {
    match error {
        PcapError::IoError(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
            "the file ends in the middle of a record".into()
        }
        PcapError::IoError(error) => format!("reading failed: {error}"),
        PcapError::IncompleteBuffer => "the file ends in the middle of a record".into(),
        PcapError::InvalidField(field) => format!("invalid field: {field}"),
        PcapError::Utf8Error(_) | PcapError::FromUtf8Error(_) => "a text field is not UTF-8".into(),
        PcapError::InvalidInterfaceId(id) => {
            format!("a packet names interface {id}, never described")
        }
    }
}
