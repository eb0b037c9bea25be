//! The forwarder table: the addresses known to forward DNS.

/// An address that forwards DNS, as the forwarder table keys it (IPv4 in the first 4 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ForwarderKey {
    pub address: [u8; 16],
}

#[cfg(feature = "user")]
crate::pod!(ForwarderKey);
