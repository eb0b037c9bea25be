//! Classifiers a dnsloop killed with SIGKILL left behind on the clsact path (kernels before
//! Linux 6.6), found and removed as the next dnsloop attaches. Left in place they would run on
//! every packet of the node, into maps nobody reads, for as long as the interface lives.
//!
//! A filter is left behind when its program is held by no process: a running dnsloop holds its
//! programs' descriptors from before it attaches until after it detaches, and dnsloop pins no
//! program. Telling so needs every process's descriptors in sight, so filters are removed only
//! from the node's own PID namespace (a DaemonSet with `hostPID`), and otherwise named.
use std::{
    collections::HashSet,
    fs, io,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use dnsloop_shared::{
    names::{EGRESS_PROGRAM, INGRESS_PROGRAM},
    point::Direction,
};

use crate::kernel::clsact::{self, BpfFilter};

/// The inode number of the kernel's initial PID namespace (`PROC_PID_INIT_INO`), the same on
/// every Linux since 3.8.
const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";

/// What a descriptor of a BPF program links to in `/proc/PID/fd`.
const PROGRAM_DESCRIPTOR: &str = "anon_inode:bpf-prog";

/// Whether the programs of dnsloop filters are still held, remembered across interfaces.
pub struct Orphans {
    proc: PathBuf,
    /// Programs some process held at the last look.
    held: HashSet<u32>,
    /// Programs no process held: a program nobody holds can never be held again.
    orphaned: HashSet<u32>,
    /// Why held programs cannot be told from orphaned ones here, once found.
    blind: Option<String>,
    warned_blind: bool,
}

impl Orphans {
    pub fn new() -> Self {
        Self::at(Path::new("/proc"))
    }

    fn at(proc: &Path) -> Self {
        Self {
            proc: proc.to_owned(),
            held: HashSet::new(),
            orphaned: HashSet::new(),
            blind: None,
            warned_blind: false,
        }
    }

    /// Removes the dnsloop filters left behind on `direction` of interface `index` of the
    /// calling thread's network namespace, saying on stderr what it removed, and what it found
    /// but could not remove. `place` names the interface for the operator.
    pub fn remove(&mut self, place: &str, index: u32, direction: Direction) {
        let side = direction.as_str();
        let filters = match clsact::bpf_filters(index, direction) {
            Ok(filters) => filters,
            Err(error) => {
                eprintln!(
                    "dnsloop: listing the tc filters of {place} {side} failed: {error}; filters a killed dnsloop left there are not removed (`tc filter show dev IFACE {side}` lists them)"
                );
                return;
            }
        };
        for filter in filters.iter().filter(|filter| is_dnsloop(filter)) {
            let BpfFilter {
                name,
                priority,
                program_id,
                ..
            } = filter;
            match self.is_orphaned(*program_id) {
                Ok(false) => {}
                Ok(true) => match clsact::delete_filter(index, direction, filter) {
                    Ok(()) => eprintln!(
                        "dnsloop: removed tc filter {name} (pref {priority}, program {program_id}) from {place} {side}: a dnsloop that no longer runs left it behind"
                    ),
                    Err(error) => eprintln!(
                        "dnsloop: removing tc filter {name} (pref {priority}) from {place} {side}, left behind by a dnsloop that no longer runs, failed: {error}; `tc filter del dev IFACE {side} pref {priority}` removes it"
                    ),
                },
                Err(why) => self.warn_blind(&why),
            }
        }
    }

    /// Whether no process holds program `id`; `Err` says why that cannot be told here.
    fn is_orphaned(&mut self, id: u32) -> Result<bool, String> {
        if let Some(why) = &self.blind {
            return Err(why.clone());
        }
        if self.orphaned.contains(&id) {
            return Ok(true);
        }
        // A program held at the last look may be held by a dnsloop started since: look again.
        if !self.held.contains(&id) {
            match held_programs(&self.proc) {
                Ok(held) => self.held = held,
                Err(why) => {
                    self.blind = Some(why.clone());
                    return Err(why);
                }
            }
        }
        if self.held.contains(&id) {
            return Ok(false);
        }
        self.orphaned.insert(id);
        Ok(true)
    }

    fn warn_blind(&mut self, why: &str) {
        if self.warned_blind {
            return;
        }
        self.warned_blind = true;
        eprintln!(
            "dnsloop: found tc filters named {INGRESS_PROGRAM} or {EGRESS_PROGRAM} that another dnsloop attached, and cannot tell whether it still runs ({why}); if none does, a killed one left them: {}",
            clsact::REMOVE_BY_HAND
        );
    }
}

/// Whether `filter` is one of dnsloop's classifiers (attached under its program's name).
fn is_dnsloop(filter: &BpfFilter) -> bool {
    filter.name == INGRESS_PROGRAM || filter.name == EGRESS_PROGRAM
}

/// The ids of the BPF programs the processes under `proc` hold a descriptor of; `Err` says why
/// some process's descriptors are out of sight.
fn held_programs(proc: &Path) -> Result<HashSet<u32>, String> {
    let namespace = fs::read_link(proc.join("self/ns/pid"))
        .map_err(|error| format!("reading {}/self/ns/pid: {error}", proc.display()))?;
    if namespace.as_os_str() != INITIAL_PID_NAMESPACE {
        return Err(
            "this dnsloop runs in a PID namespace of its own and sees only its processes; run it in the node's (hostPID)"
                .to_owned(),
        );
    }
    let processes =
        fs::read_dir(proc).map_err(|error| format!("listing {}: {error}", proc.display()))?;
    let mut held = HashSet::new();
    for process in processes.flatten() {
        if !process
            .file_name()
            .as_bytes()
            .iter()
            .all(u8::is_ascii_digit)
        {
            continue;
        }
        match programs_of(&process.path()) {
            Ok(ids) => held.extend(ids),
            // The process ended meanwhile, and its descriptors with it.
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(format!(
                    "reading {}: {error}; dnsloop needs CAP_SYS_PTRACE to see other processes' descriptors",
                    process.path().join("fd").display()
                ))
            }
        }
    }
    Ok(held)
}

/// The ids of the BPF programs process directory `process` holds descriptors of.
fn programs_of(process: &Path) -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    for descriptor in fs::read_dir(process.join("fd"))?.flatten() {
        let is_program = fs::read_link(descriptor.path())
            .is_ok_and(|target| target.as_os_str() == PROGRAM_DESCRIPTOR);
        if !is_program {
            continue;
        }
        let info = process.join("fdinfo").join(descriptor.file_name());
        // A descriptor closed meanwhile holds nothing.
        if let Some(id) = fs::read_to_string(info)
            .ok()
            .as_deref()
            .and_then(program_id)
        {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The `prog_id` line of a program descriptor's fdinfo.
fn program_id(fdinfo: &str) -> Option<u32> {
    fdinfo.lines().find_map(|line| {
        line.strip_prefix("prog_id:")
            .and_then(|id| id.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A `/proc` of its own: `self` in `pid_namespace`, and each process with its program
    /// descriptors' ids.
    struct FakeProc {
        dir: tempfile::TempDir,
    }

    impl FakeProc {
        fn new(pid_namespace: &str) -> Self {
            let dir = tempfile::tempdir().expect("temporary directory");
            fs::create_dir_all(dir.path().join("self/ns")).expect("self/ns");
            symlink(pid_namespace, dir.path().join("self/ns/pid")).expect("pid link");
            Self { dir }
        }

        fn process(&self, pid: u32, programs: &[u32]) {
            let process = self.dir.path().join(pid.to_string());
            fs::create_dir_all(process.join("fd")).expect("fd");
            fs::create_dir_all(process.join("fdinfo")).expect("fdinfo");
            symlink("/dev/null", process.join("fd/0")).expect("a file descriptor");
            fs::write(process.join("fdinfo/0"), "pos:\t0\n").expect("its fdinfo");
            for (index, id) in programs.iter().enumerate() {
                let fd = (index + 3).to_string();
                symlink(PROGRAM_DESCRIPTOR, process.join("fd").join(&fd)).expect("program fd");
                fs::write(
                    process.join("fdinfo").join(&fd),
                    format!("pos:\t0\nflags:\t02000002\nprog_type:\t3\nprog_id:\t{id}\n"),
                )
                .expect("program fdinfo");
            }
        }

        fn orphans(&self) -> Orphans {
            Orphans::at(self.dir.path())
        }
    }

    #[test]
    fn a_program_no_process_holds_is_orphaned_and_a_held_one_is_not() {
        let proc = FakeProc::new(INITIAL_PID_NAMESPACE);
        proc.process(1, &[]);
        proc.process(4242, &[17, 18]);
        let mut orphans = proc.orphans();
        assert_eq!(orphans.is_orphaned(17), Ok(false));
        assert_eq!(orphans.is_orphaned(18), Ok(false));
        assert_eq!(orphans.is_orphaned(9), Ok(true));
    }

    #[test]
    fn a_program_held_by_a_dnsloop_started_after_the_last_look_is_not_orphaned() {
        let proc = FakeProc::new(INITIAL_PID_NAMESPACE);
        proc.process(4242, &[17]);
        let mut orphans = proc.orphans();
        assert_eq!(orphans.is_orphaned(17), Ok(false));
        proc.process(5000, &[30]);
        assert_eq!(orphans.is_orphaned(30), Ok(false));
    }

    #[test]
    fn outside_the_node_pid_namespace_nothing_is_called_orphaned() {
        let proc = FakeProc::new("pid:[4026532201]");
        proc.process(1, &[]);
        let mut orphans = proc.orphans();
        let why = orphans.is_orphaned(9).expect_err("cannot tell");
        assert!(why.contains("hostPID"), "{why}");
    }

    #[test]
    fn the_program_id_is_read_from_its_descriptor_fdinfo() {
        let fdinfo = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t3\n\
                      prog_jited:\t1\nprog_tag:\t1d2f4bd0e6a4bc7e\nmemlock:\t4096\nprog_id:\t1234\n\
                      run_time_ns:\t0\nrun_cnt:\t0\n";
        assert_eq!(program_id(fdinfo), Some(1234));
        assert_eq!(program_id("pos:\t0\nflags:\t02\n"), None);
    }
}
