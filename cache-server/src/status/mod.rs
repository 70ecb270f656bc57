//! The fleet status page: `/` (HTML) and `/status.json` on kiln-cache's metrics port.
//!
//! Operators see the fleet at a glance without a Grafana: the fleet's hit rate over the last hour,
//! per toolchain and per blob namespace, the compile seconds those hits saved, leases held and
//! compiles running, the hosts that report to kiln-cache (flagged where their toolchain
//! fingerprints split them from the fleet), their latest misses and why, and Redis's memory.
//!
//! Several replicas may serve one Redis, so everything a page shows lives in Redis:
//! - [`tally`] counts lookups, stores and lease events in memory on the request paths (a mutex
//!   increment; a Get or BatchGet hit makes no Redis call for the page), and [`run_flusher`]
//!   writes them to per-minute hashes every [`FLUSH_EVERY`] ([`buckets`], [`store::flush`]);
//! - hosts report themselves (`ReportHost`, [`hosts`]); a report expires unless renewed;
//! - compile seconds saved come from the envelopes served: each records what it cost to compile
//!   (`ArtifactMeta.compile_micros`; named blobs record none). Hosts' reports carry kilnd's own
//!   figure too, shown per host.
//!
//! A page view reads Redis in two pipelines, cached for [`PAGE_CACHE`]; `INFO` is read at most
//! every [`INFO_CACHE`]. Nothing is SCANned.

pub mod buckets;
pub mod hosts;
pub mod page;
pub mod redis_info;
pub mod store;
pub mod tally;

use crate::backend::Redis;
use crate::metrics::Metrics;
use kiln_proto::envelope;
use kiln_proto::pb::{ConflictRecord, HostMiss, HostReport, QuarantineRecord, TorchJobReturn};
use kiln_serve::every::Every;
use redis_info::RedisInfo;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often a replica writes its tally to Redis: the page lags by at most this.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// How long one page's reads serve further views.
pub const PAGE_CACHE: Duration = Duration::from_secs(2);
/// How long one `INFO` answer serves.
pub const INFO_CACHE: Duration = Duration::from_secs(5);
/// Misses listed on the page.
const PAGE_MISSES: usize = 50;
/// Quarantines listed on the page.
const PAGE_QUARANTINES: usize = 20;
/// torch.compile jobs on the page and in /metrics: the most recently reported.
pub const PAGE_JOBS: usize = 100;
/// How often the per-job metrics are refreshed from the fleet ledger.
pub const JOBS_EXPORT_EVERY: Duration = Duration::from_secs(15);

/// What the page and `/status.json` show.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetStatus {
    pub generated_unix_ms: u64,
    pub window_minutes: u64,
    /// Set when Redis could not be read; the rest is then empty.
    pub redis_error: Option<String>,
    /// The `vet` policy (whose kernels the fleet runs), and what it cannot give on this server
    /// (a fleet without tokens has no publisher to vet).
    pub vet: String,
    pub vet_warning: Option<String>,
    pub lookups: buckets::Window,
    pub hit_rate: Option<f64>,
    /// What users compile and store: toolchains and blob namespaces.
    pub classes: Vec<ClassRow>,
    /// kiln's own records (envelopes under `kiln/`, such as recipe books), shown apart.
    pub internal_classes: Vec<ClassRow>,
    pub leases_held: u64,
    /// The reporting hosts' compiles in flight and queued, added up.
    pub compiles_running: u64,
    pub compiles_queued: u64,
    /// Machines reporting: distinct host names (`hosts` has one row per kilnd).
    pub host_count: usize,
    pub hosts: Vec<HostRow>,
    /// By toolchain: the fingerprints hosts report and the majority among them.
    pub toolchains: BTreeMap<String, hosts::Split>,
    pub recent_misses: Vec<MissRow>,
    /// The newest quarantines: keys an audit found publishing wrong bytes, and who published them.
    pub quarantines: Vec<QuarantineRecord>,
    /// The newest conflicting writes: Puts that offered other bytes than a key held.
    pub conflicts: Vec<ConflictRecord>,
    /// torch.compile jobs' returns from the fleet ledger, most recently reported first.
    pub torch_jobs: Vec<TorchJobReturn>,
    pub redis: Option<RedisInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassRow {
    pub name: String,
    pub hits: u64,
    pub published: u64,
    pub hit_rate: Option<f64>,
    pub seconds_saved: f64,
}

/// One kilnd's report.
#[derive(Debug, Clone, Serialize)]
pub struct HostRow {
    /// Which kilnd: [`hosts::daemon_id`].
    pub daemon: String,
    pub received_unix_ms: u64,
    pub report: HostReport,
    /// Toolchains whose fingerprint on this host differs from the fleet's majority.
    pub split: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MissRow {
    /// Which kilnd missed: [`hosts::daemon_id`].
    pub daemon: String,
    pub miss: HostMiss,
}

impl FleetStatus {
    /// Assembles the page from what Redis held at `now_ms`.
    pub fn new(read: store::Read, redis: Option<RedisInfo>, now_ms: u64) -> Self {
        let reports: Vec<&HostReport> = read.hosts.iter().map(|(_, r)| r).collect();
        let toolchains = hosts::splits(reports.iter().copied());
        let hosts = read
            .hosts
            .iter()
            .map(|(received, r)| HostRow {
                daemon: hosts::daemon_id(r),
                received_unix_ms: *received,
                split: r
                    .toolchains
                    .iter()
                    .filter(|t| toolchains.get(&t.name).is_some_and(|s| s.flags(&t.fingerprint)))
                    .map(|t| t.name.clone())
                    .collect(),
                report: r.clone(),
            })
            .collect();
        let (internal_classes, classes) = class_rows(&read.window);
        let host_count = read.hosts.iter().map(|(_, r)| r.host.as_str()).collect::<BTreeSet<_>>().len();
        FleetStatus {
            generated_unix_ms: now_ms,
            window_minutes: buckets::WINDOW_MINUTES,
            redis_error: None,
            hit_rate: read.window.hit_rate(),
            lookups: read.window,
            classes,
            internal_classes,
            leases_held: read.leases_held,
            compiles_running: reports.iter().map(|r| r.inflight_compiles).sum(),
            compiles_queued: reports.iter().map(|r| r.queue_depth).sum(),
            recent_misses: hosts::recent_misses(reports.iter().copied(), PAGE_MISSES)
                .into_iter()
                .map(|(daemon, miss)| MissRow { daemon, miss })
                .collect(),
            host_count,
            toolchains,
            hosts,
            quarantines: Vec::new(),
            conflicts: Vec::new(),
            torch_jobs: Vec::new(),
            redis,
            vet: String::new(),
            vet_warning: None,
        }
    }
}

/// The window's classes as rows, busiest first: kiln's own records (toolchain under
/// [`envelope::INTERNAL_TOOLCHAIN_PREFIX`]), then what users compile and store.
fn class_rows(window: &buckets::Window) -> (Vec<ClassRow>, Vec<ClassRow>) {
    let mut rows: Vec<ClassRow> = window
        .classes
        .iter()
        .map(|(name, c)| ClassRow {
            name: name.clone(),
            hits: c.hits,
            published: c.published,
            hit_rate: c.hit_rate(),
            seconds_saved: c.seconds_saved,
        })
        .collect();
    rows.sort_by(|a, b| (b.hits + b.published).cmp(&(a.hits + a.published)).then(a.name.cmp(&b.name)));
    rows.into_iter().partition(|c| c.name.starts_with(envelope::INTERNAL_TOOLCHAIN_PREFIX))
}

/// A value computed at most once per `ttl`.
#[derive(Debug)]
struct Cached<T> {
    ttl: Duration,
    slot: tokio::sync::Mutex<Option<(Instant, T)>>,
}

impl<T: Clone> Cached<T> {
    fn new(ttl: Duration) -> Self {
        Cached { ttl, slot: tokio::sync::Mutex::new(None) }
    }

    /// The cached value while fresh, else `make`'s. Concurrent callers wait for one `make`.
    async fn get<F: Future<Output = T>>(&self, make: impl FnOnce() -> F) -> T {
        let mut slot = self.slot.lock().await;
        if let Some((at, value)) = slot.as_ref()
            && at.elapsed() < self.ttl
        {
            return value.clone();
        }
        let value = make().await;
        *slot = Some((Instant::now(), value.clone()));
        value
    }
}

/// The page's state in one replica.
#[derive(Debug)]
pub struct FleetPage {
    redis: Redis,
    /// The `vet` policy and its warning, shown on every page.
    vet: (String, Option<String>),
    page: Cached<Arc<FleetStatus>>,
    info: Cached<Option<RedisInfo>>,
}

impl FleetPage {
    pub fn new(redis: Redis) -> Self {
        FleetPage { redis, vet: Default::default(), page: Cached::new(PAGE_CACHE), info: Cached::new(INFO_CACHE) }
    }

    /// Shows the `vet` policy, and `warning` when it cannot give what it says.
    pub fn with_vetting(self, policy: kiln_proto::vet::VetPolicy, warning: Option<String>) -> Self {
        FleetPage { vet: (policy.to_string(), warning), ..self }
    }

    /// The fleet's status, read at most once per [`PAGE_CACHE`].
    pub async fn current(&self) -> Arc<FleetStatus> {
        self.page
            .get(|| async {
                let now = tally::now_ms();
                let info = self
                    .info
                    .get(|| async { store::info(&self.redis).await.ok().map(|t| redis_info::parse(&t)) })
                    .await;
                let read = async {
                    let read = store::read(&self.redis, now).await?;
                    let quarantines = crate::store::newest_quarantines(&self.redis, PAGE_QUARANTINES).await?;
                    let conflicts = crate::store::newest_conflicts(&self.redis, PAGE_QUARANTINES).await?;
                    let torch_jobs = crate::store::torch_jobs::list(&self.redis, "", PAGE_JOBS).await?;
                    Ok::<_, crate::error::Error>((read, quarantines, conflicts, torch_jobs))
                };
                let status = match read.await {
                    Ok((read, quarantines, conflicts, torch_jobs)) => {
                        FleetStatus { quarantines, conflicts, torch_jobs, ..FleetStatus::new(read, info, now) }
                    }
                    Err(e) => FleetStatus {
                        generated_unix_ms: now,
                        window_minutes: buckets::WINDOW_MINUTES,
                        redis_error: Some(e.to_string()),
                        redis: info,
                        ..Default::default()
                    },
                };
                let (vet, vet_warning) = self.vet.clone();
                Arc::new(FleetStatus { vet, vet_warning, ..status })
            })
            .await
    }

    /// Stores a host's report (validated by the caller).
    pub async fn report(&self, report: &HostReport) -> Result<(), crate::error::Error> {
        store::put_host(&self.redis, report, tally::now_ms()).await
    }

    /// The axum routes of the page: `/` and `/status.json`.
    pub fn routes(self: Arc<Self>) -> axum::Router {
        kiln_serve::status_routes(
            move || {
                let status = Arc::clone(&self);
                async move { status.current().await }
            },
            page::render,
        )
    }
}

/// Refreshes the per-job metrics from the fleet ledger (the jobs the page shows) every
/// [`JOBS_EXPORT_EVERY`] until `stop`. Its own read, not the page's: a page cached here would be
/// stale for the next view. While Redis cannot be read the last figures stay.
pub async fn run_job_exporter(redis: Redis, metrics: Arc<Metrics>, stop: CancellationToken) {
    let mut every = Every::new(JOBS_EXPORT_EVERY, stop);
    while every.tick().await {
        match crate::store::torch_jobs::list(&redis, "", PAGE_JOBS).await {
            Ok(jobs) => metrics.export_torch_jobs(&jobs),
            Err(e) => tracing::debug!(error = %e, "the torch job metrics were not refreshed"),
        }
    }
}

/// Writes the replica's tally to Redis every [`FLUSH_EVERY`] until `stop`, and once more then,
/// so a replica that shuts down loses nothing it counted. A flush that fails is put back and
/// retried with the next.
pub async fn run_flusher(redis: Redis, metrics: Arc<Metrics>, stop: CancellationToken) {
    let mut every = Every::new(FLUSH_EVERY, stop);
    loop {
        let stopping = !every.tick().await;
        let pending = metrics.tally.take();
        if !pending.is_empty()
            && let Err(e) = store::flush(&redis, &pending, tally::now_ms()).await
        {
            tracing::debug!(error = %e, "status counts not flushed; retrying with the next flush");
            metrics.tally.restore(pending);
        }
        if stopping {
            return;
        }
    }
}
