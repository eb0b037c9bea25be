//! Reading packet bytes without ever panicking.

use super::Malformed;

/// Random access to packet bytes.
///
/// The BPF side implements it over the skb (`bpf_skb_load_bytes`, which also reaches non-linear
/// data) or XDP data; the host implements it over a slice ([`SlicePacket`]). Every read is a
/// fixed-size copy so that BPF can load it into a stack buffer of known size.
#[expect(
    clippy::len_without_is_empty,
    reason = "a packet is never \"empty\" in a meaningful way for the parser"
)]
pub trait PacketBytes {
    /// Bytes in the packet, counted from the start of the link-layer header.
    fn len(&self) -> usize;

    /// The `N` bytes starting at `offset`, or `None` if any of them lies outside the packet.
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]>;
}

/// A packet held in a byte slice (pcap records, tests, fuzzing, userspace decoding).
#[derive(Clone, Copy, Debug)]
pub struct SlicePacket<'a>(pub &'a [u8]);

impl PacketBytes for SlicePacket<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len()
    }

    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        let bytes = self.0.get(offset..offset.checked_add(N)?)?;
        bytes.try_into().ok()
    }
}

/// Reads the big-endian `u16` at `offset`.
#[inline(always)]
pub(crate) fn read_u16<P: PacketBytes>(pkt: &P, offset: usize) -> Option<u16> {
    pkt.read::<2>(offset).map(u16::from_be_bytes)
}

/// Reads a header of `N` bytes at `offset` that must lie inside an IP datagram ending (as its
/// length fields declare) at `datagram_end`.
///
/// A header past the declared end is [`Malformed::BadIpLength`] even when the packet holds the
/// bytes: what follows the datagram is link-layer padding or garbage, not a header. A header
/// inside the declared datagram but past the end of the packet is `truncated`.
#[inline(always)]
pub(crate) fn read_header<P: PacketBytes, const N: usize>(
    pkt: &P,
    offset: usize,
    datagram_end: usize,
    truncated: Malformed,
) -> Result<[u8; N], Malformed> {
    if offset + N > datagram_end {
        return Err(Malformed::BadIpLength);
    }
    pkt.read::<N>(offset).ok_or(truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_reads_inside_and_refuses_outside() {
        let pkt = SlicePacket(&[1, 2, 3, 4]);
        assert_eq!(pkt.read::<2>(2), Some([3, 4]));
        assert_eq!(pkt.read::<0>(4), Some([]));
        assert_eq!(pkt.read::<2>(3), None);
        assert_eq!(pkt.read::<1>(usize::MAX), None);
        assert_eq!(read_u16(&pkt, 1), Some(0x0203));
    }

    #[test]
    fn header_past_declared_end_is_bad_length_before_truncation() {
        let pkt = SlicePacket(&[0; 8]);
        let truncated = Malformed::TruncatedL4;
        assert_eq!(read_header::<_, 4>(&pkt, 4, 8, truncated), Ok([0; 4]));
        assert_eq!(
            read_header::<_, 4>(&pkt, 4, 7, truncated),
            Err(Malformed::BadIpLength)
        );
        assert_eq!(read_header::<_, 4>(&pkt, 6, 20, truncated), Err(truncated));
    }
}
