//! The reference programs (`xtask/bench-programs`), attached where dnsloop's programs are, so that
//! what dnsloop costs per run can be set against what running any program costs (the empty
//! classifier, the floor) and what one hash-map lookup per packet adds to that.
use std::{
    ffi::CStr,
    path::{Path, PathBuf},
    sync::mpsc,
    thread::{self, JoinHandle},
};

use anyhow::{anyhow, bail, Context as _, Result};
use aya::{
    programs::{BtfTracePoint, Program, SchedClassifier, TcAttachType},
    Btf, Ebpf,
};

use super::namespace;
use crate::command;

/// The reference programs' names, as `bpftool prog show` lists them (the kernel keeps 15
/// characters of a name).
pub const EMPTY: &str = "bench_empty";
pub const ONE_LOOKUP: &str = "bench_lookup";
/// On the `kfree_skb` tracepoint, BTF-typed as dnsloop's drop program.
pub const EMPTY_ON_DROPS: &str = "bench_kfree_skb";

/// Builds the reference programs for the BPF target and returns their object file.
pub fn build() -> Result<PathBuf> {
    let crate_dir = command::workspace_root().join("xtask/bench-programs");
    let target_dir = command::workspace_root().join("target/bench-programs");
    command::run(
        std::process::Command::new("cargo")
            .current_dir(&crate_dir)
            .args([
                "+nightly",
                "build",
                "--release",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--target-dir",
            ])
            .arg(&target_dir)
            // The workspace's cargo sets these for xtask; the nested build must choose its own.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO"),
    )?;
    Ok(target_dir.join("bpfel-unknown-none/release/bench-programs"))
}

/// A reference program, attached to every interface of a namespace until dropped.
pub struct Attached {
    stop: Option<mpsc::Sender<()>>,
    holder: Option<JoinHandle<()>>,
}

impl Attached {
    /// Attaches the classifier `program` in `object` to the interfaces of the namespace mounted
    /// at `netns`: ingress and egress, loopback on egress only, as dnsloop attaches.
    pub fn attach(object: &Path, program: &'static str, netns: &Path) -> Result<Self> {
        let (object, netns) = (object.to_path_buf(), netns.to_path_buf());
        let (ready, attached) = mpsc::channel::<Result<()>>();
        let (stop, stopped) = mpsc::channel::<()>();
        // The links live on a thread of their own, moved into the namespace.
        let holder = thread::spawn(move || {
            let ebpf = match load_and_attach(&object, program, &netns) {
                Ok(ebpf) => {
                    let _ = ready.send(Ok(()));
                    ebpf
                }
                Err(error) => {
                    let _ = ready.send(Err(error));
                    return;
                }
            };
            let _ = stopped.recv();
            drop(ebpf);
        });
        attached
            .recv()
            .map_err(|_| anyhow!("the floor's thread ended before attaching"))??;
        Ok(Self {
            stop: Some(stop),
            holder: Some(holder),
        })
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(holder) = self.holder.take() {
            let _ = holder.join();
        }
    }
}

/// The reference programs' object, read from `object` and its maps created.
fn load_object(object: &Path) -> Result<Ebpf> {
    let bytes = std::fs::read(object).with_context(|| format!("reading {}", object.display()))?;
    Ebpf::load(&bytes).context("loading the reference programs' object")
}

/// The reference program `name` of `ebpf`.
fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program> {
    ebpf.program_mut(name)
        .with_context(|| format!("the reference programs' object has no {name}"))
}

/// The empty program on the `kfree_skb` tracepoint, attached until the returned object is
/// dropped. The tracepoint is the whole kernel's: no namespace to enter.
pub fn attach_on_drops(object: &Path) -> Result<Ebpf> {
    let mut ebpf = load_object(object)?;
    let program: &mut BtfTracePoint = program(&mut ebpf, EMPTY_ON_DROPS)?.try_into()?;
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
    program
        .load("kfree_skb", &btf)
        .with_context(|| format!("loading {EMPTY_ON_DROPS}"))?;
    program
        .attach()
        .with_context(|| format!("attaching {EMPTY_ON_DROPS} to kfree_skb"))?;
    Ok(ebpf)
}

fn load_and_attach(object: &Path, name: &str, netns: &Path) -> Result<Ebpf> {
    namespace::enter(netns)?;
    let mut ebpf = load_object(object)?;
    let program: &mut SchedClassifier = program(&mut ebpf, name)?.try_into()?;
    program.load().with_context(|| format!("loading {name}"))?;
    for interface in interface_names()? {
        let directions: &[TcAttachType] = if interface == "lo" {
            &[TcAttachType::Egress]
        } else {
            &[TcAttachType::Ingress, TcAttachType::Egress]
        };
        for &direction in directions {
            program
                .attach(&interface, direction)
                .with_context(|| format!("attaching {name} to {interface}"))?;
        }
    }
    Ok(ebpf)
}

/// The interfaces of the calling thread's namespace.
fn interface_names() -> Result<Vec<String>> {
    // SAFETY: if_nameindex returns a list ending with a zero entry, freed below.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            bail!("listing interfaces: {}", std::io::Error::last_os_error());
        }
        let mut names = Vec::new();
        let mut entry = list;
        while (*entry).if_index != 0 {
            names.push(
                CStr::from_ptr((*entry).if_name)
                    .to_string_lossy()
                    .into_owned(),
            );
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
        Ok(names)
    }
}
