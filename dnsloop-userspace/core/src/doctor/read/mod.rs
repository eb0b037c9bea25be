//! Readers: each turns one kind of file into what the checks need, with line numbers, and
//! never fails on what it finds in a file (a missing or odd file is a result, not an error).
pub mod bridges;
pub mod conntrack;
pub mod corefile;
pub mod kubelet;
pub mod resolv_conf;
pub mod root;
