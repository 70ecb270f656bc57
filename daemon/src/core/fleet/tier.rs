//! The fleet cache, kiln-cache, as this daemon reaches it: every call goes through here, so every
//! call is observed by the breaker and none can forget to be.
//!
//! A remote failure is a miss plus a metric, never a failed compile. While the server does not
//! answer, a breaker skips it (each skip is an error to the caller) instead of paying a connect
//! timeout per lookup; a background probe with exponential backoff closes the breaker when the
//! server is back and keeps `kiln_remote_up` true to what it sees. tonic's channel reconnects by
//! itself.
//!
//! A refused token is not an outage: kiln-cache answered, and will keep answering the same until
//! someone fixes the configuration. It opens the breaker too (every call would be refused), but
//! is logged as an error naming the URI and the fix, and reported as `refused` in `Stats`, so
//! `kiln stats` and `kiln doctor` say why the fleet is not used instead of a bare "down".

use crate::metrics::Metrics;
use kiln_cache_client::{Acquired, CacheClient, Call, ClientError, Difference, Events, Lookup};
use kiln_proto::CacheKey;
use kiln_proto::pb::{NegativeEntry, QuarantineResponse};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What this daemon last learnt of the fleet cache, with the reason when it is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetState {
    /// No answer yet: the first probe runs at start-up.
    Starting,
    Up,
    /// Unreachable, or kiln-cache cannot reach Redis: the reason as seen.
    Down(String),
    /// kiln-cache answered and refused kilnd's token: a configuration error, not an outage.
    Refused(String),
}

impl FleetState {
    /// The word `Stats` carries in `remote_state`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FleetState::Starting => "starting",
            FleetState::Up => "up",
            FleetState::Down(_) => "down",
            FleetState::Refused(_) => "refused",
        }
    }

    /// Why the fleet is not usable, with the fix where there is one; empty when up.
    pub fn reason(&self) -> String {
        match self {
            FleetState::Starting => "no answer from kiln-cache yet".to_owned(),
            FleetState::Up => String::new(),
            FleetState::Down(why) => why.clone(),
            FleetState::Refused(why) => why.clone(),
        }
    }
}

#[derive(Debug)]
pub struct RemoteTier {
    /// kiln-cache-client's `RemoteCache` (a fake in unit tests).
    client: Box<dyn CacheClient>,
    /// The kiln-cache URI, for the messages that say which fleet refused or is down.
    uri: String,
    /// Open (true) while the server is believed down: calls skip it.
    down: AtomicBool,
    /// What `Stats` reports; changed together with `down` (the breaker reads `down` alone).
    state: Mutex<FleetState>,
    /// Set once a write was refused for a read-only token, so that is logged once.
    read_only: AtomicBool,
    metrics: Arc<Metrics>,
    /// Wakes the probe when a call fails, so the breaker opens and closes promptly.
    wake: tokio::sync::Notify,
}

impl RemoteTier {
    pub fn new(client: impl CacheClient + 'static, uri: &str, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics.remote_up.set(0);
        Arc::new(RemoteTier {
            client: Box::new(client),
            uri: uri.to_owned(),
            down: AtomicBool::new(false),
            state: Mutex::new(FleetState::Starting),
            read_only: AtomicBool::new(false),
            metrics,
            wake: tokio::sync::Notify::new(),
        })
    }

    /// The fleet's state as last seen, with its reason.
    pub fn state(&self) -> FleetState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether a write was refused because kilnd's token is read-only.
    pub fn read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    /// Records the new state; returns the previous one, so a change is logged once.
    fn set_state(&self, state: FleetState) -> FleetState {
        std::mem::replace(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()), state)
    }

    /// Whether the breaker lets calls through.
    pub fn usable(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// Runs one call unless the breaker is open, and records what came of it.
    async fn call<T>(&self, call: Call<'_, T>) -> Result<T, ClientError> {
        if !self.usable() {
            let message = match self.state() {
                FleetState::Refused(_) => "the fleet refused kilnd's token (breaker open)",
                _ => "the fleet cache is unreachable (breaker open)",
            };
            return Err(ClientError::Rpc { code: tonic::Code::Unavailable, message: message.into() });
        }
        self.observed(call).await
    }

    /// Runs one call whatever the breaker says, and records what came of it, so that a call let
    /// past the breaker still opens or closes it.
    async fn observed<T>(&self, call: Call<'_, T>) -> Result<T, ClientError> {
        let result = call.await;
        self.observe(&result);
        result
    }

    /// Records the result of a call: transport failures and a refused token open the breaker.
    fn observe<T>(&self, result: &Result<T, ClientError>) {
        match result {
            Ok(_) => {
                self.down.store(false, Ordering::Relaxed);
                if self.set_state(FleetState::Up) != FleetState::Up {
                    tracing::info!(uri = %self.uri, "fleet cache reachable");
                }
                self.metrics.remote_up.set(1);
            }
            Err(e) if e.code() == Some(tonic::Code::Unauthenticated) => {
                let why = format!(
                    "the fleet refused kilnd's token ({e}): kiln-cache at {} answers but does not accept the token \
                     of --remote-token (remote.token); give kilnd one of kiln-cache's tokens and restart it",
                    self.uri
                );
                self.down.store(true, Ordering::Relaxed);
                if !matches!(self.set_state(FleetState::Refused(why.clone())), FleetState::Refused(_)) {
                    tracing::error!(uri = %self.uri, "{why}; serving from local tiers only");
                }
                self.metrics.remote_up.set(0);
                self.wake.notify_one();
            }
            Err(e) if e.code() == Some(tonic::Code::PermissionDenied) => {
                // A read-only token reads the fleet but may not publish to it: said once, since
                // it may be meant (a host that should only consume), and the breaker stays shut.
                if !self.read_only.swap(true, Ordering::Relaxed) {
                    tracing::warn!(uri = %self.uri, error = %e,
                        "the fleet refused a write with kilnd's token (a read-only token?): this host reads from the \
                         fleet but publishes nothing to it");
                }
            }
            Err(e) if is_outage(e) => {
                let why = format!("kiln-cache at {} is unreachable: {e}", self.uri);
                if !self.down.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, uri = %self.uri, "fleet cache unreachable; serving from local tiers until it returns");
                }
                self.set_state(FleetState::Down(why));
                self.metrics.remote_up.set(0);
                self.wake.notify_one();
            }
            Err(_) => {}
        }
    }

    pub async fn get(&self, key: &CacheKey) -> Result<Lookup, ClientError> {
        self.call(self.client.get(key)).await
    }

    pub async fn batch_get(&self, keys: &[CacheKey]) -> Result<Vec<(CacheKey, Lookup)>, ClientError> {
        self.call(self.client.batch_get(keys)).await
    }

    pub async fn contains(&self, keys: &[CacheKey]) -> Result<Vec<bool>, ClientError> {
        self.call(self.client.contains(keys)).await
    }

    pub async fn put(&self, key: &CacheKey, envelope: Vec<u8>) -> Result<(), ClientError> {
        self.call(self.client.put(key, envelope)).await
    }

    pub async fn put_negative(&self, key: &CacheKey, failure: NegativeEntry, ttl: Duration) -> Result<(), ClientError> {
        self.call(self.client.put_negative(key, failure, ttl)).await
    }

    pub async fn get_manifest(&self, graph_key: &CacheKey) -> Result<Option<Vec<CacheKey>>, ClientError> {
        self.call(self.client.get_manifest(graph_key)).await
    }

    pub async fn put_manifest(&self, graph_key: &CacheKey, kernel_keys: &[CacheKey]) -> Result<(), ClientError> {
        self.call(self.client.put_manifest(graph_key, kernel_keys)).await
    }

    pub async fn acquire_lease(&self, key: &CacheKey, holder: &str, ttl: Duration) -> Result<Acquired, ClientError> {
        self.call(self.client.acquire_lease(key, holder, ttl)).await
    }

    pub async fn renew_lease(&self, key: &CacheKey, holder: &str, ttl: Duration) -> Result<bool, ClientError> {
        self.call(self.client.renew_lease(key, holder, ttl)).await
    }

    /// Releases a lease even while the breaker is open. One failed call (a put that met a Redis
    /// master being failed over) opens the breaker; skipping the release then would leave every
    /// host waiting on the key to wait out the lease's TTL. A release is one small call, made
    /// after the answer went out, so trying it costs no request anything.
    pub async fn release_lease(&self, key: &CacheKey, holder: &str) -> Result<bool, ClientError> {
        self.observed(self.client.release_lease(key, holder)).await
    }

    /// Reports that the envelope `served` under `key` differs from this host's compile.
    pub async fn quarantine(&self, key: &CacheKey, found: Difference<'_>) -> Result<QuarantineResponse, ClientError> {
        self.call(self.client.quarantine(key, found)).await
    }

    /// Reports that the envelope `served` under `key` is what this host compiles from its inputs.
    pub async fn vouch(
        &self,
        key: &CacheKey,
        served: &blake3::Hash,
    ) -> Result<kiln_proto::pb::VouchResponse, ClientError> {
        self.call(self.client.vouch(key, served)).await
    }

    /// The fleet's quarantine records from `since_ms` on, at most `limit` (0: the server's most),
    /// or its conflicting writes (`request.conflicts`).
    pub async fn list_quarantine(
        &self,
        request: kiln_proto::pb::QuarantineListRequest,
    ) -> Result<kiln_proto::pb::QuarantineListResponse, ClientError> {
        self.call(self.client.list_quarantine(request)).await
    }

    /// This host's report for kiln-cache's status page.
    pub async fn report_host(&self, report: kiln_proto::pb::HostReport) -> Result<(), ClientError> {
        self.call(self.client.report_host(report)).await
    }

    /// Merges a process's account of a torch.compile job into the fleet ledger.
    pub async fn report_torch_job(
        &self,
        job: &str,
        process: kiln_proto::pb::TorchProcessCosts,
    ) -> Result<kiln_proto::pb::TorchJobReturn, ClientError> {
        self.call(self.client.report_torch_job(job, process)).await
    }

    /// Jobs' returns from the fleet ledger.
    pub async fn list_torch_jobs(&self, job: &str, limit: u32) -> Result<kiln_proto::pb::TorchJobsReply, ClientError> {
        self.call(self.client.list_torch_jobs(job, limit)).await
    }

    /// Publish events for `key`, with the entries themselves (see
    /// `RemoteCache::watch_publish`).
    pub async fn watch(&self, key: &CacheKey) -> Result<Events, ClientError> {
        self.call(self.client.watch(key)).await
    }

    /// Probes the server until `stop`: every 5 s while up, with backoff from 100 ms to 5 s while
    /// down. The probe bypasses the breaker: it is what closes it.
    pub async fn probe(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            // kiln-cache answers Stats while Redis is down, so health is its `redis_up`.
            let healthy = match self.client.redis_up().await {
                Ok(true) => {
                    self.observe(&Ok::<(), ClientError>(()));
                    true
                }
                Ok(false) => {
                    self.mark_down("kiln-cache reports Redis down");
                    false
                }
                Err(e) => {
                    self.observe(&Err::<(), _>(e));
                    false
                }
            };
            let wait = if healthy {
                backoff = Duration::from_millis(100);
                Duration::from_secs(5)
            } else {
                backoff = (backoff * 2).min(Duration::from_secs(5));
                backoff
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified(), if healthy => {}
            }
        }
    }

    fn mark_down(&self, why: &str) {
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(why, uri = %self.uri, "fleet cache unusable; serving from local tiers until it returns");
        }
        self.set_state(FleetState::Down(format!("kiln-cache at {}: {why}", self.uri)));
        self.metrics.remote_up.set(0);
    }
}

/// Errors that mean "the server is not there", as opposed to a refused request.
fn is_outage(e: &ClientError) -> bool {
    matches!(
        e.code(),
        Some(tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown | tonic::Code::Cancelled)
    )
}
