//! Builds the kernel programs (`dnsloop-ebpf`'s BPF binary) with aya-build so that the userspace
//! binary can embed them. `cargo build --bin dnsloop` is therefore all it takes once
//! `cargo xtask setup` has installed the nightly rust-src and bpf-linker.
use anyhow::{anyhow, Context as _};

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("reading the workspace metadata")?;
    let ebpf = metadata
        .packages
        .iter()
        .find(|package| package.name.as_str() == "dnsloop-ebpf")
        .ok_or_else(|| anyhow!("the workspace has no dnsloop-ebpf package"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", ebpf.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context("building the BPF programs: run `cargo xtask setup` if bpf-linker or the nightly rust-src is missing")
}
