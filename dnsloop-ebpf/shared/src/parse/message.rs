//! The DNS buffer `parse_dns` reads: a fixed-size array holding the first bytes of a message.

/// Size of the DNS buffer. In BPF it is a per-CPU map value, too big for the 512-byte stack. A
/// power of two so that [`Message::buffer_byte`] can mask indices.
pub const DNS_BUF_LEN: usize = 512;

const _: () = assert!(DNS_BUF_LEN.is_power_of_two());

/// The valid bytes of a DNS buffer.
pub struct Message<'a> {
    buf: &'a [u8; DNS_BUF_LEN],
    len: usize,
}

impl<'a> Message<'a> {
    /// The first `len` bytes of `buf`, if `len` fits in it.
    #[inline(always)]
    pub(crate) fn new(buf: &'a [u8; DNS_BUF_LEN], len: usize) -> Option<Self> {
        (len <= DNS_BUF_LEN).then_some(Self { buf, len })
    }

    /// The byte at `idx`, if it is one of the valid bytes.
    #[inline(always)]
    pub(crate) fn byte_at(&self, idx: usize) -> Option<u8> {
        if idx >= self.len {
            return None;
        }
        Some(self.buffer_byte(idx))
    }

    /// The buffer byte at `idx`, valid or not (past `len` it is stale data).
    ///
    /// The mask changes no index below `DNS_BUF_LEN`. It is there for the verifier: it cannot
    /// carry `idx < len` (two run-time values) over to the bounds of the map value behind
    /// `buf`, but it can check `idx & (DNS_BUF_LEN - 1)` against them. It also lets rustc drop
    /// the bounds check, so no panic path is compiled in.
    ///
    /// For readers that already know `idx` to be valid. Unlike `byte_at` it does not compare
    /// `idx` with `len`: after the name walk, each of the verifier's paths has narrowed `len`
    /// differently, and a comparison would make it keep those paths apart.
    #[inline(always)]
    pub(crate) fn buffer_byte(&self, idx: usize) -> u8 {
        self.buf[idx & (DNS_BUF_LEN - 1)]
    }

    /// The big-endian `u16` at `idx`, if both bytes are valid.
    #[inline(always)]
    pub(crate) fn u16_at(&self, idx: usize) -> Option<u16> {
        Some(u16::from_be_bytes([
            self.byte_at(idx)?,
            self.byte_at(idx + 1)?,
        ]))
    }
}
