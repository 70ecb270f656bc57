//! Request fields checked before anything reaches Redis. Every failure is INVALID_ARGUMENT and
//! names its field, so a client can tell which part of its request was wrong.

use crate::config::Limits;
use crate::error::Error;
use kiln_proto::CacheKey;
use std::time::Duration;

/// Largest compiler log a negative entry keeps; a log past this is usually the same error
/// repeated, and every waiter receives it. The client cuts logs to the same bound.
pub const MAX_NEGATIVE_LOG: usize = kiln_proto::MAX_NEGATIVE_LOG_BYTES;

/// A cache key: 64 lowercase hex characters, nothing else, so no input ever shapes a Redis key.
pub fn key(field: &str, value: &str) -> Result<CacheKey, Error> {
    value.parse().map_err(|_| Error::BadKey { field: field.to_owned() })
}

/// A list of keys, each named by its index, at most `limit` of them.
pub fn keys(field: &'static str, values: &[String], limit: usize) -> Result<Vec<CacheKey>, Error> {
    if values.len() > limit {
        return Err(Error::TooMany { field, count: values.len(), limit });
    }
    values.iter().enumerate().map(|(i, v)| key(&format!("{field}[{i}]"), v)).collect()
}

/// A lease holder token: 16 to 128 characters of `[A-Za-z0-9_-]`, as the proto says. Random and
/// long enough that two holders never collide, and plain enough to log.
pub fn holder(value: &str) -> Result<(), Error> {
    let ok =
        (16..=128).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok { Ok(()) } else { Err(Error::BadHolder) }
}

pub fn lease_ttl(ttl_ms: u64, limits: &Limits) -> Result<Duration, Error> {
    in_range("ttl_ms", ttl_ms, limits.lease_min, limits.lease_max)
}

/// A negative entry's lifetime; 0 means the configured default.
pub fn negative_ttl(ttl_ms: u64, limits: &Limits) -> Result<Duration, Error> {
    if ttl_ms == 0 {
        return Ok(limits.negative_ttl);
    }
    in_range("negative_ttl_ms", ttl_ms, Duration::from_millis(1), limits.max_negative_ttl)
}

/// A host's name: 1 to 253 characters of `[A-Za-z0-9._-]`, so it can name a Redis key and a
/// metric label without escaping.
pub fn host(field: &str, value: &str) -> Result<(), Error> {
    let ok = (1..=253).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok { Ok(()) } else { Err(bad(field, "expected 1 to 253 characters of [A-Za-z0-9._-]")) }
}

/// A blake3 digest in hex: 64 lowercase hex characters (the same form as a key).
pub fn digest(field: &str, value: &str) -> Result<[u8; 32], Error> {
    key(field, value).map(|k| *k.as_bytes())
}

pub fn bad(field: &str, reason: &str) -> Error {
    Error::BadField { field: field.to_owned(), reason: reason.to_owned() }
}

/// `min` to `max` characters with no control characters (markup is allowed: pages escape).
pub fn text(field: &str, value: &str, min: usize, max: usize) -> Result<(), Error> {
    let n = value.chars().count();
    if n < min || n > max {
        return Err(bad(field, &format!("expected {min} to {max} characters, got {n}")));
    }
    if value.chars().any(char::is_control) {
        return Err(bad(field, "control characters are not allowed"));
    }
    Ok(())
}

fn in_range(field: &'static str, ms: u64, min: Duration, max: Duration) -> Result<Duration, Error> {
    let (min, max) = (min.as_millis() as u64, max.as_millis() as u64);
    if (min..=max).contains(&ms) {
        Ok(Duration::from_millis(ms))
    } else {
        Err(Error::OutOfRange { field, value: ms, min, max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, FileConfig, Flags};

    fn limits() -> Limits {
        let flags = Flags { insecure_no_auth: true, ..Default::default() };
        Config::merge(&flags, &FileConfig::default(), None).unwrap().limits
    }

    #[test]
    fn keys_must_be_lowercase_hex() {
        let good = "ab".repeat(32);
        assert!(key("key", &good).is_ok());
        for bad in ["", "AB", &"AB".repeat(32), &"ab".repeat(33), "../../etc/passwd"] {
            let e = key("key", bad).unwrap_err();
            assert_eq!(e.to_string(), "key: expected 64 lowercase hex characters");
        }
        let e = keys("keys", &[good.clone(), "x".into()], 10).unwrap_err();
        assert!(e.to_string().starts_with("keys[1]:"), "{e}");
        assert!(matches!(keys("keys", &[good.clone(), good], 1), Err(Error::TooMany { .. })));
    }

    #[test]
    fn holders_and_ttls() {
        assert!(holder("abcdefghABCDEFGH0123_-").is_ok());
        for bad in ["short", "has space in it 1234", &"a".repeat(129), "ünïcödé-ünïcödé-"] {
            assert!(holder(bad).is_err(), "{bad}");
        }
        let l = limits();
        assert_eq!(lease_ttl(100, &l).unwrap(), Duration::from_millis(100));
        assert!(lease_ttl(99, &l).is_err() && lease_ttl(600_001, &l).is_err());
        assert_eq!(negative_ttl(0, &l).unwrap(), Duration::from_secs(60));
        assert!(negative_ttl(3_600_001, &l).is_err());
    }
}
