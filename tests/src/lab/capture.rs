//! Packet captures with tcpdump inside a lab namespace: the evidence that a query really
//! travelled where a scenario says it does ([`Capture`], tcpdump's lines), and captures for
//! tools that read pcap, such as tshark ([`PcapCapture`]).
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use super::{ip_netns, process};

const START_TIMEOUT: Duration = Duration::from_secs(5);
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);
/// How many captured lines a failure shows.
const SHOWN_LINES: usize = 40;
/// What tcpdump prints on stderr once it is capturing.
const LISTENING: &str = "listening on";

/// A running `tcpdump -i INTERFACE FILTER`; the caller owns what it writes. [`Capture::stop`]
/// ends it and returns the packets it saw as lines; dropping it ends it too.
pub struct Capture {
    tcpdump: Tcpdump,
    /// tcpdump's stdout: one line per packet. Written to a file, not a pipe, so that a busy
    /// loop never blocks tcpdump on a full pipe.
    packets: PathBuf,
}

impl Capture {
    /// Starts capturing in `namespace`, writing to `<file_stem>.txt` and `<file_stem>.err`, and
    /// returns once tcpdump captures.
    pub(crate) fn start(
        namespace: &str,
        interface: &str,
        filter: &str,
        file_stem: PathBuf,
    ) -> Result<Capture> {
        let packets = file_stem.with_extension("txt");
        let stdout = fs::File::create(&packets)
            .with_context(|| format!("creating {}", packets.display()))?;
        // -l and --immediate-mode: every packet is printed as it arrives.
        let tcpdump = Tcpdump::start(
            namespace,
            &["-l", "--immediate-mode", "-i", interface, filter],
            stdout.into(),
            file_stem.with_extension("err"),
        )?;
        Ok(Capture { tcpdump, packets })
    }

    /// Waits until the packets captured so far, one line each, are what `enough` looks for;
    /// fails after `timeout` with what `enough` said was missing and the first lines
    /// captured. tcpdump prints each packet as it arrives (`-l`, `--immediate-mode`), so a
    /// storm is seen while it goes on.
    pub fn wait_for(
        &self,
        timeout: Duration,
        enough: impl Fn(&[String]) -> Result<(), String>,
    ) -> Result<()> {
        crate::wait::until(timeout, || {
            let text = fs::read_to_string(&self.packets).map_err(|error| error.to_string())?;
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            enough(&lines).map_err(|missing| {
                let first = lines.len().min(SHOWN_LINES);
                format!("{missing}; captured:\n{}", lines[..first].join("\n"))
            })
        })
        .map_err(|missing| anyhow::anyhow!("{missing}"))
    }

    /// Stops tcpdump (SIGINT, so it flushes) and returns one line per captured packet.
    pub fn stop(self) -> Result<Vec<String>> {
        self.tcpdump.stop()?;
        let packets = fs::read_to_string(&self.packets)
            .with_context(|| format!("reading {}", self.packets.display()))?;
        Ok(packets.lines().map(str::to_owned).collect())
    }
}

/// A running `tcpdump -w FILE`. [`PcapCapture::stop`] ends it so that the file is complete;
/// dropping it ends it too.
pub struct PcapCapture {
    tcpdump: Tcpdump,
}

impl PcapCapture {
    /// Starts capturing in `namespace` into `file` (tcpdump's messages beside it, `.err`), and
    /// returns once tcpdump captures.
    pub(crate) fn start(
        namespace: &str,
        interface: &str,
        link_type: Option<&str>,
        filter: &str,
        file: &Path,
    ) -> Result<PcapCapture> {
        let file_arg = file
            .to_str()
            .context("the capture file's path is not UTF-8")?;
        // -y: the link type to capture with (LINUX_SLL for `-i any` in cooked v1).
        let link_type: Vec<&str> = link_type.map(|name| vec!["-y", name]).unwrap_or_default();
        // --immediate-mode: packets are not held in the kernel's buffer, where SIGINT would
        // leave them. -U: each packet is written as it arrives. -s and -B: room for bursts:
        // each slot of tcpdump's ring is a snapshot long, and at the default (256 KiB) even a
        // 16 MiB ring held 64 packets, which two nodes' A and AAAA races overflowed on a busy
        // CI machine (tcpdump then counts "packets dropped by kernel"). 64 KiB takes any IP
        // packet whole, GRO's included; 32 MiB of them is 512 packets. -Z root:
        // Debian's tcpdump drops to its own user, which could not write into the lab's state
        // directory.
        let tcpdump = Tcpdump::start(
            namespace,
            &[
                &[
                    "--immediate-mode",
                    "-U",
                    "-s",
                    "65535",
                    "-B",
                    "32768",
                    "-Z",
                    "root",
                    "-i",
                    interface,
                ][..],
                &link_type,
                &["-w", file_arg, filter],
            ]
            .concat(),
            Stdio::null(),
            file.with_extension("err"),
        )?;
        Ok(PcapCapture { tcpdump })
    }

    /// Stops tcpdump with SIGINT, as a person would, so that it writes out what it holds.
    /// A storm may outrun it: the capture then lacks packets.
    pub fn stop(self) -> Result<()> {
        self.tcpdump.stop().map(drop)
    }

    /// As [`PcapCapture::stop`], and fails if tcpdump says the kernel dropped packets it
    /// should have captured: a capture missing packets shows what did not happen (a forward
    /// that never left, a reply never sent), so a test of what is not a fault needs all of
    /// them.
    pub fn stop_complete(self) -> Result<()> {
        let said = self.tcpdump.stop()?;
        let dropped = said.lines().find_map(|line| {
            let count = line.trim().strip_suffix(" packets dropped by kernel")?;
            count.parse::<u64>().ok()
        });
        if let Some(dropped) = dropped.filter(|&dropped| dropped > 0) {
            bail!("the capture is incomplete: tcpdump says the kernel dropped {dropped} packets:\n{said}");
        }
        Ok(())
    }
}

/// tcpdump in a lab namespace, started until it says it captures and ended with SIGINT; killed
/// by PID if it will not end, and reaped in any case.
struct Tcpdump {
    child: Child,
    /// tcpdump's stderr, in a file: the process never blocks on it.
    messages: PathBuf,
}

impl Tcpdump {
    fn start(namespace: &str, args: &[&str], stdout: Stdio, messages: PathBuf) -> Result<Tcpdump> {
        let stderr = fs::File::create(&messages)
            .with_context(|| format!("creating {}", messages.display()))?;
        // -n: no name lookups (they would be DNS traffic).
        let argv: Vec<&str> = ["tcpdump", "-n"]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        let child = ip_netns::exec_command(namespace, &argv)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting `{}` in {namespace}", argv.join(" ")))?;
        let mut tcpdump = Tcpdump { child, messages };
        tcpdump.wait_until_listening()?;
        Ok(tcpdump)
    }

    fn said(&self) -> String {
        fs::read_to_string(&self.messages)
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    fn wait_until_listening(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.said().contains(LISTENING) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("tcpdump exited with {status}: {}", self.said());
            }
            if Instant::now() >= deadline {
                bail!(
                    "tcpdump did not start capturing within {START_TIMEOUT:?}: {}",
                    self.said()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Ends tcpdump; fails unless it exits cleanly. Returns what it said, its closing
    /// counts among it.
    fn stop(mut self) -> Result<String> {
        let status = self.end().context("waiting for tcpdump")?;
        if !status.success() {
            bail!("tcpdump exited with {status}: {}", self.said());
        }
        Ok(self.said())
    }

    fn end(&mut self) -> std::io::Result<ExitStatus> {
        if self.child.try_wait()?.is_none() {
            process::signal(self.child.id(), libc::SIGINT);
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

impl Drop for Tcpdump {
    fn drop(&mut self) {
        // Ends tcpdump if `stop` was not called; after `stop` this only reaps it again.
        let _ = self.end();
    }
}
