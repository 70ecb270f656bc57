//! The engine over a fake compiler and a memory tier, and for the fleet's part over an in-memory
//! kiln-cache ([`FakeCache`]) shared by two engines, as two hosts share one kiln-cache.

use super::*;
use crate::config::{Config, Defaults, FileConfig, Flags};
use crate::core::audit::{Auditor, Policy};
use crate::core::cache::{Decision, Producer};
use crate::core::fleet::tier::RemoteTier;
use crate::core::fleet::{self, Fleet};
use crate::core::store::memory::MemoryTier;
use crate::core::store::tiered::TieredStore;
use crate::domain::TierName;
use crate::runtime::toolchain::{CompileFuture, Output};
use kiln_cache_client::FakeCache;
use kiln_proto::Fingerprint;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const FINGERPRINT: Fingerprint = Fingerprint::from_bytes([3; 32]);

/// A compiler that counts its compiles: a source containing `error` fails, any other compiles to
/// a cubin naming it.
#[derive(Debug, Default)]
struct FakeCompiler {
    compiles: AtomicUsize,
}

impl FakeCompiler {
    fn compiles(&self) -> usize {
        self.compiles.load(Ordering::SeqCst)
    }
}

impl Compiler for FakeCompiler {
    fn compile<'a>(&'a self, source: &'a KernelSource, _: &'a Target, _: Duration) -> CompileFuture<'a> {
        Box::pin(async move {
            self.compiles.fetch_add(1, Ordering::SeqCst);
            let KernelSource::Cuda(cuda) = source else { unreachable!("these tests compile CUDA") };
            if cuda.source.contains("error") {
                return Compiled::Failed { log: "kernel.cu(1): error: expected a \";\"".into(), compile_micros: 1500 };
            }
            let cubin = format!("cubin of {}", cuda.source).into_bytes();
            Compiled::Ok(Output { cubin, compile_micros: 2_000_000, ..Default::default() })
        })
    }

    fn build_of(&self, _: &KernelSource) -> Option<(Fingerprint, String)> {
        Some((FINGERPRINT, "fake 1.0".into()))
    }
}

fn limits() -> Limits {
    let defaults = Defaults { socket: "/s".into(), cache_dir: "/c".into(), cores: 2 };
    Config::merge(&Flags::default(), &FileConfig::default(), &defaults).limits
}

/// One host: an engine over `compiler`, a memory tier and, with `fleet`, the fleet cache.
struct Host {
    engine: Arc<Engine>,
    compiler: Arc<FakeCompiler>,
    metrics: Arc<Metrics>,
}

fn host(fleet: Option<&FakeCache>) -> Host {
    let limits = limits();
    let metrics = Arc::new(Metrics::new());
    let memory = MemoryTier::new(64 << 20, limits.max_artifact_bytes);
    let store = TieredStore::new(vec![Arc::new(memory)], Arc::clone(&metrics), limits.max_artifact_bytes);
    let fleet = fleet.map(|cache| {
        let settings = fleet::Settings {
            lease_ttl: Duration::from_secs(30),
            hedge: Duration::from_secs(120),
            leases: true,
            negative_ttl: limits.negative_ttl,
            max_artifact_bytes: limits.max_artifact_bytes,
        };
        let tier = RemoteTier::new(cache.clone(), "http://fake:7171", Arc::clone(&metrics));
        let auditor = Auditor::new(Policy { enabled: false, ..Policy::default() }, Arc::clone(&metrics));
        Fleet::new(settings, tier, Arc::new(auditor), Arc::clone(&metrics))
    });
    let work = Work::default();
    let cache = Arc::new(Cache::new(store, fleet, Arc::clone(&metrics), work.clone(), limits.negative_ttl));
    let compiler = Arc::new(FakeCompiler::default());
    let parts =
        Parts { recipes: RecipeStore::in_memory(), metrics: Arc::clone(&metrics), concurrency: 2, limits, work };
    let engine = Arc::new(Engine::new(Arc::clone(&compiler) as Arc<dyn Compiler>, cache, parts));
    Host { engine, compiler, metrics }
}

fn target() -> Target {
    "sm_90".parse().expect("a target")
}

/// A CUDA kernel keyed as validation keys it, under the fake compiler's fingerprint.
fn kernel(source: &str) -> KernelJob {
    let source = KernelSource::Cuda(pb::CudaSource { source: source.into(), ..Default::default() });
    let key = source.with_key_inputs(&target(), &FINGERPRINT, |k| k.derive());
    KernelJob { id: "k".into(), key, source, refusal: None }
}

impl Host {
    async fn resolve(&self, kernel: &KernelJob) -> Answer {
        self.engine.resolve("graph", kernel, target(), Priority::Interactive, false).await
    }

    fn compiled(&self, outcome: &'static str) -> u64 {
        self.metrics.compiles.get_or_create(&CompileLabels { toolchain: "nvrtc", outcome }).get()
    }
}

#[tokio::test]
async fn a_miss_compiles_once_and_the_next_ask_hits_memory() {
    let host = host(None);
    let k = kernel("__global__ void k() {}");
    let first = host.resolve(&k).await;
    assert_eq!((first.is_ok(), first.tier()), (true, pb::Tier::Compiled), "{first:?}");
    assert_eq!(first.artifact().map(|a| &a.bytes[..]), Some(&b"cubin of __global__ void k() {}"[..]));
    let second = host.resolve(&k).await;
    assert_eq!((second.is_ok(), second.tier()), (true, pb::Tier::Memory), "{second:?}");
    assert_eq!(second.artifact().map(|a| a.bytes.clone()), first.artifact().map(|a| a.bytes.clone()));
    assert_eq!(host.compiler.compiles(), 1, "the hit compiled again");
    assert_eq!(host.compiled("ok"), 1);
    assert_eq!(host.metrics.seconds_saved.get(), 2.0, "the hit saved the compile's two seconds");
    // The compile, not the hit, recorded a miss, with its recipe.
    let misses = host.engine.misses().recent();
    assert_eq!(misses.iter().map(|m| (m.key, m.reason.label())).collect::<Vec<_>>(), [(k.key, "new")]);
}

#[tokio::test]
async fn a_failed_compile_is_remembered_and_not_paid_again() {
    let host = host(None);
    let k = kernel("__global__ void k() { error }");
    let first = host.resolve(&k).await;
    let Answer::Failed { log, compile_micros, tier } = &first else { panic!("compiled: {first:?}") };
    assert!(log.contains("error: expected"), "{log}");
    assert_eq!((*compile_micros, *tier), (1500, pb::Tier::Compiled));
    // The negative cache answers the next ask, with the log and what the compile cost.
    let second = host.resolve(&k).await;
    let Answer::Failed { log: again, compile_micros, tier } = &second else { panic!("compiled: {second:?}") };
    assert_eq!((again, *compile_micros, *tier), (log, 1500, pb::Tier::Memory));
    assert_eq!(host.compiler.compiles(), 1, "a remembered failure was compiled again");
    assert_eq!((host.compiled("failed"), host.metrics.negative_hits.get()), (1, 1));
    assert!(host.engine.cache().failed_recently(&k.key));
}

#[tokio::test]
async fn a_refused_kernel_never_reaches_the_compiler() {
    let host = host(None);
    let k = KernelJob { refusal: Some("#include of a host path".into()), ..kernel("__global__ void k() {}") };
    let answer = host.resolve(&k).await;
    assert!(matches!(&answer, Answer::Failed { log, .. } if log == "#include of a host path"), "{answer:?}");
    assert_eq!(host.compiler.compiles(), 0);
}

#[tokio::test]
async fn another_hosts_compile_is_adopted_not_paid_again() {
    let fleet = FakeCache::default();
    let (a, b) = (host(Some(&fleet)), host(Some(&fleet)));
    let ok = kernel("__global__ void k() {}");
    let broken = kernel("__global__ void k() { error }");
    assert_eq!(a.resolve(&ok).await.tier(), pb::Tier::Compiled);
    assert_eq!(a.resolve(&broken).await.tier(), pb::Tier::Compiled);
    // Host b finds both in the fleet: the artifact, and the failure with its log.
    let hit = b.resolve(&ok).await;
    assert_eq!((hit.is_ok(), hit.tier()), (true, pb::Tier::Remote), "{hit:?}");
    let failed = b.resolve(&broken).await;
    assert!(matches!(&failed, Answer::Failed { tier: pb::Tier::Remote, log, .. } if log.contains("error")));
    assert_eq!(b.compiler.compiles(), 0, "host b compiled what host a had published");
    // The adopted artifact is in b's memory tier now; its failure in b's negative cache.
    assert_eq!(b.resolve(&ok).await.tier(), pb::Tier::Memory);
    assert_eq!(b.resolve(&broken).await.tier(), pb::Tier::Memory);
    assert_eq!((a.compiler.compiles(), b.compiler.compiles()), (2, 0));
}

/// An artifact sealed under `key`, as a blob or a torch graph is stored.
fn stored(key: &CacheKey, bytes: &[u8]) -> Stored {
    let meta = ArtifactMeta { toolchain: "test".into(), ..Default::default() };
    let sealed = envelope::seal(key, meta.clone(), bytes);
    Stored { envelope: sealed.into(), unpacked: Some(Arc::new(Artifact { meta, bytes: bytes.to_vec().into() })) }
}

/// What a producer's caller makes of an answer: its bytes, when it is an artifact.
fn bytes_of(answer: &Answer) -> Option<Vec<u8>> {
    answer.artifact().map(|a| a.bytes.to_vec())
}

#[tokio::test]
async fn an_artifact_stored_after_a_failure_is_answered_not_the_failure() {
    let host = host(None);
    let cache = host.engine.cache();
    let key = kernel("__global__ void k() {}").key;
    cache.remember_failure(&key, "it failed once".into(), 10).await;
    cache.store_locally(&key, stored(&key, b"produced since")).await;
    let answer = cache.cached_here(&key).await.expect("an answer");
    assert_eq!(bytes_of(&answer).as_deref(), Some(&b"produced since"[..]), "{answer:?}");
    assert!(!cache.failed_recently(&key));
}

#[tokio::test]
async fn one_producer_is_granted_and_a_second_takes_what_it_stored() {
    let fleet = FakeCache::default();
    let (a, b) = (host(Some(&fleet)), host(Some(&fleet)));
    let producer = Arc::new(Producer::new(Arc::clone(a.engine.cache()), Duration::from_secs(10)));
    let key = kernel("__global__ void produced() {}").key;
    let wait = Duration::from_secs(10);
    let Decision::Granted(grant) = producer.decide(&key, wait, bytes_of).await else { panic!("the first is granted") };
    assert!(grant.fleet_leased(), "with a fleet, the grant holds its lease");
    assert!(producer.is_held(&key));
    let second = {
        let producer = Arc::clone(&producer);
        tokio::spawn(async move { producer.decide(&key, wait, bytes_of).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!second.is_finished(), "the second waits on the holder");
    producer.cache().store_everywhere(&key, stored(&key, b"produced")).await;
    producer.published(&key);
    let Decision::Found(found) = second.await.expect("the second's task") else { panic!("the second finds it") };
    assert_eq!(found, b"produced");
    grant.release().await;
    assert!(!producer.is_held(&key));
    // Another host of the fleet finds it without producing it.
    let producer = Producer::new(Arc::clone(b.engine.cache()), Duration::from_secs(10));
    assert!(matches!(producer.decide(&key, wait, bytes_of).await, Decision::Found(b) if b == b"produced"));
}

#[tokio::test]
async fn a_hosts_requests_for_a_key_the_fleet_holds_read_it_from_the_fleet_once() {
    let fleet = FakeCache::default();
    let (a, b) = (host(Some(&fleet)), host(Some(&fleet)));
    let key = kernel("__global__ void shared() {}").key;
    // Another host compiled it: stored in the fleet, not on this host.
    b.engine.cache().store_everywhere(&key, stored(&key, b"from another host")).await;
    let producer = Arc::new(Producer::new(Arc::clone(a.engine.cache()), Duration::from_secs(10)));
    let before = fleet.calls();
    // Eight ranks of one job ask this host for the same graph at once.
    let asks: Vec<_> = (0..8)
        .map(|_| {
            let producer = Arc::clone(&producer);
            tokio::spawn(async move { producer.decide(&key, Duration::from_secs(10), bytes_of).await })
        })
        .collect();
    for ask in asks {
        let decided = ask.await.expect("a rank's task");
        assert!(matches!(&decided, Decision::Found(b) if b == b"from another host"), "{decided:?}");
    }
    assert_eq!(fleet.calls() - before, 1, "one Get for the host, the other ranks wait for it");
}

#[tokio::test]
async fn a_producer_that_waits_past_its_bound_proceeds_without_a_grant() {
    let host = host(None);
    let producer = Producer::new(Arc::clone(host.engine.cache()), Duration::from_secs(10));
    let key = kernel("__global__ void slow() {}").key;
    let Decision::Granted(_held) = producer.decide(&key, Duration::from_secs(10), bytes_of).await else {
        panic!("the first is granted")
    };
    let late = producer.decide(&key, Duration::from_millis(50), bytes_of).await;
    assert!(matches!(&late, Decision::Proceed(why) if why.contains("another process on this host")), "{late:?}");
}

#[tokio::test]
async fn a_producer_that_waits_for_nobody_is_granted_a_free_key_and_told_of_a_held_one() {
    let fleet = FakeCache::default();
    let (a, b) = (host(Some(&fleet)), host(Some(&fleet)));
    let here = Producer::new(Arc::clone(a.engine.cache()), Duration::from_secs(10));
    let there = Producer::new(Arc::clone(b.engine.cache()), Duration::from_secs(10));
    let key = kernel("__global__ void raced() {}").key;
    let Some(Decision::Granted(grant)) = here.decide_now(&key, bytes_of).await else { panic!("a free key is granted") };
    assert!(grant.fleet_leased(), "with a fleet, the grant holds its lease");
    // Held on this host, or by another host's lease: no decision, at once (the test's own
    // timeout is the bound: a wait would be the hedge's 10 s).
    let started = std::time::Instant::now();
    assert!(here.decide_now(&key, bytes_of).await.is_none(), "held on this host");
    assert!(there.decide_now(&key, bytes_of).await.is_none(), "held by another host's lease");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    here.cache().store_everywhere(&key, stored(&key, b"produced")).await;
    here.published(&key);
    grant.release().await;
    // Stored: both find it.
    assert!(matches!(here.decide_now(&key, bytes_of).await, Some(Decision::Found(b)) if b == b"produced"));
    assert!(matches!(there.decide_now(&key, bytes_of).await, Some(Decision::Found(b)) if b == b"produced"));
}

#[tokio::test]
async fn a_host_s_requests_waiting_for_one_key_share_one_watch_of_the_fleet() {
    let fleet = FakeCache::default();
    let (a, b) = (host(Some(&fleet)), host(Some(&fleet)));
    let job = kernel("__global__ void waited_for() {}");
    let cache = b.engine.cache();
    // Eight of host B's requests wait for the key (a host's ranks waiting for a piece another host
    // compiles); host A compiles and publishes it once they all wait.
    let waits = futures_util::future::join_all((0..8).map(|_| cache.published_elsewhere(&job.key)));
    let publish = async {
        fleet.watches_reach(1).await;
        assert_eq!(cache.watches_open(), 1);
        a.resolve(&job).await
    };
    let (answers, published) = tokio::join!(waits, publish);
    assert!(published.is_ok(), "{published:?}");
    for answer in &answers {
        assert_eq!((answer.is_ok(), answer.tier()), (true, pb::Tier::Remote), "{answer:?}");
    }
    assert_eq!(fleet.watches(), 1, "one subscription on kiln-cache for the host's eight waiters");
    assert_eq!(b.metrics.lookups_of(TierName::Remote, "hit"), 1, "the artifact fetched and adopted once");
    assert_eq!(cache.watches_open(), 0, "the watch ends with its last waiter");
    assert!(b.resolve(&job).await.is_ok() && b.compiler.compiles() == 0, "host B holds it without compiling");
}
