//! The kernels the scenarios send and the bytes they must get back.
//!
//! Kernel `i` is the harness's vector add `add_<i>` (id `add_<i>`) under a comment with a tag: a
//! new tag makes every kernel new to every cache, so a scenario's compiles are its own. "No wrong
//! bytes" is checked against a reference: the same graph compiled by a kilnd of its own, with its
//! own empty cache and no fleet, so nothing it returns came through the tiers under test.

use crate::bench::TARGET;
use crate::bench::kilnd::KilndOptions;
use anyhow::{Context, Result, ensure};
use kiln_proto::pb;
use kiln_tests::kernels;
use std::collections::BTreeMap;

/// Artifacts by kernel id.
pub type Artifacts = BTreeMap<String, Vec<u8>>;

/// Kernel `i` under `tag`.
pub fn kernel(tag: &str, i: usize) -> pb::Kernel {
    kernels::kernel(&format!("add_{i}"), kernels::cuda(&format!("// {tag}\n{}", kernels::vector_add(i))))
}

/// A graph of the kernels `ids` under `tag`, for [`TARGET`].
pub fn graph(tag: &str, ids: impl IntoIterator<Item = usize>) -> pb::CompileRequest {
    kernels::request(TARGET, ids.into_iter().map(|i| kernel(tag, i)).collect())
}

/// The ids of a request's kernels.
pub fn ids(req: &pb::CompileRequest) -> Vec<String> {
    req.graph.iter().flat_map(|g| g.kernels.iter().map(|k| k.id.clone())).collect()
}

/// A finished job's artifacts by id, each checked OK, every kernel of `req` present.
pub fn artifacts(req: &pb::CompileRequest, job: &kiln_client::CompletedJob) -> Result<Artifacts> {
    let mut out = Artifacts::new();
    for id in ids(req) {
        let k = job.kernel(&id).with_context(|| format!("no result for {id}"))?;
        ensure!(k.outcome() == pb::Outcome::Ok, "{id}: outcome {:?}: {}", k.outcome(), k.log);
        ensure!(!k.artifact.is_empty(), "{id}: an OK result with no artifact");
        out.insert(id, k.artifact.to_vec());
    }
    Ok(out)
}

/// A finished job's tiers, kernel by kernel: "compiled, remote, memory".
pub fn tiers(job: &kiln_client::CompletedJob) -> String {
    job.kernels.iter().map(|k| format!("{:?}", k.tier()).to_lowercase()).collect::<Vec<_>>().join(", ")
}

/// Compiles `req` on a kilnd of its own (fresh cache under `name`, no fleet) and returns what it
/// compiled: the bytes every other answer for these kernels must equal.
pub async fn reference(run: &super::Run, name: &str, req: &pb::CompileRequest) -> Result<Artifacts> {
    Ok(reference_keyed(run, name, req).await?.0)
}

/// [`reference`], with each kernel's cache key (hex) by id: where the fleet keeps it.
pub async fn reference_keyed(
    run: &super::Run,
    name: &str,
    req: &pb::CompileRequest,
) -> Result<(Artifacts, BTreeMap<String, String>)> {
    let bench = &run.bench;
    let dir = bench.dir(&format!("reference-{name}"))?;
    let daemon = bench.start_kilnd(&dir, &KilndOptions::new(bench.cores)).await?;
    let job = daemon.connect().await?.compile(req.clone()).await?.collect().await?;
    let out = artifacts(req, &job).context("the reference compile")?;
    daemon.stop().await?;
    Ok((out, keys(&job)))
}

/// A finished job's cache keys (hex) by kernel id.
pub fn keys(job: &kiln_client::CompletedJob) -> BTreeMap<String, String> {
    job.kernels.iter().map(|k| (k.id.clone(), k.key.clone())).collect()
}

/// How many of `got`'s artifacts differ from `reference` (a kernel the reference lacks counts).
pub fn wrong(got: &Artifacts, reference: &Artifacts) -> usize {
    got.iter().filter(|(id, bytes)| reference.get(*id) != Some(*bytes)).count()
}
