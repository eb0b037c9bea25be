//! The node as the tracer sees it: its links and what they connect (`topology`), the pods'
//! network namespaces behind them (`namespaces`), the pods' names (`pods`), and its conntrack
//! counters (`conntrack`).
pub mod conntrack;
pub mod namespaces;
pub mod pods;
pub mod topology;
