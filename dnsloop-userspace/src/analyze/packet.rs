//! How the analyzers recognise one question, and one DNS message, at every hop it crosses.
use crate::observation::{FoldedName, Observation, Question, Transport};

/// A question as resolvers compare them: the name without regard to ASCII case, type and class.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QuestionKey {
    folded_name: FoldedName,
    qtype: u16,
    qclass: u16,
}

impl QuestionKey {
    pub fn of(question: &Question) -> Self {
        Self {
            folded_name: question.name.folded().clone(),
            qtype: question.qtype,
            qclass: question.qclass,
        }
    }
}

/// What stays the same about one query, and the replies to it, as it crosses the node: DNAT
/// rewrites the destination and SNAT the source address, but the question, the id, the client's
/// port and the transport survive every routing and NAT hop. A forwarder's own query to its
/// upstream has a new id and port, so it is a different message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MessageKey {
    pub question: QuestionKey,
    pub id: u16,
    pub client_port: u16,
    pub transport: Transport,
}

impl MessageKey {
    /// The key of a query, or of the reply to it; `None` for a message without a question.
    pub fn of(obs: &Observation) -> Option<Self> {
        let question = obs.question.as_ref()?;
        let client = if obs.is_response { obs.dst } else { obs.src };
        Some(Self {
            question: QuestionKey::of(question),
            id: obs.id,
            client_port: client.port(),
            transport: obs.transport,
        })
    }
}
