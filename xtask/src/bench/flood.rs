//! The non-DNS flood: UDP datagrams from one sender in a pod's namespace to a port nothing
//! listens on, as fast as the sender goes, a fixed number of them. On a busy node most packets
//! are not DNS and arrive close together; the fixed load's other packets come a few thousand a
//! second, each to caches the rest of the node has emptied meanwhile.
use std::{
    net::{SocketAddr, UdpSocket},
    path::PathBuf,
    thread,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context as _, Result};

use super::namespace;

/// Datagrams per flood: a few seconds of one sender here, and then it stops by itself.
pub const DATAGRAMS: u64 = 1_000_000;
/// Small, as most packets of a flood of requests are.
const PAYLOAD: [u8; 32] = [0x5a; 32];

/// Sends `DATAGRAMS` datagrams from the namespace mounted at `netns` to `target`; returns how
/// long it took.
pub fn run(netns: PathBuf, target: SocketAddr) -> Result<Duration> {
    thread::spawn(move || -> Result<Duration> {
        namespace::enter(&netns)?;
        let socket = UdpSocket::bind("0.0.0.0:0").context("binding the flood's socket")?;
        let started = Instant::now();
        for _ in 0..DATAGRAMS {
            // The port's ICMP errors come back as errors of later sends: they are expected.
            let _ = socket.send_to(&PAYLOAD, target);
        }
        Ok(started.elapsed())
    })
    .join()
    .map_err(|_| anyhow!("the flood's thread panicked"))?
}
