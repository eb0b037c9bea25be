//! The newest flight of each message, to attach its next sighting to.
//!
//! Indexed by the hash of the message's key without keeping the key: the flight holds it, and
//! a storm keeps tens of thousands of flights, each key 48 bytes.
use super::flight::{Flight, FlightId, Flights};
use crate::analyzers::{
    packet::MessageKey,
    table::{FastHash, Table},
};

/// At most `capacity` flights, the stalest evicted (and counted) to make room for a new
/// message's, each entry refreshed when its message takes a new flight.
pub struct LatestFlights {
    /// By the keyed hash of the message's key (`MessageKey::hash_value`), and told apart by
    /// the key the flight holds. Two messages followed at once whose keys hash alike, which 64
    /// bits make all but impossible, share an entry: the later one's flight replaces the
    /// other's, as an eviction would.
    entries: Table<u64, FlightId, FastHash>,
}

impl LatestFlights {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Table::with_hasher(capacity),
        }
    }

    /// The newest flight of `message`, while it is among `flights`: found there to be told
    /// apart by its key, and handed back so that the caller need not look for it again.
    pub fn get<'f>(
        &self,
        message: &MessageKey,
        flights: &'f Flights,
    ) -> Option<(FlightId, &'f Flight)> {
        let id = *self.entries.get(&message.hash_value())?;
        let flight = flights
            .get(&id)
            .filter(|flight| flight.message == *message)?;
        Some((id, flight))
    }

    /// Makes `flight` the newest of `message`, and the freshest entry.
    pub fn insert(&mut self, message: &MessageKey, flight: FlightId) {
        self.entries.insert(message.hash_value(), flight);
    }

    /// Forgets `flight`, if it is still the newest of `message`.
    pub fn forget(&mut self, message: &MessageKey, flight: FlightId) {
        if self.entries.get(&message.hash_value()) == Some(&flight) {
            self.entries.remove(&message.hash_value());
        }
    }

    /// Forgets the stalest entries whose flights are no longer among `flights` (evicted from
    /// them when full), up to the first whose flight is.
    pub fn forget_stalest_gone(&mut self, flights: &Flights) {
        while self
            .entries
            .pop_stalest_if(|_, id| flights.get(id).is_none())
            .is_some()
        {}
    }

    /// How many entries were dropped to make room.
    pub fn evictions(&self) -> u64 {
        self.entries.evictions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{observation::Observation, testkit::observations::*};

    /// The id of `message`'s newest flight, as `get` finds it.
    fn newest(latest: &LatestFlights, message: &MessageKey, flights: &Flights) -> Option<FlightId> {
        latest.get(message, flights).map(|(id, _)| id)
    }

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
        latest.insert(&message, first);
        latest.insert(&other, other_flight);
        let (_, second) = follow(&mut flights, 3, &client_asks(7, 10));
        latest.insert(&message, second);
        assert_eq!(newest(&latest, &message, &flights), Some(second));
        assert_eq!(newest(&latest, &other, &flights), Some(other_flight));
        latest.forget(&message, first);
        assert_eq!(
            newest(&latest, &message, &flights),
            Some(second),
            "not its newest"
        );
        latest.forget(&message, second);
        assert_eq!(newest(&latest, &message, &flights), None);
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
            latest.insert(message, *id);
        }
        assert_eq!(latest.evictions(), 1);
        assert_eq!(newest(&latest, &followed[0].0, &flights), None);
        flights.remove(&followed[1].1);
        latest.forget_stalest_gone(&flights);
        assert_eq!(latest.entries.iter().count(), 1);
        assert_eq!(
            newest(&latest, &followed[2].0, &flights),
            Some(followed[2].1)
        );
    }
}
