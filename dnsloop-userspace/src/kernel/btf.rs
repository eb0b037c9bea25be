//! The few answers the drop program needs from the kernel's BTF (`/sys/kernel/btf/vmlinux`):
//! where a member sits in a named struct, and the values of a named enum.
//!
//! Not a general BTF parser on purpose: parsing all of the kernel's 130,000-odd types into maps
//! took 54 MiB of heap at start-up, which the allocator never gave back, for a handful of
//! offsets. This keeps the file's bytes and where each type starts, and reads the rest in
//! place. Every read is bounds-checked: malformed BTF gives a [`BtfError`].
//! The format: the kernel's `Documentation/bpf/btf.rst`.
use std::ops::Range;

use thiserror::Error;

/// BTF's magic number, as its first two bytes read in the byte order the BTF was written in.
const MAGIC: u16 = 0xeb9f;
/// The only version of the format there is.
const VERSION: u8 = 1;
/// `struct btf_header` as version 1 has it; later headers may be longer.
const HEADER_LEN: usize = 24;
/// `struct btf_type`: name, info and size (or type), before the kind's own data.
const TYPE_LEN: usize = 12;
/// `struct btf_member`: name, type and offset.
const MEMBER_LEN: usize = 12;
/// `struct btf_enum`: name and 32-bit value.
const ENUM_VALUE_LEN: usize = 8;
/// `struct btf_enum64`: name and the value's low and high halves.
const ENUM64_VALUE_LEN: usize = 12;
/// How far the reader follows types into types. No kernel nests a tenth as deep; it only
/// stops malformed BTF whose types refer to themselves.
const MAX_DEPTH: u32 = 64;

/// The kinds of type (`BTF_KIND_*`).
mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const FWD: u32 = 7;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const FLOAT: u32 = 16;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// Why BTF cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("it ends inside its {0}")]
    Truncated(&'static str),
    #[error("it starts with {0:#06x}, not BTF's magic number 0xeb9f")]
    NotBtf(u16),
    #[error("it is BTF of the other byte order, which is not read")]
    ForeignByteOrder,
    #[error("it is BTF version {0}; only version 1 is read")]
    Version(u8),
    #[error("its type {id} runs past the end of the type section")]
    TypeTruncated { id: usize },
    #[error("its type {id} is of kind {kind}, unknown here")]
    UnknownKind { id: usize, kind: u32 },
    #[error("a type refers to type {0}, which does not exist")]
    NoSuchType(u32),
    #[error("a name at {0} in the string section is not there or not UTF-8 text")]
    BadName(u32),
    #[error("its types nest more than {MAX_DEPTH} deep: they refer to themselves")]
    TooDeep,
}

/// The kernel's BTF, read in place.
pub struct KernelBtf {
    bytes: Vec<u8>,
    /// Where the type section and the string section sit in `bytes`.
    types: Range<usize>,
    strings: Range<usize>,
    /// Where each type starts in the type section: type `id` at `type_starts[id - 1]` (0 is
    /// `void`, which has no entry).
    type_starts: Vec<u32>,
}

/// One `struct btf_type`: where it starts in the type section, and its common fields.
#[derive(Clone, Copy)]
struct TypeHeader {
    start: usize,
    name: u32,
    info: u32,
    /// Its size (structs, unions, enums) or the type it refers to (typedefs, modifiers).
    size_or_type: u32,
}

impl TypeHeader {
    fn kind(self) -> u32 {
        (self.info >> 24) & 0x1f
    }

    /// How many members, values or parameters follow it.
    fn vlen(self) -> usize {
        (self.info & 0xffff) as usize
    }

    /// For a struct or union: whether its members' offsets carry their bitfield size. For an
    /// enum: whether its values are signed.
    fn kind_flag(self) -> bool {
        self.info >> 31 == 1
    }

    /// Where its kind's own data starts in the type section.
    fn data_start(self) -> usize {
        self.start + TYPE_LEN
    }
}

/// A member of a struct or union.
struct Member {
    name: u32,
    type_id: u32,
    bit_offset: u32,
    bitfield_size: u32,
}

impl Member {
    /// Its byte offset; none for a bitfield, which cannot be read a byte at a time.
    fn byte_offset(&self) -> Option<u32> {
        (self.bitfield_size == 0 && self.bit_offset.is_multiple_of(8))
            .then_some(self.bit_offset / 8)
    }
}

impl KernelBtf {
    /// Checks the header and finds where every type starts: one pass over the type section.
    pub fn parse(bytes: Vec<u8>) -> Result<Self, BtfError> {
        let magic = bytes
            .first_chunk::<2>()
            .map(|magic| u16::from_le_bytes(*magic))
            .ok_or(BtfError::Truncated("header"))?;
        if magic == MAGIC.swap_bytes() {
            return Err(BtfError::ForeignByteOrder);
        }
        if magic != MAGIC {
            return Err(BtfError::NotBtf(magic));
        }
        let version = *bytes.get(2).ok_or(BtfError::Truncated("header"))?;
        if version != VERSION {
            return Err(BtfError::Version(version));
        }
        let header_word = |at| u32_at(&bytes, at).ok_or(BtfError::Truncated("header"));
        let header_len = header_word(4)? as usize;
        if header_len < HEADER_LEN || header_len > bytes.len() {
            return Err(BtfError::Truncated("header"));
        }
        let section = |offset: u32, len: u32, name| {
            let start = header_len.checked_add(offset as usize);
            let end = start.and_then(|start| start.checked_add(len as usize));
            match (start, end) {
                (Some(start), Some(end)) if end <= bytes.len() => Ok(start..end),
                _ => Err(BtfError::Truncated(name)),
            }
        };
        let types = section(header_word(8)?, header_word(12)?, "type section")?;
        let strings = section(header_word(16)?, header_word(20)?, "string section")?;
        let type_starts = type_starts(bytes.get(types.clone()).unwrap_or_default())?;
        Ok(Self {
            bytes,
            types,
            strings,
            type_starts,
        })
    }

    /// The byte offset of `path` (`nd_net.net`: dotted for nested members) in `struct
    /// structure`, counted from the struct's start. Members of anonymous structs and unions
    /// are found by their own names; a member is followed through typedefs and modifiers to
    /// the struct or union it holds. None if the struct or a member is missing, or a member is
    /// a bitfield.
    pub fn member_offset(&self, structure: &str, path: &str) -> Result<Option<u32>, BtfError> {
        let Some(mut outer) = self.named(&[kind::STRUCT], structure)? else {
            return Ok(None);
        };
        let mut offset = 0u32;
        let mut names = path.split('.').peekable();
        while let Some(name) = names.next() {
            let Some((member_offset, member_type)) = self.find_member(outer, name, 0)? else {
                return Ok(None);
            };
            let Some(sum) = offset.checked_add(member_offset) else {
                return Ok(None);
            };
            offset = sum;
            if names.peek().is_some() {
                let Some(inner) = self.struct_or_union(member_type)? else {
                    return Ok(None);
                };
                outer = inner;
            }
        }
        Ok(Some(offset))
    }

    /// The values of `enum name` with their names, in the enum's order; only the values a
    /// `u32` holds. None if there is no such enum.
    pub fn enum_values(&self, name: &str) -> Result<Option<Vec<(u32, &str)>>, BtfError> {
        let Some(header) = self.named(&[kind::ENUM, kind::ENUM64], name)? else {
            return Ok(None);
        };
        let signed = header.kind_flag();
        let mut values = Vec::with_capacity(header.vlen());
        for index in 0..header.vlen() {
            let (name, value) = if header.kind() == kind::ENUM {
                let at = header.data_start() + index * ENUM_VALUE_LEN;
                let raw = self.type_word(at + 4)?;
                let value = if signed {
                    u32::try_from(raw.cast_signed()).ok()
                } else {
                    Some(raw)
                };
                (self.type_word(at)?, value)
            } else {
                let at = header.data_start() + index * ENUM64_VALUE_LEN;
                let raw =
                    u64::from(self.type_word(at + 4)?) | u64::from(self.type_word(at + 8)?) << 32;
                let value = if signed {
                    u32::try_from(raw.cast_signed()).ok()
                } else {
                    u32::try_from(raw).ok()
                };
                (self.type_word(at)?, value)
            };
            if let Some(value) = value {
                values.push((value, self.name(name)?));
            }
        }
        Ok(Some(values))
    }

    /// The first type of one of `kinds` named `name`.
    fn named(&self, kinds: &[u32], name: &str) -> Result<Option<TypeHeader>, BtfError> {
        for &start in &self.type_starts {
            let header = self.type_header_at(start as usize)?;
            if kinds.contains(&header.kind()) && self.name_bytes(header.name)? == name.as_bytes() {
                return Ok(Some(header));
            }
        }
        Ok(None)
    }

    /// The byte offset and type of member `name` of `outer`, looking into its anonymous
    /// structs and unions too; none if it has no such member or it is a bitfield.
    fn find_member(
        &self,
        outer: TypeHeader,
        name: &str,
        depth: u32,
    ) -> Result<Option<(u32, u32)>, BtfError> {
        if depth > MAX_DEPTH {
            return Err(BtfError::TooDeep);
        }
        for index in 0..outer.vlen() {
            let member = self.member(outer, index)?;
            let member_name = self.name_bytes(member.name)?;
            if member_name == name.as_bytes() {
                return Ok(member.byte_offset().map(|offset| (offset, member.type_id)));
            }
            if !member_name.is_empty() {
                continue;
            }
            let Some(anonymous) = self.struct_or_union(member.type_id)? else {
                continue;
            };
            if let Some((inner_offset, type_id)) = self.find_member(anonymous, name, depth + 1)? {
                let offset = member
                    .byte_offset()
                    .and_then(|offset| offset.checked_add(inner_offset));
                return Ok(offset.map(|offset| (offset, type_id)));
            }
        }
        Ok(None)
    }

    /// Member `index` of struct or union `outer`.
    fn member(&self, outer: TypeHeader, index: usize) -> Result<Member, BtfError> {
        let at = outer.data_start() + index * MEMBER_LEN;
        let offset = self.type_word(at + 8)?;
        // With the kind flag, the offset's top byte is the bitfield's size in bits.
        let (bit_offset, bitfield_size) = if outer.kind_flag() {
            (offset & 0x00ff_ffff, offset >> 24)
        } else {
            (offset, 0)
        };
        Ok(Member {
            name: self.type_word(at)?,
            type_id: self.type_word(at + 4)?,
            bit_offset,
            bitfield_size,
        })
    }

    /// The struct or union type `id` is, through typedefs and modifiers; none for another
    /// kind.
    fn struct_or_union(&self, mut id: u32) -> Result<Option<TypeHeader>, BtfError> {
        for _ in 0..MAX_DEPTH {
            if id == 0 {
                return Ok(None);
            }
            let header = self.type_header(id)?;
            match header.kind() {
                kind::STRUCT | kind::UNION => return Ok(Some(header)),
                kind::TYPEDEF | kind::CONST | kind::VOLATILE | kind::RESTRICT | kind::TYPE_TAG => {
                    id = header.size_or_type;
                }
                _ => return Ok(None),
            }
        }
        Err(BtfError::TooDeep)
    }

    fn type_header(&self, id: u32) -> Result<TypeHeader, BtfError> {
        let start = id
            .checked_sub(1)
            .and_then(|index| self.type_starts.get(index as usize))
            .ok_or(BtfError::NoSuchType(id))?;
        self.type_header_at(*start as usize)
    }

    /// The type starting at `start` in the type section.
    fn type_header_at(&self, start: usize) -> Result<TypeHeader, BtfError> {
        Ok(TypeHeader {
            start,
            name: self.type_word(start)?,
            info: self.type_word(start + 4)?,
            size_or_type: self.type_word(start + 8)?,
        })
    }

    /// The word at `at` in the type section.
    fn type_word(&self, at: usize) -> Result<u32, BtfError> {
        self.bytes
            .get(self.types.clone())
            .and_then(|types| u32_at(types, at))
            .ok_or(BtfError::Truncated("type section"))
    }

    /// The name at `offset` in the string section, without its terminating NUL.
    fn name_bytes(&self, offset: u32) -> Result<&[u8], BtfError> {
        let name = self
            .bytes
            .get(self.strings.clone())
            .and_then(|strings| strings.get(offset as usize..))
            .and_then(|rest| rest.split(|&byte| byte == 0).next())
            .ok_or(BtfError::BadName(offset))?;
        Ok(name)
    }

    fn name(&self, offset: u32) -> Result<&str, BtfError> {
        std::str::from_utf8(self.name_bytes(offset)?).map_err(|_| BtfError::BadName(offset))
    }
}

/// Where each type starts in `types`, the type section, in order of id.
fn type_starts(types: &[u8]) -> Result<Vec<u32>, BtfError> {
    let mut starts = Vec::new();
    let mut at = 0;
    while at < types.len() {
        let id = starts.len() + 1;
        let info = u32_at(types, at + 4).ok_or(BtfError::TypeTruncated { id })?;
        let vlen = (info & 0xffff) as usize;
        let data_len = match (info >> 24) & 0x1f {
            kind::PTR
            | kind::FWD
            | kind::TYPEDEF
            | kind::VOLATILE
            | kind::CONST
            | kind::RESTRICT
            | kind::FUNC
            | kind::FLOAT
            | kind::TYPE_TAG => 0,
            // The encoding of an int; the linkage of a var; the component of a decl tag.
            kind::INT | kind::VAR | kind::DECL_TAG => 4,
            // Element type, index type, element count.
            kind::ARRAY => 12,
            // Members; a section's variables (type, offset, size).
            kind::STRUCT | kind::UNION | kind::DATASEC => vlen * MEMBER_LEN,
            // Values; a function's parameters (name, type).
            kind::ENUM | kind::FUNC_PROTO => vlen * ENUM_VALUE_LEN,
            kind::ENUM64 => vlen * ENUM64_VALUE_LEN,
            kind => return Err(BtfError::UnknownKind { id, kind }),
        };
        let end = at + TYPE_LEN + data_len;
        if end > types.len() {
            return Err(BtfError::TypeTruncated { id });
        }
        // `at` is inside the type section, whose length is a u32.
        starts.push(u32::try_from(at).map_err(|_| BtfError::TypeTruncated { id })?);
        at = end;
    }
    Ok(starts)
}

/// The little-endian word at `at` in `bytes`, if it is all there.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..)?.first_chunk::<4>()?;
    Some(u32::from_le_bytes(*word))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INT: u32 = 1;

    /// BTF written by hand: types are added in order of id, from 1.
    struct Blob {
        types: Vec<u8>,
        strings: Vec<u8>,
        next_id: u32,
    }

    impl Blob {
        /// With `int` as type 1.
        fn new() -> Self {
            let mut blob = Self {
                types: Vec::new(),
                strings: vec![0],
                next_id: 1,
            };
            blob.add("int", kind::INT, false, 0, 4, &[32]);
            blob
        }

        fn name(&mut self, name: &str) -> u32 {
            if name.is_empty() {
                return 0;
            }
            let offset = u32::try_from(self.strings.len()).unwrap();
            self.strings.extend_from_slice(name.as_bytes());
            self.strings.push(0);
            offset
        }

        /// Adds a type, its kind's data given as words; returns its id.
        fn add(
            &mut self,
            name: &str,
            kind: u32,
            kind_flag: bool,
            vlen: usize,
            size_or_type: u32,
            data: &[u32],
        ) -> u32 {
            let name = self.name(name);
            let info = u32::from(kind_flag) << 31 | kind << 24 | u32::try_from(vlen).unwrap();
            for word in [name, info, size_or_type].iter().chain(data) {
                self.types.extend_from_slice(&word.to_le_bytes());
            }
            self.next_id += 1;
            self.next_id - 1
        }

        /// A struct or union of `members` (name, type, offset as BTF has it).
        fn aggregate(
            &mut self,
            kind: u32,
            name: &str,
            kind_flag: bool,
            members: &[(&str, u32, u32)],
        ) -> u32 {
            let mut data = Vec::new();
            for &(member, type_id, offset) in members {
                data.extend([self.name(member), type_id, offset]);
            }
            self.add(name, kind, kind_flag, members.len(), 64, &data)
        }

        fn enumeration(&mut self, kind: u32, name: &str, signed: bool, values: &[(&str, u64)]) {
            let mut data = Vec::new();
            for &(value_name, value) in values {
                data.push(self.name(value_name));
                data.push(value as u32);
                if kind == kind::ENUM64 {
                    data.push((value >> 32) as u32);
                }
            }
            self.add(name, kind, signed, values.len(), 4, &data);
        }

        fn bytes(&self) -> Vec<u8> {
            let types_len = u32::try_from(self.types.len()).unwrap();
            let strings_len = u32::try_from(self.strings.len()).unwrap();
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&MAGIC.to_le_bytes());
            bytes.extend([VERSION, 0]);
            for word in [HEADER_LEN as u32, 0, types_len, types_len, strings_len] {
                bytes.extend_from_slice(&word.to_le_bytes());
            }
            bytes.extend_from_slice(&self.types);
            bytes.extend_from_slice(&self.strings);
            bytes
        }

        fn parse(&self) -> KernelBtf {
            KernelBtf::parse(self.bytes()).unwrap()
        }
    }

    /// `struct sk_buff` as newer kernels have it: its members inside an anonymous union
    /// holding an anonymous struct.
    fn sk_buff() -> Blob {
        let mut blob = Blob::new();
        let headers = blob.aggregate(
            kind::STRUCT,
            "",
            false,
            &[("mark", INT, 0), ("protocol", INT, 32)],
        );
        let union = blob.aggregate(
            kind::UNION,
            "",
            false,
            &[("", headers, 0), ("headers", headers, 0)],
        );
        blob.aggregate(
            kind::STRUCT,
            "sk_buff",
            false,
            &[("len", INT, 0), ("", union, 64), ("head", INT, 256)],
        );
        blob
    }

    #[test]
    fn members_of_anonymous_unions_and_structs_are_found_by_name() {
        let btf = sk_buff().parse();
        assert_eq!(btf.member_offset("sk_buff", "len"), Ok(Some(0)));
        assert_eq!(btf.member_offset("sk_buff", "protocol"), Ok(Some(12)));
        assert_eq!(
            btf.member_offset("sk_buff", "headers.protocol"),
            Ok(Some(12))
        );
        assert_eq!(btf.member_offset("sk_buff", "head"), Ok(Some(32)));
        assert_eq!(btf.member_offset("sk_buff", "tail"), Ok(None));
        assert_eq!(btf.member_offset("sk_buff", "len.protocol"), Ok(None));
        assert_eq!(btf.member_offset("net_device", "len"), Ok(None));
    }

    #[test]
    fn nested_members_are_followed_through_typedefs_and_modifiers() {
        let mut blob = Blob::new();
        let pointer = blob.add("", kind::PTR, false, 0, INT, &[]);
        let possible_net = blob.aggregate(kind::STRUCT, "", false, &[("net", pointer, 0)]);
        let typedef = blob.add("possible_net_t", kind::TYPEDEF, false, 0, possible_net, &[]);
        let constant = blob.add("", kind::CONST, false, 0, typedef, &[]);
        blob.aggregate(
            kind::STRUCT,
            "net_device",
            false,
            &[("ifindex", INT, 32), ("nd_net", constant, 128)],
        );
        let btf = blob.parse();
        assert_eq!(btf.member_offset("net_device", "nd_net.net"), Ok(Some(16)));
        assert_eq!(btf.member_offset("net_device", "ifindex"), Ok(Some(4)));
        assert_eq!(btf.member_offset("net_device", "nd_net.other"), Ok(None));
    }

    #[test]
    fn bitfields_are_not_readable() {
        let mut blob = Blob::new();
        blob.aggregate(
            kind::STRUCT,
            "flagged",
            true,
            &[("bits", INT, 3 << 24 | 8), ("whole", INT, 32)],
        );
        blob.aggregate(kind::STRUCT, "unflagged", false, &[("odd", INT, 12)]);
        let btf = blob.parse();
        assert_eq!(btf.member_offset("flagged", "bits"), Ok(None));
        assert_eq!(btf.member_offset("flagged", "whole"), Ok(Some(4)));
        assert_eq!(btf.member_offset("unflagged", "odd"), Ok(None));
    }

    #[test]
    fn enum_values_are_read_with_their_names() {
        let mut blob = Blob::new();
        blob.enumeration(
            kind::ENUM,
            "skb_drop_reason",
            false,
            &[("SKB_NOT_DROPPED_YET", 0), ("SKB_DROP_REASON_NO_SOCKET", 3)],
        );
        blob.enumeration(
            kind::ENUM,
            "signed",
            true,
            &[("MINUS_ONE", u64::from(u32::MAX)), ("ONE", 1)],
        );
        blob.enumeration(kind::ENUM64, "wide", false, &[("BIG", 1 << 40), ("TWO", 2)]);
        let btf = blob.parse();
        assert_eq!(
            btf.enum_values("skb_drop_reason"),
            Ok(Some(vec![
                (0, "SKB_NOT_DROPPED_YET"),
                (3, "SKB_DROP_REASON_NO_SOCKET")
            ]))
        );
        assert_eq!(btf.enum_values("signed"), Ok(Some(vec![(1, "ONE")])));
        assert_eq!(btf.enum_values("wide"), Ok(Some(vec![(2, "TWO")])));
        assert_eq!(btf.enum_values("int"), Ok(None));
    }

    #[test]
    fn truncated_btf_is_an_error() {
        let bytes = sk_buff().bytes();
        for len in 0..bytes.len() {
            let truncated = bytes.get(..len).unwrap().to_vec();
            assert!(KernelBtf::parse(truncated).is_err(), "{len} bytes");
        }
    }

    #[test]
    fn malformed_btf_is_an_error() {
        let mut swapped = sk_buff().bytes();
        swapped.swap(0, 1);
        assert_eq!(
            KernelBtf::parse(swapped).err(),
            Some(BtfError::ForeignByteOrder)
        );

        // A struct claiming more members than the type section holds.
        let mut blob = Blob::new();
        blob.add("long", kind::STRUCT, false, 5, 8, &[0, INT, 0]);
        assert_eq!(
            KernelBtf::parse(blob.bytes()).err(),
            Some(BtfError::TypeTruncated { id: 2 })
        );

        let mut blob = Blob::new();
        blob.add("strange", 31, false, 0, 0, &[]);
        assert_eq!(
            KernelBtf::parse(blob.bytes()).err(),
            Some(BtfError::UnknownKind { id: 2, kind: 31 })
        );

        // Types referring to missing types, to themselves, and to names past the strings.
        let mut blob = Blob::new();
        let looping = blob.next_id;
        blob.add("looping", kind::TYPEDEF, false, 0, looping, &[]);
        blob.aggregate(
            kind::STRUCT,
            "broken",
            false,
            &[("", 99, 0), ("", looping, 0), ("x", INT, 0)],
        );
        let info = kind::STRUCT << 24;
        for word in [9999, info, 0] {
            blob.types.extend_from_slice(&u32::to_le_bytes(word));
        }
        let btf = blob.parse();
        assert_eq!(
            btf.member_offset("broken", "x"),
            Err(BtfError::NoSuchType(99))
        );
        assert_eq!(
            btf.member_offset("missing", "x"),
            Err(BtfError::BadName(9999))
        );

        let mut blob = Blob::new();
        let looping = blob.next_id;
        blob.add("looping", kind::TYPEDEF, false, 0, looping, &[]);
        blob.aggregate(kind::STRUCT, "broken", false, &[("", looping, 0)]);
        assert_eq!(
            blob.parse().member_offset("broken", "x"),
            Err(BtfError::TooDeep)
        );
    }
}
