//! Reading packet bytes out of the socket buffer.
use aya_ebpf::{helpers::generated::bpf_skb_load_bytes, programs::TcContext};
use dnsloop_ebpf::parse::{PacketBytes, DNS_BUF_LEN};

use super::maps::DNS_BUFFER;

/// The parser's view of a socket buffer. `bpf_skb_load_bytes` works on non-linear skbs too
/// (GRO'd and TCP traffic often keeps the DNS payload outside the linear area).
pub struct SkbBytes<'a>(pub &'a TcContext);

impl PacketBytes for SkbBytes<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len() as usize
    }

    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.0.load::<[u8; N]>(offset).ok()
    }
}

/// Copies `len` bytes of the packet at `offset` into the per-CPU DNS buffer for `parse_dns`.
#[inline(always)]
pub fn load_dns_buffer(
    packet: &SkbBytes,
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
pub fn copy_into<const N: usize>(
    ctx: &TcContext,
    offset: usize,
    dst: &mut [u8; N],
    len: usize,
) -> Option<usize> {
    let len = verifier_len::<N>(len)?;
    // SAFETY: `dst` holds at least `len` bytes; the helper fails cleanly past the packet end.
    let rc = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *const _,
            offset as u32,
            dst.as_mut_ptr().cast(),
            len,
        )
    };
    (rc == 0).then_some(len as usize)
}

/// `len` as a helper length the verifier can prove to be in `1..=N`.
///
/// A plain `if len == 0 || len > N` is not enough: LLVM may test one copy of the value and pass
/// another to the helper, and the verifier then sees an unbounded length. Masking the value that
/// is passed keeps the bound on that very register (`N` is a power of two).
#[inline(always)]
fn verifier_len<const N: usize>(len: usize) -> Option<u32> {
    const { assert!(N.is_power_of_two()) };
    if len == 0 || len > N {
        return None;
    }
    let masked = (len - 1) as u32 & (N as u32 - 1);
    Some(masked + 1)
}
