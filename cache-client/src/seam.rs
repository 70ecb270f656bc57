//! The seam between kilnd's fleet tier and kiln-cache: every call the tier makes, as a trait.
//! [`RemoteCache`] is the implementation kilnd runs with; `FakeCache` (the `fake` feature) is the
//! in-memory one its unit tests run the same tier, breaker, leases and claims over. It lives
//! beside `RemoteCache` so that a new kiln-cache call is written in the proto, the server and this
//! crate, and kilnd only uses it.

use crate::{Acquired, ClientError, Difference, Lookup, PublishEvent, RemoteCache};
use futures_util::Stream;
use kiln_proto::CacheKey;
use kiln_proto::pb::{
    HostReport, NegativeEntry, QuarantineListRequest, QuarantineListResponse, QuarantineResponse, TorchJobReturn,
    TorchJobsReply, TorchProcessCosts, VouchResponse,
};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// One call's answer, boxed so that clients can sit behind `dyn`.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, ClientError>> + Send + 'a>>;

/// A key's publish events (see [`RemoteCache::watch_publish`] with `values`).
pub type Events = Pin<Box<dyn Stream<Item = Result<PublishEvent, ClientError>> + Send>>;

/// What the fleet tier asks of kiln-cache.
pub trait CacheClient: Send + Sync + std::fmt::Debug {
    fn get<'a>(&'a self, key: &'a CacheKey) -> Call<'a, Lookup>;
    fn batch_get<'a>(&'a self, keys: &'a [CacheKey]) -> Call<'a, Vec<(CacheKey, Lookup)>>;
    fn contains<'a>(&'a self, keys: &'a [CacheKey]) -> Call<'a, Vec<bool>>;
    fn put<'a>(&'a self, key: &'a CacheKey, envelope: Vec<u8>) -> Call<'a, ()>;
    fn put_negative<'a>(&'a self, key: &'a CacheKey, failure: NegativeEntry, ttl: Duration) -> Call<'a, ()>;
    fn get_manifest<'a>(&'a self, graph_key: &'a CacheKey) -> Call<'a, Option<Vec<CacheKey>>>;
    fn put_manifest<'a>(&'a self, graph_key: &'a CacheKey, kernel_keys: &'a [CacheKey]) -> Call<'a, ()>;
    fn acquire_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str, ttl: Duration) -> Call<'a, Acquired>;
    fn renew_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str, ttl: Duration) -> Call<'a, bool>;
    fn release_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str) -> Call<'a, bool>;
    /// `key`'s publish events, with the entries themselves.
    fn watch<'a>(&'a self, key: &'a CacheKey) -> Call<'a, Events>;
    fn report_host(&self, report: HostReport) -> Call<'_, ()>;
    /// Merges a process's account of a torch.compile job into the fleet ledger.
    fn report_torch_job<'a>(&'a self, job: &'a str, process: TorchProcessCosts) -> Call<'a, TorchJobReturn>;
    /// Jobs' returns from the fleet ledger.
    fn list_torch_jobs<'a>(&'a self, job: &'a str, limit: u32) -> Call<'a, TorchJobsReply>;
    /// Reports that the envelope `served` under `key` differs from this host's compile.
    fn quarantine<'a>(&'a self, key: &'a CacheKey, found: Difference<'a>) -> Call<'a, QuarantineResponse>;
    /// The fleet's quarantine records (or conflicting writes) as `request` asks.
    fn list_quarantine(&self, request: QuarantineListRequest) -> Call<'_, QuarantineListResponse>;
    /// Reports that the envelope `served` under `key` is what this host compiles from its inputs.
    fn vouch<'a>(&'a self, key: &'a CacheKey, served: &'a blake3::Hash) -> Call<'a, VouchResponse>;
    /// Whether Redis answers kiln-cache (kiln-cache answers while Redis is down): the probe's
    /// question.
    fn redis_up(&self) -> Call<'_, bool>;
}

impl CacheClient for RemoteCache {
    fn get<'a>(&'a self, key: &'a CacheKey) -> Call<'a, Lookup> {
        Box::pin(RemoteCache::get(self, key))
    }

    fn batch_get<'a>(&'a self, keys: &'a [CacheKey]) -> Call<'a, Vec<(CacheKey, Lookup)>> {
        Box::pin(RemoteCache::batch_get(self, keys))
    }

    fn contains<'a>(&'a self, keys: &'a [CacheKey]) -> Call<'a, Vec<bool>> {
        Box::pin(RemoteCache::contains(self, keys))
    }

    fn put<'a>(&'a self, key: &'a CacheKey, envelope: Vec<u8>) -> Call<'a, ()> {
        Box::pin(RemoteCache::put(self, key, envelope))
    }

    fn put_negative<'a>(&'a self, key: &'a CacheKey, failure: NegativeEntry, ttl: Duration) -> Call<'a, ()> {
        Box::pin(RemoteCache::put_negative(self, key, failure, ttl))
    }

    fn get_manifest<'a>(&'a self, graph_key: &'a CacheKey) -> Call<'a, Option<Vec<CacheKey>>> {
        Box::pin(RemoteCache::get_manifest(self, graph_key))
    }

    fn put_manifest<'a>(&'a self, graph_key: &'a CacheKey, kernel_keys: &'a [CacheKey]) -> Call<'a, ()> {
        Box::pin(RemoteCache::put_manifest(self, graph_key, kernel_keys))
    }

    fn acquire_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str, ttl: Duration) -> Call<'a, Acquired> {
        Box::pin(RemoteCache::acquire_lease(self, key, holder, ttl))
    }

    fn renew_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str, ttl: Duration) -> Call<'a, bool> {
        Box::pin(RemoteCache::renew_lease(self, key, holder, ttl))
    }

    fn release_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str) -> Call<'a, bool> {
        Box::pin(RemoteCache::release_lease(self, key, holder))
    }

    fn watch<'a>(&'a self, key: &'a CacheKey) -> Call<'a, Events> {
        Box::pin(async move {
            let stream = self.watch_publish(std::slice::from_ref(key), true).await?;
            Ok(Box::pin(stream) as Events)
        })
    }

    fn report_host(&self, report: HostReport) -> Call<'_, ()> {
        Box::pin(async move { RemoteCache::report_host(self, report).await.map(|_| ()) })
    }

    fn report_torch_job<'a>(&'a self, job: &'a str, process: TorchProcessCosts) -> Call<'a, TorchJobReturn> {
        Box::pin(RemoteCache::report_torch_job(self, job, process))
    }

    fn list_torch_jobs<'a>(&'a self, job: &'a str, limit: u32) -> Call<'a, TorchJobsReply> {
        Box::pin(RemoteCache::list_torch_jobs(self, job, limit))
    }

    fn quarantine<'a>(&'a self, key: &'a CacheKey, found: Difference<'a>) -> Call<'a, QuarantineResponse> {
        Box::pin(RemoteCache::quarantine(self, key, found))
    }

    fn list_quarantine(&self, request: QuarantineListRequest) -> Call<'_, QuarantineListResponse> {
        Box::pin(RemoteCache::list_records(self, request))
    }

    fn vouch<'a>(&'a self, key: &'a CacheKey, served: &'a blake3::Hash) -> Call<'a, VouchResponse> {
        Box::pin(RemoteCache::vouch(self, key, served))
    }

    fn redis_up(&self) -> Call<'_, bool> {
        Box::pin(async move { self.stats().await.map(|s| s.redis_up) })
    }
}
