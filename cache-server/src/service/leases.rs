//! AcquireLease, RenewLease and ReleaseLease: a key's lease lets one host compile it while the
//! others wait for its publish. Each lease taken, renewed or given up is told to the status
//! page's tally, which counts the leases held.

use super::CacheService;
use super::ops::Op;
use crate::error::Error;
use crate::status::tally::{LeaseEvent, now_ms};
use crate::store::Acquired;
use crate::validate;
use kiln_proto::pb::{LeaseRequest, LeaseResponse};
use std::time::Duration;

impl CacheService {
    pub(super) async fn lease(&self, op: Op, req: LeaseRequest) -> Result<LeaseResponse, Error> {
        let key = validate::key("key", &req.key)?;
        validate::holder(&req.holder)?;
        // The status page counts leases held from these events (see `status::tally`).
        let held_until = |ttl: Duration| LeaseEvent::HeldUntil(now_ms() + ttl.as_millis() as u64);
        let (ok, present, event) = match op {
            Op::ReleaseLease => (self.store.release_lease(&key, &req.holder).await?, false, LeaseEvent::Released),
            Op::RenewLease => {
                let ttl = validate::lease_ttl(req.ttl_ms, &self.limits)?;
                (self.store.renew_lease(&key, &req.holder, ttl).await?, false, held_until(ttl))
            }
            _ => {
                let ttl = validate::lease_ttl(req.ttl_ms, &self.limits)?;
                let acquired = self.store.acquire_lease(&key, &req.holder, ttl).await?;
                (acquired == Acquired::Taken, acquired == Acquired::Present, held_until(ttl))
            }
        };
        if ok {
            self.metrics.tally.lease(key.to_hex(), event);
        }
        Ok(LeaseResponse { ok, present })
    }
}
