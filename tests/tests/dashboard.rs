//! The Grafana dashboard in deploy/grafana/kiln.json queries metrics by name. A renamed metric
//! would leave a panel silently empty, so every name it uses is checked here against the
//! families a real kilnd and a real kiln-cache export.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb::{
    BlobFile, BlobScope, GetBlobsRequest, LeaseBlobRequest, PutBlobRequest, TorchGraphCost, TorchGraphReport,
    blobs_client::BlobsClient, torch_graphs_client::TorchGraphsClient,
};
use kiln_tests::redis::fleet;
use std::collections::BTreeSet;

/// Family names from `# TYPE name kind` lines of a Prometheus/OpenMetrics text.
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect()
}

/// Every `kiln_…` identifier in the dashboard's queries.
fn queried_names(dashboard: &serde_json::Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("kiln_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                    .collect();
                rest = &rest[at + name.len()..];
                names.insert(name);
            }
        }
    }
    names
}

/// The family a sample name belongs to: `_total`, `_bucket`, `_sum` and `_count` are suffixes
/// of samples, not of families.
fn family_of(name: &str) -> &str {
    ["_total", "_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name)
}

#[tokio::test]
async fn every_metric_the_dashboard_queries_is_exported() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/kiln.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (_redis, cache) = fleet();
    let kilnd = cache.host("");
    // The per-namespace blob series exist once a namespace has been used.
    let mut blobs = BlobsClient::new(kilnd.client().await.channel());
    let scope = Some(BlobScope { namespace: "triton".into(), tool_version: "3.6.0".into() });
    let files = vec![BlobFile { name: String::new(), data: b"x".to_vec() }];
    blobs.put_blob(PutBlobRequest { scope: scope.clone(), key: b"k".to_vec(), files }).await.unwrap();
    blobs.get_blobs(GetBlobsRequest { scope: scope.clone(), keys: vec![b"k".to_vec()] }).await.unwrap();
    let lease = LeaseBlobRequest { scope, key: b"k".to_vec(), wait_ms: 0, hold_ms: 0 };
    blobs.lease_blob(lease).await.unwrap().into_inner().message().await.unwrap();
    // The per-job torch.compile series exist once a job has reported (kilnd forwards it to the
    // fleet ledger), measured both ways and paying (a break-even), from two ranks that ended
    // their first steps (a rank skew).
    let graph = TorchGraphCost {
        name: "g".into(),
        eager_calls: 10,
        compiled_calls: 10,
        eager_median_s: 0.02,
        compiled_median_s: 0.01,
        served: "in-process".into(),
        compile_s: 1.0,
        ..Default::default()
    };
    for rank in 0..2 {
        let report = TorchGraphReport {
            job: "dashboard".into(),
            process: format!("dashboard-000{rank}"),
            rank,
            graphs: vec![graph.clone()],
            started_unix_ms: 1_000,
            first_step_unix_ms: 2_000 + 500 * rank as u64,
            ..Default::default()
        };
        let reply = TorchGraphsClient::new(kilnd.client().await.channel()).report_torch_graphs(report).await.unwrap();
        assert_eq!(reply.into_inner().source, "fleet", "kilnd forwarded the report to kiln-cache");
    }
    let mut exported = families(&kilnd.metrics_text());
    exported.extend(families(&cache.metrics_text()));
    let queried = queried_names(&dashboard);
    assert!(queried.len() >= 15, "the dashboard queries only {queried:?}");
    let missing: Vec<_> = queried.iter().filter(|n| !exported.contains(family_of(n))).collect();
    assert!(missing.is_empty(), "the dashboard queries metrics nobody exports: {missing:?}\nexported: {exported:?}");
    kilnd.stop();
}
