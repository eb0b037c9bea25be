//! Packets the kernel dropped: on the `kfree_skb` tracepoint, a dropped packet on a DNS port is
//! copied from its IP header on, with the drop's reason, place and kernel location, into the
//! drop ring.
//!
//! Offsets come from the running kernel's BTF, patched in by userspace (see
//! `drop::DropLayout`). The few fields every freed buffer needs are plain loads from the
//! tracepoint's typed `sk_buff` pointer, which the verifier checks against that BTF and the JIT
//! makes fault-safe; the rest (the packet, and the device and namespace of a DNS drop) go
//! through `bpf_probe_read_kernel`: a read that fails leaves that part of the record zero, never
//! a fault.
use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_buf},
    programs::BtfTracePointContext,
};
use dnsloop_shared::{
    counter::Counter,
    drop::{
        reason_slot, DropLayout, DropRecord, DROP_RECORD_HEADER_LEN, DROP_SNAP_MAX,
        LOCATION_ARGUMENT, REASON_ARGUMENT, SKB_ARGUMENT, UNKNOWN_REASON,
    },
    parse::{classify, LinkLayer, PacketBytes, PacketClass},
};

use super::{counters, maps, Linux};

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

/// Looks at one freed socket buffer; streams it if it held DNS.
#[inline(always)]
pub fn observe<L: Linux>(ctx: &BtfTracePointContext) {
    let layout = maps::drop_layout();
    if !layout.is_set() {
        return;
    }
    let skb: *const u8 = ctx.arg(SKB_ARGUMENT);
    if skb.is_null() {
        return;
    }
    let headers = Headers::read(skb, &layout);
    if headers.protocol != ETH_P_IP && headers.protocol != ETH_P_IPV6 {
        return;
    }
    let Some(record) = maps::DROP_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let record = unsafe { &mut *record };
    if !copy_packet(&headers, record) || !is_dns(record) {
        return;
    }
    counters::bump(Counter::DnsDrops);
    // Not read where the tracepoint has no such argument: the kernel refuses to attach a
    // program that reads past a tracepoint's arguments.
    let reason = if L::DROP_REASONS {
        ctx.arg::<u64>(REASON_ARGUMENT) as u32
    } else {
        UNKNOWN_REASON
    };
    if let Some(count) = maps::DROP_REASONS.get_ptr_mut(reason_slot(reason)) {
        // SAFETY: per-CPU slot, so nothing else writes it concurrently.
        unsafe { *count += 1 };
    }
    record.protocol = headers.protocol;
    record.reason = reason;
    record.location = ctx.arg(LOCATION_ARGUMENT);
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    record.ts_ns = unsafe { bpf_ktime_get_ns() };
    place(skb as u64, &layout, record);
    // The header and the bytes captured, no more (see `DropRecord`).
    let len = DROP_RECORD_HEADER_LEN + usize::from(record.captured_len).min(DROP_SNAP_MAX);
    // SAFETY: the per-CPU value is a whole DropRecord, and `len` is at most its size.
    let filled =
        unsafe { core::slice::from_raw_parts((record as *const DropRecord).cast::<u8>(), len) };
    if maps::DROPS.output::<[u8]>(filled, 0).is_err() {
        counters::bump(Counter::LostRecords);
    }
}

/// Whether the packet copied into `record` is on a DNS port.
///
/// Its own BPF function, as `classify_into` is for the classifiers: it keeps the classifier's
/// deep frame off the rest of the program's stack.
#[inline(never)]
fn is_dns(record: &DropRecord) -> bool {
    let ports = maps::dns_ports();
    let bytes = CopiedPacket {
        bytes: &record.bytes,
        len: usize::from(record.captured_len),
    };
    matches!(
        classify(&bytes, LinkLayer::RawIp, &ports),
        PacketClass::Dns(_)
    )
}

/// The bytes copied from a dropped packet, as the parser reads them.
struct CopiedPacket<'a> {
    bytes: &'a [u8; DROP_SNAP_MAX],
    len: usize,
}

impl PacketBytes for CopiedPacket<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        if offset.checked_add(N)? > self.len {
            return None;
        }
        // The verifier checks a read against the map value's bounds on the register that
        // addresses it, and LLVM would move the check above to another register (or fold it
        // with what it knows of `offset`): passed through memory it cannot, and the check
        // below is on the very value the read uses. Older verifiers (6.1, 6.12) need it.
        let mut at = offset;
        // SAFETY: a local's own address.
        let at = unsafe {
            core::ptr::write_volatile(&mut at, offset);
            core::ptr::read_volatile(&at)
        };
        let bytes = self.bytes.get(at..at.checked_add(N)?)?;
        bytes.try_into().ok()
    }
}

/// What the drop program reads of every freed buffer, DNS or not, to find its packet.
#[derive(Clone, Copy)]
struct Headers {
    /// The ethertype (host order).
    protocol: u16,
    /// Offsets from `head`, as in `struct sk_buff`.
    network: u16,
    tail: u32,
    head: u64,
}

impl Headers {
    /// Every freed buffer comes this way, DNS or not: plain loads, at offsets the verifier sees
    /// as the constants userspace patched in, cost a few nanoseconds where a
    /// `bpf_probe_read_kernel` costs about 40.
    #[inline(always)]
    fn read(skb: *const u8, layout: &DropLayout) -> Self {
        // SAFETY: `skb` is the tracepoint's `struct sk_buff *`, and each offset that of the
        // field read, of its type, in the running kernel (the verifier refuses any other).
        unsafe {
            let field = |offset: u16| skb.add(usize::from(offset));
            Self {
                protocol: u16::from_be(field(layout.skb_protocol).cast::<u16>().read()),
                network: field(layout.skb_network_header).cast::<u16>().read(),
                tail: field(layout.skb_tail).cast::<u32>().read(),
                head: field(layout.skb_head).cast::<u64>().read(),
            }
        }
    }
}

/// Copies the packet from its IP header (`network`, from the buffer's head) to the end of its
/// linear data, at most `DROP_SNAP_MAX` bytes, into `record`; false when there is none to read.
#[inline(always)]
fn copy_packet(headers: &Headers, record: &mut DropRecord) -> bool {
    let Headers {
        network,
        tail,
        head,
        ..
    } = *headers;
    // A buffer never given a network header (0 as allocated) or holding nothing past it.
    if head == 0 || network == 0 || u32::from(network) >= tail {
        return false;
    }
    let linear = tail - u32::from(network);
    record.linear_len = linear;
    let len = (linear as usize).min(DROP_SNAP_MAX);
    // The helper needs a length it can prove: in 1..=DROP_SNAP_MAX.
    if len == 0 {
        return false;
    }
    let src = (head + u64::from(network)) as *const u8;
    // SAFETY: the helper checks the kernel address and fails cleanly.
    if unsafe { bpf_probe_read_kernel_buf(src, &mut record.bytes[..len]) }.is_err() {
        return false;
    }
    record.captured_len = len as u16;
    true
}

/// Notes the device the buffer was on, and its network namespace, in `record`.
#[inline(always)]
fn place(skb: u64, layout: &DropLayout, record: &mut DropRecord) {
    record.ifindex = 0;
    record.netns_cookie = 0;
    let dev: u64 = read(skb, layout.skb_dev).unwrap_or(0);
    if dev == 0 {
        return;
    }
    let Some(ifindex) = read::<i32>(dev, layout.dev_ifindex) else {
        return;
    };
    record.ifindex = ifindex as u32;
    let net: u64 = read(dev, layout.dev_net).unwrap_or(0);
    if net == 0 {
        return;
    }
    record.netns_cookie = if layout.net_cookie != 0 {
        read(net, layout.net_cookie).unwrap_or(0)
    } else {
        read::<u32>(net, layout.net_inum).map_or(0, u64::from)
    };
}

/// The `T` at `offset` into the kernel object at `base`.
#[inline(always)]
fn read<T>(base: u64, offset: u16) -> Option<T> {
    // SAFETY: the helper checks the kernel address and fails cleanly.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T) }.ok()
}
