//! dnsloop's kernel programs: TC/TCX classifiers on ingress and egress that parse every DNS
//! packet, count it, track the questions it asks, and stream to userspace only what matters.
//! This build is for Linux 5.17 and later; `before_5_17.rs` builds the same programs for older
//! kernels (see `programs::linux`).
//!
//! They never drop or modify a packet: every path returns `TC_ACT_UNSPEC`, which under TCX
//! means "next program", or `XDP_PASS`, so dnsloop never changes the fate of a packet or of
//! another program attached to the same hook.
//!
//! The programs only build for the BPF target: aya-build builds them from
//! dnsloop-userspace/build.rs, with the nightly toolchain.
#![no_std]
#![no_main]
// Atomic adds to shared map values: the BPF target has no compare-and-swap, so core offers no
// `fetch_add`, but the kernel has an atomic add instruction, which this intrinsic compiles to.
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "core_intrinsics, for the atomic add")]

#[macro_use]
mod programs;

entry_points!(programs::linux::Linux517);
