//! How the analyzers recognise one question, and one DNS message, at every hop it crosses.
//!
//! Each packet is looked up by these keys in a dozen tables, so a key hashes as one number
//! made without hashing its name again, and the tables spread that number (`table::FastHash`).
//! The keys come off the wire, so that number derives from keyed hashes: a name's SipHash,
//! with a random key of this process's, made once when it is decoded (`FoldedName`); a
//! message's fields go to SipHash together, in one piece, as it costs by the piece.
use std::hash::{BuildHasher, Hash, Hasher};

use crate::observation::{
    DroppedMessage, FoldedName, Observation, Question, Transport, WIRE_HASHER,
};

/// A question as resolvers compare them: the name without regard to ASCII case, type and class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuestionKey {
    // Before the name, so that keys that differ in them are told apart without reading it.
    qtype: u16,
    qclass: u16,
    folded_name: FoldedName,
}

impl QuestionKey {
    pub fn of(question: &Question) -> Self {
        Self {
            qtype: question.qtype,
            qclass: question.qclass,
            folded_name: question.name.folded().clone(),
        }
    }

    /// The number the key hashes as: its name's keyed hash, which no packet can know, moved by
    /// its type and class (so one name's questions differ in it, in their 32 bits).
    fn hash_value(&self) -> u64 {
        self.folded_name.keyed_hash() ^ (u64::from(self.qtype) << 16 | u64::from(self.qclass))
    }
}

impl Hash for QuestionKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash_value());
    }
}

/// What stays the same about one query, and the replies to it, as it crosses the node: DNAT
/// rewrites the destination and SNAT the source address, but the question, the id, the client's
/// port and the transport survive every routing and NAT hop. A forwarder's own query to its
/// upstream has a new id and port, so it is a different message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageKey {
    // First, so that keys that differ are told apart by it.
    hash: u64,
    pub question: QuestionKey,
    pub id: u16,
    pub client_port: u16,
    pub transport: Transport,
}

impl Hash for MessageKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl MessageKey {
    /// The key of a query, or of the reply to it; `None` for a message without a question.
    pub fn of(obs: &Observation) -> Option<Self> {
        let client = if obs.is_response { obs.dst } else { obs.src };
        Some(Self::new(
            obs.question.as_ref()?,
            obs.id,
            client.port(),
            obs.transport,
        ))
    }

    /// The key of the message asking `question` with `id`, from the client's `client_port`.
    /// The key of the query dropped; `None` for a reply, or a message without a question.
    pub fn of_dropped_query(dropped: &DroppedMessage) -> Option<Self> {
        let question = dropped.question.as_ref().filter(|_| !dropped.is_response)?;
        Some(Self::new(
            question,
            dropped.id,
            dropped.src.port(),
            dropped.transport,
        ))
    }

    /// The key of the message dropped, a query or a reply; `None` for one without a question.
    pub fn of_dropped(dropped: &DroppedMessage) -> Option<Self> {
        let client = if dropped.is_response {
            dropped.dst
        } else {
            dropped.src
        };
        Some(Self::new(
            dropped.question.as_ref()?,
            dropped.id,
            client.port(),
            dropped.transport,
        ))
    }

    /// The one number the key hashes as: an index that keeps it in place of the key (to find
    /// the key itself elsewhere) hashes as the key does.
    pub fn hash_value(&self) -> u64 {
        self.hash
    }

    pub fn new(question: &Question, id: u16, client_port: u16, transport: Transport) -> Self {
        let question = QuestionKey::of(question);
        // Hashed as one number: SipHash costs by the piece written to it.
        let fields = u128::from(question.hash_value()) << 64
            | u128::from(id) << 32
            | u128::from(client_port) << 16
            | u128::from(transport == Transport::Tcp);
        Self {
            hash: WIRE_HASHER.hash_one(fields),
            question,
            id,
            client_port,
            transport,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;
    use crate::{analyzers::table::FastHash, testkit::observations::*};

    fn key(obs: &Observation) -> MessageKey {
        MessageKey::of(obs).expect("a question")
    }

    #[test]
    fn a_query_and_its_reply_in_any_case_share_a_key_and_its_hash() {
        let asked = key(&query("Www.Example.TEST.").id(7).seen(CLIENT_OUT));
        let answered = key(&reply("www.example.test.")
            .id(7)
            .from("169.254.25.10:53")
            .to("10.244.0.2:41234")
            .seen(CLIENT_IN));
        assert_eq!(asked, answered);
        let hash = |key: &MessageKey| FastHash::default().hash_one(key);
        assert_eq!(hash(&asked), hash(&answered));
    }

    #[test]
    fn type_id_port_and_transport_each_make_another_message() {
        let base = query("a.test.").id(7);
        let asked = key(&base.clone().seen(CLIENT_OUT));
        for other in [
            base.clone().qtype(TXT),
            base.clone().id(8),
            base.clone().from("10.244.0.2:41235"),
            base.clone().tcp(),
        ] {
            assert_ne!(key(&other.seen(CLIENT_OUT)), asked);
        }
        let other_name = key(&query("b.test.").id(7).seen(CLIENT_OUT));
        assert_ne!(other_name.question, asked.question);
    }
}
