//! The vouch handler: an auditor's report that the artifact under a key is what the key's inputs
//! compile to on its host, which vets the publisher of those bytes for the fleet (see
//! `crate::trust`) and confirms the artifact itself: two tokens agree on it. The publisher is
//! read from the key's head, never taken from the report, so a host can vouch only for bytes it
//! was served; and a writer cannot vouch for itself.

use super::CacheService;
use crate::error::Error;
use crate::trust::publisher_id;
use crate::validate;
use kiln_proto::auth::Caller;
use kiln_proto::pb::{VouchRequest, VouchResponse};

impl CacheService {
    pub(super) async fn vouch(&self, req: VouchRequest, caller: Caller) -> Result<VouchResponse, Error> {
        let key = validate::key("key", &req.key)?;
        let served = validate::digest("served_digest", &req.served_digest)?;
        validate::host("reporter_host", &req.reporter_host)?;
        let Some(publisher) = self.store.publisher_of(&key, served).await? else {
            return Ok(refused(None, "the key no longer holds the served bytes"));
        };
        let Some(id) = publisher_id(&publisher) else {
            return Ok(refused(Some(publisher), "an anonymous publisher names no writer to vet"));
        };
        if publisher.token == caller.token_id {
            return Ok(refused(Some(publisher), "a writer cannot vouch for its own token"));
        }
        if self.trust.distrusts(&id) {
            return Ok(refused(Some(publisher), "quarantined before: a publisher found wrong stays distrusted"));
        }
        self.trust.vouch(&self.store, &id).await?;
        let confirmed = self.store.confirm(&key, served).await?;
        tracing::info!(%key, publisher = %id, reporter = %req.reporter_host, confirmed, "vouched for: an audit found the same bytes");
        Ok(VouchResponse { vetted: true, publisher: Some(publisher), refused: String::new() })
    }
}

fn refused(publisher: Option<kiln_proto::pb::Provenance>, why: &str) -> VouchResponse {
    VouchResponse { vetted: false, publisher, refused: why.to_owned() }
}
