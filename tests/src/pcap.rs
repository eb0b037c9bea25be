//! Packet captures to a pcap file with tcpdump inside a lab namespace, for tools that read pcap
//! (tshark). [`crate::lab::Capture`] keeps tcpdump's text lines instead.
use std::{
    io::{self, BufRead, BufReader},
    path::Path,
    process::{Child, ExitStatus},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::lab::Lab;

const START_TIMEOUT: Duration = Duration::from_secs(5);
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);
/// What tcpdump prints on stderr once it is capturing.
const LISTENING: &str = "listening on";

/// A running `tcpdump -w`. [`PcapCapture::stop`] ends it; dropping it stops it too.
pub struct PcapCapture {
    child: Child,
    /// tcpdump's stderr lines, read on their own thread so that its pipe never fills.
    messages: mpsc::Receiver<String>,
}

impl PcapCapture {
    /// Starts capturing the packets of `interface` in `lab`'s namespace `ns` that match the pcap
    /// `filter` into `file`, and returns once tcpdump captures.
    pub fn start(lab: &Lab, ns: &str, interface: &str, filter: &str, file: &Path) -> Result<Self> {
        let file_arg = file
            .to_str()
            .context("the capture file's path is not UTF-8")?;
        // -n: no name lookups (they would be DNS traffic). --immediate-mode: packets are not
        // held in the kernel's buffer, where SIGINT would leave them. -U: each packet is written
        // as it arrives. -Z root: Debian's tcpdump drops to its own user, which could not write
        // into the lab's state directory.
        let argv = [
            "tcpdump",
            "-n",
            "--immediate-mode",
            "-U",
            "-Z",
            "root",
            "-i",
            interface,
            "-w",
            file_arg,
            filter,
        ];
        let mut child = lab.spawn(ns, &argv)?;
        let stderr = child.stderr.take().context("tcpdump has no stderr pipe")?;
        let (sender, messages) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut capture = PcapCapture { child, messages };
        capture.wait_until_listening()?;
        Ok(capture)
    }

    fn wait_until_listening(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut said = String::new();
        while Instant::now() < deadline {
            match self.messages.recv_timeout(POLL) {
                Ok(line) if line.contains(LISTENING) => return Ok(()),
                Ok(line) => said.push_str(&line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        bail!("tcpdump did not start capturing within {START_TIMEOUT:?}: {said}")
    }

    /// Stops tcpdump with SIGINT, as a person would, so that it writes out what it holds;
    /// fails unless it then exits cleanly.
    pub fn stop(mut self) -> Result<()> {
        let status = self.end().context("waiting for tcpdump")?;
        if !status.success() {
            let said: Vec<String> = self.messages.try_iter().collect();
            bail!("tcpdump exited with {status}: {}", said.join("\n"));
        }
        Ok(())
    }

    fn end(&mut self) -> io::Result<ExitStatus> {
        if self.child.try_wait()?.is_none() {
            // SAFETY: signalling our own child by its PID (`ip netns exec` execs tcpdump).
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while self.child.try_wait()?.is_none() && Instant::now() < deadline {
            thread::sleep(POLL);
        }
        if self.child.try_wait()?.is_none() {
            self.child.kill()?;
        }
        self.child.wait()
    }
}

impl Drop for PcapCapture {
    fn drop(&mut self) {
        // Ends tcpdump if `stop` was not called; after `stop` this only reaps it again.
        let _ = self.end();
    }
}
