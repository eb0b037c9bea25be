//! The two places the programs run: a socket buffer at TC, and a frame at XDP. Everything else
//! is written once against [`Hook`].
use aya_ebpf::{
    bindings::{__sk_buff, xdp_md},
    helpers::generated::{
        bpf_get_netns_cookie, bpf_skb_load_bytes, bpf_xdp_get_buff_len, bpf_xdp_load_bytes,
    },
};
use core::mem::MaybeUninit;

use dnsloop_shared::parse::{PacketBytes, DNS_BUF_LEN};

use super::maps::{self, DNS_BUFFER};

/// The kernel gives loopback this index in every network namespace.
pub const LOOPBACK_IFINDEX: u32 = 1;

/// A program's context: the raw pointer the kernel handed it, passed by value so that calls
/// out of line do not pin a copy of a wrapper on the 512-byte stack.
pub trait Hook: Copy {
    /// Length of the whole packet.
    fn len(self) -> u32;

    /// Copies `len` bytes at `offset` into `dst`; false past the packet's end. Works on
    /// non-linear packets too (GRO'd and TCP traffic often keeps the payload out of the linear
    /// area, and XDP frames may span several buffers).
    ///
    /// # Safety
    /// `dst` must hold `len` writable bytes.
    unsafe fn load_bytes(self, offset: u32, dst: *mut u8, len: u32) -> bool;

    /// Start and end addresses of the bytes the program may read in place: the packet's linear
    /// area (for XDP, its first buffer).
    fn linear(self) -> (usize, usize);

    fn ifindex(self) -> u32;

    /// The namespace of a loopback packet; 0 for every other interface.
    ///
    /// Userspace attaches to every interface of its own namespace and, in pod namespaces, only
    /// to `lo`, which is ifindex 1 everywhere: so only loopback observations need their
    /// namespace told apart.
    fn loopback_netns_cookie(self) -> u64;
}

/// A socket buffer, at a TC hook.
#[derive(Clone, Copy)]
pub struct Skb(pub *mut __sk_buff);

impl Hook for Skb {
    #[inline(always)]
    fn len(self) -> u32 {
        // Volatile, so that LLVM does not take one read of it for another: from `InPlace`'s
        // check that the packet is all in the linear area and a header's check against the
        // length, it would prove the header in range and drop the check the verifier needs.
        // SAFETY: reading a field of the context the kernel handed us.
        unsafe { core::ptr::read_volatile(&raw const (*self.0).len) }
    }

    #[inline(always)]
    unsafe fn load_bytes(self, offset: u32, dst: *mut u8, len: u32) -> bool {
        // SAFETY: the caller vouches for `dst`; the helper fails cleanly past the packet end.
        unsafe { bpf_skb_load_bytes(self.0 as *const _, offset, dst.cast(), len) == 0 }
    }

    #[inline(always)]
    fn linear(self) -> (usize, usize) {
        // SAFETY: reading fields of the context the kernel handed us (the verifier turns them
        // into the packet's pointers).
        unsafe { ((*self.0).data as usize, (*self.0).data_end as usize) }
    }

    #[inline(always)]
    fn ifindex(self) -> u32 {
        // SAFETY: reading a field of the context the kernel handed us.
        unsafe { (*self.0).ifindex }
    }

    /// In TC, `bpf_get_netns_cookie` returns the namespace of the skb's socket (init_net when
    /// there is none), so userspace attaches to `lo` on egress only, where every packet still
    /// carries the local socket that sent it.
    ///
    /// TC programs have the helper since Linux 6.13. Before, userspace watches only its own
    /// loopback and patches its cookie in: the verifier then never reaches the call, which an
    /// older kernel would reject.
    #[inline(always)]
    fn loopback_netns_cookie(self) -> u64 {
        if self.ifindex() != LOOPBACK_IFINDEX {
            return 0;
        }
        let patched = maps::loopback_cookie();
        if patched != 0 {
            return patched;
        }
        // SAFETY: the helper only reads the skb's socket, if any.
        unsafe { bpf_get_netns_cookie(self.0 as *mut _) }
    }
}

/// A received frame, at an XDP hook (ingress only, before the stack allocates a socket buffer).
#[derive(Clone, Copy)]
pub struct Xdp(pub *mut xdp_md);

impl Hook for Xdp {
    #[inline(always)]
    fn len(self) -> u32 {
        // SAFETY: the helper only reads the frame's lengths.
        unsafe { bpf_xdp_get_buff_len(self.0) as u32 }
    }

    #[inline(always)]
    unsafe fn load_bytes(self, offset: u32, dst: *mut u8, len: u32) -> bool {
        // SAFETY: the caller vouches for `dst`; the helper fails cleanly past the frame end.
        unsafe { bpf_xdp_load_bytes(self.0, offset, dst.cast(), len) == 0 }
    }

    #[inline(always)]
    fn linear(self) -> (usize, usize) {
        // SAFETY: as for `Skb`.
        unsafe { ((*self.0).data as usize, (*self.0).data_end as usize) }
    }

    #[inline(always)]
    fn ifindex(self) -> u32 {
        // SAFETY: reading a field of the context the kernel handed us.
        unsafe { (*self.0).ingress_ifindex }
    }

    /// Userspace never attaches XDP to loopback.
    #[inline(always)]
    fn loopback_netns_cookie(self) -> u64 {
        0
    }
}

/// The parser's view of a packet at a hook.
pub struct HookBytes<H: Hook>(pub H);

impl<H: Hook> PacketBytes for HookBytes<H> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len() as usize
    }

    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        // Not zeroed first: the helper writes every byte or fails, and zeroing compiles to a
        // `memset` call per header read, which also counts against 6.1's stack limit.
        let mut bytes = MaybeUninit::<[u8; N]>::uninit();
        // SAFETY: `bytes` holds N bytes.
        let loaded = unsafe {
            self.0
                .load_bytes(offset as u32, bytes.as_mut_ptr().cast(), N as u32)
        };
        // SAFETY: a successful load wrote all N bytes.
        loaded.then(|| unsafe { bytes.assume_init() })
    }
}

/// The parser's view of a packet held whole in its linear area, as nearly every packet is at the
/// hooks: read in place. A header then costs no helper call and no copy to the stack (LLVM loads
/// only the bytes the parser uses); three such calls were most of what classifying a packet
/// cost.
///
/// A packet is read either all in place or all with the helper, never a mix: with a choice at
/// every header, the verifier would follow each combination of choices (about four times the
/// work).
#[derive(Clone, Copy)]
pub struct InPlace<H: Hook> {
    hook: H,
    start: usize,
    end: usize,
}

/// Packets this long or longer are read with the helper: the verifier needs a bound on an offset
/// added to a packet pointer. Above any frame of a 1500-byte MTU; jumbo frames and GRO's merged
/// packets take the helper (which also reaches the data the latter keep outside the linear area).
const IN_PLACE_LEN_LIMIT: usize = 2048;

impl<H: Hook> InPlace<H> {
    /// The packet at `hook`, if its every byte is in the linear area.
    ///
    /// Call once per packet, in one BPF function: the verifier refuses a context field read
    /// through a pointer LLVM derived from the context, which it does when the fields are read
    /// in many places.
    #[inline(always)]
    pub fn of(hook: H) -> Option<Self> {
        let (start, end) = hook.linear();
        let len = hook.len() as usize;
        (len < IN_PLACE_LEN_LIMIT && start + len <= end).then_some(Self { hook, start, end })
    }
}

impl<H: Hook> PacketBytes for InPlace<H> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.hook.len() as usize
    }

    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        // One byte is left to the helper: at offset 0, LLVM turns the check into
        // `start < end`, from which the verifier grants no readable range.
        if N < 2 {
            return HookBytes(self.hook).read(offset);
        }
        // Bounded after a barrier, so that the very value added to the packet pointer is the one
        // tested: LLVM may otherwise test a part of it before combining the parts, and Linux
        // 6.1's verifier then sees an unbounded offset.
        let offset = core::hint::black_box(offset);
        if offset >= IN_PLACE_LEN_LIMIT || self.start + offset + N > self.end {
            return None;
        }
        // SAFETY: the N bytes lie in the linear area, as checked just above (the very check the
        // verifier wants before a packet read).
        Some(unsafe { core::ptr::read_unaligned((self.start + offset) as *const [u8; N]) })
    }
}

/// Copies `len` bytes of the packet at `offset` into the per-CPU DNS buffer for `parse_dns`.
#[inline(always)]
pub fn load_dns_buffer<H: Hook>(
    packet: &HookBytes<H>,
    offset: usize,
    len: usize,
) -> Option<(&'static [u8; DNS_BUF_LEN], usize)> {
    let buffer = DNS_BUFFER.get_ptr_mut(0)?;
    // SAFETY: the per-CPU buffer belongs to this program run until it returns.
    let buffer = unsafe { &mut *buffer };
    let len = copy_into(packet.0, offset, buffer, len)?;
    Some((buffer, len))
}

/// Copies `len` bytes at `offset` into `dst`, `len` clamped to `1..=N`; returns the length.
#[inline(always)]
pub fn copy_into<H: Hook, const N: usize>(
    hook: H,
    offset: usize,
    dst: &mut [u8; N],
    len: usize,
) -> Option<usize> {
    let len = verifier_len::<N>(len)?;
    // SAFETY: `dst` holds at least `len` bytes.
    unsafe { hook.load_bytes(offset as u32, dst.as_mut_ptr(), len) }.then_some(len as usize)
}

/// `len` as a helper length the verifier can prove to be in `1..=N`.
///
/// A plain `if len == 0 || len > N` is not enough: LLVM may test one copy of the value and pass
/// another to the helper, and the verifier then sees an unbounded length. Masking the value that
/// is passed keeps the bound on that very register (`N` is a power of two). The value is read
/// through a volatile load first: where LLVM knows its range from a test before (a name longer
/// than some room), it would find the mask redundant and drop it.
#[inline(always)]
fn verifier_len<const N: usize>(len: usize) -> Option<u32> {
    const { assert!(N.is_power_of_two()) };
    // SAFETY: reading a local.
    let len = unsafe { core::ptr::read_volatile(&len) };
    if len == 0 || len > N {
        return None;
    }
    let masked = (len - 1) as u32 & (N as u32 - 1);
    Some(masked + 1)
}
