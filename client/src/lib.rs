//! kiln-client: a typed async client for kilnd, the per-host compile daemon, and the pieces of
//! the `kiln` command line that other Rust code may want too.
//!
//! - [`connect`] and [`Client`]: one connection to kilnd over `unix:///path`, `http://host:port`
//!   or `https://host:port` ([`connect_with`] a token and a CA), with the message-size limits
//!   raised so large cubins fit.
//! - [`EventStream`] and [`CompletedJob`]: the named stream of `JobEvent`s that `Compile`, `Lookup`
//!   and `Watch` answer with, and its collected form.
//! - [`ClientError`]: every way a call can fail, keeping the gRPC code and message.
//! - [`includes`]: finds the headers a `.cu` file includes, on the client's side, because the
//!   daemon never reads a path a client names; headers travel by name and content.
//! - [`graph`]: builds a `CompileGraph` from `.cu` files, or reads one written in proto3 JSON.
//! - [`snapshot`]: job snapshots: saves directories of JIT caches through kilnd and restores
//!   them on another host, never overwriting a file and never leaving a half-written one.
//!
//! The wire types are [`kiln_proto::pb`], re-exported here as [`pb`].

mod client;
mod error;
mod events;
pub mod graph;
pub mod includes;
pub mod snapshot;

pub use client::{
    CA_FILE_ENV, Client, ConnectOptions, MAX_MESSAGE_BYTES, TOKEN_FILE_ENV, Transport, connect, connect_with,
};
pub use error::{ClientError, code_name};
pub use events::{CompletedJob, EventStream};
pub use kiln_proto::pb;
