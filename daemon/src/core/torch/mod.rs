//! What kilnd keeps of torch.compile jobs, whoever compiled their graphs.
//!
//! - [`ledger`]: counts of what was answered and each job's ledger of what compiling paid.
//! - [`recipe`]: what each graph's key was made of, and which part a miss changed.
//! - [`forward`]: each process's account sent on to the fleet ledger, kept while unreachable.

pub mod forward;
pub mod ledger;
pub mod recipe;
