//! Queries the kernel counted but no answer reached: collected from its query table once they
//! are older than the timeout, so that a query that was never streamed is still reported.
//!
//! The kernel removes a query from the table when its answer reaches the client, so what is left
//! past the timeout is unanswered. Each is taken out once, and the reply that may still come
//! later finds no entry: by then the client has given up on it anyway.
use std::{cmp::Ordering, collections::BinaryHeap, time::Duration};

use aya::maps::{HashMap, MapData, MapError};
use dnsloop_shared::{
    parse::Transport,
    query::{LongName, QueryEntry, QueryKey},
};

use dnsloop_core::{
    observation::DnsName,
    points::Seen,
    source::{ip_family, socket_addr, UnansweredQuery},
};

use super::{
    clock::{monotonic_now_ns, MonotonicClock},
    map_batch,
};

/// The most expired queries one sweep takes, the oldest first; the rest wait for the next. A
/// loop storm leaves tens of thousands unanswered within a second: taken in one sweep, they
/// and the queries made of them were a sixth of the tracer's memory at its peak.
pub const SWEEP_MAX: usize = 4096;

/// The kernel's query table, and the names too long for its entries under the same keys.
pub struct QueryTables {
    pub queries: HashMap<MapData, QueryKey, QueryEntry>,
    pub long_names: HashMap<MapData, QueryKey, LongName>,
}

pub struct UnansweredQueries {
    tables: QueryTables,
    clock: MonotonicClock,
    /// When this run started, on the kernel's clock: a query first seen before then is in the
    /// table an earlier run pinned (`--pin`).
    run_started_ns: u64,
    /// Entries that could not be read back as a query (never expected: counted, not hidden).
    pub unreadable: u64,
    /// Queries from before this run that expired. They are not reported: between the runs no
    /// program watched, so their answers may have come unseen.
    pub expired_from_before: u64,
}

impl UnansweredQueries {
    /// `run_started_ns`: when this run started, on the kernel's monotonic clock.
    pub fn new(tables: QueryTables, clock: MonotonicClock, run_started_ns: u64) -> Self {
        Self {
            tables,
            clock,
            run_started_ns,
            unreadable: 0,
            expired_from_before: 0,
        }
    }

    /// Takes the queries sent more than `timeout` ago out of the table, at most [`SWEEP_MAX`]
    /// of them, the oldest, appending them to `out` in the order they were sent. Returns
    /// whether expired queries were left for another sweep.
    pub fn take_expired(
        &mut self,
        timeout: Duration,
        out: &mut Vec<UnansweredQuery>,
    ) -> Result<bool, MapError> {
        let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let expired_before = monotonic_now_ns().saturating_sub(timeout_ns);
        // The newest of the oldest kept is on top, to give way to an older one.
        let mut oldest = BinaryHeap::new();
        let mut left = false;
        map_batch::read_each(&self.tables.queries, |key, entry| {
            if entry.state.first_ns < expired_before {
                oldest.push(Expired {
                    key: *key,
                    entry: *entry,
                });
                if oldest.len() > SWEEP_MAX {
                    oldest.pop();
                    left = true;
                }
            }
        })
        .map_err(|io_error| {
            MapError::SyscallError(aya::sys::SyscallError {
                call: "bpf_map_lookup_batch",
                io_error,
            })
        })?;
        for Expired { key, entry } in oldest.into_sorted_vec() {
            match self.tables.queries.remove(&key) {
                // Answered just now, between the read and the removal.
                Err(error) if is_gone(&error) => continue,
                result => result?,
            }
            let long_name = if QueryEntry::name_is_long(entry.name_len) {
                self.take_long_name(&key)?
            } else {
                None
            };
            if entry.state.first_ns < self.run_started_ns {
                self.expired_from_before += 1;
                continue;
            }
            match unanswered(&key, &entry, long_name.as_ref(), &self.clock) {
                Some(query) => out.push(query),
                None => self.unreadable += 1,
            }
        }
        Ok(left)
    }

    /// Takes the long name of the query with `key` out of its table; `None` if it is not there.
    fn take_long_name(&mut self, key: &QueryKey) -> Result<Option<LongName>, MapError> {
        let long_name = match self.tables.long_names.get(key, 0) {
            Ok(long_name) => long_name,
            Err(error) if is_gone(&error) => return Ok(None),
            Err(error) => return Err(error),
        };
        match self.tables.long_names.remove(key) {
            Err(error) if !is_gone(&error) => Err(error),
            _ => Ok(Some(long_name)),
        }
    }
}

/// An expired query, ordered by when it was first sent.
struct Expired {
    key: QueryKey,
    entry: QueryEntry,
}

impl Ord for Expired {
    fn cmp(&self, other: &Self) -> Ordering {
        self.entry.state.first_ns.cmp(&other.entry.state.first_ns)
    }
}

impl PartialOrd for Expired {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

// Equal as the heap orders them: sent at the same time.
impl PartialEq for Expired {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Expired {}

/// Whether `error` says the entry is no longer in the table: the kernel removed it (its answer
/// arrived) or evicted it while userspace was looking. aya reports a lookup's miss as
/// `KeyNotFound` and a deletion's as the syscall's ENOENT.
fn is_gone(error: &MapError) -> bool {
    match error {
        MapError::KeyNotFound => true,
        MapError::SyscallError(failed) => failed.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

/// The query `entry` holds, with its name from `long_name` when too long for the entry.
fn unanswered(
    key: &QueryKey,
    entry: &QueryEntry,
    long_name: Option<&LongName>,
    clock: &MonotonicClock,
) -> Option<UnansweredQuery> {
    let family = ip_family(entry.family)?;
    let state = &entry.state;
    Some(UnansweredQuery {
        at: clock.wall_time(state.first_ns),
        seen: Seen::from_kernel(
            entry.netns_cookie,
            state.ifindex,
            state.direction,
            state.via_gateway != 0,
        )?,
        tcp: key.transport == Transport::Tcp as u8,
        client: socket_addr(family, &key.client, key.client_port),
        server: socket_addr(family, &state.server, state.server_port),
        id: key.id,
        name: DnsName::from_wire(match long_name {
            Some(long_name) => long_name.name(entry.name_len)?,
            None => entry.name()?,
        })?,
        qtype: entry.qtype,
        qclass: entry.qclass,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dnsloop_shared::{
        parse::IpFamily,
        point::Direction,
        query::{QueryState, NAME_INLINE_MAX, NAME_WIRE_MAX},
    };

    #[test]
    fn an_entry_becomes_the_query_it_holds() {
        let mut name = [0u8; NAME_INLINE_MAX];
        let wire = b"\x03www\x07example\x04test\x00";
        name[..wire.len()].copy_from_slice(wire);
        let entry = QueryEntry {
            state: QueryState {
                first_ns: 1_000_000_000,
                server: [10, 96, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                server_port: 53,
                direction: Direction::Ingress as u8,
                retried: 0,
                ifindex: 7,
                ..QueryState::default()
            },
            netns_cookie: 0,
            qtype: 1,
            qclass: 1,
            name_len: wire.len() as u16,
            family: IpFamily::V4 as u8,
            _pad: [0],
            name,
        };
        let key = QueryKey::new(
            [10, 244, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            40000,
            0x1234,
            Transport::Udp as u8,
        );
        let clock = MonotonicClock::anchored_now();
        let query = unanswered(&key, &entry, None, &clock).expect("a readable entry");
        assert_eq!(query.client, "10.244.0.2:40000".parse().unwrap());
        assert_eq!(query.server, "10.96.0.10:53".parse().unwrap());
        assert_eq!(
            query
                .name
                .presented(&dnsloop_core::present::names::Names::AsSent),
            "www.example.test."
        );
        assert_eq!(query.seen.interface.ifindex, 7);
        assert!(!query.tcp);
        assert_eq!(query.at, clock.wall_time(1_000_000_000));

        let corrupt = QueryEntry {
            name_len: 300,
            ..entry
        };
        assert_eq!(unanswered(&key, &corrupt, None, &clock), None);
        let not_a_name = QueryEntry {
            name_len: 3,
            ..entry
        };
        assert_eq!(unanswered(&key, &not_a_name, None, &clock), None);

        // A name too long for the entry comes from the long-name table, and without it the
        // entry is no query.
        let label = [b'a'; 63];
        let mut long = LongName {
            wire: [0; NAME_WIRE_MAX],
        };
        long.wire[0] = 63;
        long.wire[1..64].copy_from_slice(&label);
        long.wire[64] = 63;
        long.wire[65..128].copy_from_slice(&label);
        let with_long_name = QueryEntry {
            name_len: 129,
            ..entry
        };
        let query = unanswered(&key, &with_long_name, Some(&long), &clock)
            .expect("an entry with its long name");
        let presented = query
            .name
            .presented(&dnsloop_core::present::names::Names::AsSent);
        assert_eq!(presented.len(), 128, "two whole labels: {presented}");
        assert_eq!(unanswered(&key, &with_long_name, None, &clock), None);
    }

    #[test]
    fn an_entry_gone_while_looking_is_not_an_error() {
        let deleted_meanwhile = MapError::SyscallError(aya::sys::SyscallError {
            call: "bpf_map_delete_elem",
            io_error: std::io::Error::from_raw_os_error(libc::ENOENT),
        });
        assert!(is_gone(&deleted_meanwhile));
        assert!(is_gone(&MapError::KeyNotFound));
        let refused = MapError::SyscallError(aya::sys::SyscallError {
            call: "bpf_map_delete_elem",
            io_error: std::io::Error::from_raw_os_error(libc::EPERM),
        });
        assert!(!is_gone(&refused));
    }
}
