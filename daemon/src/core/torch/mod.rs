//! torch.compile graphs in kilnd: the engine that decides what happens to each graph a process
//! asks for, and what kilnd keeps of torch.compile jobs, whoever compiled their graphs.
//!
//! - [`engine`]: a graph's key, and its answer: stored, claimed, waited for, or compiled by a worker.
//! - [`claims`]: a claim's life, from its grant to its publish or release.
//! - [`workers`]: the torch workers as the engine uses them.
//! - [`replies`]: the replies a graph gets, and a stored graph's files.
//! - [`jobs`]: the processes' accounts, this host's and the fleet's.
//! - [`ledger`]: counts of what was answered and each job's ledger of what compiling paid.
//! - [`recipe`]: what each graph's key was made of, and which part a miss changed.
//! - [`forward`]: each process's account sent on to the fleet ledger, kept while unreachable.

pub mod claims;
pub mod engine;
pub mod forward;
pub mod jobs;
pub mod ledger;
pub mod recipe;
pub mod replies;
pub mod workers;
