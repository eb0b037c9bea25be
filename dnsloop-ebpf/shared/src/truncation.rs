//! The truncation table: questions answered with TC set at their client, so that the client's
//! retry over TCP is streamed too and userspace sees whether it came (see `StreamReason::Truncated`).

/// A client sent a truncated answer, and the question it asked.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TruncatedKey {
    /// The client's address (IPv4 in the first 4 bytes): a retry over TCP comes from another
    /// port.
    pub client: [u8; 16],
    /// As in [`QuestionKey`](crate::question::QuestionKey).
    pub name_hash: u64,
    pub qtype: u16,
    pub qclass: u16,
    pub _pad: [u8; 4],
}

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layout is a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn truncated_key_has_no_implicit_padding() {
        assert_eq!(size_of::<TruncatedKey>(), 32);
    }
}
