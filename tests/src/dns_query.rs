//! Hand-made DNS traffic inside a lab namespace, for what dig cannot make: one query sent twice
//! from one socket with one id, as a stub resolver retries; A and AAAA at once from one socket,
//! as glibc asks, or from two CPUs at the same instant to race in conntrack; a burst of queries
//! sent without waiting; a server that never reads its socket.
use std::{
    net::{SocketAddr, UdpSocket},
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Barrier, RwLock,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::in_netns;

const QTYPE_A: u16 = 1;
const QTYPE_AAAA: u16 = 28;
const QCLASS_IN: u16 = 1;
/// Recursion desired, as every stub resolver sets it.
const FLAGS_RD: u16 = 0x0100;
/// How long to wait for the replies once both copies are sent.
const REPLY_WAIT: Duration = Duration::from_secs(1);

/// Sends the same `A` query for `name` (same id, same source port) twice, `gap` apart, to
/// `server` from the network namespace mounted at `netns`, and returns how many replies with
/// that id came back within a second (a server may answer each copy, or fold the two). A gap of
/// a second is how glibc retries an unanswered query.
pub fn send_twice(
    netns: &Path,
    server: SocketAddr,
    name: &str,
    id: u16,
    gap: Duration,
) -> Result<usize> {
    let query = query(id, name, QTYPE_A)?;
    in_netns::run(netns, || -> Result<usize> {
        let socket = UdpSocket::bind(unspecified_for(server)).context("binding a UDP socket")?;
        socket.set_read_timeout(Some(REPLY_WAIT))?;
        for copy in 0..2 {
            if copy > 0 {
                thread::sleep(gap);
            }
            socket
                .send_to(&query, server)
                .with_context(|| format!("sending to {server}"))?;
        }
        let mut replies = 0;
        let mut buffer = [0u8; 1500];
        while replies < 2 {
            match socket.recv_from(&mut buffer) {
                Ok((len, _)) if len >= 2 && buffer[..2] == id.to_be_bytes() => replies += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        Ok(replies)
    })
    .with_context(|| format!("entering the namespace at {}", netns.display()))?
}

/// Sends `A` and `AAAA` queries for `name` to `server` back to back from one socket (ids `id`
/// and `id + 1`), as glibc's resolver does unless told `single-request`, and returns how many
/// of the two were answered within a second.
pub fn send_a_and_aaaa(netns: &Path, server: SocketAddr, name: &str, id: u16) -> Result<usize> {
    let ids = [id, id.wrapping_add(1)];
    let queries = [
        query(ids[0], name, QTYPE_A)?,
        query(ids[1], name, QTYPE_AAAA)?,
    ];
    in_netns::run(netns, || -> Result<usize> {
        let socket = UdpSocket::bind(unspecified_for(server)).context("binding a UDP socket")?;
        socket.set_read_timeout(Some(REPLY_WAIT))?;
        for query in &queries {
            socket
                .send_to(query, server)
                .with_context(|| format!("sending to {server}"))?;
        }
        let mut answered = [false; 2];
        let mut buffer = [0u8; 1500];
        while answered.contains(&false) {
            let Ok((len, _)) = socket.recv_from(&mut buffer) else {
                break;
            };
            for (slot, id) in answered.iter_mut().zip(ids) {
                *slot |= len >= 2 && buffer[..2] == id.to_be_bytes();
            }
        }
        Ok(answered.iter().filter(|&&answered| answered).count())
    })
    .with_context(|| format!("entering the namespace at {}", netns.display()))?
}

/// Asks `server` for `name` from port `port` in the namespace at `netns`, runs `between`, then
/// asks again on the same socket (the same flow, as a resolver keeping its socket does), and
/// returns whether each was answered within a second.
pub fn ask_around<T: Send>(
    netns: &Path,
    server: SocketAddr,
    name: &str,
    port: u16,
    between: impl FnOnce() -> T + Send,
) -> Result<(bool, T, bool)> {
    let queries = [query(0x6e01, name, QTYPE_A)?, query(0x6e02, name, QTYPE_A)?];
    in_netns::run(netns, || -> Result<(bool, T, bool)> {
        let local = SocketAddr::new(unspecified_for(server).ip(), port);
        let socket = UdpSocket::bind(local).with_context(|| format!("binding {local}"))?;
        socket.set_read_timeout(Some(REPLY_WAIT))?;
        let mut buffer = [0u8; 1500];
        let mut ask = |query: &[u8]| -> Result<bool> {
            socket
                .send_to(query, server)
                .with_context(|| format!("sending to {server}"))?;
            Ok(socket
                .recv_from(&mut buffer)
                .is_ok_and(|(len, _)| len >= 2 && buffer[..2] == query[..2]))
        };
        let first = ask(&queries[0])?;
        let meanwhile = between();
        let second = ask(&queries[1])?;
        Ok((first, meanwhile, second))
    })
    .with_context(|| format!("entering the namespace at {}", netns.display()))?
}

/// How long a raced pair waits for its answers before the next pair: CoreDNS in the lab answers
/// in well under a millisecond.
const RACE_REPLY_WAIT: Duration = Duration::from_millis(100);

/// Sends up to `pairs` pairs of `A` and `AAAA` queries for `name` to `server` from the
/// namespace at `netns`, each pair from a new connected socket, its two queries sent by two
/// threads pinned to CPUs 0 and 1 at the same instant: the race in conntrack of two packets of
/// one new flow that glibc's parallel queries make. Stops after `pairs` or at `deadline`,
/// whichever comes first; returns the pairs sent.
pub fn race_a_and_aaaa(
    netns: &Path,
    server: SocketAddr,
    name: &str,
    pairs: u32,
    deadline: Duration,
) -> Result<u32> {
    let queries = [
        query(0x5a00, name, QTYPE_A)?,
        query(0x5a01, name, QTYPE_AAAA)?,
    ];
    let end = Instant::now() + deadline;
    // Three parties: the two racers and the thread in the namespace, which opens each pair's
    // socket, or sets `stop` once the pairs are sent or the deadline has passed.
    let start = Barrier::new(3);
    let sent = Barrier::new(3);
    let stop = AtomicBool::new(false);
    let pair_socket: RwLock<Option<UdpSocket>> = RwLock::new(None);
    thread::scope(|scope| -> Result<u32> {
        let racers: Vec<_> = (0..2)
            .map(|cpu| {
                let (start, sent, stop, pair_socket) = (&start, &sent, &stop, &pair_socket);
                let query = &queries[cpu];
                scope.spawn(move || -> Result<()> {
                    let pinned = pin_to_cpu(cpu);
                    loop {
                        start.wait();
                        if stop.load(Ordering::Relaxed) {
                            return pinned;
                        }
                        if pinned.is_ok() {
                            if let Some(socket) =
                                &*pair_socket.read().unwrap_or_else(|e| e.into_inner())
                            {
                                let _ = socket.send(query);
                            }
                        }
                        sent.wait();
                    }
                })
            })
            .collect();
        let raced = in_netns::run(netns, || -> Result<u32> {
            let mut buffer = [0u8; 1500];
            let mut done = 0;
            while done < pairs && Instant::now() < end {
                let socket = UdpSocket::bind(unspecified_for(server))?;
                socket.connect(server)?;
                socket.set_read_timeout(Some(RACE_REPLY_WAIT))?;
                *pair_socket.write().unwrap_or_else(|e| e.into_inner()) = Some(socket);
                start.wait();
                sent.wait();
                done += 1;
                if let Some(socket) = &*pair_socket.read().unwrap_or_else(|e| e.into_inner()) {
                    for _ in 0..2 {
                        if socket.recv(&mut buffer).is_err() {
                            break;
                        }
                    }
                }
            }
            Ok(done)
        });
        stop.store(true, Ordering::Relaxed);
        start.wait();
        for racer in racers {
            racer
                .join()
                .map_err(|_| anyhow::anyhow!("a racing thread panicked"))??;
        }
        raced.with_context(|| format!("entering the namespace at {}", netns.display()))?
    })
}

/// Keeps the calling thread on CPU `cpu`.
fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes within the set; `cpu` is 0 or 1, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size given; 0 is this thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        return Err(std::io::Error::last_os_error())
            .context(format!("pinning a thread to CPU {cpu}"));
    }
    Ok(())
}

/// Sends `count` `A` queries for `name` to `server` from one socket in the namespace at
/// `netns`, ids from `first_id` on, without waiting for replies (none are read).
pub fn send_burst(
    netns: &Path,
    server: SocketAddr,
    name: &str,
    first_id: u16,
    count: u16,
) -> Result<()> {
    let queries = (0..count)
        .map(|offset| query(first_id.wrapping_add(offset), name, QTYPE_A))
        .collect::<Result<Vec<_>>>()?;
    in_netns::run(netns, || -> Result<()> {
        let socket = UdpSocket::bind(unspecified_for(server)).context("binding a UDP socket")?;
        for query in &queries {
            socket
                .send_to(query, server)
                .with_context(|| format!("sending to {server}"))?;
        }
        Ok(())
    })
    .with_context(|| format!("entering the namespace at {}", netns.display()))?
}

/// A UDP socket bound to `address` in the namespace at `netns` with a receive buffer of
/// `buffer_bytes` (the kernel doubles it, and keeps a floor), which nobody reads: a DNS server
/// stuck, whose buffer fills with the first queries and drops the rest. Closed when dropped.
pub fn stuck_server(netns: &Path, address: SocketAddr, buffer_bytes: i32) -> Result<UdpSocket> {
    in_netns::run(netns, || -> Result<UdpSocket> {
        let socket = UdpSocket::bind(address).with_context(|| format!("binding {address}"))?;
        // SAFETY: a valid socket and a pointer to an int of the size given.
        let set = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&socket),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&buffer_bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if set != 0 {
            return Err(std::io::Error::last_os_error()).context("setting SO_RCVBUF");
        }
        Ok(socket)
    })
    .with_context(|| format!("entering the namespace at {}", netns.display()))?
}

/// The unspecified address of `server`'s family, any port.
fn unspecified_for(server: SocketAddr) -> SocketAddr {
    if server.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    }
}

/// A standard query with recursion desired for `name` (dotted, trailing dot optional) of type
/// `qtype`.
fn query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>> {
    let mut message = Vec::with_capacity(17 + name.len());
    message.extend_from_slice(&id.to_be_bytes());
    message.extend_from_slice(&FLAGS_RD.to_be_bytes());
    // One question; no answer, authority or additional records.
    message.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|label| !label.is_empty()) {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|&len| len <= 63)
            .with_context(|| format!("label `{label}` is too long"))?;
        message.push(len);
        message.extend_from_slice(label.as_bytes());
    }
    message.push(0);
    message.extend_from_slice(&qtype.to_be_bytes());
    message.extend_from_slice(&QCLASS_IN.to_be_bytes());
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_wire_form_of_a_query() {
        let built = query(0x1234, "api.default.", QTYPE_A).expect("valid name");
        assert_eq!(
            built,
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\
              \x03api\x07default\x00\x00\x01\x00\x01"
        );
        assert!(query(1, &"x".repeat(64), QTYPE_A).is_err());
    }
}
