//! The kernel side of tracing: checking the node can run the programs (`preflight`), loading
//! them with their maps (`programs`, `pinning`), telling them which points to watch
//! (`point_table`), attaching them (`attach`, with `clsact` on kernels without TCX, `orphans`
//! for what a killed run left, `expedited_rcu` to attach fast), and reading what they stream and
//! count (`ringbuf`, `unanswered`, `counters`, `summary`) on their clock (`clock`), and the
//! kernel's own drops of DNS packets (`drops`, read where the kernel's BTF says (`btf`),
//! located in the kernel by `symbols`); what an older kernel lacks of all that, and what it
//! costs (`features`).
pub mod attach;
pub mod btf;
pub mod clock;
pub mod clsact;
pub mod counters;
pub mod drops;
pub mod expedited_rcu;
pub mod features;
mod map_batch;
pub mod orphans;
pub mod pinning;
pub mod point_table;
pub mod preflight;
pub mod programs;
pub mod ringbuf;
pub mod summary;
mod symbols;
#[cfg(test)]
mod tests;
pub mod unanswered;
