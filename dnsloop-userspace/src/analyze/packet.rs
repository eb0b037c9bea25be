//! How the analyzers recognise one question, and one DNS message, at every hop it crosses.
//!
//! Each packet is looked up by these keys in a dozen tables, so a key is hashed once, when
//! made, and the tables use that hash (`table::FastHash`). The keys come off the wire: the hash
//! is SipHash with a random key of this process's, as the tables' own hashing would be.
use std::{
    hash::{BuildHasher, Hash, Hasher, RandomState},
    sync::LazyLock,
};

use crate::observation::{FoldedName, Observation, Question, Transport};

/// The key of every key's hash, drawn once per process.
static KEY_HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// A question as resolvers compare them: the name without regard to ASCII case, type and class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuestionKey {
    folded_name: FoldedName,
    qtype: u16,
    qclass: u16,
    hash: u64,
}

impl QuestionKey {
    pub fn of(question: &Question) -> Self {
        let folded_name = question.name.folded().clone();
        Self {
            hash: KEY_HASHER.hash_one((&folded_name, question.qtype, question.qclass)),
            folded_name,
            qtype: question.qtype,
            qclass: question.qclass,
        }
    }
}

impl Hash for QuestionKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// What stays the same about one query, and the replies to it, as it crosses the node: DNAT
/// rewrites the destination and SNAT the source address, but the question, the id, the client's
/// port and the transport survive every routing and NAT hop. A forwarder's own query to its
/// upstream has a new id and port, so it is a different message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageKey {
    pub question: QuestionKey,
    pub id: u16,
    pub client_port: u16,
    pub transport: Transport,
    hash: u64,
}

impl Hash for MessageKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl MessageKey {
    /// The key of a query, or of the reply to it; `None` for a message without a question.
    pub fn of(obs: &Observation) -> Option<Self> {
        let question = obs.question.as_ref()?;
        let client = if obs.is_response { obs.dst } else { obs.src };
        let question = QuestionKey::of(question);
        Some(Self {
            hash: KEY_HASHER.hash_one((question.hash, obs.id, client.port(), obs.transport)),
            question,
            id: obs.id,
            client_port: client.port(),
            transport: obs.transport,
        })
    }
}
