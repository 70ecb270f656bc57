//! The fleet's vetting in Redis: two sets of publisher ids, those an auditor vouched for and
//! those quarantined since (see `crate::trust` for what they mean), and each artifact's own mark
//! in its head's provenance once a second token confirmed it. A publisher in both sets is
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
        Ok(self.raw_head_holding(key, served).await?.map(|(parsed, _)| parsed))
    }

    /// [`Store::head_holding`] with the head's value as read, for a compare-and-set.
    async fn raw_head_holding(
        &self,
        key: &CacheKey,
        served: [u8; 32],
    ) -> Result<Option<(layout::Head, Vec<u8>)>, Error> {
        let mut con = self.redis.clone();
        let head: Option<Vec<u8>> = redis::cmd("GET").arg(layout::head_key(key)).query_async(&mut con).await?;
        let Some(head) = head else { return Ok(None) };
        let parsed = layout::parse_head(&head).ok().map(|(parsed, _)| parsed);
        Ok(parsed.filter(|parsed| parsed.digest == served).map(|parsed| (parsed, head)))
    }

    /// Marks the artifact `key` holds `confirmed` (a second token found the same bytes), while
    /// it still holds the envelope whose blake3 is `served`; whether it did. The mark lives in
    /// the head, so it goes with these bytes: a later publish under the key starts unconfirmed.
    pub async fn confirm(&self, key: &CacheKey, served: [u8; 32]) -> Result<bool, Error> {
        let Some((parsed, head)) = self.raw_head_holding(key, served).await? else { return Ok(false) };
        let provenance = Provenance::decode(parsed.provenance.as_slice()).unwrap_or_default();
        if provenance.confirmed {
            return Ok(true);
        }
        self.restamp(key, &head, &Provenance { confirmed: true, ..provenance }).await
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
