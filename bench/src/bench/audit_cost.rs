//! Figure (o): the fleet audit's CPU under load. A host whose every fetched artifact is queued
//! for audit (the worst case: as if each came from a publisher it had not yet audited) takes a
//! 64-kernel graph from the fleet, beside the same host with the audit off, and both are given a
//! window of time: what the audit adds to the host's CPU (kilnd and its compile workers) must
//! stay within its share (`audit_cpu_share`, 5% of one CPU by default).

use super::fleet::Fleet;
use super::report::{Row, Section, Target, Value};
use super::{Bench, GRAPH_KERNELS, check_job, cpu, graph_request};
use anyhow::{Context, Result};
use kiln_proto::pb;
use std::time::{Duration, Instant};

const TITLE: &str = "(o) Fleet audit: the CPU it takes under load, against the same host with the audit off";
/// How long both hosts are watched, from the graph's request on.
const WINDOW: Duration = Duration::from_secs(30);
/// kilnd's default `audit_cpu_share`: the target.
const SHARE: f64 = 0.05;

pub async fn run(bench: &Bench, fleet: &Fleet) -> Result<Section> {
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "A filler kilnd publishes the {GRAPH_KERNELS}-kernel graph of (a) to the run's kiln-cache. Then two \
             fresh kilnds (`--concurrency {}`, empty caches) side by side: one with `audit_rate = 1` (every \
             artifact it takes from the fleet is queued for audit, as if each came from a publisher it had not \
             audited yet) and the default `audit_cpu_share` ({SHARE}), the other with `audit = false`. Both ask \
             for the graph at once (all {GRAPH_KERNELS} kernels from the fleet) and are then left alone until \
             {} s have passed since the request.",
            bench.cores,
            WINDOW.as_secs()
        ),
        "Measured over the window: the CPU seconds (utime + stime from /proc) of each kilnd and every process \
         it started (its compile workers, where the audit's recompiles run). The audit's share is the \
         difference; the target is the configured share of one CPU over the window. The audited host recompiles \
         what the share allows and leaves the rest queued (the queue holds 64)."
            .into(),
    ];
    let filler = fleet.start_host(bench, "audit-cost-fill", "audit = false\n").await?;
    let job = filler.connect().await?.compile(graph_request()).await?.collect().await.context("the fill")?;
    check_job(&job, GRAPH_KERNELS, None)?;
    filler.stop().await?;

    let start = |name: &'static str, config: &'static str| async move {
        let mut options = fleet.kilnd_options(bench.cores, config);
        options.metrics = true;
        bench.start_kilnd(&bench.dir(name)?, &options).await
    };
    let audited = start("audit-cost-on", "audit_rate = 1.0\n").await?;
    let plain = start("audit-cost-off", "audit = false\n").await?;
    let (audited_pid, plain_pid) = (audited.pid().context("kilnd is gone")?, plain.pid().context("kilnd is gone")?);
    let (audited_client, plain_client) = (audited.connect().await?, plain.connect().await?);
    let (a0, p0) = (cpu::tree_seconds(audited_pid)?, cpu::tree_seconds(plain_pid)?);
    let started = Instant::now();
    let (a, p) = tokio::join!(async { audited_client.compile(graph_request()).await?.collect().await }, async {
        plain_client.compile(graph_request()).await?.collect().await
    },);
    check_job(&a?, GRAPH_KERNELS, Some(pb::Tier::Remote)).context("the audited host")?;
    check_job(&p?, GRAPH_KERNELS, Some(pb::Tier::Remote)).context("the host without the audit")?;
    tokio::time::sleep(WINDOW.saturating_sub(started.elapsed())).await;
    let window = started.elapsed();
    let (a1, p1) = (cpu::tree_seconds(audited_pid)?, cpu::tree_seconds(plain_pid)?);
    let (with_audit, without) = (a1 - a0, p1 - p0);
    let audits = |result: &str| audited.metric_sum(&format!("kiln_audits_total{{result=\"{result}\"}}"));
    // `+ 0.0`: a sum over no series is -0.0, which would print as "-0".
    let (clean, mismatched, dropped) = (audits("clean")? + 0.0, audits("mismatch")? + 0.0, audits("dropped")? + 0.0);
    s.rows.push(Row::new(
        "CPU of kilnd and its workers over the window, every fetched artifact queued for audit",
        Ok(Value::Seconds(with_audit)),
        "the same host with the audit off",
        Ok(Value::Seconds(without)),
    ));
    s.rows.push(
        Row::new(
            "the audit's CPU: the difference",
            Ok(Value::Millis((with_audit - without).max(0.0) * 1e3)),
            format!("{:.0}% of one CPU over the window", SHARE * 100.0),
            Ok(Value::Millis(SHARE * window.as_secs_f64() * 1e3)),
        )
        .with_target(Target::RatioAtMost(1.0)),
    );
    s.notes.push(format!(
        "Over {:.1} s: {clean} artifacts audited clean, {mismatched} mismatched, {dropped} not queued (the queue \
         was full); the rest of the {GRAPH_KERNELS} wait in the queue for the share to allow them.",
        window.as_secs_f64()
    ));
    drop((audited_client, plain_client));
    audited.stop().await?;
    plain.stop().await?;
    Ok(s)
}
