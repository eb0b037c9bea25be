//! The newest flight of each message, to attach its next sighting to.
//!
//! Indexed by the message's key without keeping it: the flight holds it, and a storm keeps tens
//! of thousands of flights, each key 48 bytes.
use std::hash::{BuildHasher, Hash, Hasher};

use hashlink::{linked_hash_map::RawEntryMut, LinkedHashMap};

use super::flight::{FlightId, Flights};
use crate::analyzers::{packet::MessageKey, table::FastHash};

/// A table like `Table`: at most `capacity` flights, the stalest evicted (and counted) to make
/// room for a new message's, each entry refreshed when its message takes a new flight.
pub struct LatestFlights {
    entries: LinkedHashMap<Latest, (), FastHash>,
    capacity: usize,
    evictions: u64,
}

/// A flight, hashed as its message key is: an entry is found by the hash, then told apart by
/// the key its flight holds.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Latest {
    message_hash: u64,
    flight: FlightId,
}

impl Hash for Latest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.message_hash);
    }
}

impl LatestFlights {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: LinkedHashMap::with_hasher(FastHash::default()),
            capacity: capacity.max(1),
            evictions: 0,
        }
    }

    /// The newest flight of `message`, while it is among `flights`.
    pub fn get(&self, message: &MessageKey, flights: &Flights) -> Option<FlightId> {
        self.entries
            .raw_entry()
            .from_hash(self.hash(message), is_of(message, flights))
            .map(|(latest, ())| latest.flight)
    }

    /// Makes `flight` the newest of `message`, and the freshest entry.
    pub fn insert(&mut self, message: &MessageKey, flight: FlightId, flights: &Flights) {
        let hash = self.hash(message);
        let latest = Latest {
            message_hash: message.hash_value(),
            flight,
        };
        if let RawEntryMut::Occupied(mut newest) = self
            .entries
            .raw_entry_mut()
            .from_hash(hash, is_of(message, flights))
        {
            newest.replace_key(latest);
            newest.to_back();
            return;
        }
        if self.entries.len() >= self.capacity {
            self.evictions += 1;
            self.entries.pop_front();
        }
        self.entries.insert(latest, ());
    }

    /// Forgets `flight`, if it is still the newest of `message`.
    pub fn forget(&mut self, message: &MessageKey, flight: FlightId) {
        self.entries.remove(&Latest {
            message_hash: message.hash_value(),
            flight,
        });
    }

    /// Forgets the stalest entries whose flights are no longer among `flights` (evicted from
    /// them when full), up to the first whose flight is.
    pub fn forget_stalest_gone(&mut self, flights: &Flights) {
        while let Some((latest, ())) = self.entries.front() {
            if flights.get(&latest.flight).is_some() {
                break;
            }
            self.entries.pop_front();
        }
    }

    /// How many entries were dropped to make room.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn hash(&self, message: &MessageKey) -> u64 {
        self.entries.hasher().hash_one(message)
    }
}

/// Whether an entry is `message`'s: its flight, among `flights`, is of `message`.
fn is_of<'a>(message: &'a MessageKey, flights: &'a Flights) -> impl Fn(&Latest) -> bool + 'a {
    move |latest| {
        latest.message_hash == message.hash_value()
            && flights
                .get(&latest.flight)
                .is_some_and(|flight| flight.message == *message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analyzers::forwarding_loop::flight::Flight, observation::Observation,
        testkit::observations::*,
    };

    fn follow(flights: &mut Flights, id: u64, obs: &Observation) -> (MessageKey, FlightId) {
        let message = MessageKey::of(obs).expect("a question");
        let id = FlightId::new(id).expect("not zero");
        let question = obs.question.clone().expect("a question");
        flights.insert(id, Flight::start(message.clone(), question, obs));
        (message, id)
    }

    #[test]
    fn a_message_s_new_flight_replaces_its_last_and_others_stay_apart() {
        let mut flights = Flights::with_hasher(8);
        let mut latest = LatestFlights::new(8);
        let (message, first) = follow(&mut flights, 1, &client_asks(7, 0));
        let (other, other_flight) = follow(&mut flights, 2, &client_asks(8, 0));
        latest.insert(&message, first, &flights);
        latest.insert(&other, other_flight, &flights);
        let (_, second) = follow(&mut flights, 3, &client_asks(7, 10));
        latest.insert(&message, second, &flights);
        assert_eq!(latest.get(&message, &flights), Some(second));
        assert_eq!(latest.get(&other, &flights), Some(other_flight));
        latest.forget(&message, first);
        assert_eq!(
            latest.get(&message, &flights),
            Some(second),
            "not its newest"
        );
        latest.forget(&message, second);
        assert_eq!(latest.get(&message, &flights), None);
        assert_eq!(latest.evictions(), 0);
    }

    #[test]
    fn a_full_index_evicts_the_stalest_and_forgets_flights_gone() {
        let mut flights = Flights::with_hasher(8);
        let mut latest = LatestFlights::new(2);
        let followed: Vec<_> = (1..=3)
            .map(|id| follow(&mut flights, id, &client_asks(id as u16, 0)))
            .collect();
        for (message, id) in &followed {
            latest.insert(message, *id, &flights);
        }
        assert_eq!(latest.evictions(), 1);
        assert_eq!(latest.get(&followed[0].0, &flights), None);
        flights.remove(&followed[1].1);
        latest.forget_stalest_gone(&flights);
        assert_eq!(latest.entries.len(), 1);
        assert_eq!(latest.get(&followed[2].0, &flights), Some(followed[2].1));
    }
}
