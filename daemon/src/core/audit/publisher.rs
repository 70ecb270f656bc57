//! Who published an artifact, as far as the audit may trust it.
//!
//! A host name is whatever the writer sends with its `Put`: a writer gone bad can name no host,
//! or an honest host's name. The token id is not the writer's to choose: kiln-cache stamps it
//! from the token that authenticated the `Put`. So a publisher, for the audit, is the token id
//! together with the declared host: the same name behind another token is another publisher,
//! and must earn its own clean audit. Without a token behind it (kiln-cache without tokens, or
//! an artifact stored before kiln-cache recorded provenance) a publish says nothing about its
//! writer at all: such an artifact is anonymous, and each one is audited on its own account. So
//! is one kiln-cache marks disputed (another writer offered different bytes under its key, and
//! was refused), whoever published it: one of the two writers is wrong.

use kiln_proto::CacheKey;
use kiln_proto::auth::Caller;
use kiln_proto::pb::Provenance;

/// A publisher the audit can tell apart from others.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Publisher {
    /// kiln-cache's id of the writer's token (`tok-…`).
    pub token: String,
    /// The host the writer declared; may be empty.
    pub host: String,
}

impl Publisher {
    /// The publisher `provenance` names, or `None` when nothing vouches for the writer: no
    /// provenance, no token id, or kiln-cache's id for a writer without a token.
    pub fn of(provenance: Option<&Provenance>) -> Option<Publisher> {
        let p = provenance?;
        if p.token.is_empty() || p.token == Caller::anonymous().token_id {
            return None;
        }
        Some(Publisher { token: p.token.clone(), host: p.host.clone() })
    }
}

impl std::fmt::Display for Publisher {
    /// `gpu-7 (tok-0123456789ab)`, or the token id alone when no host was declared.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.is_empty() { f.write_str(&self.token) } else { write!(f, "{} ({})", self.host, self.token) }
    }
}

/// One publish of one key: the key, the time kiln-cache stamped on the publish, and whether it
/// was disputed when fetched. A new publish under the key (after a quarantine, or an expiry) is
/// another artifact, and so is the same one once disputed: an audit of it before the dispute
/// does not settle it.
pub type Publish = (CacheKey, u64, bool);

/// Why the audit took an artifact, beside the random sample.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Claim {
    /// The first artifact seen of a publisher not yet audited clean.
    NewPublisher(Publisher),
    /// An artifact audited on its own account: anonymous, or disputed by another writer.
    Artifact(Publish),
    /// Nothing in particular: the random sample, or `kiln audit`.
    Sampled,
}

/// What the audit must do about a fetched artifact, from its provenance alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Anonymous, or disputed: audit this publish unless already done.
    OnItsOwn(Publish),
    /// A known publisher: audit its first artifact until one is clean.
    Of(Publisher),
}

/// How `key`'s artifact, published as `provenance` says, stands with the audit.
pub fn standing(key: &CacheKey, provenance: Option<&Provenance>) -> Standing {
    let (when, disputed) = provenance.map_or((0, false), |p| (p.unix_ms, p.disputed));
    match Publisher::of(provenance) {
        Some(publisher) if !disputed => Standing::Of(publisher),
        _ => Standing::OnItsOwn((*key, when, disputed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(host: &str, token: &str) -> Provenance {
        Provenance { host: host.into(), token: token.into(), unix_ms: 7, ..Default::default() }
    }

    #[test]
    fn a_publisher_is_its_token_and_its_host_and_no_token_is_nobody() {
        let key = CacheKey::from_bytes([1; 32]);
        assert_eq!(standing(&key, None), Standing::OnItsOwn((key, 0, false)));
        assert_eq!(standing(&key, Some(&provenance("gpu-1", "anonymous"))), Standing::OnItsOwn((key, 7, false)));
        assert_eq!(standing(&key, Some(&provenance("gpu-1", ""))), Standing::OnItsOwn((key, 7, false)));
        let disputed = Provenance { disputed: true, ..provenance("gpu-1", "tok-a") };
        assert_eq!(standing(&key, Some(&disputed)), Standing::OnItsOwn((key, 7, true)), "whoever published it");
        let honest = Publisher::of(Some(&provenance("gpu-1", "tok-a"))).unwrap_or_else(|| unreachable!());
        let spoofed = Publisher::of(Some(&provenance("gpu-1", "tok-b"))).unwrap_or_else(|| unreachable!());
        assert_ne!(honest, spoofed, "the same name behind another token");
        assert_eq!(honest.to_string(), "gpu-1 (tok-a)");
        let unnamed = Publisher::of(Some(&provenance("", "tok-a"))).unwrap_or_else(|| unreachable!());
        assert_ne!(honest, unnamed);
        assert_eq!(unnamed.to_string(), "tok-a");
    }
}
