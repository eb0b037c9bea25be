//! What the kernel must allow before the programs load, checked first so that a node that
//! cannot run dnsloop says why, and what to do, rather than failing halfway.
use std::{io, path::Path};

use aya::{maps::MapType, sys::is_map_supported};
use thiserror::Error;

/// Where the kernel publishes its own BTF (`CONFIG_DEBUG_INFO_BTF`).
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// Where the BPF filesystem is mounted, for pinning.
const BPFFS: &str = "/sys/fs/bpf";
/// `BPF_FS_MAGIC` from linux/magic.h.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Capabilities, by their bit in `CapEff` (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// What loading and attaching the programs needs: bpf() itself, the verifier's leave for the
/// programs' pointer arithmetic, and TC/XDP programs. The kernel still takes CAP_SYS_ADMIN for
/// each (before Linux 5.8 it was the only way), so it stands in for any of them.
const NEEDED: [(u32, &str); 3] = [
    (CAP_BPF, "CAP_BPF"),
    (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
    (CAP_PERFMON, "CAP_PERFMON"),
];

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PreflightError {
    #[error("loading BPF programs needs root, or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON in the effective set (CAP_SYS_ADMIN stands in for each); this process lacks {}: run it with sudo, or grant it what it lacks (in a pod: securityContext.capabilities.add)", in_words(.0))]
    MissingCapabilities(Vec<&'static str>),
    #[error("the kernel refuses the bpf() system call to this process ({0}): it needs CAP_BPF or CAP_SYS_ADMIN, which containers drop; run dnsloop as root on the host, or in a privileged pod (securityContext.privileged: true), and check that no seccomp profile blocks bpf()")]
    BpfDenied(String),
    #[error("this kernel has no bpf() system call: it was built without CONFIG_BPF_SYSCALL; dnsloop needs a kernel with BPF (any distribution kernel since Linux 5.17 has it)")]
    NoBpf,
    #[error("the bpf() system call failed ({0}): check `dmesg` for why")]
    Bpf(String),
    #[error("this kernel has no BPF ring buffer (Linux 5.8 added it), which carries every packet and drop to dnsloop: run dnsloop on a node with Linux 5.8 or later (Debian 11, Amazon Linux 2's 5.10 and every kernel since have it)")]
    NoRingBuffer,
    #[error("this kernel publishes no BTF at {KERNEL_BTF}, which dnsloop reads to find its way in the kernel's socket buffers and to name drop reasons: run dnsloop on a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian 11, Amazon Linux 2's 5.10, Ubuntu 20.10, RHEL 8.2 and every kernel of theirs since have it)")]
    NoKernelBtf,
}

/// Something that does not stop dnsloop but is worth knowing when things go wrong.
#[derive(Debug, PartialEq, Eq)]
pub enum Note {
    /// No BPF filesystem: fine unless `--pin` is given.
    NoBpffs,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::NoBpffs => write!(
                f,
                "no BPF filesystem at {BPFFS}: not needed, unless --pin keeps the maps on one"
            ),
        }
    }
}

/// Checks that this process may load BPF programs; returns what is worth noting.
pub fn check() -> Result<Vec<Note>, PreflightError> {
    // What the kernel checks is the capabilities, not who we are: root holds them all, and so
    // may another user granted them. Unknown, the bpf() call below tells.
    match effective_capabilities() {
        Ok(effective) => check_capabilities(effective)?,
        Err(error) => tracing::debug!("reading this process's capabilities: {error}"),
    }
    probe_bpf_syscall().map_err(bpf_error)?;
    // A failed probe says nothing either way: loading the programs then tells.
    if is_map_supported(MapType::RingBuf).is_ok_and(|supported| !supported) {
        return Err(PreflightError::NoRingBuffer);
    }
    if !Path::new(KERNEL_BTF).exists() {
        return Err(PreflightError::NoKernelBtf);
    }
    let mut notes = Vec::new();
    if !is_bpffs(Path::new(BPFFS)) {
        notes.push(Note::NoBpffs);
    }
    Ok(notes)
}

/// Refuses a process whose `effective` capability set lacks one of [`NEEDED`], naming those it
/// lacks.
fn check_capabilities(effective: u64) -> Result<(), PreflightError> {
    let holds = |bit: u32| effective & (1 << bit) != 0;
    if holds(CAP_SYS_ADMIN) {
        return Ok(());
    }
    let missing: Vec<&str> = NEEDED
        .iter()
        .filter(|(bit, _)| !holds(*bit))
        .map(|(_, name)| *name)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PreflightError::MissingCapabilities(missing))
    }
}

/// `a`, `a and b`, `a, b and c`.
fn in_words(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// This process's effective capabilities, as `/proc/self/status` shows them.
fn effective_capabilities() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    parse_cap_eff(&status).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "no CapEff line in /proc/self/status",
        )
    })
}

/// The `CapEff:` line of a `/proc/<pid>/status`: the set in hexadecimal.
fn parse_cap_eff(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// What the bpf() system call failing with `error` means for dnsloop.
fn bpf_error(error: io::Error) -> PreflightError {
    match error.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => PreflightError::BpfDenied(error.to_string()),
        Some(libc::ENOSYS) => PreflightError::NoBpf,
        _ => PreflightError::Bpf(error.to_string()),
    }
}

/// Creates (and closes) the smallest map there is: the one bpf() command every run needs.
fn probe_bpf_syscall() -> io::Result<()> {
    /// The first fields of `union bpf_attr` for BPF_MAP_CREATE; the kernel reads the rest as 0.
    #[repr(C)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    }
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_TYPE_ARRAY: u32 = 2;
    let attr = MapCreate {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: 4,
        max_entries: 1,
    };
    // SAFETY: bpf(BPF_MAP_CREATE) reads `size` bytes of a live, initialised attribute struct.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            &raw const attr,
            std::mem::size_of::<MapCreate>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: closing the descriptor the kernel just gave us.
    unsafe { libc::close(fd as libc::c_int) };
    Ok(())
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into a zeroed statfs we own, reading a NUL-terminated path.
    unsafe {
        let mut stat: libc::statfs = std::mem::zeroed();
        libc::statfs(path.as_ptr(), &mut stat) == 0 && stat.f_type as i64 == BPF_FS_MAGIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_bpf_call_says_which_privilege_is_missing_and_what_to_do() {
        for errno in [libc::EPERM, libc::EACCES] {
            let error = bpf_error(io::Error::from_raw_os_error(errno));
            assert!(matches!(error, PreflightError::BpfDenied(_)), "{error:?}");
            let message = error.to_string();
            assert!(message.contains("CAP_BPF or CAP_SYS_ADMIN"), "{message}");
            assert!(message.contains("privileged"), "{message}");
        }
    }

    #[test]
    fn a_kernel_without_bpf_is_told_apart_from_a_refusal() {
        assert_eq!(
            bpf_error(io::Error::from_raw_os_error(libc::ENOSYS)),
            PreflightError::NoBpf
        );
        assert!(PreflightError::NoBpf
            .to_string()
            .contains("CONFIG_BPF_SYSCALL"));
        assert!(matches!(
            bpf_error(io::Error::from_raw_os_error(libc::ENOMEM)),
            PreflightError::Bpf(_)
        ));
    }

    #[test]
    fn a_kernel_without_ring_buffers_is_told_what_it_needs() {
        let said = PreflightError::NoRingBuffer.to_string();
        assert!(
            said.contains("ring buffer") && said.contains("5.8"),
            "{said}"
        );
    }

    #[test]
    fn a_kernel_without_btf_is_told_what_it_needs() {
        let said = PreflightError::NoKernelBtf.to_string();
        assert!(
            said.contains(KERNEL_BTF) && said.contains("CONFIG_DEBUG_INFO_BTF"),
            "{said}"
        );
    }

    #[test]
    fn a_missing_bpffs_is_a_note_not_an_error() {
        let no_bpffs = Note::NoBpffs.to_string();
        assert!(no_bpffs.contains("not needed"), "{no_bpffs}");
        assert!(
            no_bpffs.contains("--pin") && !no_bpffs.contains("pins nothing"),
            "--pin needs one: {no_bpffs}"
        );
    }

    /// A capability set holding `bits`.
    fn holding(bits: &[u32]) -> u64 {
        bits.iter().fold(0, |set, bit| set | 1 << bit)
    }

    #[test]
    fn the_three_capabilities_suffice_without_root() {
        let three = holding(&[CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON]);
        assert_eq!(check_capabilities(three), Ok(()));
        // Root's set: every capability this kernel knows.
        assert_eq!(check_capabilities(0x0000_01ff_ffff_ffff), Ok(()));
        // CAP_SYS_ADMIN stands in for all three, as on kernels older than CAP_BPF.
        assert_eq!(check_capabilities(holding(&[CAP_SYS_ADMIN])), Ok(()));
    }

    #[test]
    fn a_missing_capability_is_named() {
        assert_eq!(
            check_capabilities(holding(&[CAP_BPF, CAP_NET_ADMIN])),
            Err(PreflightError::MissingCapabilities(vec!["CAP_PERFMON"]))
        );
        let error = check_capabilities(0).unwrap_err();
        assert_eq!(
            error,
            PreflightError::MissingCapabilities(vec!["CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"])
        );
        let message = error.to_string();
        assert!(
            message.contains("lacks CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON:"),
            "{message}"
        );
        assert!(message.contains("sudo"), "{message}");
    }

    #[test]
    fn the_effective_set_is_read_from_the_status_file() {
        let status = "Name:\tdnsloop\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                      CapEff:\t000000c000001000\nCapBnd:\t000001ffffffffff\n";
        let effective = parse_cap_eff(status).unwrap();
        assert_eq!(effective, holding(&[CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON]));
        assert_eq!(parse_cap_eff("Name:\tdnsloop\n"), None);
        assert_eq!(parse_cap_eff("CapEff:\tnot hex\n"), None);
        // This process's own set reads, whoever runs the tests.
        assert!(effective_capabilities().is_ok());
    }

    #[test]
    fn only_a_bpf_filesystem_counts_as_bpffs() {
        assert!(!is_bpffs(Path::new("/proc")));
        assert!(!is_bpffs(Path::new("/no/such/dir")));
    }
}
