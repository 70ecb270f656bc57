//! kiln-tests: end-to-end tests that start the real `kilnd` and `kiln` binaries, over real
//! sockets, with the real NVRTC from the pinned wheels in `.venv/`. This library is their
//! harness, which the benchmark and reliability harnesses (the kiln-bench crate) use too.
//!
//! - [`env`]: where the repo, the built binaries and the CUDA wheel tree are. A missing piece
//!   fails loudly with what to run; nothing is ever skipped.
//! - [`daemon`]: a `kilnd` process with its own socket and cache directory, stopped with SIGTERM.
//! - [`kernels`]: sample CUDA sources and request builders.
//! - [`elf`]: just enough ELF reading to check a cubin's SM and its symbols.
//! - [`http`]: a minimal HTTP GET for `/metrics`.
//! - [`toolkits`]: CUDA roots for tests: a witness NVRTC, and one with a byte appended.
//! - [`redis`]: private `redis-server` and Redis Cluster processes, and `kiln-cache` over them.
//! - [`ports`]: TCP ports for the servers, from below the kernel's ephemeral range.
//! - [`procs`]: processes from /proc: a daemon's Triton workers, processes by name; signals.
//! - [`stderr`]: a server's stderr passed through, its end kept for start-up failures.
//! - [`tls`]: a private CA and a `localhost` certificate for the TLS listeners' tests.

pub mod daemon;
pub mod elf;
pub mod env;
pub mod http;
pub mod kernels;
pub mod ports;
pub mod procs;
pub mod redis;
pub mod stderr;
pub mod tls;
pub mod toolkits;
