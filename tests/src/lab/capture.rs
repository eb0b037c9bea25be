//! Packet captures with tcpdump inside a lab namespace: the evidence that a query really
//! travelled where a scenario says it does.
use std::{
    fs,
    path::PathBuf,
    process::{Child, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use super::{netns, process};

const START_TIMEOUT: Duration = Duration::from_secs(5);
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);
/// What tcpdump prints on stderr once it is capturing.
const LISTENING: &str = "listening on";

/// A running tcpdump. [`Capture::stop`] ends it and returns what it saw; dropping it kills it.
pub struct Capture {
    child: Child,
    /// tcpdump's stdout: one line per packet. Written to a file, not a pipe, so that a busy
    /// loop never blocks tcpdump on a full pipe.
    packets: PathBuf,
    /// tcpdump's stderr.
    messages: PathBuf,
}

impl Capture {
    /// Starts `tcpdump -i INTERFACE FILTER` in `namespace`, writing to `<file_stem>.txt` and
    /// `<file_stem>.err`, and returns once it is capturing.
    pub(crate) fn start(
        namespace: &str,
        interface: &str,
        filter: &str,
        file_stem: PathBuf,
    ) -> Result<Capture> {
        let packets = file_stem.with_extension("txt");
        let messages = file_stem.with_extension("err");
        let stdout = fs::File::create(&packets)
            .with_context(|| format!("creating {}", packets.display()))?;
        let stderr = fs::File::create(&messages)
            .with_context(|| format!("creating {}", messages.display()))?;
        let child = netns::exec_command(
            namespace,
            // -n: no name lookups (they would be DNS traffic); -l and --immediate-mode: every
            // packet is printed as it arrives.
            &[
                "tcpdump",
                "-n",
                "-l",
                "--immediate-mode",
                "-i",
                interface,
                filter,
            ],
        )
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting tcpdump on {interface} in {namespace}"))?;
        let mut capture = Capture {
            child,
            packets,
            messages,
        };
        capture.wait_until_listening()?;
        Ok(capture)
    }

    fn wait_until_listening(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let messages = fs::read_to_string(&self.messages).unwrap_or_default();
            if messages.contains(LISTENING) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("tcpdump exited with {status}: {}", messages.trim());
            }
            if Instant::now() >= deadline {
                bail!(
                    "tcpdump did not start capturing within {START_TIMEOUT:?}: {}",
                    messages.trim()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Stops tcpdump (SIGINT, so it flushes) and returns one line per captured packet.
    pub fn stop(mut self) -> Result<Vec<String>> {
        self.end();
        let packets = fs::read_to_string(&self.packets)
            .with_context(|| format!("reading {}", self.packets.display()))?;
        Ok(packets.lines().map(str::to_owned).collect())
    }

    fn end(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        process::signal(self.child.id(), libc::SIGINT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(POLL);
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.end();
    }
}
