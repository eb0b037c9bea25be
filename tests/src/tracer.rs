//! Running `dnsloop trace` inside a lab namespace, as the end-to-end tests and the demo do.
use std::{
    io::{BufRead, BufReader, Read},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use dnsloop_core::schema::Record;

use crate::lab::Lab;

/// What `dnsloop trace` prints on stderr once its programs are attached.
pub const READY_MARKER: &str = "dnsloop: watching";
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `dnsloop trace`; killed (by PID) if dropped before it ends.
pub struct Tracer {
    child: Child,
    /// Read line by line on their own threads, so that a chatty tracer never blocks on a full
    /// pipe, and a test can wait for what it printed while it runs.
    stdout_lines: mpsc::Receiver<String>,
    stdout: String,
    stderr_lines: mpsc::Receiver<String>,
    stderr: String,
}

pub struct TracerOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Tracer {
    /// Starts `dnsloop trace ARGS` in namespace `ns` and returns once it is attached.
    pub fn start(dnsloop: &Path, lab: &Lab, ns: &str, args: &[&str]) -> Result<Tracer> {
        Self::start_subcommand(dnsloop, "trace", lab, ns, args)
    }

    /// As [`Tracer::start`], with `env` added to dnsloop's environment.
    pub fn start_with_env(
        dnsloop: &Path,
        lab: &Lab,
        ns: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Tracer> {
        Self::spawn(dnsloop, "trace", lab, ns, args, env, None)
    }

    /// As [`Tracer::start`], with dnsloop's umask set to `umask`.
    pub fn start_with_umask(
        dnsloop: &Path,
        lab: &Lab,
        ns: &str,
        args: &[&str],
        umask: libc::mode_t,
    ) -> Result<Tracer> {
        Self::spawn(dnsloop, "trace", lab, ns, args, &[], Some(umask))
    }

    /// Starts `dnsloop SUBCOMMAND ARGS` (one that traces: `trace`, `capture`) in namespace `ns`
    /// and returns once it is attached.
    pub fn start_subcommand(
        dnsloop: &Path,
        subcommand: &str,
        lab: &Lab,
        ns: &str,
        args: &[&str],
    ) -> Result<Tracer> {
        Self::spawn(dnsloop, subcommand, lab, ns, args, &[], None)
    }

    fn spawn(
        dnsloop: &Path,
        subcommand: &str,
        lab: &Lab,
        ns: &str,
        args: &[&str],
        env: &[(&str, &str)],
        umask: Option<libc::mode_t>,
    ) -> Result<Tracer> {
        // `ip netns exec` execs dnsloop: the child's PID is dnsloop's.
        let mut command = Command::new("ip");
        if let Some(umask) = umask {
            // SAFETY: umask is async-signal-safe and touches only the child's own state.
            unsafe {
                command.pre_exec(move || {
                    libc::umask(umask);
                    Ok(())
                });
            }
        }
        let mut child = command
            .args(["netns", "exec", ns])
            .arg(dnsloop)
            .arg(subcommand)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} {subcommand} in {ns}", dnsloop.display()))?;
        let stdout_lines = read_lines(child.stdout.take().context("no stdout pipe")?);
        let stderr_lines = read_lines(child.stderr.take().context("no stderr pipe")?);
        let mut tracer = Tracer {
            child,
            stdout_lines,
            stdout: String::new(),
            stderr_lines,
            stderr: String::new(),
        };
        tracer.wait_until_ready(lab)?;
        Ok(tracer)
    }

    fn wait_until_ready(&mut self, lab: &Lab) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            match self.stderr_lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let ready = line.contains(READY_MARKER);
                    self.stderr.push_str(&line);
                    self.stderr.push('\n');
                    if ready {
                        return Ok(());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.drain_stderr();
        bail!(
            "dnsloop trace did not become ready in {} (lab {}):\n{}",
            lab.node_ns(),
            lab.scenario(),
            self.stderr
        )
    }

    /// Waits until dnsloop has printed a record (`--output json`) for which `wanted` holds,
    /// and returns it; fails after `timeout`, or if dnsloop ends first. What it printed
    /// meanwhile is kept for [`Tracer::interrupt`] and the rest.
    pub fn wait_for_record(
        &mut self,
        timeout: Duration,
        wanted: impl Fn(&Record) -> bool,
    ) -> Result<Record> {
        let deadline = Instant::now() + timeout;
        // The lines printed before this call were looked at by earlier calls, or not at all.
        let mut seen = 0;
        loop {
            for line in self.stdout[seen..].lines() {
                if let Ok(record) = serde_json::from_str::<Record>(line) {
                    if wanted(&record) {
                        return Ok(record);
                    }
                }
            }
            seen = self.stdout.len();
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.drain_stderr_now();
                    bail!(
                        "dnsloop printed no such record within {timeout:?}:\n{}{}",
                        self.stdout,
                        self.stderr
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.drain_stderr_now();
                    bail!(
                        "dnsloop ended before it printed such a record:\n{}{}",
                        self.stdout,
                        self.stderr
                    )
                }
            }
        }
    }

    /// dnsloop's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGINT, as an operator's Ctrl-C would, and collects the output.
    pub fn interrupt(self) -> Result<TracerOutput> {
        self.signal(libc::SIGINT)
    }

    /// Sends SIGTERM, as `kill` or Kubernetes stopping a pod would, and collects the output.
    pub fn terminate(self) -> Result<TracerOutput> {
        self.signal(libc::SIGTERM)
    }

    /// Sends SIGKILL, which gives dnsloop no chance to clean up, and collects the output.
    pub fn kill(self) -> Result<TracerOutput> {
        self.signal(libc::SIGKILL)
    }

    fn signal(self, signal: libc::c_int) -> Result<TracerOutput> {
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        self.wait(Duration::from_secs(10))
    }

    /// Waits up to `timeout` for the tracer to end by itself (`--duration`).
    pub fn wait(mut self, timeout: Duration) -> Result<TracerOutput> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.drain_stderr();
                bail!(
                    "dnsloop trace did not end within {timeout:?}:\n{}",
                    self.stderr
                );
            }
            thread::sleep(Duration::from_millis(50));
        };
        // Its stdout ends with it: every line is taken, up to the pipe's end.
        while let Ok(line) = self.stdout_lines.recv() {
            self.stdout.push_str(&line);
            self.stdout.push('\n');
        }
        self.drain_stderr();
        Ok(TracerOutput {
            status,
            stdout: std::mem::take(&mut self.stdout),
            stderr: std::mem::take(&mut self.stderr),
        })
    }

    /// Takes what dnsloop has printed on stderr so far, without waiting for more.
    fn drain_stderr_now(&mut self) {
        while let Ok(line) = self.stderr_lines.try_recv() {
            self.stderr.push_str(&line);
            self.stderr.push('\n');
        }
    }

    fn drain_stderr(&mut self) {
        while let Ok(line) = self.stderr_lines.recv_timeout(Duration::from_millis(200)) {
            self.stderr.push_str(&line);
            self.stderr.push('\n');
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The lines of `pipe`, read on a thread of their own until it ends.
fn read_lines(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (sender, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// Runs `dnsloop analyze --output json ARGS FILE`, as any user may, and collects its output.
pub fn analyze(dnsloop: &Path, file: &Path, args: &[&str]) -> Result<TracerOutput> {
    let output = Command::new(dnsloop)
        .args(["analyze", "--output", "json"])
        .args(args)
        .arg(file)
        .output()
        .with_context(|| format!("running {} analyze", dnsloop.display()))?;
    Ok(TracerOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}
