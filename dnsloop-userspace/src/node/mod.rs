//! The node as the tracer sees it: its links and what they connect (`topology`), the pods'
//! network namespaces behind them (`namespaces`), the pods' names (`pods`), and the
//! watch that keeps the programs attached as links and pods come and go (`watch`).
pub mod namespaces;
pub mod pods;
pub mod topology;
pub mod watch;
