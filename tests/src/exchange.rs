//! DNS exchanges made with dig from the lab's client pod, as dig itself reports them (`+qr`):
//! what the tests hold dnsloop's and tshark's views of the same packets against.
use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    sync::atomic::{AtomicU16, Ordering},
};

use anyhow::{bail, Context as _, Result};
use dnsloop_core::{observation::Transport, present::names::Names, DnsName};

use crate::lab::{dns_server, Lab, Pod};
use crate::or_fail::OrFail as _;

/// Source ports handed to exchanges, one each: a client address then names one exchange's
/// packets alone. Above the ephemeral range (32768-60999) nothing else in the pod takes them.
static NEXT_CLIENT_PORT: AtomicU16 = AtomicU16::new(61_000);

/// A question for dig to send from the client pod.
#[derive(Clone, Debug)]
pub struct Query {
    pub server: IpAddr,
    pub qname: DnsName,
    /// A type mnemonic (`A`, `HINFO`).
    pub qtype: &'static str,
    pub transport: Transport,
}

impl Query {
    /// A query for `qname`, its labels as bytes between dots, with no escapes
    /// (`"bell\x07.example.test"`).
    ///
    /// # Panics
    ///
    /// If `qname` is not a DNS name (a label empty or longer than 63 bytes, or the name longer
    /// than 255).
    pub fn udp(server: impl Into<IpAddr>, qname: &str, qtype: &'static str) -> Query {
        Query {
            server: server.into(),
            qname: wire_name(qname),
            qtype,
            transport: Transport::Udp,
        }
    }

    pub fn tcp(server: impl Into<IpAddr>, qname: &str, qtype: &'static str) -> Query {
        Query {
            transport: Transport::Tcp,
            ..Query::udp(server, qname, qtype)
        }
    }

    /// The name as dnsloop prints it, and as dig takes and prints it: case as sent, `\DDD` and
    /// `\.` escapes, a trailing dot.
    pub fn presented_qname(&self) -> String {
        self.qname.presented(&Names::AsSent)
    }

    /// Sends the query with dig from the client pod, from a source port of its own, and
    /// returns what dig reports. Fails if no reply came.
    pub fn send(&self, lab: &Lab) -> Result<Exchange> {
        let client_ip = match self.server {
            IpAddr::V4(_) => IpAddr::V4(Pod::Client.ip()),
            IpAddr::V6(_) => IpAddr::V6(Pod::Client.ip6()),
        };
        let client = SocketAddr::new(client_ip, NEXT_CLIENT_PORT.fetch_add(1, Ordering::Relaxed));
        let bind = format!("{client_ip}#{}", client.port());
        let transport = match self.transport {
            Transport::Udp => "+notcp",
            Transport::Tcp => "+tcp",
        };
        let qname = self.presented_qname();
        let args = ["+qr", transport, "-b", &bind, &qname, self.qtype];
        let outcome = lab.dig(Pod::Client, &self.server.to_string(), &args)?;
        let report = DigReport::parse(&outcome.stdout)
            .with_context(|| format!("dig {}:\n{}", args.join(" "), outcome.stdout))?;
        Ok(Exchange {
            query: self.clone(),
            client,
            server: dns_server(self.server),
            report,
        })
    }
}

fn wire_name(qname: &str) -> DnsName {
    let mut wire = Vec::new();
    for label in qname.trim_end_matches('.').split('.') {
        wire.push(u8::try_from(label.len()).unwrap_or(u8::MAX));
        wire.extend_from_slice(label.as_bytes());
    }
    wire.push(0);
    DnsName::from_wire(&wire).or_fail(format_args!("{qname:?} is not a DNS name"))
}

/// A query dig sent and the reply it got.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub query: Query,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub report: DigReport,
}

impl fmt::Display for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} over {} from {} to {} (id {})",
            self.query.presented_qname(),
            self.query.qtype,
            self.query.transport.as_str(),
            self.client,
            self.server,
            self.report.id
        )
    }
}

/// What `dig +qr` prints about an exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigReport {
    /// The query's ID, which its reply carries too.
    pub id: u16,
    /// Bytes of the query's DNS message.
    pub query_size: usize,
    /// The reply's response code (`NOERROR`, `NXDOMAIN`, ...).
    pub rcode: String,
    /// Bytes of the reply's DNS message.
    pub reply_size: usize,
}

impl DigReport {
    /// Reads dig's output: the query it sent (`;; Sending:`), then the reply (`;; Got answer:`).
    fn parse(stdout: &str) -> Result<DigReport> {
        let (sent, answer) = stdout
            .split_once(";; Got answer:")
            .context("no reply arrived")?;
        let (query_id, _) = header(sent).context("no query header")?;
        let (id, rcode) = header(answer).context("no reply header")?;
        if id != query_id {
            bail!("the reply's id {id} is not the query's {query_id}");
        }
        Ok(DigReport {
            id,
            query_size: size_after(sent, ";; QUERY SIZE:").context("no query size")?,
            rcode,
            reply_size: size_after(answer, ";; MSG SIZE  rcvd:").context("no reply size")?,
        })
    }
}

/// The id and status of the first `;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 18623`.
fn header(text: &str) -> Option<(u16, String)> {
    let line = text.lines().find(|line| line.contains("->>HEADER<<-"))?;
    let status = line.split("status: ").nth(1)?.split(',').next()?;
    let id = line.split("id: ").nth(1)?.trim().parse().ok()?;
    Some((id, status.to_owned()))
}

/// The number after the first line starting with `label`.
fn size_after(text: &str, label: &str) -> Option<usize> {
    text.lines()
        .find_map(|line| line.strip_prefix(label))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_query_and_the_reply() {
        let stdout = "\
; <<>> DiG 9.18.49 <<>> +tries=1 +timeout=1 @169.254.25.10 +qr WwW.ExAmPlE.TeSt
;; Sending:
;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 18623
;; flags: rd ad; QUERY: 1, ANSWER: 0, AUTHORITY: 0, ADDITIONAL: 1

;; QUESTION SECTION:
;WwW.ExAmPlE.TeSt.\t\tIN\tA

;; QUERY SIZE: 57

;; Got answer:
;; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN, id: 18623
;; flags: qr aa rd ra; QUERY: 1, ANSWER: 1, AUTHORITY: 0, ADDITIONAL: 1

;; MSG SIZE  rcvd: 61
";
        assert_eq!(
            DigReport::parse(stdout).unwrap(),
            DigReport {
                id: 18623,
                query_size: 57,
                rcode: "NXDOMAIN".into(),
                reply_size: 61,
            }
        );
    }

    #[test]
    fn a_query_without_a_reply_is_an_error() {
        let stdout = ";; Sending:\n;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1\n\
                      ;; QUERY SIZE: 57\n;; communications error: timed out\n";
        assert!(DigReport::parse(stdout).is_err());
    }

    #[test]
    fn names_are_presented_as_dig_writes_them() {
        let query = Query::udp([10, 0, 0, 1], "a\x07b.Test", "A");
        assert_eq!(query.presented_qname(), "a\\007b.Test.");
        let rooted = Query::udp([10, 0, 0, 1], "a.test.", "A");
        assert_eq!(rooted.presented_qname(), "a.test.");
    }

    #[test]
    #[should_panic(expected = "is not a DNS name")]
    fn an_empty_label_is_no_name() {
        Query::udp([10, 0, 0, 1], "a..test", "A");
    }
}
