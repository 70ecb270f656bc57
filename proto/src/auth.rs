//! Bearer tokens, read-only or read-write: the one copy of the token logic that kiln-cache and
//! kilnd's TCP listener check, and the interceptor their clients send a token with.
//!
//! A cache is code that will run on GPUs, and kilnd compiles (runs Triton modules) for whoever
//! may write, so who may write matters more than who may read: each server names which calls a
//! read-only token may make, and everything else needs a read-write token.
//!
//! Tokens come from a tokens file with one `read:TOKEN` or `write:TOKEN` per line (kiln-cache also
//! takes `[[tokens]]` in its config). They are kept only as blake3 digests and looked up by
//! digest, so the check takes the same time whichever byte of a wrong token differs, and a memory
//! dump of the server does not reveal them.

use serde::Deserialize;
use std::collections::HashMap;
use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::{Code, Request, Status};

/// What a token allows. `Write` includes `Read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

/// Shortest token accepted: a short token can be guessed by anyone who can reach the port.
pub const MIN_TOKEN_CHARS: usize = 16;

/// One configured token. Its `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub token: String,
    pub access: Access,
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry").field("token", &"<redacted>").field("access", &self.access).finish()
    }
}

/// Why a token list was refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("line {line}: expected `read:TOKEN` or `write:TOKEN`")]
    Syntax { line: usize },
    #[error("a token has {chars} characters; at least {MIN_TOKEN_CHARS} are required")]
    TooShort { chars: usize },
    #[error("a token holds whitespace or a character that cannot travel in gRPC metadata")]
    BadCharacter,
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing or malformed `authorization: Bearer <token>` metadata")]
    NoToken,
    #[error("the bearer token is not valid for this server")]
    WrongToken,
    #[error("{op} needs a read-write token; this one is read-only")]
    ReadOnly { op: String },
}

impl AuthError {
    /// UNAUTHENTICATED without a valid token, PERMISSION_DENIED for a reader's write.
    pub fn code(&self) -> Code {
        match self {
            AuthError::NoToken | AuthError::WrongToken => Code::Unauthenticated,
            AuthError::ReadOnly { .. } => Code::PermissionDenied,
        }
    }
}

impl From<AuthError> for Status {
    fn from(e: AuthError) -> Self {
        Status::new(e.code(), e.to_string())
    }
}

/// Parses a tokens file: `read:TOKEN` / `write:TOKEN` per line; blank lines and `#` comments are
/// skipped.
pub fn parse_tokens_file(text: &str) -> Result<Vec<TokenEntry>, TokenError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (access, token) = match line.split_once(':') {
            Some(("read", t)) => (Access::Read, t),
            Some(("write", t)) => (Access::Write, t),
            _ => return Err(TokenError::Syntax { line: i + 1 }),
        };
        out.push(TokenEntry { token: token.to_owned(), access });
    }
    Ok(out)
}

/// The tokens a server accepts.
#[derive(Clone)]
pub struct Tokens {
    /// blake3(token) → access. See the module doc for why digests.
    by_digest: HashMap<[u8; 32], Access>,
    /// No authentication: every caller may write.
    open: bool,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").field("count", &self.by_digest.len()).field("open", &self.open).finish()
    }
}

impl Tokens {
    /// Checks and indexes the configured tokens. Where a token is listed twice, the wider access
    /// wins.
    pub fn new(entries: &[TokenEntry]) -> Result<Self, TokenError> {
        let mut by_digest = HashMap::new();
        for e in entries {
            let chars = e.token.chars().count();
            if chars < MIN_TOKEN_CHARS {
                return Err(TokenError::TooShort { chars });
            }
            if !e.token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(TokenError::BadCharacter);
            }
            let slot = by_digest.entry(*blake3::hash(e.token.as_bytes()).as_bytes()).or_insert(e.access);
            *slot = (*slot).max(e.access);
        }
        Ok(Tokens { by_digest, open: false })
    }

    /// No authentication at all: only for a server on a trusted network or a test.
    pub fn insecure() -> Self {
        Tokens { by_digest: HashMap::new(), open: true }
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// How many distinct tokens there are.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Checks the `authorization` metadata against the access `op` needs; the caller's
    /// [`Caller`] on success.
    pub fn check(&self, metadata: &MetadataMap, op: &str, needs: Access) -> Result<Caller, AuthError> {
        self.check_header(metadata.get("authorization").and_then(|v| v.to_str().ok()), op, needs)
    }

    /// [`Tokens::check`] on the `authorization` header's value, for a layer that sees the HTTP
    /// request rather than gRPC metadata.
    pub fn check_header(&self, authorization: Option<&str>, op: &str, needs: Access) -> Result<Caller, AuthError> {
        if self.open {
            return Ok(Caller::anonymous());
        }
        let token = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::NoToken)?;
        let access = self.by_digest.get(blake3::hash(token.as_bytes()).as_bytes()).ok_or(AuthError::WrongToken)?;
        if *access < needs {
            return Err(AuthError::ReadOnly { op: op.to_owned() });
        }
        Ok(Caller::of(token))
    }
}

/// Who made a request, as far as its token says: what a server records as a write's author
/// (an artifact's provenance) without ever storing or logging the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `tok-` and the first 12 hex characters of blake3(token): stable for one token, distinct
    /// between tokens in practice, and useless for authenticating. `anonymous` on a server
    /// without tokens.
    pub token_id: String,
}

impl Caller {
    pub fn of(token: &str) -> Self {
        let digest = blake3::hash(token.as_bytes()).to_hex();
        Caller { token_id: format!("tok-{}", &digest[..12]) }
    }

    pub fn anonymous() -> Self {
        Caller { token_id: "anonymous".into() }
    }
}

/// A client interceptor that puts `authorization: Bearer <token>` on every request, or nothing
/// when there is no token. Its `Debug` never prints the token.
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Bearer").field(&self.0.as_ref().map(|_| "<redacted>")).finish()
    }
}

/// A token that cannot travel in gRPC metadata (a control character, say).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the token holds characters that cannot travel in gRPC metadata")]
pub struct InvalidToken;

impl Bearer {
    /// `token` on every request; an empty `token` sends none.
    pub fn new(token: &str) -> Result<Self, InvalidToken> {
        match token {
            "" => Ok(Bearer(None)),
            t => {
                let mut value: MetadataValue<Ascii> = format!("Bearer {t}").parse().map_err(|_| InvalidToken)?;
                value.set_sensitive(true);
                Ok(Bearer(Some(value)))
            }
        }
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    const R: &str = "read-token-0123456789";
    const W: &str = "write-token-0123456789";

    fn tokens() -> Tokens {
        let file = format!("# fleet tokens\n\nread:{R}\nwrite:{W}\n");
        Tokens::new(&parse_tokens_file(&file).unwrap()).unwrap()
    }

    fn meta(value: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(v) = value {
            m.insert("authorization", v.parse().unwrap());
        }
        m
    }

    fn code(r: Result<Caller, AuthError>) -> Option<Code> {
        r.err().map(|e| e.code())
    }

    #[test]
    fn read_and_write_tokens() {
        let t = tokens();
        let read = meta(Some(&format!("Bearer {R}")));
        let write = meta(Some(&format!("Bearer {W}")));
        assert_eq!(code(t.check(&read, "Get", Access::Read)), None);
        assert_eq!(code(t.check(&write, "Put", Access::Write)), None);
        assert_eq!(code(t.check(&write, "Get", Access::Read)), None);
        let denied = t.check(&read, "Put", Access::Write).unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert!(denied.to_string().starts_with("Put needs a read-write token"), "{denied}");
    }

    #[test]
    fn missing_or_wrong_tokens_are_unauthenticated() {
        let t = tokens();
        for m in [meta(None), meta(Some(R)), meta(Some("Bearer ")), meta(Some("Bearer not-a-configured-token"))] {
            assert_eq!(code(t.check(&m, "Get", Access::Read)), Some(Code::Unauthenticated));
        }
        assert_eq!(code(Tokens::insecure().check(&meta(None), "Put", Access::Write)), None);
    }

    #[test]
    fn bad_token_lists_are_refused() {
        assert_eq!(parse_tokens_file("admin:x").unwrap_err(), TokenError::Syntax { line: 1 });
        let short = parse_tokens_file("read:short").unwrap();
        assert_eq!(Tokens::new(&short).unwrap_err(), TokenError::TooShort { chars: 5 });
        let spaced = parse_tokens_file("read:has a space in it ok").unwrap();
        assert_eq!(Tokens::new(&spaced).unwrap_err(), TokenError::BadCharacter);
    }

    #[test]
    fn debug_never_prints_a_token() {
        let e = TokenEntry { token: W.into(), access: Access::Write };
        assert!(!format!("{e:?}").contains(W));
        let b = Bearer::new(W).unwrap();
        assert!(!format!("{b:?}").contains(W));
    }

    #[test]
    fn the_bearer_interceptor_sends_what_the_check_reads() {
        let mut b = Bearer::new(W).unwrap();
        let sent = b.call(Request::new(())).unwrap();
        assert_eq!(code(tokens().check(sent.metadata(), "Put", Access::Write)), None);
        let none = Bearer::new("").unwrap().call(Request::new(())).unwrap();
        assert!(none.metadata().get("authorization").is_none());
        assert_eq!(Bearer::new("bad\ntoken").unwrap_err(), InvalidToken);
    }
}
