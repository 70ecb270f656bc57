//! torch.compile graphs, compiled by kilnd: `kiln.torch` hands over the graph Dynamo captured,
//! a pool of warm torch workers runs AOTAutograd and Inductor on it, and the answer (torch's own
//! cache artifacts) is stored in the tiers and the fleet like any blob, compiled once per fleet.
//!
//! - [`bundle`]: the framing of an answer, checked before a process's publish is stored.
//! - [`workers`]: the torch worker pool and its pipe protocol (`torch_worker.py`).
//! - [`service`]: the `kiln.v1.TorchGraphs` handlers: key, single flight, claims, store.
//! - [`validate`]: what the handlers accept, each refusal naming its field.
//! - [`ledger`]: counts of what was answered and each job's ledger of what compiling paid.
//! - [`forward`]: each process's account sent on to the fleet ledger, kept while unreachable.

mod bundle;
pub mod forward;
pub mod ledger;
pub mod recipe;
pub(crate) mod service;
pub(crate) mod validate;
pub mod workers;
