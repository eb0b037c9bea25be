//! The names of recent messages, kept to be shared: in a storm one question is asked thousands
//! of times a second, and the analyzers hold each message's name for as long as they follow it.
use foldhash::fast::FixedState;
use std::hash::BuildHasher;

use crate::observation::DnsName;

/// A direct-mapped cache of names by their wire bytes: one hash and one comparison per message,
/// and at most [`SLOTS`] names held. Two names that land in one slot take turns in it.
pub(super) struct RecentNames {
    slots: Box<[Option<DnsName>]>,
}

/// A power of two, far above the distinct questions of any storm yet seen (a handful).
const SLOTS: usize = 64;

impl Default for RecentNames {
    fn default() -> Self {
        Self {
            slots: vec![None; SLOTS].into_boxed_slice(),
        }
    }
}

impl RecentNames {
    /// An empty cache that allocates nothing and keeps nothing: the decoder's own stands in
    /// for it while one packet is decoded (see `Decoder::decode`).
    pub(super) fn placeholder() -> Self {
        Self {
            slots: Box::default(),
        }
    }

    /// The name `wire` holds (see [`DnsName::from_wire`]), shared with the last message that
    /// sent the same bytes when it is still held.
    pub(super) fn name(&mut self, wire: &[u8]) -> Option<DnsName> {
        let index = FixedState::default().hash_one(wire) as usize & (SLOTS - 1);
        let Some(slot) = self.slots.get_mut(index) else {
            return DnsName::from_wire(wire);
        };
        if let Some(name) = slot.as_ref().filter(|name| name.as_wire() == wire) {
            return Some(name.clone());
        }
        let name = DnsName::from_wire(wire)?;
        *slot = Some(name.clone());
        Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_sent_again_is_shared() {
        let mut names = RecentNames::default();
        let first = names.name(b"\x03www\x04test\x00").unwrap();
        let again = names.name(b"\x03www\x04test\x00").unwrap();
        assert!(std::ptr::eq(first.as_wire(), again.as_wire()));
        let other_case = names.name(b"\x03WWW\x04test\x00").unwrap();
        assert_ne!(other_case, first, "a case variant is a name of its own");
        assert_eq!(other_case.folded(), first.folded());
    }

    #[test]
    fn malformed_names_are_refused_cached_or_not() {
        assert!(RecentNames::default().name(&[3, b'a', b'b']).is_none());
        assert!(RecentNames::placeholder().name(&[0xc0, 0x0c]).is_none());
        assert!(RecentNames::placeholder().name(&[0]).is_some());
    }
}
