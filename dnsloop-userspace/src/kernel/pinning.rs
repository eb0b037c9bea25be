//! `--pin DIR`: the maps whose state means the same to the next run, pinned on a BPF filesystem
//! so that a tracer started again with the same DIR carries on from them.
//!
//! Pinned:
//! - `COUNTERS`, `POINT_COUNTERS`: the kernel's counters.
//! - `POINTS`: the point table, which gives each point's counters their slot. Points are keyed by
//!   the kernel's own ids (interface index, and the namespace cookie of a loopback), which a
//!   restart keeps; the restarted tracer keeps the slot of every point still there, rewrites what
//!   it knows of it (the namespaces' numbers are dealt out afresh) and frees the slots of the
//!   others, all before it attaches.
//! - `SERVERS`: every server's answers, rcodes and latency histogram.
//! - `QUERIES`: the queries in flight, keyed and placed by the kernel's ids too, so an answer
//!   that arrives after the restart is still matched to its query and timed; and `LONG_NAMES`,
//!   the names too long for its entries.
//!
//! Not pinned:
//! - `QUESTIONS`: it remembers namespaces by the numbers userspace gives them
//!   (in `POINTS`), which every run deals out afresh; carried over, a stale number would
//!   name another namespace and could fake a loop. A loop still going on is found again on its
//!   next round, a few milliseconds later.
//! - `FORWARDERS`: this run's view of the node, written as it starts; a stale entry would name
//!   an address that no longer forwards.
//! - `RECORDS`: packets streamed to the process that placed them; the next one starts reading
//!   what is new.
//! - Per-CPU scratch space, and the run's settings (`--dns-port`, `--snap-len`, ...).
use std::{
    ffi::OsStr,
    fs::File,
    io,
    os::{fd::AsRawFd as _, unix::ffi::OsStrExt as _},
    path::{Path, PathBuf},
};

use aya::maps::{MapInfo, MapType};
use thiserror::Error;

use dnsloop_shared::names::{
    COUNTERS_MAP, LONG_NAMES_MAP, POINTS_MAP, POINT_COUNTERS_MAP, QUERIES_MAP, SERVERS_MAP,
};

/// The maps `--pin` keeps (see the module's documentation for why these).
pub const PINNED_MAPS: [&str; 6] = [
    COUNTERS_MAP,
    POINTS_MAP,
    POINT_COUNTERS_MAP,
    SERVERS_MAP,
    QUERIES_MAP,
    LONG_NAMES_MAP,
];

/// `statfs(2)`'s `f_type` of a BPF filesystem.
const BPF_FS_MAGIC: u64 = 0xcafe_4a11;

const MOUNT_HINT: &str = "mount one with `mount -t bpf bpf /sys/fs/bpf` and give a directory \
                          under it, e.g. --pin /sys/fs/bpf/dnsloop";

#[derive(Debug, Error)]
pub enum PinError {
    #[error("--pin {}: it is not on a BPF filesystem, the only place maps can be pinned: {MOUNT_HINT}", .0.display())]
    NotBpffs(PathBuf),
    #[error("--pin {}: cannot use it: {source}; give a directory on a BPF filesystem ({MOUNT_HINT})", path.display())]
    Directory {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--pin {}: another dnsloop is tracing with it, and two would count every packet twice into the same maps: stop that one first, or give another directory", .0.display())]
    InUse(PathBuf),
    #[error("pinned map {} is not what this dnsloop's {map} is: it holds {found}, this run needs {expected}. It was pinned with other sizes (--query-table-size) or by another dnsloop version: run with the sizes it was pinned with, or remove the directory (`rm -r {}`) to start from zero", path.display(), dir.display())]
    Mismatch {
        map: &'static str,
        path: PathBuf,
        dir: PathBuf,
        found: Shape,
        expected: Shape,
    },
    #[error("pinned map {} cannot be read ({source}): remove it (`rm {}`), or the directory, to start that map from zero", path.display(), path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: aya::maps::MapError,
    },
}

/// What makes two maps interchangeable: the kernel checks a program's accesses against them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map_type = aya_obj::generated::bpf_map_type::try_from(self.map_type)
            .ok()
            .and_then(|map_type| MapType::try_from(map_type).ok())
            .map_or_else(|| format!("type {}", self.map_type), |t| format!("{t:?}"));
        write!(
            f,
            "{map_type} map of {} entries, {}-byte keys, {}-byte values",
            self.max_entries, self.key_size, self.value_size
        )?;
        if self.flags != 0 {
            write!(f, ", flags {:#x}", self.flags)?;
        }
        Ok(())
    }
}

/// The `--pin` directory, held for the run: a second dnsloop cannot take it meanwhile.
#[derive(Debug)]
pub struct PinDir {
    path: PathBuf,
    /// Holds the directory's `flock` until dropped.
    _lock: File,
}

impl PinDir {
    /// Takes `path`, creating it if it does not exist, on a BPF filesystem.
    pub fn open(path: &Path) -> Result<Self, PinError> {
        let directory_error = |source| PinError::Directory {
            path: path.to_owned(),
            source,
        };
        // Creating it on another filesystem would leave a stray directory behind the refusal.
        let existing = path
            .ancestors()
            .find(|ancestor| ancestor.exists())
            .unwrap_or(Path::new("/"));
        if !on_bpffs(existing).map_err(directory_error)? {
            return Err(PinError::NotBpffs(path.to_owned()));
        }
        std::fs::create_dir_all(path).map_err(directory_error)?;
        let lock = File::open(path).map_err(directory_error)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            return Err(if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                PinError::InUse(path.to_owned())
            } else {
                directory_error(error)
            });
        }
        Ok(Self {
            path: path.to_owned(),
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where map `name` is pinned.
    pub fn map_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether any of the maps is pinned here already: a run that reuses them.
    pub fn holds_maps(&self) -> bool {
        PINNED_MAPS.iter().any(|name| self.map_path(name).exists())
    }

    /// Checks that map `name`, if pinned here, has the `expected` shape: the loader would take
    /// any map it finds, and the kernel would then run the programs on one of another layout.
    pub fn check(&self, name: &'static str, expected: Shape) -> Result<(), PinError> {
        let path = self.map_path(name);
        if !path.exists() {
            return Ok(());
        }
        let info = MapInfo::from_pin(&path).map_err(|source| PinError::Unreadable {
            path: path.clone(),
            source,
        })?;
        let found = Shape {
            map_type: info.map_type().map_or(u32::MAX, |map_type| map_type as u32),
            key_size: info.key_size(),
            value_size: info.value_size(),
            max_entries: info.max_entries(),
            flags: info.map_flags(),
        };
        if found == expected {
            Ok(())
        } else {
            Err(PinError::Mismatch {
                map: name,
                path,
                dir: self.path.clone(),
                found,
                expected,
            })
        }
    }
}

fn on_bpffs(path: &Path) -> io::Result<bool> {
    let path =
        std::ffi::CString::new(OsStr::as_bytes(path.as_os_str())).map_err(io::Error::other)?;
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: statfs writes into the buffer we give it, and reads a NUL-terminated path we own.
    if unsafe { libc::statfs(path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statfs succeeded, so it filled the buffer.
    let stat = unsafe { stat.assume_init() };
    Ok(stat.f_type as u64 == BPF_FS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_off_bpffs_is_refused_with_how_to_mount_one_and_left_uncreated() {
        let parent = tempfile::tempdir().expect("temporary directory");
        let dir = parent.path().join("dnsloop");
        let error = PinDir::open(&dir).expect_err("a tmp directory is no bpffs");
        assert!(matches!(&error, PinError::NotBpffs(path) if path == &dir));
        assert!(
            error.to_string().contains("mount -t bpf bpf /sys/fs/bpf"),
            "{error}"
        );
        assert!(!dir.exists());
    }

    #[test]
    fn a_mismatch_names_the_map_both_shapes_and_the_way_out() {
        let shape = Shape {
            map_type: aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_LRU_HASH as u32,
            key_size: 24,
            value_size: 344,
            max_entries: 32768,
            flags: 0,
        };
        let error = PinError::Mismatch {
            map: QUERIES_MAP,
            path: "/sys/fs/bpf/dnsloop/QUERIES".into(),
            dir: "/sys/fs/bpf/dnsloop".into(),
            found: Shape {
                max_entries: 4096,
                ..shape
            },
            expected: shape,
        };
        assert_eq!(
            error.to_string(),
            "pinned map /sys/fs/bpf/dnsloop/QUERIES is not what this dnsloop's QUERIES is: it holds \
             LruHash map of 4096 entries, 24-byte keys, 344-byte values, this run needs LruHash map \
             of 32768 entries, 24-byte keys, 344-byte values. It was pinned with other sizes \
             (--query-table-size) or by another dnsloop version: run with the sizes it was pinned \
             with, or remove the directory (`rm -r /sys/fs/bpf/dnsloop`) to start from zero"
        );
    }
}
