//! Choosing interfaces and attaching the classifiers to them.
use aya::{programs::TcAttachType, Ebpf};
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

/// Attaches the classifiers to every link in its watched directions. The links live as long as
/// `ebpf`: with TCX a process that dies, even by SIGKILL, leaves nothing attached.
pub fn attach(ebpf: &mut Ebpf, links: &[Link]) -> Result<(), AttachError> {
    for (direction, program, attach_type) in [
        (Direction::Ingress, INGRESS_PROGRAM, TcAttachType::Ingress),
        (Direction::Egress, EGRESS_PROGRAM, TcAttachType::Egress),
    ] {
        let classifier = programs::classifier(ebpf, program)?;
        for link in links
            .iter()
            .filter(|link| watched_directions(link).contains(&direction))
        {
            classifier
                .attach(&link.name, attach_type)
                .map_err(|source| AttachError::Attach {
                    program,
                    interface: link.name.clone(),
                    source,
                })?;
        }
    }
    Ok(())
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
