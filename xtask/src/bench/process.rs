//! A process on the node (a watcher, a tracer) whose stdout lines are stamped as they arrive:
//! started once its stderr says it is ready, interrupted to read what it printed.
use std::{
    io::{BufRead as _, BufReader, Read as _},
    process::Child,
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

/// A process on the node whose stdout lines are stamped as they arrive.
pub struct Process {
    pub child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    stderr: Option<thread::JoinHandle<String>>,
}

impl Process {
    /// Waits until its stderr shows `ready`.
    pub fn started(mut child: Child, ready: &str) -> Result<Self> {
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (line_sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line_sender.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let (ready_sender, ready_seen) = mpsc::channel();
        let ready = ready.to_owned();
        let stderr = thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut text = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                if line.contains(&ready) {
                    let _ = ready_sender.send(());
                }
                text.push_str(&line);
                line.clear();
            }
            let _ = reader.read_to_string(&mut text);
            text
        });
        let process = Self {
            child,
            lines,
            stderr: Some(stderr),
        };
        if ready_seen.recv_timeout(Duration::from_secs(30)).is_err() {
            let output = process.interrupt();
            bail!("a watcher did not start: {output:?}");
        }
        Ok(process)
    }

    /// SIGINT, then every stdout line with its arrival time.
    pub fn interrupt(mut self) -> Result<Vec<(Instant, String)>> {
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let status = self.child.wait().context("waiting for a watcher")?;
        let stderr = self
            .stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        if !status.success() {
            bail!("a watcher failed ({status}):\n{stderr}");
        }
        // The reader thread may still be reading what the process wrote last (its summary): it
        // ends, and so does this, at the end of the pipe, which came with the process's exit.
        Ok(self.lines.iter().collect())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
