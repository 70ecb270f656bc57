//! The fleet audit, end to end: real kilnd hosts over a real kiln-cache and redis-server. An
//! honest publish audits clean with every toolchain (the toolchains are deterministic, so a
//! false alarm would be a bug); a writer that publishes wrong bytes under a right key is caught
//! by the first host that takes them, quarantined fleet-wide, named, and kept out.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_cache_client::Lookup;
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::{Outcome, Tier};
use kiln_tests::daemon::{Daemon, compile_job};
use kiln_tests::env;
use kiln_tests::http::sample;
use kiln_tests::kernels::*;
use kiln_tests::redis::{CacheServer, WRITE_TOKEN, fleet};
use std::time::{Duration, Instant};
use tonic::Code;

/// The bad writer's name for itself.
const WRITER_HOST: &str = "gone-bad";

/// Every artifact audited, with all of a CPU, and the quarantine list read often.
/// Under `vet = "sample"`: these are the tests of the audit after the answer (the vetting
/// before it is tests/tests/vetting.rs).
const AUDIT_ALL: &str = "vet = \"sample\"\naudit_rate = 1.0\naudit_cpu_share = 1.0\nquarantine_poll_ms = 200\n";

fn metric(d: &Daemon, series: &str) -> f64 {
    sample(&d.metrics_text(), series).unwrap_or(0.0)
}

/// Waits until `d`'s audits have settled `n` artifacts (any verdict).
fn wait_for_audits(d: &Daemon, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = d.metrics_text();
        let done: f64 = ["clean", "mismatch", "failed", "absent"]
            .iter()
            .map(|r| sample(&text, &format!("kiln_audits_total{{result=\"{r}\"}}")).unwrap_or(0.0))
            .sum();
        if done >= n {
            return;
        }
        assert!(Instant::now() < deadline, "only {done} of {n} audits done:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// CUDA, PTX and Triton kernels one host compiled and published audit clean on another, both
/// on their own (every fleet artifact, at rate 1) and with `kiln audit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_publishes_audit_clean_with_every_toolchain() {
    let (_redis, cache) = fleet();
    let publisher = cache.host("");
    let examples = env::repo_root().join("examples");
    let graph = examples.join("mixed.graph.json");
    let graph = graph.to_str().unwrap();
    let out = publisher.kiln(&["compile", "--graph", graph, "--json"], &examples);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let kernels = String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("\"key\"")).count();
    assert!(kernels >= 3, "the mixed graph has CUDA, PTX and Triton kernels");
    let auditor = cache.host(AUDIT_ALL);
    let out = auditor.kiln(&["compile", "--graph", graph], &examples);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for_audits(&auditor, kernels as f64);
    assert_eq!(metric(&auditor, "kiln_audits_total{result=\"clean\"}"), kernels as f64);
    let text = auditor.metrics_text();
    assert!(!text.contains("kiln_audit_mismatches_total{"), "a false alarm:\n{text}");
    // On demand, the same: every kernel clean, named by its publisher.
    let out = auditor.kiln(&["audit", "--graph", graph], &examples);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.starts_with("clean ")).count(), kernels, "{stdout}");
    assert!(stdout.lines().all(|l| l.contains("published by ")), "{stdout}");
    let stats = auditor.client().await.stats().await.unwrap();
    let audit = stats.audit.unwrap();
    assert_eq!((audit.mismatched, audit.rate), (0, 1.0));
    assert_eq!(audit.publishers_audited.len(), 1, "{audit:?}");
    // An honest fleet: no conflicting write on record nor counted.
    assert_no_conflicts(&auditor, &cache);
}

/// `kiln audit --conflicts` lists nothing, and kiln-cache counted no conflicting write.
fn assert_no_conflicts(d: &Daemon, cache: &CacheServer) {
    let out = d.kiln(&["audit", "--conflicts"], &env::repo_root());
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listing}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(listing.trim(), "", "a false alarm");
    let text = cache.metrics_text();
    assert!(!text.contains("kiln_server_conflicting_puts_total{"), "a false alarm:\n{text}");
}

/// A writer with a read-write token publishes a wrong cubin (a valid envelope, digest and all)
/// under the right key. The first host that takes it audits it, quarantines it and names the
/// writer; kiln-cache serves it no more and refuses it again; the other host drops what it held
/// of the key; both end up with the right bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gone_bad_is_caught_quarantined_named_and_kept_out() {
    let (redis, cache) = fleet();
    let honest = cache.host("quarantine_poll_ms = 200\n");
    let job = compile_job(&honest.client().await, vector_graph("sm_90", 2)).await;
    let right = job.kernels[0].clone();
    assert_eq!(right.outcome(), Outcome::Ok, "{}", right.log);
    let key: CacheKey = right.key.parse().unwrap();
    // The bad writer: the honest envelope's metadata, other cubin bytes.
    let bad = cache.client(WRITE_TOKEN).with_host(WRITER_HOST);
    let Lookup::Hit(sealed, _) = bad.get(&key).await.unwrap() else { panic!("the honest host did not publish") };
    let honest_artifact = envelope::open(&sealed, &key, u64::MAX).unwrap();
    let mut wrong = honest_artifact.bytes.to_vec();
    let last = wrong.len() - 1;
    wrong[last] ^= 0xff;
    let wrong_envelope = envelope::seal(&key, honest_artifact.meta.clone(), &wrong);
    // Over the honest bytes: refused, a conflict on record. Once the fleet has lost them
    // (evicted), the wrong bytes are the key's first publish, and only the audit can tell.
    let refused = bad.put(&key, wrong_envelope.clone()).await.unwrap_err();
    assert_eq!(refused.code(), Some(Code::FailedPrecondition), "{refused}");
    redis.cli(&["DEL", &format!("kiln:v1:{{{key}}}:a")]);
    bad.put(&key, wrong_envelope.clone()).await.unwrap();

    let auditor = cache.host(AUDIT_ALL);
    let taken = compile_job(&auditor.client().await, vector_graph("sm_90", 2)).await;
    let served = taken.kernel(&right.id).unwrap();
    assert_eq!((tier(served), &served.artifact[..]), (Tier::Remote, &wrong[..]), "served once, before the audit");
    auditor.wait_for_metric("kiln_audit_mismatches_total{publisher=\"gone-bad\"}", 1.0);

    // kiln-cache: out of service, on record with the writer named, and refused again.
    assert_eq!(bad.get(&key).await.unwrap(), Lookup::Miss);
    let records = bad.list_quarantine(0, 0).await.unwrap().records;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].publisher.as_ref().map(|p| p.host.as_str()), Some("gone-bad"));
    assert!(records[0].detail.starts_with("cubin:"), "{:?}", records[0].detail);
    let refused = bad.put(&key, wrong_envelope).await.unwrap_err();
    assert_eq!(refused.code(), Some(Code::FailedPrecondition), "{refused}");
    assert_eq!(sample(&cache.metrics_text(), "kiln_server_quarantines_total{publisher=\"gone-bad\"}"), Some(1.0));

    // Both hosts learn of it and drop the key: their next compile of it gives the right bytes.
    honest.wait_for_metric("kiln_quarantined_keys", 1.0);
    for d in [&honest, &auditor] {
        let again = compile_job(&d.client().await, vector_graph("sm_90", 2)).await;
        let k = again.kernel(&right.id).unwrap();
        assert_eq!(k.artifact, right.artifact, "a host still serves the wrong bytes");
        assert_ne!(tier(k), Tier::Memory, "the quarantined key was not dropped from memory");
    }
    // The fleet page lists it, naming the writer, once its cached view (2 s) renews.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status: serde_json::Value =
            serde_json::from_str(&kiln_tests::http::get(cache.metrics, "/status.json").unwrap()).unwrap();
        if status["quarantines"][0].is_object() || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let listed = &status["quarantines"][0];
    assert_eq!(listed["key"], key.to_hex(), "{status}");
    assert_eq!(listed["publisher"]["host"], WRITER_HOST, "{status}");
    let html = kiln_tests::http::get(cache.metrics, "/").unwrap();
    assert!(html.contains("Quarantined by the fleet audit") && html.contains(WRITER_HOST), "{html}");
    let out = auditor.kiln(&["audit", "--quarantined"], &env::repo_root());
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && listing.contains("published by gone-bad"), "{listing}");
    // The refused Put over the honest bytes is on record too, naming both writers.
    let out = auditor.kiln(&["audit", "--conflicts"], &env::repo_root());
    let conflicts = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{conflicts}{}", String::from_utf8_lossy(&out.stderr));
    // Only it: the hosts' recompiles of the dropped key rewrote the graph's recipe books (the
    // honest host's over its own), kiln's own records, updated, which are no conflict.
    let listed: Vec<&str> = conflicts.lines().collect();
    assert_eq!(listed.len(), 1, "the refused Put, and no recipe book: {conflicts}");
    assert!(listed[0].contains("[refused]"), "{conflicts}");
    assert!(listed[0].starts_with(&key.to_hex()[..12]) && listed[0].contains("offered by gone-bad"), "{conflicts}");
    let text = cache.metrics_text();
    assert!(!text.contains("outcome=\"replaced\""), "a recipe book counted as a conflict:\n{text}");
    let out = auditor.kiln(&["audit", "--conflicts", "--json"], &env::repo_root());
    let json = String::from_utf8_lossy(&out.stdout);
    let records: Vec<serde_json::Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.iter().any(|r| r["key"] == key.to_hex() && r["refused"] == true), "{json}");
    // The honest host's kernel audited clean: no false alarm beside the true one.
    wait_for_audits(&auditor, 2.0);
    assert!(metric(&auditor, "kiln_audits_total{result=\"clean\"}") >= 1.0);
    assert_eq!(metric(&auditor, "kiln_audits_total{result=\"mismatch\"}"), 1.0);
}
