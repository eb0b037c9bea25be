//! The kernel's own drops of DNS packets: where the drop program reads in the running kernel,
//! the reasons' names there, attaching it to the `kfree_skb` tracepoint, and reading what it
//! streams and counts.
//!
//! Drop reasons are numbered differently from kernel to kernel, and the structures the program
//! reads move: both are read from the running kernel's BTF, never compiled in. The program is a
//! BTF-typed tracepoint (`tp_btf`): it needs no tracefs, which containers and `ip netns exec`
//! often lack, and reads the buffer's fields by plain loads the verifier checks.
use std::{collections::HashMap, io, sync::Arc};

use aya::{
    maps::{MapData, MapError, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, ProgramError},
    Btf, BtfError as AyaBtfError, Ebpf,
};
use bytes::Bytes;
use dnsloop_core::{points::InterfaceRef, source::DroppedPacket};
use dnsloop_shared::{
    drop::{
        reason_slot, DropLayout, DropRecord, DROP_REASON_SLOTS, DROP_RECORD_HEADER_LEN,
        DROP_SNAP_MAX, UNKNOWN_REASON,
    },
    names::{DROPS_MAP, DROP_PROGRAM, DROP_REASONS_MAP},
};
use thiserror::Error;
use tokio::io::unix::AsyncFd;

use super::{
    btf::{BtfError, KernelBtf},
    clock::MonotonicClock,
    programs::{self, Build},
    symbols::KernelSymbols,
};
use crate::node::namespaces;

/// The tracepoint the drop program attaches to.
const TRACEPOINT: &str = "kfree_skb";
/// The kernel's own BTF.
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// The enum naming the drop reasons.
const REASONS_ENUM: &str = "skb_drop_reason";
/// The prefix of the drop reasons' names in `enum skb_drop_reason`.
const REASON_PREFIX: &str = "SKB_DROP_REASON_";
/// The name the last counter slot goes by when no reason has its number.
const OTHER_REASONS: &str = "OTHER";
/// The reason of every drop where the tracepoint gives none.
pub const UNKNOWN_REASON_NAME: &str = "unknown (Linux < 5.17)";

/// Why drops cannot be watched on this kernel. None stops dnsloop: it traces without them.
#[derive(Debug, Error)]
pub enum DropsUnavailable {
    #[error("this kernel's kfree_skb tracepoint gives no drop reason (Linux 5.17 added it), which the programs for Linux 5.17+ read")]
    NoReasons,
    #[error("this kernel publishes no BTF at {KERNEL_BTF} (CONFIG_DEBUG_INFO_BTF): the drop program cannot find its way in the kernel's socket buffers")]
    NoBtf(#[source] io::Error),
    #[error("the kernel's BTF at {KERNEL_BTF} cannot be read: {0}")]
    Btf(BtfError),
    #[error("the kernel's BTF has no {0} the drop program can read")]
    NoMember(String),
}

/// Attaching the drop program failed.
#[derive(Debug, Error)]
pub enum DropAttachError {
    #[error("the BPF object has no {0}: the build is broken, rebuild with `cargo xtask build`")]
    Missing(&'static str),
    #[error("reading the kernel's BTF for the kfree_skb tracepoint's types failed")]
    Btf(#[source] AyaBtfError),
    #[error("loading the drop program failed")]
    Load(#[source] ProgramError),
    #[error("attaching the drop program to the kfree_skb tracepoint failed")]
    Attach(#[source] ProgramError),
    #[error("opening map {0}")]
    Map(&'static str, #[source] MapError),
    #[error("watching the drop ring")]
    Ring(#[source] io::Error),
}

/// What the running kernel offers for watching drops: the program's layout, and the reasons'
/// names.
pub struct KernelDrops {
    layout: DropLayout,
    reasons: DropReasons,
}

impl KernelDrops {
    /// Reads the kernel's BTF, for the drop program of `build`.
    pub fn discover(build: Build) -> Result<Self, DropsUnavailable> {
        let btf = std::fs::read(KERNEL_BTF).map_err(DropsUnavailable::NoBtf)?;
        let btf = KernelBtf::parse(btf).map_err(DropsUnavailable::Btf)?;
        let reasons = if kernel_gives_reasons(&btf)? {
            DropReasons::from_btf(&btf)?
        } else if build.reads_drop_reasons() {
            return Err(DropsUnavailable::NoReasons);
        } else {
            DropReasons::unknown()
        };
        let offset = |structure: &str, path: &str| byte_offset(&btf, structure, path);
        // The namespace of a drop's device goes by what every namespace goes by here.
        let (net_cookie, net_inum) = if namespaces::cookies_exist() {
            (offset("net", "net_cookie")?, 0)
        } else {
            (0, offset("net", "ns.inum")?)
        };
        let layout = DropLayout {
            skb_protocol: offset("sk_buff", "protocol")?,
            skb_head: offset("sk_buff", "head")?,
            skb_network_header: offset("sk_buff", "network_header")?,
            skb_tail: offset("sk_buff", "tail")?,
            skb_dev: offset("sk_buff", "dev")?,
            dev_ifindex: offset("net_device", "ifindex")?,
            dev_net: offset("net_device", "nd_net.net")?,
            net_cookie,
            net_inum,
        };
        Ok(Self { layout, reasons })
    }

    /// Whether drops are reported with their reason.
    pub fn gives_reasons(&self) -> bool {
        !self.reasons.unknown
    }

    /// Where the drop program is to read: patched into it at load time.
    pub fn layout(&self) -> DropLayout {
        self.layout
    }

    /// Attaches the drop program of `ebpf`, loaded with [`Self::layout`], and returns what
    /// reads its drops.
    pub fn attach(self, ebpf: &mut Ebpf, clock: MonotonicClock) -> Result<Drops, DropAttachError> {
        let program: &mut BtfTracePoint = ebpf
            .program_mut(DROP_PROGRAM)
            .ok_or(DropAttachError::Missing(DROP_PROGRAM))?
            .try_into()
            .map_err(DropAttachError::Load)?;
        // The tracepoint's types are looked up in the kernel's BTF, parsed whole for this and
        // let go at once.
        let btf = Btf::from_sys_fs().map_err(DropAttachError::Btf)?;
        program
            .load(TRACEPOINT, &btf)
            .map_err(DropAttachError::Load)?;
        drop(btf);
        programs::give_back_freed_heap();
        program.attach().map_err(DropAttachError::Attach)?;
        let map = ebpf
            .take_map(DROPS_MAP)
            .ok_or(DropAttachError::Missing(DROPS_MAP))?;
        let ring =
            RingBuf::try_from(map).map_err(|error| DropAttachError::Map(DROPS_MAP, error))?;
        // SAFETY: the ring owns its map descriptor, which stays open and unchanged for as long
        // as the AsyncFd owns the ring.
        let ring = unsafe { AsyncFd::register(ring) }
            .map_err(|error| DropAttachError::Ring(error.into()))?;
        Ok(Drops {
            ring,
            clock,
            reasons: self.reasons,
            symbols: KernelSymbols::default(),
            undecodable_records: 0,
        })
    }
}

/// The drop program's stream and counts.
pub struct Drops {
    ring: AsyncFd<RingBuf<MapData>>,
    clock: MonotonicClock,
    reasons: DropReasons,
    /// The places drops came from, named as they come.
    symbols: KernelSymbols,
    /// Records whose bytes made no sense (a version mismatch between the program and us).
    pub undecodable_records: u64,
}

impl Drops {
    /// Waits until drops may be available, then appends every available one to `out`.
    pub async fn next_batch(&mut self, out: &mut Vec<DroppedPacket>) -> io::Result<()> {
        self.ring.readable_mut().await?.clear_ready();
        self.drain(out);
        Ok(())
    }

    /// Appends every drop already in the ring to `out`, without waiting.
    pub fn drain(&mut self, out: &mut Vec<DroppedPacket>) {
        let first = out.len();
        let mut locations = Vec::new();
        let ring = self.ring.get_mut();
        while let Some(item) = ring.next() {
            match dropped_packet(&item, &self.clock, &self.reasons) {
                Some((packet, location)) => {
                    out.push(packet);
                    locations.push(location);
                }
                None => self.undecodable_records += 1,
            }
        }
        // The batch's new places named together: each costs a pass over kallsyms.
        self.symbols.learn(locations.iter().copied());
        for (packet, location) in out[first..].iter_mut().zip(locations) {
            packet.location = self.symbols.name(location);
        }
    }

    /// The DNS packets dropped per reason so far, reasons in the kernel's order; only reasons
    /// that occurred.
    pub fn counts(&self, ebpf: &Ebpf) -> Result<Vec<(Arc<str>, u64)>, MapError> {
        let map = ebpf
            .map(DROP_REASONS_MAP)
            .ok_or_else(|| MapError::InvalidName {
                name: DROP_REASONS_MAP.into(),
            })?;
        let array: PerCpuArray<_, u64> = PerCpuArray::try_from(map)?;
        let mut counts = Vec::new();
        for slot in 0..DROP_REASON_SLOTS {
            let count: u64 = array.get(&slot, 0)?.iter().sum();
            if count > 0 {
                counts.push((self.reasons.of_slot(slot), count));
            }
        }
        Ok(counts)
    }
}

/// The drop a ring record holds, and the kernel text address it came from (its location left
/// for the caller to name).
fn dropped_packet(
    item: &[u8],
    clock: &MonotonicClock,
    reasons: &DropReasons,
) -> Option<(DroppedPacket, u64)> {
    if item.len() < DROP_RECORD_HEADER_LEN {
        return None;
    }
    // The item is the record's header and its captured bytes only (see `DropRecord`).
    let mut record = DropRecord::EMPTY;
    let len = item.len().min(std::mem::size_of::<DropRecord>());
    // SAFETY: `len` bytes fit in both; DropRecord is plain data, valid whatever its bytes.
    unsafe { std::ptr::copy_nonoverlapping(item.as_ptr(), (&raw mut record).cast::<u8>(), len) };
    let captured = usize::from(record.captured_len)
        .min(DROP_SNAP_MAX)
        .min(len - DROP_RECORD_HEADER_LEN);
    let packet = DroppedPacket {
        ts: clock.wall_time(record.ts_ns),
        reason: reasons.of(record.reason),
        location: None,
        device: InterfaceRef {
            netns_cookie: record.netns_cookie,
            ifindex: record.ifindex,
        },
        bytes: Bytes::copy_from_slice(&record.bytes[..captured]),
    };
    Some((packet, record.location))
}

/// Whether the kernel's `kfree_skb` tracepoint gives the drop's reason: its record declares
/// what its arguments are, and the reason came with them (Linux 5.17).
fn kernel_gives_reasons(btf: &KernelBtf) -> Result<bool, DropsUnavailable> {
    match byte_offset(btf, "trace_event_raw_kfree_skb", "reason") {
        Ok(_) => Ok(true),
        Err(DropsUnavailable::NoMember(_)) => Ok(false),
        Err(error) => Err(error),
    }
}

/// The running kernel's names of its drop reasons (`NETFILTER_DROP`), by number.
#[derive(Debug, Default)]
pub struct DropReasons {
    names: HashMap<u32, Arc<str>>,
    /// The kernel gives no reasons: every drop's is [`UNKNOWN_REASON_NAME`].
    unknown: bool,
}

impl DropReasons {
    /// Where the kernel gives no reasons.
    fn unknown() -> Self {
        Self {
            names: HashMap::new(),
            unknown: true,
        }
    }

    /// From `enum skb_drop_reason` in the kernel's BTF; none if it has no such enum.
    fn from_btf(btf: &KernelBtf) -> Result<Self, DropsUnavailable> {
        let reasons = btf
            .enum_values(REASONS_ENUM)
            .map_err(DropsUnavailable::Btf)?;
        Ok(reasons.map_or_else(Self::default, Self::from_names))
    }

    /// From the enum's names as the kernel spells them (`SKB_DROP_REASON_NO_SOCKET`).
    fn from_names<'a>(values: impl IntoIterator<Item = (u32, &'a str)>) -> Self {
        Self {
            names: values
                .into_iter()
                .map(|(number, name)| {
                    let short = name.strip_prefix(REASON_PREFIX).unwrap_or(name);
                    (number, Arc::from(short))
                })
                .collect(),
            unknown: false,
        }
    }

    /// The name of reason `number`; `REASON_<number>` for one the kernel does not name.
    pub fn of(&self, number: u32) -> Arc<str> {
        if self.unknown || number == UNKNOWN_REASON {
            return UNKNOWN_REASON_NAME.into();
        }
        self.names
            .get(&number)
            .cloned()
            .unwrap_or_else(|| format!("REASON_{number}").into())
    }

    /// The name of the counter slot `slot` (see `drop::reason_slot`).
    fn of_slot(&self, slot: u32) -> Arc<str> {
        if self.unknown {
            return UNKNOWN_REASON_NAME.into();
        }
        let shared = slot == reason_slot(u32::MAX);
        if shared
            && self
                .names
                .keys()
                .any(|&number| reason_slot(number) == slot && number != slot)
        {
            return OTHER_REASONS.into();
        }
        self.of(slot)
    }
}

/// The byte offset of `path` (`nd_net.net`) in `struct structure`; members of anonymous
/// structs and unions are found by their own names.
fn byte_offset(btf: &KernelBtf, structure: &str, path: &str) -> Result<u16, DropsUnavailable> {
    let missing = || DropsUnavailable::NoMember(format!("struct {structure}'s {path}"));
    let offset = btf
        .member_offset(structure, path)
        .map_err(DropsUnavailable::Btf)?
        .ok_or_else(missing)?;
    u16::try_from(offset).map_err(|_| missing())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_item_holds_its_header_and_only_the_bytes_captured() {
        let mut record = DropRecord::EMPTY;
        record.captured_len = 3;
        record.bytes[..3].copy_from_slice(&[0x45, 0, 0]);
        // SAFETY: plain data, read as bytes.
        let whole = unsafe {
            std::slice::from_raw_parts(
                (&raw const record).cast::<u8>(),
                std::mem::size_of::<DropRecord>(),
            )
        };
        let (clock, reasons) = (MonotonicClock::anchored_now(), DropReasons::unknown());
        let item = &whole[..DROP_RECORD_HEADER_LEN + 3];
        let (dropped, _) = dropped_packet(item, &clock, &reasons).unwrap();
        assert_eq!(&dropped.bytes[..], [0x45, 0, 0]);
        // An item cut short of what its header says holds only what it has.
        let cut = &whole[..DROP_RECORD_HEADER_LEN + 1];
        let (dropped, _) = dropped_packet(cut, &clock, &reasons).unwrap();
        assert_eq!(&dropped.bytes[..], [0x45]);
        let header_only = &whole[..DROP_RECORD_HEADER_LEN - 1];
        assert!(dropped_packet(header_only, &clock, &reasons).is_none());
    }

    #[test]
    fn reasons_are_named_as_the_kernel_numbers_them() {
        let reasons = DropReasons::from_names([
            (2, "SKB_DROP_REASON_NOT_SPECIFIED"),
            (3, "SKB_DROP_REASON_NO_SOCKET"),
            (12, "SKB_DROP_REASON_NETFILTER_DROP"),
            (1, "SKB_CONSUMED"),
        ]);
        assert_eq!(&*reasons.of(12), "NETFILTER_DROP");
        assert_eq!(&*reasons.of(3), "NO_SOCKET");
        assert_eq!(&*reasons.of(1), "SKB_CONSUMED");
        assert_eq!(&*reasons.of(99), "REASON_99");
    }

    #[test]
    fn the_last_counter_slot_is_named_for_the_reasons_it_shares() {
        let last = DROP_REASON_SLOTS - 1;
        let alone = DropReasons::from_names([(last, "SKB_DROP_REASON_LAST")]);
        assert_eq!(&*alone.of_slot(last), "LAST");
        let shared =
            DropReasons::from_names([(last, "SKB_DROP_REASON_LAST"), (0x1_0000, "SUBSYS")]);
        assert_eq!(&*shared.of_slot(last), OTHER_REASONS);
    }

    #[test]
    fn without_reasons_every_drop_and_slot_is_unknown() {
        let unknown = DropReasons::unknown();
        assert_eq!(&*unknown.of(UNKNOWN_REASON), UNKNOWN_REASON_NAME);
        assert_eq!(&*unknown.of(3), UNKNOWN_REASON_NAME);
        assert_eq!(
            &*unknown.of_slot(DROP_REASON_SLOTS - 1),
            UNKNOWN_REASON_NAME
        );
        // A build that reads no reason, on a kernel that names them.
        let named = DropReasons::from_names([(3, "SKB_DROP_REASON_NO_SOCKET")]);
        assert_eq!(&*named.of(UNKNOWN_REASON), UNKNOWN_REASON_NAME);
    }

    /// On the machine running the tests: the lean reader finds every member the drop program
    /// reads where btfparse, a general BTF parser, does, and the same drop reasons.
    #[test]
    fn this_kernels_btf_reads_as_btfparse_reads_it() {
        use btfparse::{Integer32Value, Offset, TypeInformation, TypeVariant};

        let bytes = match std::fs::read(KERNEL_BTF) {
            Ok(bytes) => bytes,
            Err(error) if std::env::var("CI").is_ok_and(|value| value == "true") => {
                panic!("{KERNEL_BTF}: {error} (CI=true: this test must run)")
            }
            Err(error) => {
                eprintln!("SKIPPED: {KERNEL_BTF}: {error}");
                return;
            }
        };
        let general = TypeInformation::new(&GeneralBtf(bytes.clone())).unwrap();
        let lean = KernelBtf::parse(bytes).unwrap();
        // Every member `KernelDrops::discover` reads, both namespace paths included.
        for (structure, path) in [
            ("sk_buff", "protocol"),
            ("sk_buff", "head"),
            ("sk_buff", "network_header"),
            ("sk_buff", "tail"),
            ("sk_buff", "dev"),
            ("net_device", "ifindex"),
            ("net_device", "nd_net.net"),
            ("net", "net_cookie"),
            ("net", "ns.inum"),
            ("trace_event_raw_kfree_skb", "reason"),
        ] {
            let expected = general
                .id_of(structure)
                .and_then(|id| general.offset_of(id, path).ok())
                .and_then(|(_, offset)| match offset {
                    Offset::ByteOffset(offset) => Some(offset),
                    Offset::BitOffsetAndSize(..) => None,
                });
            assert_eq!(
                lean.member_offset(structure, path).unwrap(),
                expected,
                "struct {structure}'s {path}"
            );
        }
        let expected = match general
            .id_of(REASONS_ENUM)
            .and_then(|id| general.from_id(id))
        {
            Some(TypeVariant::Enum(reasons)) => Some(
                reasons
                    .named_value_list()
                    .iter()
                    .filter_map(|value| {
                        let number = match value.value {
                            Integer32Value::Unsigned(number) => number,
                            Integer32Value::Signed(number) => u32::try_from(number).ok()?,
                        };
                        Some((number, value.name.clone()))
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        let found = lean.enum_values(REASONS_ENUM).unwrap().map(|values| {
            values
                .into_iter()
                .map(|(number, name)| (number, name.to_owned()))
                .collect::<Vec<_>>()
        });
        assert_eq!(found, expected);
    }

    /// The kernel's BTF as btfparse reads it.
    struct GeneralBtf(Vec<u8>);

    impl btfparse::Readable for GeneralBtf {
        fn read(&self, offset: u64, buffer: &mut [u8]) -> btfparse::Result<()> {
            let bytes = usize::try_from(offset)
                .ok()
                .and_then(|start| self.0.get(start..start.checked_add(buffer.len())?))
                .ok_or_else(|| {
                    btfparse::Error::new(btfparse::ErrorKind::EOF, "past the BTF's end")
                })?;
            buffer.copy_from_slice(bytes);
            Ok(())
        }
    }

    /// On the machine running the tests: a kernel with drop reasons and BTF gives a layout
    /// whose every offset was found, and names the reasons the lab's scenarios make.
    #[test]
    fn this_kernels_layout_is_found() {
        let drops = match KernelDrops::discover(Build::Linux517) {
            Ok(drops) => drops,
            Err(error) if std::env::var_os("CI").is_none() => {
                eprintln!("skipped outside CI: {error}");
                return;
            }
            Err(error) => panic!("{error}"),
        };
        let layout = drops.layout();
        assert!(layout.is_set());
        assert!(layout.skb_head > 0 && layout.net_cookie > 0, "{layout:?}");
        assert!(drops.gives_reasons());
        for reason in ["NETFILTER_DROP", "NO_SOCKET", "SOCKET_RCVBUFF"] {
            assert!(
                drops.reasons.names.values().any(|name| &**name == reason),
                "{reason} unnamed"
            );
        }
    }
}
