//! dnsloop's kernel programs for Linux 5.10 to 5.16, which have no `bpf_loop` and no drop
//! reason: the same programs as `main.rs`'s, with their loops in a shape these kernels'
//! verifiers can check (see `programs::linux::Linux510`). Userspace loads this build where the
//! kernel lacks `bpf_loop`.
#![no_std]
#![no_main]
// As in main.rs: the atomic add.
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "core_intrinsics, for the atomic add")]

#[macro_use]
mod programs;

entry_points!(programs::linux::Linux510);
