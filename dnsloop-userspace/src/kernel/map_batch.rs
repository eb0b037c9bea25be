//! Reading a whole hash map a few hundred entries per system call (`BPF_MAP_LOOKUP_BATCH`,
//! Linux 5.6), where aya's iterator takes two calls per entry: the query table is read every
//! sweep, and it is largest when DNS is failing, which is when dnsloop is running. Entries are
//! handed to the caller as they come, a batch at a time: a whole table of a loop storm's
//! unanswered queries, read into one vector each sweep, was the largest part of the tracer's
//! memory then.
use std::{
    io, mem,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{
    maps::{HashMap, IterableMap as _, MapData},
    Pod,
};
use aya_obj::generated::{bpf_attr, bpf_cmd};

/// Entries asked for per call. A call fails with ENOSPC when one hash bucket holds more: far
/// more than a bucket of a table sized for its entries ever does.
const BATCH: usize = 256;

/// Hands every entry of `map` to `each`, in the kernel's order. Entries added or removed
/// meanwhile may or may not be handed, as with any walk of a map the programs keep writing.
pub fn read_each<K: Pod, V: Pod>(
    map: &HashMap<MapData, K, V>,
    mut each: impl FnMut(&K, &V),
) -> io::Result<()> {
    let fd = map.map().fd().as_fd().as_raw_fd();
    // SAFETY: K and V are plain data; all-zero bytes are a valid value of each.
    let (mut keys, mut values) = unsafe {
        (
            vec![mem::zeroed::<K>(); BATCH],
            vec![mem::zeroed::<V>(); BATCH],
        )
    };
    // The kernel's position in the map between calls: a bucket index for hash maps.
    let (mut position, mut next_position) = (0u64, 0u64);
    let mut first = true;
    loop {
        // SAFETY: all-zero bytes are the empty value of this union of plain structs.
        let mut attr: bpf_attr = unsafe { mem::zeroed() };
        {
            // SAFETY: the member of the union this command reads.
            let batch = unsafe { &mut attr.batch };
            batch.in_batch = if first {
                0
            } else {
                &position as *const u64 as u64
            };
            batch.out_batch = &mut next_position as *mut u64 as u64;
            batch.keys = keys.as_mut_ptr() as u64;
            batch.values = values.as_mut_ptr() as u64;
            batch.count = BATCH as u32;
            batch.map_fd = fd as u32;
        }
        // SAFETY: the attribute points at buffers of `BATCH` keys and values of the map's own
        // sizes, and at the two positions, all alive for the call.
        let result = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                bpf_cmd::BPF_MAP_LOOKUP_BATCH as libc::c_long,
                &mut attr as *mut bpf_attr,
                mem::size_of::<bpf_attr>(),
            )
        };
        // ENOENT: the walk is past the last bucket; this call may still have copied some.
        let finished = result < 0;
        if finished {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::ENOENT) {
                return Err(error);
            }
        }
        // SAFETY: the kernel wrote back how many entries it copied.
        let copied = (unsafe { attr.batch.count } as usize).min(BATCH);
        for (key, value) in keys[..copied].iter().zip(&values[..copied]) {
            each(key, value);
        }
        if finished {
            return Ok(());
        }
        position = next_position;
        first = false;
    }
}
