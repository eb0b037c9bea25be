//! dnsloop's kernel programs for Linux 5.10 to 5.16, which have no `bpf_loop` and no drop
//! reason: the same programs as `main.rs`'s, with their loops in a shape these kernels'
//! verifiers can check (see `programs::linux::Linux510`). Userspace loads this build where the
//! kernel lacks `bpf_loop`.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// As in main.rs: the atomic add.
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(
    target_arch = "bpf",
    expect(internal_features, reason = "core_intrinsics, for the atomic add")
)]

#[cfg(target_arch = "bpf")]
#[macro_use]
mod programs;

/// The host stub, as in main.rs.
#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
entry_points!(programs::linux::Linux510);
