//! The quarantine handlers: an auditor's report taken in, checked field by field and recorded
//! (see `crate::store` for the move itself), and the records listed for every kilnd's poll; and
//! the conflicting writes (see `crate::conflict`), listed on request beside them.

use super::CacheService;
use crate::error::Error;
use crate::metrics::PublisherLabels;
use crate::store::{MAX_LIST, Quarantined};
use crate::trust::publisher_id;
use crate::validate;
use kiln_proto::auth::Caller;
use kiln_proto::pb::{
    QuarantineListRequest, QuarantineListResponse, QuarantineRecord, QuarantineRequest, QuarantineResponse,
};

impl CacheService {
    pub(super) async fn quarantine(&self, req: QuarantineRequest, caller: Caller) -> Result<QuarantineResponse, Error> {
        let key = validate::key("key", &req.key)?;
        let served = validate::digest("served_digest", &req.served_digest)?;
        validate::digest("audited_digest", &req.audited_digest)?;
        validate::host("reporter_host", &req.reporter_host)?;
        validate::text("detail", &req.detail, 0, 1024)?;
        let record = QuarantineRecord {
            reporter_host: req.reporter_host,
            reporter_token: caller.token_id,
            audited_digest: req.audited_digest,
            detail: req.detail,
            ..Default::default()
        };
        match self.store.quarantine(&key, served, record).await? {
            Quarantined::Now(record) => {
                // Found wrong once, distrusted everywhere: its other kernels are vetted again
                // before any host runs them.
                if let Some(id) = record.publisher.as_ref().and_then(publisher_id) {
                    self.trust.distrust(&self.store, &id).await?;
                }
                let publisher = record.publisher.as_ref().map(|p| p.host.clone()).unwrap_or_default();
                self.metrics.quarantines.get_or_create(&PublisherLabels { publisher: publisher.clone() }).inc();
                tracing::warn!(
                    %key, %publisher, reporter = %record.reporter_host, detail = %record.detail,
                    "quarantined: an audit found these bytes differ from what the key's inputs compile to"
                );
                Ok(QuarantineResponse { quarantined: true, record: Some(*record) })
            }
            Quarantined::NotHeld => {
                Ok(QuarantineResponse { quarantined: false, record: self.store.quarantine_record(&key).await? })
            }
        }
    }

    pub(super) async fn list_quarantine(&self, req: QuarantineListRequest) -> Result<QuarantineListResponse, Error> {
        let limit = match req.limit as usize {
            0 => MAX_LIST,
            n if n <= MAX_LIST => n,
            n => return Err(Error::OutOfRange { field: "limit", value: n as u64, min: 0, max: MAX_LIST as u64 }),
        };
        if req.conflicts {
            let (conflicts, more) = self.store.list_conflicts(req.since_ms, limit).await?;
            return Ok(QuarantineListResponse { conflicts, more, ..Default::default() });
        }
        let (records, more) = self.store.list_quarantine(req.since_ms, limit).await?;
        Ok(QuarantineListResponse { records, more, ..Default::default() })
    }
}
