//! The fleet's vetting in Redis: two sets of publisher ids, those an auditor vouched for and
//! those quarantined since (see `crate::trust` for what they mean). A publisher in both is
//! distrusted: a quarantine is never undone by a later vouch.

use super::Store;
use crate::error::Error;
use crate::layout;
use kiln_proto::CacheKey;
use kiln_proto::pb::Provenance;
use prost::Message;

impl Store {
    /// Every vetted and every distrusted publisher id, in one round trip.
    pub async fn trust_sets(&self) -> Result<(Vec<String>, Vec<String>), Error> {
        let mut pipe = redis::pipe();
        pipe.cmd("SMEMBERS").arg(layout::VETTED).cmd("SMEMBERS").arg(layout::DISTRUSTED);
        let mut con = self.redis.clone();
        Ok(pipe.query_async(&mut con).await?)
    }

    /// Who published the envelope `key` holds, when its blake3 is `served`; `None` when the key
    /// holds other bytes or none (replaced, expired, quarantined).
    pub async fn publisher_of(&self, key: &CacheKey, served: [u8; 32]) -> Result<Option<Provenance>, Error> {
        let head = self.head_holding(key, served).await?;
        Ok(head.map(|head| Provenance::decode(head.provenance.as_slice()).unwrap_or_default()))
    }

    /// The head of `key` while it holds the envelope whose blake3 is `served`: what an auditor's
    /// verdict is about. `None` for other bytes, none, or a damaged head.
    pub(super) async fn head_holding(&self, key: &CacheKey, served: [u8; 32]) -> Result<Option<layout::Head>, Error> {
        let mut con = self.redis.clone();
        let head: Option<Vec<u8>> = redis::cmd("GET").arg(layout::head_key(key)).query_async(&mut con).await?;
        let parsed = head.as_deref().and_then(|head| layout::parse_head(head).ok()).map(|(parsed, _)| parsed);
        Ok(parsed.filter(|parsed| parsed.digest == served))
    }

    /// Records `publisher` (an id) as vetted for the fleet.
    pub async fn vet(&self, publisher: &str) -> Result<(), Error> {
        self.add_to(layout::VETTED, publisher).await
    }

    /// Records `publisher` (an id) as distrusted for the fleet, for good: an operator lifts it by
    /// removing it from the set.
    pub async fn distrust(&self, publisher: &str) -> Result<(), Error> {
        self.add_to(layout::DISTRUSTED, publisher).await
    }

    async fn add_to(&self, set: &str, member: &str) -> Result<(), Error> {
        let mut con = self.redis.clone();
        redis::cmd("SADD").arg(set).arg(member).query_async::<()>(&mut con).await?;
        Ok(())
    }
}
