//! The node as the tracer sees it: its links and what they connect (`topology`), the pods'
//! network namespaces behind them (`namespaces`), and the pods' names (`pods`).
pub mod namespaces;
pub mod pods;
pub mod topology;
