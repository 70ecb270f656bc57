//! A torch.compile job's ledger: what its processes reported of its graphs, merged into one
//! return (is the compile paying for itself?), the same way in kilnd (this host's processes) and
//! in kiln-cache (the fleet's, across hosts, ranks and restarts).
//!
//! A process reports its whole account each time (cumulative, under a random process id), so
//! the ledger keeps each process's latest report and a report received twice counts once. The
//! ledger is bounded: [`MAX_PROCESSES`] processes apart, the oldest (ended first) folded into
//! one aggregate; [`MAX_GRAPHS`] graphs a process.
//!
//! The figures, from every process kept and the aggregate:
//! - a graph's eager and compiled seconds a step: the median over processes, weighted by samples.
//!   Eager samples taken while no compile of the job ran on the host are preferred; only where a
//!   graph has none are the contended ones used, and the return says so (`eager_basis`). A run
//!   that measured one way only keeps the other way's figure from the runs before it;
//! - the cold compile: each graph key's stored compile seconds once, whichever host compiled it,
//!   plus every in-process compile;
//! - the processes' own seconds: serialization, round trips and loads (a warm hit's whole cost),
//!   and waits on another request's compile;
//! - seconds saved by the caches: the stored compile time of every graph a process took warm;
//! - steps: every process's, added up.
//!
//! The parts: `check` validates a report's fields, `merge` keeps the ledger (a process's latest
//! account, the oldest folded) and merges it into the job's return, and `words` puts that
//! return as one sentence.

mod check;
mod merge;
#[cfg(test)]
mod tests;
mod words;

pub use check::{Invalid, SERVED, check_first_step, check_graph, check_job, check_process, check_process_id};
pub use merge::{fold, job_return, record, warm, weighted_median};
pub use words::{thousands, verdict};

/// Processes a ledger keeps apart; older ones are folded into its aggregate.
pub const MAX_PROCESSES: usize = 16;
/// Graphs kept of one process (its busiest), and of the aggregate four times as many.
pub const MAX_GRAPHS: usize = 128;
/// Graphs one report may carry.
pub const MAX_REPORT_GRAPHS: usize = 4096;
/// Folded process ids remembered.
pub const MAX_FOLDED_IDS: usize = 1024;
/// A ledger's encoded size is kept under this by folding more processes.
pub const MAX_LEDGER_BYTES: usize = 256 << 10;
/// Longest job or graph name.
pub const MAX_LABEL: usize = 256;
/// Compiled steps a graph's figure needs before a verdict reads it: the few after a swap ran
/// beside the swap's own threads and anything else on the host, and on a 2-core box three of
/// them read 130 ms against eager's 6.5 ms, which would have told the job to run eagerly.
pub const MIN_COMPILED_SAMPLES: u64 = 5;

/// The process id a report without one (an older client) is kept under: one per job, so its
/// latest report replaces the one before, as it did.
pub const UNNAMED_PROCESS: &str = "unnamed";
