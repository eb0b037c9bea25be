//! Choosing interfaces and attaching the classifiers to them.
use std::collections::HashMap;

use aya::{
    programs::{
        tc::SchedClassifierLinkId,
        xdp::{XdpLinkId, XdpMode},
        TcAttachType,
    },
    Ebpf,
};
use dnsloop_ebpf::event::Direction;
use thiserror::Error;

use crate::{
    programs::{self, EGRESS_PROGRAM, INGRESS_PROGRAM},
    topology::{Link, LinkRole},
};

/// The kernel gives loopback this index in every network namespace.
pub const LOOPBACK_INDEX: u32 = 1;

#[derive(Debug, Error)]
pub enum AttachError {
    #[error("no interface named {0:?} in this network namespace (see `ip link`)")]
    UnknownInterface(String),
    #[error(transparent)]
    Program(#[from] programs::LoadError),
    #[error("attaching {program} to {interface} failed (TCX needs Linux 6.6; older kernels need the clsact qdisc)")]
    Attach {
        program: &'static str,
        interface: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("attaching XDP to {interface} failed: another XDP program may hold it, or its driver cannot run XDP; run without --xdp to watch its ingress at TC")]
    AttachXdp {
        interface: String,
        #[source]
        source: aya::programs::ProgramError,
    },
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
/// goes away can be let go of. The attachments are bpf links (TCX, XDP) that live as long as
/// the programs: a process that dies, even by SIGKILL, leaves nothing attached.
#[derive(Default)]
pub struct Attachments {
    /// Ingress is watched at XDP rather than TC (`--xdp`), where it can be (see `at_xdp`).
    xdp_ingress: bool,
    by_index: HashMap<u32, Vec<Attached>>,
}

enum Attached {
    Tc(&'static str, SchedClassifierLinkId),
    Xdp(XdpLinkId),
}

impl Attachments {
    pub fn new(xdp_ingress: bool) -> Self {
        Self {
            xdp_ingress,
            by_index: HashMap::new(),
        }
    }

    pub fn is_attached(&self, index: u32) -> bool {
        self.by_index.contains_key(&index)
    }

    /// Attaches the programs to `link` in its watched directions.
    pub fn attach(&mut self, ebpf: &mut Ebpf, link: &Link) -> Result<(), AttachError> {
        let mut attached = Vec::with_capacity(2);
        for &direction in watched_directions(link) {
            if direction == Direction::Ingress && self.xdp_ingress && at_xdp(link) {
                let id = programs::xdp(ebpf)?
                    .attach_to_if_index(link.index, XdpMode::Default)
                    .map_err(|source| AttachError::AttachXdp {
                        interface: link.name.clone(),
                        source,
                    })?;
                attached.push(Attached::Xdp(id));
                continue;
            }
            let (program, attach_type) = match direction {
                Direction::Ingress => (INGRESS_PROGRAM, TcAttachType::Ingress),
                Direction::Egress => (EGRESS_PROGRAM, TcAttachType::Egress),
            };
            let id = programs::classifier(ebpf, program)?
                .attach(&link.name, attach_type)
                .map_err(|source| AttachError::Attach {
                    program,
                    interface: link.name.clone(),
                    source,
                })?;
            attached.push(Attached::Tc(program, id));
        }
        self.by_index.insert(link.index, attached);
        Ok(())
    }

    /// Lets go of interface `index`'s attachments. The interface is gone, and the kernel with it
    /// detached the programs: this only releases our handles, so failures are not errors.
    pub fn forget(&mut self, ebpf: &mut Ebpf, index: u32) {
        for attached in self.by_index.remove(&index).into_iter().flatten() {
            match attached {
                Attached::Tc(program, id) => {
                    if let Ok(classifier) = programs::classifier(ebpf, program) {
                        let _ = classifier.detach(id);
                    }
                }
                Attached::Xdp(id) => {
                    if let Ok(xdp) = programs::xdp(ebpf) {
                        let _ = xdp.detach(id);
                    }
                }
            }
        }
    }
}

/// Whether `--xdp` watches `link`'s ingress at XDP. Loopback is watched on egress only. A bridge
/// keeps TC: its own ingress is where packets enter the node from the pods, not a wire, and the
/// kernel refuses XDP on the bridge's ports while the bridge holds a program.
fn at_xdp(link: &Link) -> bool {
    !matches!(link.role, LinkRole::Loopback | LinkRole::BridgeMaster)
}

/// Attaches the egress classifier to the loopback of the calling thread's namespace (a pod's,
/// entered with `namespaces::in_namespace`), to see a server that forwards to itself.
pub fn attach_loopback(ebpf: &mut Ebpf) -> Result<(), AttachError> {
    programs::classifier(ebpf, EGRESS_PROGRAM)?
        .attach("lo", TcAttachType::Egress)
        .map(|_| ())
        .map_err(|source| AttachError::Attach {
            program: EGRESS_PROGRAM,
            interface: "lo".into(),
            source,
        })
}
