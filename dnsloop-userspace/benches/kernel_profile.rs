//! `cargo bench -p dnsloop-userspace --features profiling --bench kernel_profile` (as root):
//! the kernel programs' cost per kind of packet and what the verifier made of them, as
//! tab-separated lines for `cargo xtask bench` (see `dnsloop_userspace::profiling`).
//!
//! Both builds of the programs run: this kernel takes both, and the one for kernels before 5.17
//! (without `bpf_loop`) has its lines marked so.
use dnsloop_userspace::profiling::{self, Build};

fn main() -> anyhow::Result<()> {
    for (build, mark) in [
        (Build::Linux517, ""),
        (Build::Before517, "programs for Linux < 5.17: "),
    ] {
        for cost in profiling::packet_costs(build)? {
            println!("cost\t{mark}{}\t{:.1}", cost.kind, cost.ns_per_run);
        }
        for program in profiling::verified(build)? {
            println!(
                "verified\t{mark}{}\t{}\t{}\t{}",
                program.program,
                program.instructions,
                program.translated_bytes,
                program.jited_bytes
            );
        }
    }
    Ok(())
}
