//! `cargo xtask kernels`: dnsloop on kernels it was not built on.
//!
//! Boots kernels Debian packages under QEMU, each with an initramfs holding dnsloop, its
//! libraries, busybox and bpftool: 5.10, Debian 11's (Amazon Linux 2's series too), which lacks
//! `SO_NETNS_COOKIE`, `bpf_loop` and drop reasons (dnsloop loads its programs built for kernels
//! before 5.17 there); 6.1, Debian 12's own, which has no TCX (dnsloop attaches with tc clsact
//! there); and 6.12, which has TCX but predates `bpf_get_netns_cookie` in TC programs (6.13). The
//! guest (`init.sh`) loads and attaches the programs to loopback, asks a few DNS names that
//! nothing answers, stops dnsloop with SIGTERM and reports on the serial console;
//! [`Report::check`] (in `report`) reads that report.
//!
//! KVM hangs on this machine's kind of host, so QEMU emulates the CPU (TCG, `-cpu max`); the
//! kernels boot in parallel, one emulated CPU each.
mod debian;
mod initramfs;
mod report;

use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context as _, Result};

use crate::{command, setup};
use debian::Suite;
use initramfs::Initramfs;
use report::Report;

/// Where a kernel runs dnsloop's classifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    Tcx,
    Clsact,
}

/// A kernel: the Debian release and metapackage that name it, and what dnsloop must do there.
struct Target {
    suite: Suite,
    metapackage: &'static str,
    series: &'static str,
    hook: Hook,
    /// What dnsloop must say the kernel lacks, in the summary's `kernel_lacks`.
    lacks: &'static [&'static str],
    /// The reason dnsloop must give for the kernel dropping a query to a closed port.
    drop_reason: &'static str,
}

/// The reason of a drop on kernels whose tracepoint gives none.
const UNKNOWN_REASON: &str = "unknown (Linux < 5.17)";

/// The matrix: what `cargo xtask kernels` boots, and CI with it.
const TARGETS: [Target; 3] = [
    Target {
        suite: Suite::Bullseye,
        metapackage: "linux-image-amd64",
        series: "5.10",
        hook: Hook::Clsact,
        lacks: &[
            "netns_cookie",
            "bpf_loop",
            "drop_reasons",
            "tcx",
            "tc_netns_cookie",
        ],
        drop_reason: UNKNOWN_REASON,
    },
    Target {
        suite: Suite::Bookworm,
        metapackage: "linux-image-amd64",
        series: "6.1",
        hook: Hook::Clsact,
        lacks: &["tcx", "tc_netns_cookie"],
        drop_reason: "NO_SOCKET",
    },
    Target {
        suite: Suite::Bookworm,
        metapackage: "linux-image-6.12-amd64",
        series: "6.12",
        hook: Hook::Tcx,
        lacks: &["tc_netns_cookie"],
        drop_reason: "NO_SOCKET",
    },
];

/// Asked from the guest, one A query each.
const QUERY_NAMES: [&str; 3] = [
    "one.kernels.dnsloop.test",
    "two.kernels.dnsloop.test",
    "three.kernels.dnsloop.test",
];
/// Boot, load (the verifier is emulated too), queries, exit: one to two minutes.
const GUEST_TIMEOUT: Duration = Duration::from_secs(300);
const MARKER: &str = "dnsloop-kernels: ";
const BUSYBOX: &str = "/bin/busybox";
const BPFTOOL: &str = "/usr/sbin/bpftool";

/// Boots the kernels of `series` (`6.1`, `5.10`), or the whole matrix if none is given.
pub fn run(series: &[String]) -> Result<()> {
    let targets: Vec<&Target> = if series.is_empty() {
        TARGETS.iter().collect()
    } else {
        series
            .iter()
            .map(|wanted| {
                TARGETS
                    .iter()
                    .find(|target| target.series == wanted)
                    .with_context(|| {
                        let known: Vec<&str> = TARGETS.iter().map(|target| target.series).collect();
                        format!(
                            "no kernel {wanted} to boot: choose among {}",
                            known.join(", ")
                        )
                    })
            })
            .collect::<Result<_>>()?
    };
    setup::run()?;
    command::cargo(&["build", "--bin", "dnsloop"])?;
    check_on(
        &command::workspace_root().join("target/debug/dnsloop"),
        &targets,
    )
}

/// Boots every kernel of the matrix with `dnsloop` and checks what each guest reports.
pub fn check(dnsloop: &Path) -> Result<()> {
    check_on(dnsloop, &TARGETS.iter().collect::<Vec<_>>())
}

fn check_on(dnsloop: &Path, targets: &[&Target]) -> Result<()> {
    let cache = command::workspace_root().join("target/kernels");
    let kernels = targets
        .iter()
        .map(|target| debian::kernel(target.suite, target.metapackage, target.series, &cache))
        .collect::<Result<Vec<_>>>()?;
    let shared = shared_files(dnsloop, &cache)?;
    let outcomes: Vec<Result<String>> = std::thread::scope(|scope| {
        let runs: Vec<_> = targets
            .iter()
            .zip(&kernels)
            .map(|(target, kernel)| {
                let shared = &shared;
                let cache = &cache;
                scope.spawn(move || run_guest(target, kernel, shared, cache))
            })
            .collect();
        runs.into_iter()
            .map(|run| {
                run.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a guest's thread panicked")))
            })
            .collect()
    });
    let mut failed = Vec::new();
    for (kernel, outcome) in kernels.iter().zip(outcomes) {
        match outcome {
            Ok(summary) => println!("kernels: {summary}"),
            Err(error) => {
                println!("kernels: {} FAILED: {error:#}", kernel.package);
                failed.push(kernel.package.as_str());
            }
        }
    }
    if !failed.is_empty() {
        bail!("dnsloop failed on {}", failed.join(", "));
    }
    Ok(())
}

/// Boots `kernel` with the guest's files and checks its report; says what it showed.
fn run_guest(
    target: &Target,
    kernel: &debian::Kernel,
    shared: &[(String, Vec<u8>, u32)],
    cache: &Path,
) -> Result<String> {
    let dir = cache.join(&kernel.package);
    let initrd = dir.join("initrd.gz");
    std::fs::write(&initrd, initramfs(shared, kernel)?)
        .with_context(|| format!("writing {}", initrd.display()))?;
    let started = Instant::now();
    let console = boot(&kernel.vmlinuz, &initrd)?;
    let took = started.elapsed();
    let log = dir.join("console.log");
    std::fs::write(&log, &console).with_context(|| format!("writing {}", log.display()))?;
    let checked = Report::parse(&console)
        .check(target)
        .with_context(|| format!("(the guest's whole console: {})", log.display()))?;
    let hook = match target.hook {
        Hook::Tcx => "as TCX links",
        Hook::Clsact => "with the clsact fallback (no TCX), removed again on exit",
    };
    // The kernel shows the count from Linux 5.16 on.
    let verified = if checked.verified.is_empty() {
        "their count not shown before Linux 5.16".to_owned()
    } else {
        let counts: Vec<String> = checked.verified.iter().map(u64::to_string).collect();
        format!("{} instructions processed", counts.join(" and "))
    };
    Ok(format!(
        "Linux {} (Debian's {} {}) booted and ran in {took:.0?} under TCG: the verifier accepted dnsloop's programs ({}), they attached {hook}, counted {} DNS packets on lo egress for {} queries, reported the kernel dropping {} of them as {}, and dnsloop exited 0 on SIGTERM",
        checked.kernel,
        kernel.package,
        kernel.version,
        verified,
        checked.dns_packets,
        QUERY_NAMES.len(),
        checked.closed_port_drops,
        target.drop_reason,
    ))
}

/// The files every guest holds: busybox, and dnsloop and bpftool with their libraries, as
/// (path, contents, mode).
fn shared_files(dnsloop: &Path, scratch: &Path) -> Result<Vec<(String, Vec<u8>, u32)>> {
    std::fs::create_dir_all(scratch)?;
    // Without debug info: a sixth of the size, and so of the guest's unpacking time.
    let stripped = scratch.join("dnsloop.stripped");
    command::run(
        Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&stripped)
            .arg(dnsloop),
    )?;
    let mut files = vec![
        (BUSYBOX.to_owned(), PathBuf::from(BUSYBOX)),
        ("/dnsloop".to_owned(), stripped),
        ("/bin/bpftool".to_owned(), PathBuf::from(BPFTOOL)),
    ];
    for library in shared_libraries(&[dnsloop, Path::new(BPFTOOL)])? {
        let path = library
            .to_str()
            .context("library paths are UTF-8")?
            .to_owned();
        files.push((path, library));
    }
    files
        .into_iter()
        .map(|(path, source)| {
            let contents =
                std::fs::read(&source).with_context(|| format!("reading {}", source.display()))?;
            Ok((path, contents, 0o755))
        })
        .collect()
}

/// The guest's root: the shared files, the kernel's modules, /init.
fn initramfs(shared: &[(String, Vec<u8>, u32)], kernel: &debian::Kernel) -> Result<Vec<u8>> {
    let mut image = Initramfs::default();
    for (path, contents, mode) in shared {
        image.file(path, *mode, contents);
    }
    for module in &kernel.modules {
        let name = module
            .file_name()
            .and_then(|name| name.to_str())
            .context("module names are UTF-8")?;
        image.copy(&format!("/modules/{name}"), module, 0o644)?;
    }
    for directory in ["/proc", "/sys", "/tmp", "/dev"] {
        image.directory(directory);
    }
    image.file("/init", 0o755, init_script().as_bytes());
    image.gzip()
}

fn init_script() -> String {
    include_str!("init.sh").replace("@QUERY_NAMES@", &QUERY_NAMES.join(" "))
}

/// The shared libraries `binaries` load, and the loader, as `ldd` finds them.
fn shared_libraries(binaries: &[&Path]) -> Result<Vec<PathBuf>> {
    let mut libraries = Vec::new();
    for binary in binaries {
        let output = Command::new("ldd")
            .arg(binary)
            .output()
            .context("running ldd")?;
        ensure!(
            output.status.success(),
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        for path in ldd_paths(&String::from_utf8_lossy(&output.stdout)) {
            if !libraries.contains(&path) {
                libraries.push(path);
            }
        }
    }
    Ok(libraries)
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and `/lib64/ld-linux-x86-64.so.2
/// (0x...)`; the vDSO has no file.
fn ldd_paths(ldd: &str) -> Vec<PathBuf> {
    ldd.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = line.split_once(" => ").map_or(line, |(_, path)| path);
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Runs the guest to its end and returns its console output.
fn boot(vmlinuz: &Path, initrd: &Path) -> Result<String> {
    let mut qemu = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", "max", "-m", "1024"])
        .args(["-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64 (run `cargo xtask setup`)")?;
    let mut stdout = qemu.stdout.take().context("qemu has no stdout")?;
    let console = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).replace('\r', "")
    });
    let deadline = Instant::now() + GUEST_TIMEOUT;
    let status = loop {
        if let Some(status) = qemu.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            // Our own child, by its PID.
            let _ = qemu.kill();
            let _ = qemu.wait();
            let console = console.join().unwrap_or_default();
            bail!("the guest did not finish within {GUEST_TIMEOUT:?}; its console:\n{console}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let console = console
        .join()
        .map_err(|_| anyhow::anyhow!("reading the console panicked"))?;
    if !status.success() {
        let mut stderr = String::new();
        if let Some(mut pipe) = qemu.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        bail!("qemu failed ({status}): {stderr}\nconsole:\n{console}");
    }
    Ok(console)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_paths_are_the_files_loaded() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f4d)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f4d)\n";
        assert_eq!(
            ldd_paths(ldd),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn the_init_script_asks_every_name() {
        let script = init_script();
        assert!(!script.contains('@'), "placeholders left: {script}");
        for name in QUERY_NAMES {
            assert!(script.contains(name));
        }
    }
}
