//! Bearer tokens, read-only or read-write: kiln-cache uses kiln-proto's one copy of the token
//! logic (kilnd's TCP listener checks the same way). A read-only token can fetch, watch and see
//! stats; putting artifacts or manifests and taking leases need a read-write token (a lease is a
//! write: a reader holding one would stall the fleet). Which call needs what is
//! [`crate::service::needs`]; kiln-serve's token layer checks it before any handler runs.

pub use kiln_proto::auth::{Access, AuthError, TokenEntry, TokenError, Tokens, parse_tokens_file};
