//! Jobs: a validated graph running in the background, and the record of its events.
//!
//! A job's events are kept in order, so a `Watch` that arrives late replays what it missed and
//! then follows. A job runs to the end whether or not anyone watches, which is what lets a
//! compile fill the cache after its client has gone. Finished jobs are kept for a while for late
//! watchers, then pruned.

use crate::core::audit::Sample;
use crate::core::cache::Cache;
use crate::core::engine::Engine;
use crate::domain::Answer;
use crate::domain::{Job, KernelJob};
use kiln_proto::CacheKey;
use kiln_proto::key::graph_key;
use kiln_proto::pb::{self, job_event::Event};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

/// Finished jobs are kept this long for late watchers.
const RETENTION: Duration = Duration::from_secs(600);
/// And at most this many, oldest pruned first.
const MAX_FINISHED: usize = 256;
/// Pruning walks every job, so it runs at most this often, not on every request.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct JobRecord {
    pub id: String,
    /// A std Mutex: pushes and clones only, never across an await.
    events: Mutex<Vec<pb::JobEvent>>,
    /// The number of events so far; watchers wait on it.
    count: watch::Sender<usize>,
    finished: Mutex<Option<Instant>>,
    /// Keep the cubins in the record after the job's first watcher is done: true for `Submit`,
    /// whose results are fetched later by `Watch`; false for `Compile`, whose caller received
    /// them as they came, so a finished record does not pin megabytes for ten minutes.
    retain_artifacts: bool,
}

impl JobRecord {
    fn push(&self, event: Event) {
        self.push_all(std::iter::once(event));
    }

    /// Appends events under one lock and wakes watchers once: a warm graph's results arrive
    /// together, and one wake-up per kernel was a measurable part of a warm hit.
    fn push_all(&self, new: impl IntoIterator<Item = Event>) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events.extend(new.into_iter().map(|event| pb::JobEvent { job_id: self.id.clone(), event: Some(event) }));
        let n = events.len();
        drop(events);
        self.count.send_replace(n);
    }

    /// Drops the artifact bytes from the recorded results (sizes and everything else stay).
    fn strip_artifacts(&self) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        for e in events.iter_mut() {
            match &mut e.event {
                Some(Event::Kernel(k)) => k.artifact = bytes::Bytes::new(),
                Some(Event::Kernels(batch)) => {
                    for k in &mut batch.results {
                        k.artifact = bytes::Bytes::new();
                    }
                }
                _ => {}
            }
        }
    }

    fn events_from(&self, from: usize) -> Vec<pb::JobEvent> {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }
}

/// Cubin bytes per batch of results. Far under any message limit, so a graph of large cubins
/// never meets one as a whole (a cubin larger than this goes alone), and large enough that a
/// graph of ordinary kernels is one message.
const BATCH_BYTES: usize = 4 << 20;

/// `results` cut into batches of at most [`BATCH_BYTES`] of cubins each, in order.
pub fn batches(results: Vec<pb::KernelResult>) -> impl Iterator<Item = Vec<pb::KernelResult>> {
    let mut out: Vec<Vec<pb::KernelResult>> = Vec::new();
    let mut size = 0;
    for r in results {
        let n = r.artifact.len();
        match out.last_mut() {
            Some(batch) if size + n <= BATCH_BYTES => batch.push(r),
            _ => {
                out.push(vec![r]);
                size = 0;
            }
        }
        size += n;
    }
    out.into_iter()
}

/// `event` as a client that does (`batches`) or does not read `kernels` events wants it.
fn unbatched(event: pb::JobEvent, batches: bool) -> Vec<pb::JobEvent> {
    match event.event {
        Some(Event::Kernels(batch)) if !batches => batch
            .results
            .into_iter()
            .map(|k| pb::JobEvent { job_id: event.job_id.clone(), event: Some(Event::Kernel(k)) })
            .collect(),
        _ => vec![event],
    }
}

fn is_last(event: &pb::JobEvent) -> bool {
    matches!(event.event, Some(Event::Done(_)) | Some(Event::Failed(_)))
}

#[derive(Debug)]
pub struct Jobs {
    map: Mutex<HashMap<String, Arc<JobRecord>>>,
    last_prune: Mutex<Instant>,
}

impl Default for Jobs {
    fn default() -> Self {
        Jobs { map: Mutex::new(HashMap::new()), last_prune: Mutex::new(Instant::now()) }
    }
}

impl Jobs {
    /// Registers a new job and returns its record.
    pub fn create(&self, retain_artifacts: bool) -> Arc<JobRecord> {
        let id = format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
        let record = Arc::new(JobRecord {
            id: id.clone(),
            events: Mutex::new(Vec::new()),
            count: watch::channel(0).0,
            finished: Mutex::new(None),
            retain_artifacts,
        });
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = self.last_prune.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() >= PRUNE_EVERY || map.len() > 4 * MAX_FINISHED {
            prune(&mut map);
            *last = Instant::now();
        }
        map.insert(id, Arc::clone(&record));
        record
    }

    pub fn get(&self, id: &str) -> Option<Arc<JobRecord>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }
}

fn prune(map: &mut HashMap<String, Arc<JobRecord>>) {
    let finished_at = |r: &JobRecord| *r.finished.lock().unwrap_or_else(|p| p.into_inner());
    map.retain(|_, r| finished_at(r).is_none_or(|t| t.elapsed() < RETENTION));
    let mut finished: Vec<(Instant, String)> =
        map.iter().filter_map(|(id, r)| finished_at(r).map(|t| (t, id.clone()))).collect();
    if finished.len() > MAX_FINISHED {
        finished.sort();
        for (_, id) in &finished[..finished.len() - MAX_FINISHED] {
            map.remove(id);
        }
    }
}

/// Streams a job's events: the ones so far, then new ones until the last. The stream ends when
/// the client goes away; the job does not. The forwarding task is not tracked work: it does
/// nothing of its own, and a client that stops reading would hold a shutdown to its bound; the
/// job it follows is tracked, and the server's flush delivers its last events. `primary` marks the `Compile` caller's own stream,
/// after which a record that does not retain artifacts drops them. A client that does not read
/// batches (`batch_results` unset) gets a batch as one `kernel` event per result.
pub fn watch(record: Arc<JobRecord>, primary: bool, batches: bool) -> EventStream {
    let (tx, rx) = mpsc::channel(64);
    let mut count = record.count.subscribe();
    tokio::spawn(async move {
        forward(&record, &tx, &mut count, batches).await;
        if primary && !record.retain_artifacts {
            record.strip_artifacts();
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

/// A job's events as the gRPC handlers answer them.
pub type EventStream = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::JobEvent, tonic::Status>> + Send>>;

/// A finished job's events as one ready stream: no task, channel or wake-up between the job's
/// record and the answer (what a request answered wholly from the caches gets).
pub fn replay(record: &JobRecord, primary: bool, batches: bool) -> EventStream {
    let events: Vec<Result<pb::JobEvent, tonic::Status>> =
        record.events_from(0).into_iter().flat_map(|e| unbatched(e, batches)).map(Ok).collect();
    if primary && !record.retain_artifacts {
        record.strip_artifacts();
    }
    Box::pin(tokio_stream::iter(events))
}

async fn forward(
    record: &JobRecord,
    tx: &mpsc::Sender<Result<pb::JobEvent, tonic::Status>>,
    count: &mut watch::Receiver<usize>,
    batches: bool,
) {
    let mut sent = 0;
    loop {
        for event in record.events_from(sent) {
            sent += 1;
            let last = is_last(&event);
            for event in unbatched(event, batches) {
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            if last {
                return;
            }
        }
        if count.wait_for(|n| *n > sent).await.is_err() {
            return;
        }
    }
}

/// Runs a job to the end, recording its events.
pub async fn run(engine: Arc<Engine>, record: Arc<JobRecord>, job: Job) {
    let begun = begin(engine.cache(), &record, job).await;
    complete(engine, record, begun).await;
}

/// A job whose cache hits are recorded; what is left must be compiled.
#[derive(Debug)]
pub struct Begun {
    job: Job,
    started: Instant,
    ok: u32,
    failed: u32,
    /// The kernels the caches did not answer, by index in the job.
    rest: Vec<usize>,
    fleet_asked: bool,
}

impl Begun {
    /// Whether the caches answered every kernel, so completing the job compiles nothing.
    pub fn answered_all(&self) -> bool {
        self.rest.is_empty()
    }
}

/// What the caches answered of a job's kernels: their results in kernel order, and the indices
/// of the kernels they did not answer. `Compile` (through [`begin`]) and `Lookup` both start here.
#[derive(Debug)]
pub struct FromCaches {
    pub answered: Vec<pb::KernelResult>,
    pub ok: u32,
    pub failed: u32,
    pub rest: Vec<usize>,
    pub fleet_asked: bool,
}

/// Asks this host's tiers, then the fleet for all their misses in one round trip, for every
/// kernel of `job` that validation did not refuse.
pub async fn from_caches(cache: &Cache, job: &Job, started: Instant) -> FromCaches {
    let keys: Vec<CacheKey> = job.kernels.iter().filter(|k| k.refusal.is_none()).map(|k| k.key).collect();
    let prefetched = cache.prefetch(&keys).await;
    let mut cached = prefetched.found;
    let (mut ok, mut failed) = (0, 0);
    let mut rest = Vec::new();
    let mut answered = Vec::with_capacity(cached.len());
    for (index, kernel) in job.kernels.iter().enumerate() {
        match cached.remove(&kernel.key) {
            Some(answer) => {
                offer_to_audit(cache, job, kernel, &answer);
                if answer.is_ok() {
                    ok += 1
                } else {
                    failed += 1
                }
                answered.push(result(kernel, job, answer, started));
            }
            None => rest.push(index),
        }
    }
    FromCaches { answered, ok, failed, rest, fleet_asked: prefetched.fleet_asked }
}

/// Offers a kernel the fleet answered to the audit, which decides whether to recompile it (see
/// `crate::core::audit`). Kernels a job brings are what can be audited: the job holds their inputs.
fn offer_to_audit(cache: &Cache, job: &Job, kernel: &KernelJob, answer: &Answer) {
    if answer.tier() != pb::Tier::Remote || !answer.is_ok() {
        return;
    }
    let sample = || Sample { key: kernel.key, source: kernel.source.clone(), target: job.target };
    cache.offer_to_audit(sample, &kernel.key);
}

/// Records the job's start and answers everything the caches hold, with one fleet round trip
/// for this host's misses.
pub async fn begin(cache: &Cache, record: &JobRecord, job: Job) -> Begun {
    let started = Instant::now();
    record.push_all([
        Event::Queued(pb::Queued { kernels: job.kernels.len() as u32, target: job.target.to_string() }),
        Event::Started(pb::Started {}),
    ]);
    let FromCaches { answered, ok, failed, rest, fleet_asked } = from_caches(cache, &job, started).await;
    // The cache hits in as few events as fit: for a warm graph, one message on the wire instead
    // of 64 (a message, a wake-up and an HTTP/2 frame each were a large part of a warm hit).
    record.push_all(batches(answered).map(|results| Event::Kernels(pb::KernelResults { results })));
    Begun { job, started, ok, failed, rest, fleet_asked }
}

/// The key of a job's whole graph: what the fleet's manifest of it is stored under.
pub fn graph_of(job: &Job) -> CacheKey {
    graph_key(&job.target, job.kernels.iter().map(|k| (k.id.as_str(), &k.key)))
}

/// A job's `done` event: its graph key (see [`graph_of`]) and kernel keys, and how its kernels
/// came out.
pub fn done(job: &Job, graph: &CacheKey, ok: u32, failed: u32, missed: u32) -> pb::JobDone {
    pb::JobDone {
        graph_key: graph.to_hex(),
        kernel_keys: job.kernels.iter().map(|k| k.key.to_hex()).collect(),
        ok,
        failed,
        missed,
    }
}

/// Compiles what the caches did not answer (each kernel once however many ask), records each
/// result as it comes, then `Done`; the graph's manifest is published after that.
pub async fn complete(engine: Arc<Engine>, record: Arc<JobRecord>, begun: Begun) {
    let Begun { job, started, mut ok, mut failed, rest, fleet_asked } = begun;
    let answered_from_caches = rest.is_empty();
    let job = Arc::new(job);
    let mut tasks = tokio::task::JoinSet::new();
    for index in rest {
        let (engine, job) = (Arc::clone(&engine), Arc::clone(&job));
        tasks.spawn(async move {
            let kernel = &job.kernels[index];
            let answer = engine.resolve(&job.name, kernel, job.target, job.priority, fleet_asked).await;
            (index, answer)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let Ok((index, answer)) = joined else {
            record.push(Event::Failed(pb::JobFailed { reason: "a kernel task ended abnormally".into() }));
            finish(&record);
            return;
        };
        if answer.is_ok() {
            ok += 1
        } else {
            failed += 1
        }
        let kernel = &job.kernels[index];
        offer_to_audit(engine.cache(), &job, kernel, &answer);
        record.push(Event::Kernel(result(kernel, &job, answer, started)));
    }
    let key = graph_of(&job);
    record.push(Event::Done(done(&job, &key, ok, failed, 0)));
    finish(&record);
    // After the answer, not before it, and in the background.
    let cache = engine.cache();
    if failed == 0 && cache.manifest_due(&key, !answered_from_caches) {
        cache.publish_manifest(key, job.kernels.iter().filter(|k| k.refusal.is_none()).map(|k| k.key).collect());
    }
}

fn finish(record: &JobRecord) {
    *record.finished.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
}

/// The wire form of one kernel's answer.
pub fn result(kernel: &KernelJob, job: &Job, answer: Answer, started: Instant) -> pb::KernelResult {
    let common = pb::KernelResult {
        id: kernel.id.clone(),
        key: kernel.key.to_hex(),
        tier: answer.tier() as i32,
        elapsed_micros: started.elapsed().as_micros() as u64,
        toolchain: kernel.source.toolchain().as_str().into(),
        target: job.target.to_string(),
        ..Default::default()
    };
    match answer {
        Answer::Ok { artifact, .. } => {
            let meta = &artifact.meta;
            pb::KernelResult {
                outcome: pb::Outcome::Ok as i32,
                artifact: if job.omit_artifacts { bytes::Bytes::new() } else { artifact.bytes.clone() },
                artifact_bytes: artifact.bytes.len() as u64,
                compile_micros: meta.compile_micros,
                log: meta.log.clone(),
                lowered_names: meta.lowered_names.clone(),
                metadata_json: meta.metadata_json.clone(),
                ptx: if kernel.source.wants_ptx() { meta.ptx.clone() } else { String::new() },
                attributes: meta.attributes.clone(),
                validation: meta.validation.clone(),
                ..common
            }
        }
        Answer::Failed { log, compile_micros, .. } => {
            pb::KernelResult { outcome: pb::Outcome::Failed as i32, compile_micros, log, ..common }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cubin(id: &str, bytes: usize) -> pb::KernelResult {
        pb::KernelResult { id: id.into(), artifact: vec![0u8; bytes].into(), ..Default::default() }
    }

    #[test]
    fn batches_stay_under_their_byte_bound_and_keep_order() {
        let ids = |b: &[pb::KernelResult]| b.iter().map(|r| r.id.clone()).collect::<Vec<_>>().join(",");
        let small: Vec<_> = (0..64).map(|i| with_cubin(&i.to_string(), 4000)).collect();
        assert_eq!(batches(small).count(), 1, "a graph of ordinary kernels is one message");
        let mixed = vec![
            with_cubin("a", 1 << 20),
            with_cubin("b", 3 << 20),
            with_cubin("huge", 9 << 20),
            with_cubin("c", 1),
            with_cubin("d", 4 << 20),
        ];
        let cut: Vec<String> = batches(mixed).map(|b| ids(&b)).collect();
        assert_eq!(cut, ["a,b", "huge", "c", "d"]);
        assert_eq!(batches(Vec::new()).count(), 0);
    }
}
