//! One query message's trip across the node: where it came from, the hops it was seen at, and
//! where it ended up.
use std::{
    net::SocketAddr,
    num::NonZeroU64,
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_shared::parse::Probe;

use crate::{
    analyzers::{
        endpoint::Endpoint,
        packet::MessageKey,
        table::{FastHash, Table},
    },
    finding::{Hop, Unconfirmable, Unconfirmed},
    observation::{Namespace, Observation, Point, Question, Transport},
};

/// Never zero, so that a flight's optional links to others (`parent`, `returning`) take no
/// more room than an id.
pub type FlightId = NonZeroU64;

/// Every flight followed, by id. Ids are handed out in sequence: see `FastHash`.
pub type Flights = Table<FlightId, Flight, FastHash>;

/// A trip seen at more points than this is a routing loop of one packet, not a DNS forward:
/// its first hops are enough to show.
const MAX_HOPS: usize = 16;

/// Room a flight's hops start with: nearly every query is seen twice, on both sides of the veth
/// or bridge it crosses. A node keeps tens of thousands of flights, and a `Vec`'s first growth
/// would give each room for four.
const USUAL_HOPS: usize = 2;

/// Where a flight is.
#[derive(Clone, Debug, PartialEq)]
pub enum Position {
    /// Last seen at `point`, entering the namespace it enters there, at `since`, addressed to
    /// `at`, which the namespace holds or not (`None`: not known). Whether the namespace took
    /// it or routed it on is decided once `settle` has passed.
    Entered {
        point: Arc<Point>,
        since: SystemTime,
        at: Endpoint,
        own_address: Option<bool>,
    },
    /// Last seen heading into an unwatched side at `since`: a bridge, or the network beyond an
    /// uplink.
    Outside { since: SystemTime },
    /// Stayed in the namespace it entered at `point`, at `since`, addressed to `at`: a server
    /// there received it. `confirmed`: the namespace is known to hold `at`; where its addresses are
    /// not known (a capture), nothing shows that it was not routed on or dropped unseen.
    Delivered {
        point: Arc<Point>,
        since: SystemTime,
        at: Endpoint,
        confirmed: bool,
    },
    /// Stayed in the namespace it entered, but was not taken in there: it was addressed to an
    /// address the namespace does not hold (held for a neighbour that never answered, or
    /// routed nowhere), or the kernel dropped it there.
    Stranded,
}

#[derive(Clone, Debug)]
pub struct Flight {
    pub message: MessageKey,
    /// As sent, for the report.
    pub question: Question,
    pub probe: Probe,
    /// Never empty: its first sighting starts it, and says where it came from, where it was
    /// addressed and when (kept once: a storm has tens of thousands of flights).
    pub hops: Vec<Sighting>,
    pub position: Position,
    /// The query that `origin` had received and forwarded as this one; for one that came onto
    /// the node from an unwatched side, the query it came back as (see `came_back`).
    pub parent: Option<FlightId>,
    /// For one that came onto the node from an unwatched side, the query that had just left
    /// the node that it may be coming back as.
    pub returning: Option<FlightId>,
    /// When the namespace it was delivered to answered it.
    pub answered: Option<SystemTime>,
    /// The last time anything about it was seen or used; it is forgotten some time after.
    pub active: SystemTime,
}

/// One sighting of a flight: a `Hop` of the findings it may end up in, kept in less room.
#[derive(Clone, Debug)]
pub struct Sighting {
    pub ts: SystemTime,
    pub point: Arc<Point>,
    pub src: Endpoint,
    pub dst: Endpoint,
    id: u16,
    transport: Transport,
}

impl Sighting {
    fn of(obs: &Observation) -> Self {
        Self {
            ts: obs.ts,
            point: Arc::clone(&obs.point),
            src: obs.src.into(),
            dst: obs.dst.into(),
            id: obs.id,
            transport: obs.transport,
        }
    }

    /// The sighting as a finding shows it.
    pub fn hop(&self) -> Hop {
        Hop {
            ts: self.ts,
            point: Arc::clone(&self.point),
            src: self.src.into(),
            dst: self.dst.into(),
            id: self.id,
            transport: self.transport,
        }
    }
}

impl Flight {
    pub fn start(message: MessageKey, question: Question, obs: &Observation) -> Self {
        let mut flight = Self {
            message,
            question,
            probe: obs.probe,
            hops: Vec::with_capacity(USUAL_HOPS),
            position: Position::Outside { since: obs.ts },
            parent: None,
            returning: None,
            answered: None,
            active: obs.ts,
        };
        flight.advance(obs);
        flight
    }

    /// Its first sighting.
    fn first(&self) -> &Sighting {
        &self.hops[0]
    }

    /// The namespace it left without having entered it first: where its sender lives. `None`
    /// when it first showed up coming from an unwatched side.
    pub fn origin(&self) -> Option<&Namespace> {
        self.first().point.leaves.as_ref()
    }

    /// Where it was addressed when first seen, before any DNAT.
    pub fn server(&self) -> SocketAddr {
        self.first().dst.into()
    }

    pub fn started(&self) -> SystemTime {
        self.first().ts
    }

    /// Whether `obs`, a sighting of the same message, is this flight moving on. It is not when
    /// the flight has come to rest, or when the sighting leaves a namespace other than the one
    /// the flight just entered: then the message was sent anew (a client's retry), unless it
    /// is the same crossing seen at a second point.
    pub fn continues_with(&self, obs: &Observation, settle: Duration) -> bool {
        let moving_since = |since: SystemTime| {
            obs.ts
                .duration_since(since)
                .map_or(true, |elapsed| elapsed < settle)
        };
        match &self.position {
            Position::Delivered { .. } | Position::Stranded => false,
            Position::Outside { since } => moving_since(*since),
            Position::Entered { point, since, .. } => {
                // A sighting that leaves no watched namespace (a bridge port seen from the
                // bridge) cannot contradict where the flight is, and neither can the crossing it
                // just made seen again (a capture that places a bridge port and the bridge alike,
                // by the packet's addresses).
                let same_crossing =
                    obs.point.leaves == point.leaves && obs.point.enters == point.enters;
                moving_since(*since)
                    && (same_crossing
                        || obs
                            .point
                            .leaves
                            .as_ref()
                            .is_none_or(|leaves| Some(leaves) == point.enters.as_ref()))
            }
        }
    }

    /// Records the sighting `obs` of this flight.
    pub fn advance(&mut self, obs: &Observation) {
        if self.hops.len() < MAX_HOPS {
            // One more at a time: most flights that outgrow the usual room end at one more hop
            // (a query forwarded off the node), where doubling would leave a hop's room unused.
            self.hops.reserve_exact(1);
            self.hops.push(Sighting::of(obs));
        }
        self.position = match &obs.point.enters {
            Some(_) => Position::Entered {
                point: Arc::clone(&obs.point),
                since: obs.ts,
                at: obs.dst.into(),
                own_address: obs.to_own_address,
            },
            None => Position::Outside { since: obs.ts },
        };
        self.active = self.active.max(obs.ts);
    }

    /// The flight has not left the namespace it entered at `entered_at`: a server there took
    /// it in, unless it was not addressed to that namespace or `dropped` says the kernel
    /// dropped it there; then it is stranded. A namespace whose addresses are unknown is taken
    /// to hold the address, unconfirmed. Returns whether it was delivered (not when it had moved
    /// on since).
    pub fn settle(&mut self, entered_at: SystemTime, dropped: bool) -> bool {
        let Position::Entered {
            point,
            since,
            at,
            own_address,
            ..
        } = &self.position
        else {
            return false;
        };
        if *since != entered_at {
            return false;
        }
        if dropped || *own_address == Some(false) {
            self.position = Position::Stranded;
            return false;
        }
        self.position = Position::Delivered {
            point: Arc::clone(point),
            since: *since,
            at: *at,
            confirmed: *own_address == Some(true),
        };
        true
    }

    /// The namespace and address it was delivered to.
    pub fn delivered_to(&self) -> Option<(&Namespace, SocketAddr)> {
        match &self.position {
            Position::Delivered { point, at, .. } => Some((point.enters.as_ref()?, (*at).into())),
            _ => None,
        }
    }

    /// Where it was delivered without evidence that the namespace holds the address: a
    /// question that may have been routed on or dropped there, unseen.
    pub fn unconfirmed_delivery(&self) -> Option<Unconfirmed> {
        match &self.position {
            Position::Delivered {
                point,
                at,
                confirmed: false,
                ..
            } => Some(Unconfirmed {
                namespace: point.enters.clone()?,
                at: (*at).into(),
                why: Unconfirmable::AddressNotShown,
            }),
            _ => None,
        }
    }

    /// Whether it was sent no later than `delay` after `parent` was delivered.
    pub fn sent_within(&self, delay: Duration, parent: &Flight) -> bool {
        let Position::Delivered { since, .. } = parent.position else {
            return false;
        };
        self.started()
            .duration_since(since)
            .is_ok_and(|gap| gap <= delay)
    }

    /// Whether the namespace it sits in, delivered or not yet decided, is `namespace`.
    pub fn is_in(&self, namespace: &Namespace) -> bool {
        match &self.position {
            Position::Entered { point, .. } | Position::Delivered { point, .. } => {
                point.enters.as_ref() == Some(namespace)
            }
            Position::Stranded | Position::Outside { .. } => false,
        }
    }

    /// Whether it never left `namespace`: every hop was on that namespace's loopback.
    pub fn stayed_in(&self, namespace: &Namespace) -> bool {
        self.origin() == Some(namespace)
            && self
                .hops
                .iter()
                .all(|hop| hop.point.enters.as_ref() == Some(namespace))
    }

    /// Whether its sender meant to send it on: a forward of a query it received, or a loop
    /// probe. Only such a query going round proves a loop; a client asking again does not.
    pub fn is_forward_or_probe(&self) -> bool {
        self.parent.is_some() || self.probe != Probe::None
    }

    /// The hop where it left the watched namespaces for good, if it did: its last sighting
    /// went from a namespace into an unwatched side and nothing saw it again. Off the node,
    /// unless it is a bridge transit whose next sighting is still to come.
    pub fn departure(&self) -> Option<&Sighting> {
        let Position::Outside { .. } = self.position else {
            return None;
        };
        self.hops
            .last()
            .filter(|hop| hop.point.leaves.is_some() && hop.point.enters.is_none())
    }

    /// Whether it came onto the node from an unwatched side as the return of a question this
    /// node sent off (see `ForwardingLoops::returning`): its parent is that query.
    pub fn came_back(&self) -> bool {
        self.origin().is_none() && self.parent.is_some()
    }
}
