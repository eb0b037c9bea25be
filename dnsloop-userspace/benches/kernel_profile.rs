//! `cargo bench -p dnsloop-userspace --features profiling --bench kernel_profile` (as root):
//! the kernel programs' cost per kind of packet and what the verifier made of them, as
//! tab-separated lines for `cargo xtask bench` (see `dnsloop_userspace::profiling`).
fn main() -> anyhow::Result<()> {
    for cost in dnsloop_userspace::profiling::packet_costs()? {
        println!("cost\t{}\t{:.1}", cost.kind, cost.ns_per_run);
    }
    for program in dnsloop_userspace::profiling::verified()? {
        println!(
            "verified\t{}\t{}\t{}\t{}",
            program.program, program.instructions, program.translated_bytes, program.jited_bytes
        );
    }
    Ok(())
}
