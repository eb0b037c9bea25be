//! Deciding whether a delivered query closed a forwarding cycle.
use std::time::{Duration, SystemTime};

use dnsloop_shared::parse::Probe;

use super::flight::{Flight, FlightId, Flights};
use crate::observation::Namespace;

/// Chains are followed this many forwards up; real cycles are two or three forwards long.
const MAX_CHAIN: usize = 16;

/// A server forwarding to itself over loopback does so as soon as it has read the query; a
/// client on the same host asking the same question again first waits for its timeout.
const LOOPBACK_FORWARD_DELAY: Duration = Duration::from_millis(50);

/// When the question was last sent out of a namespace (a query leaving it for elsewhere).
pub trait SentOut {
    fn sent_out_since(&self, namespace: &Namespace, since: SystemTime) -> bool;
}

/// The forwards that brought a question back, in the order they were sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Cycle {
    pub flights: Vec<FlightId>,
    /// Rounds of the loop the chain shows: one, or two for a cycle through other nodes.
    pub rounds: u64,
}

/// Looks for the cycle that `arrival`, just delivered to namespace M, closes. Walking up its
/// chain of forwards (`arrival`, the query it was forwarded from, and so on):
///
/// - the question left M and comes back: some query of the chain was sent by M as a forward
///   (or a probe), and a hop since then was outside M. M will get it again and send it round
///   again; the cycle is that query down to `arrival`.
/// - the same, through other nodes: part of the cycle is out of sight, a query M sent off the
///   node and a question that came back onto it soon after (`Flight::came_back`). One such
///   round may be another node's client asking what M is asking its own upstream; two in one
///   chain, each the forward of the one before, are a loop.
/// - the question never left M (forwards over M's loopback) and comes back to an address it was
///   already delivered to in M. A single forward over loopback is no proof: a node cache
///   forwarding to systemd-resolved on 127.0.0.53 is a healthy chain. The same server twice is,
///   if the forwards were sent at once, or if nothing sent the question out of M in between: a
///   resolver behind the loopback address sends it on (and its client may well retry), while a
///   server that merges the copy it gets from itself (unbound) only sends it round again.
/// - a probe (`probe_origin` is the query that sent it) comes back to M, its sender's
///   namespace, from outside, even when the chain was broken by an unwatched resolver: probe
///   names are unique to their sender, so nothing but a loop brings one back.
pub fn find(
    flights: &Flights,
    arrival: FlightId,
    probe_origin: Option<FlightId>,
    sent_out: &impl SentOut,
) -> Option<Cycle> {
    let arrived = flights.get(&arrival)?;
    let (home, address) = arrived.delivered_to()?;
    // Since the chain began, has the question been sent out of M? A resolver behind a loopback
    // address sends it on at once; a server going round through itself never does. Asked only
    // of a chain back at the same server: nearly every delivery is not.
    let kept_in = || !sent_out.sent_out_since(home, chain_start(flights, arrived));
    let mut chain = Vec::new();
    // The cycle through other nodes found first, waiting for the round before it.
    let mut unconfirmed: Option<Vec<FlightId>> = None;
    let mut round_start = 0;
    let mut left_home = false;
    let mut forwarded_at_once = true;
    let mut child: Option<&Flight> = None;
    let mut next = Some(arrival);
    while let Some(id) = next.filter(|_| chain.len() < MAX_CHAIN) {
        let Some(flight) = flights.get(&id) else {
            break;
        };
        chain.push(id);
        left_home |= !flight.stayed_in(home);
        if let Some(child) = child {
            forwarded_at_once &= child.sent_within(LOOPBACK_FORWARD_DELAY, flight);
        }
        if left_home && flight.origin() == Some(home) && flight.is_forward_or_probe() {
            if let Some(cycle) = unconfirmed {
                return Some(Cycle::sent_in_order(cycle, 2));
            }
            let through_other_nodes = chain[round_start..]
                .iter()
                .any(|id| flights.get(id).is_some_and(Flight::came_back));
            // A probe's name is its sender's alone: one round is proof.
            if !through_other_nodes || flight.probe != Probe::None {
                return Some(Cycle::sent_in_order(chain, 1));
            }
            unconfirmed = Some(chain.clone());
            round_start = chain.len();
            left_home = false;
        }
        let back_at_the_same_server =
            chain.len() > 1 && flight.delivered_to() == Some((home, address));
        if unconfirmed.is_none()
            && !left_home
            && back_at_the_same_server
            && (forwarded_at_once || kept_in())
        {
            // The earlier arrival is where the cycle starts from, not one of its forwards.
            chain.pop();
            return Some(Cycle::sent_in_order(chain, 1));
        }
        child = Some(flight);
        next = flight.parent;
    }
    if unconfirmed.is_some() {
        return None;
    }
    let probe_id = probe_origin.filter(|id| !chain.contains(id))?;
    let probe = flights.get(&probe_id)?;
    let came_from_outside = !arrived.stayed_in(home);
    (probe.origin() == Some(home) && came_from_outside).then(|| {
        chain.push(probe_id);
        Cycle::sent_in_order(chain, 1)
    })
}

/// When the first query of `arrival`'s chain of forwards was sent.
fn chain_start(flights: &Flights, arrival: &Flight) -> SystemTime {
    let mut start = arrival.started();
    let mut next = arrival.parent;
    for _ in 0..MAX_CHAIN {
        let Some(flight) = next.and_then(|id| flights.get(&id)) else {
            break;
        };
        start = start.min(flight.started());
        next = flight.parent;
    }
    start
}

impl Cycle {
    /// `chain` runs from the arrival up to the first forward.
    fn sent_in_order(mut chain: Vec<FlightId>, rounds: u64) -> Self {
        chain.reverse();
        Self {
            flights: chain,
            rounds,
        }
    }
}
