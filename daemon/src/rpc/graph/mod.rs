//! torch.compile graphs, compiled by kilnd: `kiln.torch` hands over the graph Dynamo captured,
//! a pool of warm torch workers runs AOTAutograd and Inductor on it, and the answer (torch's own
//! cache artifacts) is stored in the tiers and the fleet like any blob, compiled once per fleet.
//!
//! - [`bundle`]: the framing of an answer, checked before a process's publish is stored.
//! - [`service`]: the `kiln.v1.TorchGraphs` handlers, which validate and call the engine.
//! - [`validate`]: what the handlers accept, each refusal naming its field.
//!
//! The torch workers are a compiler beside the others ([`crate::runtime::toolchain::torch`]); the
//! engine that decides each graph's answer, the ledger and the graphs' recipes are the core's
//! ([`crate::core::torch`]).

mod bundle;
pub(crate) mod service;
pub(crate) mod validate;
