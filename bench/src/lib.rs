//! kiln-bench: the two harnesses that measure kiln rather than test it, over the real binaries.
//! Neither is part of the tests: they take minutes and load the whole machine.
//!
//! - [`bench`](mod@bench): the benchmark harness behind `scripts/bench` (`kiln-bench`): kiln side by side
//!   with its baselines, written to BENCHMARKS.md.
//! - [`reliability`]: the load and chaos harness behind `scripts/reliability`
//!   (`kiln-reliability`), the `## Reliability` section of BENCHMARKS.md.
//!
//! Both start their processes with the tests' harness, the `kiln-tests` library (its [`env`],
//! [`kernels`], [`redis`] and [`toolkits`] modules among others).
//!
//! [`env`]: kiln_tests::env
//! [`kernels`]: kiln_tests::kernels
//! [`redis`]: kiln_tests::redis
//! [`toolkits`]: kiln_tests::toolkits

pub mod bench;
pub mod reliability;
