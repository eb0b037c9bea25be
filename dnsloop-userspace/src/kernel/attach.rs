//! Choosing interfaces, attaching the programs to them, and letting go of them again.
//!
//! Classifiers attach as TCX links (Linux 6.6+), and `--xdp` as an XDP link. A link lives as
//! long as the process: a dnsloop that dies, even by SIGKILL, leaves nothing attached, and
//! other programs on the same hooks (a second dnsloop included) keep running beside it.
//!
//! Older kernels have no TCX. There the classifiers are tc filters on the clsact qdisc, which
//! stay until someone removes them: dnsloop removes its own, and the qdisc if it added it and
//! nothing else uses it, when [`Attachments`] is dropped, which every exit but SIGKILL does.
//! What a SIGKILL leaves, the next dnsloop removes where it attaches (see `orphans`).
use std::{collections::HashMap, io, path::Path};

use aya::{
    programs::{
        links::{Link as _, LinkOrder},
        tc::{NlOptions, SchedClassifierLink, TcAttachOptions, TcError},
        xdp::{XdpLink, XdpMode},
        ProgramError, TcAttachType,
    },
    sys::SyscallError,
    util::KernelVersion,
    Ebpf,
};
use dnsloop_shared::{
    names::{EGRESS_PROGRAM, INGRESS_PROGRAM},
    point::Direction,
};
use thiserror::Error;

use crate::{
    kernel::clsact::{self, Qdisc},
    kernel::orphans::Orphans,
    kernel::programs,
    node::namespaces::{self, NamespaceError},
    node::topology::{Link, LinkRole},
};

/// The kernel gives loopback this index in every network namespace.
pub const LOOPBACK_INDEX: u32 = 1;

/// Set to `1`, classifiers attach to the clsact qdisc even where TCX exists: the tests use it
/// to run the path older kernels take on this one.
pub const FORCE_CLSACT_ENV: &str = "DNSLOOP_FORCE_CLSACT";

#[derive(Debug, Error)]
pub enum AttachError {
    #[error("no interface named {0:?} in this network namespace (see `ip link`)")]
    UnknownInterface(String),
    #[error("interface {0} is gone: it was removed while dnsloop attached to it; run dnsloop again (leave out `-i {0}` if it is not coming back)")]
    InterfaceGone(String),
    #[error(transparent)]
    Program(#[from] programs::LoadError),
    #[error("attaching {program} to {interface} ({hook}) failed: {hint}")]
    Attach {
        program: &'static str,
        interface: String,
        hook: TcHook,
        hint: &'static str,
        #[source]
        source: Box<ProgramError>,
    },
    #[error("adding the clsact qdisc to {interface} failed: dnsloop attaches there on kernels without TCX; see what holds the interface's ingress with `tc qdisc show dev {interface}`")]
    Clsact {
        interface: String,
        #[source]
        source: TcError,
    },
    #[error("attaching XDP to {interface} failed: another XDP program may hold it, or its driver cannot run XDP; run without --xdp to watch its ingress at TC")]
    AttachXdp {
        interface: String,
        #[source]
        source: Box<ProgramError>,
    },
    #[error(transparent)]
    Namespace(#[from] NamespaceError),
}

/// Where a classifier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcHook {
    /// A TCX link: it goes when dnsloop goes.
    Tcx,
    /// A tc filter on the clsact qdisc: it stays until removed.
    Clsact,
}

impl std::fmt::Display for TcHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TcHook::Tcx => "TCX",
            TcHook::Clsact => "tc clsact",
        })
    }
}

/// The directions watched on a link. Every packet on loopback crosses egress and then ingress;
/// only egress still carries the sending socket, which tells the kernel program whose loopback
/// it is, so loopback is watched on egress alone.
pub fn watched_directions(link: &Link) -> &'static [Direction] {
    if link.role == LinkRole::Loopback {
        &[Direction::Egress]
    } else {
        &[Direction::Ingress, Direction::Egress]
    }
}

/// The links named on the command line, or all of them when none is named.
pub fn select(available: Vec<Link>, requested: &[String]) -> Result<Vec<Link>, AttachError> {
    if requested.is_empty() {
        return Ok(available);
    }
    requested
        .iter()
        .map(|name| {
            available
                .iter()
                .find(|link| &link.name == name)
                .cloned()
                .ok_or_else(|| AttachError::UnknownInterface(name.clone()))
        })
        .collect()
}

/// The programs attached to the node's links, by interface index, so that an interface that
/// goes away can be let go of, and to its pods' loopbacks. Dropping it detaches them all.
pub struct Attachments {
    /// Ingress is watched at XDP rather than TC (`--xdp`), where it can be (see `at_xdp`).
    xdp_ingress: bool,
    hooks: TcHooks,
    by_index: HashMap<u32, Vec<Attached>>,
    /// Interfaces of the node's namespace that dnsloop gave a clsact qdisc: index, name.
    added_qdiscs: Vec<(u32, String)>,
    pod_loopbacks: Vec<PodLoopback>,
}

enum Attached {
    Tc(Classifier),
    /// Never detached by hand: dropping the link detaches it.
    Xdp(#[expect(dead_code, reason = "held for its Drop")] XdpLink),
}

/// A classifier attached to one direction of one interface.
struct Classifier {
    link: SchedClassifierLink,
    /// Set on the clsact path, to tell the operator what to remove if detaching fails.
    filter: Option<Filter>,
}

struct Filter {
    program: &'static str,
    interface: String,
    direction: &'static str,
    priority: u16,
}

impl Filter {
    fn remove_command(&self) -> String {
        format!(
            "tc filter del dev {} {} pref {}",
            self.interface, self.direction, self.priority
        )
    }
}

/// The classifier on a pod's loopback, which lives in the pod's namespace: a tc filter there
/// must be removed from inside it (loopback's index is 1 in every namespace).
struct PodLoopback {
    namespace: std::path::PathBuf,
    /// Tells the pod's namespace from whatever may have taken over its path by exit.
    cookie: u64,
    label: String,
    classifier: Classifier,
    added_qdisc: bool,
}

impl Attachments {
    pub fn new(xdp_ingress: bool) -> Self {
        Self {
            xdp_ingress,
            hooks: TcHooks::from_env(),
            by_index: HashMap::new(),
            added_qdiscs: Vec::new(),
            pod_loopbacks: Vec::new(),
        }
    }

    /// Whether classifiers attach through tc clsact: the kernel has no TCX (or the tests
    /// said so).
    pub fn on_clsact(&self) -> bool {
        self.hooks.current == TcHook::Clsact
    }

    pub fn is_attached(&self, index: u32) -> bool {
        self.by_index.contains_key(&index)
    }

    /// Attaches the programs to `link` in its watched directions.
    ///
    /// One link at a time, on purpose: the kernel creates a TCX link holding RTNL across an RCU
    /// grace period (`tcx_link_attach` -> `synchronize_rcu`, 8-13 ms), and RTNL is one lock for
    /// every namespace, so links created from several threads wait for each other (200 links
    /// took 1.7 s from 8 threads as from one, Linux 6.18).
    pub fn attach(&mut self, ebpf: &mut Ebpf, link: &Link) -> Result<(), AttachError> {
        let mut attached = Vec::with_capacity(2);
        for &direction in watched_directions(link) {
            if direction == Direction::Ingress && self.xdp_ingress && at_xdp(link) {
                let xdp = programs::xdp(ebpf)?;
                let id = xdp
                    .attach_to_if_index(link.index, XdpMode::Default)
                    .map_err(|source| match os_error(&source) {
                        Some(libc::ENODEV) => AttachError::InterfaceGone(link.name.clone()),
                        _ => AttachError::AttachXdp {
                            interface: link.name.clone(),
                            source: Box::new(source),
                        },
                    })?;
                attached.push(Attached::Xdp(xdp.take_link(id).map_err(|source| {
                    AttachError::AttachXdp {
                        interface: link.name.clone(),
                        source: Box::new(source),
                    }
                })?));
                continue;
            }
            let (classifier, added_qdisc) =
                self.hooks.attach(ebpf, &link.name, &link.name, direction)?;
            if added_qdisc {
                self.added_qdiscs.push((link.index, link.name.clone()));
            }
            attached.push(Attached::Tc(classifier));
        }
        self.by_index.insert(link.index, attached);
        Ok(())
    }

    /// Attaches the egress classifier to the loopback of the pod whose namespace is at
    /// `namespace`, to see a server that forwards to itself.
    pub fn attach_pod_loopback(
        &mut self,
        ebpf: &mut Ebpf,
        namespace: &Path,
        cookie: u64,
        label: &str,
    ) -> Result<(), AttachError> {
        let hooks = &mut self.hooks;
        let place = format!("lo in the namespace of {label}");
        let (classifier, added_qdisc) = namespaces::in_namespace(namespace, || {
            hooks.attach(ebpf, "lo", &place, Direction::Egress)
        })??;
        self.pod_loopbacks.push(PodLoopback {
            namespace: namespace.to_owned(),
            cookie,
            label: label.to_owned(),
            classifier,
            added_qdisc,
        });
        Ok(())
    }

    /// Lets go of interface `index`'s attachments. The interface is gone, and the kernel with it
    /// detached the programs and removed its qdisc: this only releases our handles.
    pub fn forget(&mut self, index: u32) {
        self.by_index.remove(&index);
        self.added_qdiscs.retain(|(added, _)| *added != index);
    }

    /// Removes the tc filters and qdiscs dnsloop added; says on stderr what it could not
    /// remove, and how to. Links need nothing: dropping them detaches them.
    fn detach_all(&mut self) {
        for pod in self.pod_loopbacks.drain(..) {
            let PodLoopback {
                namespace,
                cookie,
                label,
                classifier,
                added_qdisc,
            } = pod;
            if classifier.filter.is_none() {
                continue;
            }
            let removed = namespaces::in_namespace(&namespace, move || {
                // Another namespace at the same path has none of our filters.
                if namespaces::current_cookie().ok() != Some(cookie) {
                    return Vec::new();
                }
                let mut problems = classifier.detach().err().into_iter().collect::<Vec<_>>();
                if added_qdisc {
                    if let Err(error) = clsact::remove_if_unused(LOOPBACK_INDEX) {
                        problems.push(format!(
                            "removing the clsact qdisc of lo failed: {error} (`tc qdisc del dev lo clsact`)"
                        ));
                    }
                }
                problems
            });
            // A namespace that cannot be entered any more is gone, and its filters with it.
            for problem in removed.unwrap_or_default() {
                eprintln!(
                    "dnsloop: in the namespace of {label} ({}): {problem}",
                    namespace.display()
                );
            }
        }
        for (_, attached) in self.by_index.drain() {
            for attached in attached {
                if let Attached::Tc(classifier) = attached {
                    if let Err(problem) = classifier.detach() {
                        eprintln!("dnsloop: {problem}");
                    }
                }
            }
        }
        for (index, name) in self.added_qdiscs.drain(..) {
            if let Err(error) = clsact::remove_if_unused(index) {
                eprintln!(
                    "dnsloop: removing the clsact qdisc dnsloop added to {name} failed: {error}; once nothing uses it, `tc qdisc del dev {name} clsact` removes it"
                );
            }
        }
    }
}

impl Drop for Attachments {
    fn drop(&mut self) {
        self.detach_all();
    }
}

impl Classifier {
    /// Detaches it; on failure, says what is left behind and how to remove it.
    fn detach(self) -> Result<(), String> {
        let Classifier { link, filter } = self;
        match (link.detach(), filter) {
            (Ok(()), _) => Ok(()),
            // The interface went, and the filter with it.
            (Err(error), _) if os_error(&error) == Some(libc::ENODEV) => Ok(()),
            (Err(error), Some(filter)) => Err(format!(
                "removing tc filter {} from {} {} failed: {error}; remove it with `{}`",
                filter.program,
                filter.interface,
                filter.direction,
                filter.remove_command()
            )),
            (Err(error), None) => Err(format!("detaching a TCX link failed: {error}")),
        }
    }
}

/// Which hook classifiers attach to: TCX until the kernel shows it has none (or the tests
/// force clsact), then clsact for the rest of the run.
struct TcHooks {
    current: TcHook,
    forced: bool,
    warned: bool,
    orphans: Orphans,
}

impl TcHooks {
    fn from_env() -> Self {
        let forced = std::env::var(FORCE_CLSACT_ENV).is_ok_and(|value| value == "1");
        Self {
            current: if forced { TcHook::Clsact } else { TcHook::Tcx },
            forced,
            warned: false,
            orphans: Orphans::new(),
        }
    }

    /// Attaches the classifier for `direction` to `interface` of the calling thread's
    /// namespace (`place` names it for the operator); says whether the clsact qdisc had to be
    /// added for it.
    fn attach(
        &mut self,
        ebpf: &mut Ebpf,
        interface: &str,
        place: &str,
        direction: Direction,
    ) -> Result<(Classifier, bool), AttachError> {
        let (program, attach_type, direction_name) = match direction {
            Direction::Ingress => (INGRESS_PROGRAM, TcAttachType::Ingress, "ingress"),
            Direction::Egress => (EGRESS_PROGRAM, TcAttachType::Egress, "egress"),
        };
        let classifier = programs::classifier(ebpf, program)?;
        let failed = |hook, source| attach_error(program, interface, hook, source);
        if self.current == TcHook::Tcx {
            let options = TcAttachOptions::TcxOrder(LinkOrder::default());
            match classifier.attach_with_options(interface, attach_type, options) {
                Ok(id) => {
                    let link = classifier
                        .take_link(id)
                        .map_err(|source| failed(TcHook::Tcx, source))?;
                    return Ok((Classifier { link, filter: None }, false));
                }
                Err(source) if tcx_missing(&source) => self.current = TcHook::Clsact,
                Err(source) => return Err(failed(TcHook::Tcx, source)),
            }
        }
        self.warn_once();
        let qdisc = clsact::ensure(interface).map_err(|source| match tc_os_error(&source) {
            Some(libc::ENODEV) => AttachError::InterfaceGone(interface.to_owned()),
            _ => AttachError::Clsact {
                interface: interface.to_owned(),
                source,
            },
        })?;
        // A qdisc dnsloop just added holds no filter yet.
        if qdisc == Qdisc::AlreadyThere {
            match interface_index(interface) {
                Ok(index) => self.orphans.remove(place, index, direction),
                Err(error) if error.raw_os_error() == Some(libc::ENODEV) => {
                    return Err(AttachError::InterfaceGone(interface.to_owned()))
                }
                Err(error) => eprintln!(
                    "dnsloop: {place}: {error}; filters a killed dnsloop left there are not removed"
                ),
            }
        }
        let options = TcAttachOptions::Netlink(NlOptions::default());
        let attached = classifier
            .attach_with_options(interface, attach_type, options)
            .and_then(|id| classifier.take_link(id));
        let link = match attached {
            Ok(link) => link,
            Err(source) => {
                if qdisc == Qdisc::Added {
                    if let Ok(index) = interface_index(interface) {
                        let _ = clsact::remove_if_unused(index);
                    }
                }
                return Err(failed(TcHook::Clsact, source));
            }
        };
        // The kernel picked a priority no other filter there has, so it names ours alone.
        let priority = link.priority().unwrap_or_default();
        let filter = Filter {
            program,
            interface: interface.to_owned(),
            direction: direction_name,
            priority,
        };
        tracing::info!(
            "attached {program} to {interface} {direction_name} as tc filter pref {priority}; if dnsloop is killed, remove it with `{}`",
            filter.remove_command()
        );
        Ok((
            Classifier {
                link,
                filter: Some(filter),
            },
            qdisc == Qdisc::Added,
        ))
    }

    fn warn_once(&mut self) {
        if self.warned {
            return;
        }
        self.warned = true;
        let reason = if self.forced {
            format!("{FORCE_CLSACT_ENV}=1")
        } else {
            match KernelVersion::current() {
                Ok(version) => format!("Linux {version} < 6.6"),
                Err(_) => "Linux < 6.6".to_owned(),
            }
        };
        eprintln!("dnsloop: {}", legacy_warning(&reason));
    }
}

/// The warning for runs on the clsact path, whose filters outlive a killed dnsloop.
fn legacy_warning(reason: &str) -> String {
    format!(
        "TCX is not available ({reason}): attached with tc clsact; dnsloop removes its filters when it exits, \
         but a dnsloop killed with SIGKILL leaves them behind until the next dnsloop starts and removes them: \
         {}",
        clsact::REMOVE_BY_HAND
    )
}

/// A kernel without TCX takes its attach types for unknown ones and refuses with EINVAL.
fn tcx_missing(error: &ProgramError) -> bool {
    matches!(error, ProgramError::SyscallError(SyscallError { io_error, .. })
        if io_error.raw_os_error() == Some(libc::EINVAL))
}

fn attach_error(
    program: &'static str,
    interface: &str,
    hook: TcHook,
    source: ProgramError,
) -> AttachError {
    let hint = match os_error(&source) {
        Some(libc::ENODEV) => return AttachError::InterfaceGone(interface.to_owned()),
        Some(libc::EPERM | libc::EACCES) => {
            "attaching needs CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN) in this network namespace: run dnsloop as root on the host"
        }
        _ => "`bpftool net show` and `tc filter show dev IFACE ingress|egress` list what is attached there",
    };
    AttachError::Attach {
        program,
        interface: interface.to_owned(),
        hook,
        hint,
        source: Box::new(source),
    }
}

/// The errno behind an attach or detach failure, wherever aya keeps it.
fn os_error(error: &ProgramError) -> Option<i32> {
    match error {
        ProgramError::SyscallError(SyscallError { io_error, .. })
        | ProgramError::IOError(io_error) => io_error.raw_os_error(),
        ProgramError::TcError(error) => tc_os_error(error),
        ProgramError::NetlinkError(error) => error.raw_os_error(),
        ProgramError::UnknownInterface { .. } => Some(libc::ENODEV),
        _ => None,
    }
}

fn tc_os_error(error: &TcError) -> Option<i32> {
    match error {
        TcError::IoError(error) => error.raw_os_error(),
        TcError::NetlinkError(error) => error.raw_os_error(),
        _ => None,
    }
}

fn interface_index(name: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: if_nametoindex reads a NUL-terminated string we own.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        index => Ok(index),
    }
}

/// Whether `--xdp` watches `link`'s ingress at XDP. Loopback is watched on egress only. A bridge
/// keeps TC: its own ingress is where packets enter the node from the pods, not a wire, and the
/// kernel refuses XDP on the bridge's ports while the bridge holds a program.
fn at_xdp(link: &Link) -> bool {
    !matches!(link.role, LinkRole::Loopback | LinkRole::BridgeMaster)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syscall_error(errno: i32) -> ProgramError {
        ProgramError::SyscallError(SyscallError {
            call: "bpf_mprog_attach",
            io_error: io::Error::from_raw_os_error(errno),
        })
    }

    #[test]
    fn only_einval_from_the_tcx_attach_means_no_tcx() {
        assert!(tcx_missing(&syscall_error(libc::EINVAL)));
        assert!(!tcx_missing(&syscall_error(libc::EPERM)));
        assert!(!tcx_missing(&syscall_error(libc::ENODEV)));
        // An interface that cannot be looked up says nothing about TCX.
        assert!(!tcx_missing(&ProgramError::TcError(TcError::IoError(
            io::Error::from_raw_os_error(libc::EINVAL)
        ))));
    }

    #[test]
    fn an_interface_gone_before_attaching_is_named() {
        let gone = [
            syscall_error(libc::ENODEV),
            ProgramError::TcError(TcError::IoError(io::Error::from_raw_os_error(libc::ENODEV))),
        ];
        for source in gone {
            let error = attach_error(EGRESS_PROGRAM, "veth0", TcHook::Tcx, source);
            assert!(matches!(&error, AttachError::InterfaceGone(name) if name == "veth0"));
            assert_eq!(
                error.to_string(),
                "interface veth0 is gone: it was removed while dnsloop attached to it; run dnsloop again (leave out `-i veth0` if it is not coming back)"
            );
        }
    }

    #[test]
    fn a_refused_attach_names_the_privilege_it_needs() {
        let error = attach_error(
            INGRESS_PROGRAM,
            "eth0",
            TcHook::Clsact,
            syscall_error(libc::EPERM),
        );
        let message = error.to_string();
        assert!(
            message.starts_with("attaching dnsloop_ingress to eth0 (tc clsact) failed: "),
            "{message}"
        );
        assert!(message.contains("CAP_NET_ADMIN"), "{message}");
    }

    #[test]
    fn the_legacy_warning_says_what_a_sigkill_leaves_and_how_to_remove_it() {
        let warning = legacy_warning("Linux 6.1.0 < 6.6");
        assert!(warning
            .starts_with("TCX is not available (Linux 6.1.0 < 6.6): attached with tc clsact;"));
        assert!(warning.contains("SIGKILL leaves them behind"));
        assert!(warning.contains("tc filter del dev IFACE ingress|egress pref PREF"));
        assert!(!warning.contains('\n'));
    }

    #[test]
    fn a_filter_is_removed_by_its_own_priority() {
        let filter = Filter {
            program: EGRESS_PROGRAM,
            interface: "cni0".into(),
            direction: "egress",
            priority: 49151,
        };
        assert_eq!(
            filter.remove_command(),
            "tc filter del dev cni0 egress pref 49151"
        );
    }
}
