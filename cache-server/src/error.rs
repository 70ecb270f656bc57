//! The server's error type and its one mapping to `tonic::Status`.
//!
//! Every handler returns [`Error`]; [`From<Error> for Status`] is the only place a gRPC code is
//! chosen, so the same failure always reads the same way to clients.

use crate::auth::AuthError;
use kiln_proto::envelope::IntegrityError;
use tonic::{Code, Status};

/// Everything an RPC can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A field that must be a cache key is not 64 lowercase hex characters.
    #[error("{field}: expected 64 lowercase hex characters")]
    BadKey { field: String },
    #[error("{field}: missing")]
    Missing { field: &'static str },
    /// The envelope does not verify: bad digest, wrong key, bad frame.
    #[error("envelope: {0}")]
    Envelope(#[from] IntegrityError),
    #[error("{field}: {size} bytes is over the limit of {limit}")]
    TooLarge { field: &'static str, size: u64, limit: u64 },
    #[error("{field}: {count} entries is over the limit of {limit}")]
    TooMany { field: &'static str, count: usize, limit: usize },
    #[error("{field}: {value} is outside {min}..={max}")]
    OutOfRange { field: &'static str, value: u64, min: u64, max: u64 },
    #[error("holder: expected 16 to 128 characters of [A-Za-z0-9_-]")]
    BadHolder,
    /// A text field outside its bounds (a host report's, say).
    #[error("{field}: {reason}")]
    BadField { field: String, reason: String },
    /// No token, a wrong one, or a read-only token on a write.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// A command to Redis failed. Redis being down is the usual cause.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Stored, but the announcement to waiters failed; a retry of the Put is harmless.
    #[error("stored, but announcing the publish failed: {0}")]
    Announce(redis::RedisError),
    /// The envelope put is the very one an auditor quarantined under this key.
    #[error(
        "envelope: these bytes were quarantined under this key ({publisher}'s publish, reported by {reporter}); publish what the key's inputs compile to"
    )]
    Quarantined { publisher: String, reporter: String },
    /// The key holds a different kernel: kiln's toolchains are deterministic, so one of the two
    /// writers did not compile the key's inputs. Recorded, and the held kernel is audited.
    #[error(
        "key {key}: holds a different artifact ({held_by}'s publish; {detail}); a key has one right answer, so this Put was refused and recorded as a conflict for the fleet audit"
    )]
    Conflict { key: String, held_by: String, detail: String },
    /// Under `vet = "trusted-writers"`, a kernel put with a token not listed.
    #[error(
        "envelope: this fleet takes kernels only from the token ids in trusted_writers (vet = \"trusted-writers\"), and {token} is not one; blobs and snapshot files are still taken"
    )]
    UntrustedWriter { token: String },
    /// Writers kept replacing the key while this Put judged what it held.
    #[error("key {key}: other writers kept replacing it; retry the Put")]
    Contended { key: String },
    /// The server's pub/sub subscription is not live, so a watch could not start.
    #[error("the pub/sub subscription to Redis is down; retry shortly")]
    PubSubDown,
}

impl Error {
    /// The gRPC code this error answers with.
    pub fn code(&self) -> Code {
        match self {
            Error::BadKey { .. }
            | Error::Missing { .. }
            | Error::Envelope(_)
            | Error::TooLarge { .. }
            | Error::TooMany { .. }
            | Error::OutOfRange { .. }
            | Error::BadHolder
            | Error::BadField { .. } => Code::InvalidArgument,
            Error::Auth(e) => e.code(),
            Error::UntrustedWriter { .. } => Code::PermissionDenied,
            Error::Quarantined { .. } | Error::Conflict { .. } => Code::FailedPrecondition,
            Error::Contended { .. } => Code::Aborted,
            Error::Redis(e) | Error::Announce(e) if is_out_of_memory(e) => Code::ResourceExhausted,
            Error::Redis(_) | Error::Announce(_) | Error::PubSubDown => Code::Unavailable,
        }
    }

    /// Whether this is a failure of Redis, for `kiln_server_redis_errors_total`.
    pub fn is_redis(&self) -> bool {
        matches!(self, Error::Redis(_) | Error::Announce(_))
    }

    /// Whether Redis could not be reached at all (as opposed to refusing one command), which is
    /// what `kiln_server_redis_up` reports.
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Redis(e) | Error::Announce(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    || e.is_unrecoverable_error()
            }
            _ => false,
        }
    }
}

/// A full Redis under `maxmemory-policy noeviction` answers OOM; that is a full cache, not an
/// outage. (Under the recommended `allkeys-lru` Redis evicts instead and never says this.)
fn is_out_of_memory(e: &redis::RedisError) -> bool {
    e.code() == Some("OOM") || e.to_string().contains("OOM")
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        let code = e.code();
        let message = match (&e, code) {
            (_, Code::ResourceExhausted) => {
                format!("{e} (Redis is full: run it with maxmemory-policy allkeys-lru)")
            }
            (Error::Redis(_), _) if e.is_connection() => {
                format!("kiln-cache cannot reach Redis: {e}")
            }
            _ => e.to_string(),
        };
        Status::new(code, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_proto() {
        assert_eq!(Error::BadKey { field: "keys[2]".into() }.code(), Code::InvalidArgument);
        assert_eq!(Error::from(AuthError::NoToken).code(), Code::Unauthenticated);
        assert_eq!(Error::from(AuthError::ReadOnly { op: "Put".into() }).code(), Code::PermissionDenied);
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let e = Error::Redis(io);
        assert!(e.is_connection() && e.is_redis());
        let status = Status::from(e);
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.message().contains("cannot reach Redis"));
    }

    #[test]
    fn messages_name_the_field() {
        let s = Status::from(Error::OutOfRange { field: "ttl_ms", value: 5, min: 100, max: 600_000 });
        assert_eq!(s.message(), "ttl_ms: 5 is outside 100..=600000");
    }
}
