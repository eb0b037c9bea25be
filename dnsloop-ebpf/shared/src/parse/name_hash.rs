//! The hash that identifies a query name, computed identically in BPF and in userspace.
//!
//! Definition: 64-bit FNV-1a (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) over the
//! name's wire bytes exactly as they appear in the question (every length octet, every label
//! byte and the terminating root zero), where each byte in `b'A'..=b'Z'` is first mapped to
//! lower case and every other byte is hashed as is. Length octets are at most 63, below `b'A'`,
//! so folding every byte equals folding only label bytes. For example `\x03Foo\x00` hashes like
//! `\x03foo\x00`, and the root name `\x00` hashes to FNV-1a of the single byte 0.

/// The hash of the empty byte string; fold a name's bytes into it one by one.
pub const NAME_HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Folds one wire byte of a name into `hash` (start from [`NAME_HASH_SEED`]).
#[inline(always)]
pub fn name_hash_fold(hash: u64, byte: u8) -> u64 {
    (hash ^ u64::from(byte.to_ascii_lowercase())).wrapping_mul(FNV_PRIME)
}

/// The hash of a complete wire-format name, for userspace to key names it holds the bytes of.
pub fn name_hash(wire_name: &[u8]) -> u64 {
    wire_name
        .iter()
        .fold(NAME_HASH_SEED, |hash, &byte| name_hash_fold(hash, byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_published_fnv1a_64_vectors() {
        assert_eq!(name_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(name_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(name_hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn folds_ascii_upper_case_only() {
        assert_eq!(name_hash(b"\x03FoO\x00"), name_hash(b"\x03foo\x00"));
        // Bytes outside A-Z (here Latin-1 upper-case letters) are hashed unchanged.
        assert_ne!(name_hash(b"\x01\xc0\x00"), name_hash(b"\x01\xe0\x00"));
        assert_ne!(name_hash(b"\x01[\x00"), name_hash(b"\x01{\x00"));
    }
}
