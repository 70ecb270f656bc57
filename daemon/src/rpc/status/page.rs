//! The host page's HTML, from this host's `Stats` answer and its metrics.

use crate::domain::TierName;
use crate::metrics::{LeaseResult, Metrics};
use kiln_proto::pb::{self, StatsResponse};
use kiln_proto::units::bytes as size;
use kiln_serve::html::{Cell, Page, Row, ago, now_ms, percent};

/// The page reloads itself this often (a meta refresh, so it needs no script).
const REFRESH_SECS: u32 = 5;

/// Misses listed (kilnd keeps more; `kiln explain` and `/status.json` have them all).
const PAGE_MISSES: usize = 50;

pub fn render(s: &StatsResponse, m: &Metrics) -> String {
    render_at(s, m, now_ms())
}

/// [`render`] as of `now_ms` (Unix milliseconds), which the page's "ago" columns count from.
fn render_at(s: &StatsResponse, m: &Metrics, now: u64) -> String {
    let mut page = Page::new(
        "kilnd",
        &format!("kilnd {} · reloads every {REFRESH_SECS} s · /status.json for scripts", s.version),
        REFRESH_SECS,
    );
    let local_hits: u64 = s.tiers.iter().map(|t| t.hits).sum();
    let local_misses = s.tiers.last().map_or(0, |t| t.misses);
    let fleet = if s.remote.is_empty() {
        "not configured"
    } else if s.remote_up {
        "reachable"
    } else if s.remote_state == "refused" {
        "TOKEN REFUSED"
    } else {
        "UNREACHABLE"
    };
    page.figures(&[
        ("local hit rate", percent(local_hits, local_hits + local_misses), "hit-rate"),
        ("compiles running", s.inflight_compiles.to_string(), "compiles-running"),
        ("queued", s.queue_depth.to_string(), "queued"),
        ("compiles", format!("{} ok, {} failed", s.compiles_ok, s.compiles_failed), "compiles"),
        ("compile seconds saved", format!("{:.1}", s.compile_seconds_saved), "seconds-saved"),
        ("fleet cache", fleet.to_owned(), "fleet"),
    ]);
    if !s.remote.is_empty() {
        page.paragraph(&format!("fleet cache: {}", s.remote));
        if !s.remote_reason.is_empty() {
            page.paragraph(&format!("why: {}", s.remote_reason));
        }
        if let Some(audit) = s.audit.as_ref().filter(|a| !a.vet.is_empty()) {
            page.paragraph(&format!("vetting of fleet kernels: {}", audit.vet));
            if !audit.vet_warning.is_empty() {
                page.heading("Publishers cannot be vetted");
                page.paragraph(&audit.vet_warning);
            }
        }
    }

    page.heading("Tiers");
    let remote = |result| m.lookups_of(TierName::Remote, result);
    let mut rows: Vec<Row> = s
        .tiers
        .iter()
        .map(|t| {
            Row::new(vec![
                t.tier.as_str().into(),
                t.entries.into(),
                size(t.bytes).into(),
                size(t.capacity_bytes).into(),
                Cell::from(t.hits).id(format!("tier-hits-{}", t.tier)),
                Cell::from(t.misses).id(format!("tier-misses-{}", t.tier)),
                percent(t.hits, t.hits + t.misses).into(),
                Cell::from(t.integrity_failures).flagged(t.integrity_failures > 0),
            ])
            .key(t.tier.as_str())
        })
        .collect();
    if !s.remote.is_empty() {
        let (hits, misses) = (remote("hit"), remote("miss"));
        rows.push(
            Row::new(vec![
                TierName::Remote.as_str().into(),
                "".into(),
                "".into(),
                "".into(),
                Cell::from(hits).id("tier-hits-remote"),
                Cell::from(misses).id("tier-misses-remote"),
                percent(hits, hits + misses).into(),
                "".into(),
            ])
            .key(TierName::Remote.as_str()),
        );
    }
    page.table(
        "tiers",
        &["tier", "entries", "bytes", "capacity", "hits", "misses", "hit rate", "integrity failures"],
        &rows,
    );

    page.heading("Toolchains");
    let rows: Vec<Row> = s
        .toolchains
        .iter()
        .map(|t| {
            Row::new(vec![t.name.as_str().into(), t.version.as_str().into(), t.fingerprint.as_str().into()])
                .key(t.name.as_str())
        })
        .collect();
    page.table("toolchains", &["toolchain", "version", "fingerprint"], &rows);

    page.heading("GPUs");
    let rows: Vec<Row> = s
        .gpus
        .iter()
        .map(|g| Row::new(vec![g.index.into(), g.name.as_str().into(), g.target.as_str().into()]))
        .collect();
    page.table("gpus", &["index", "name", "target"], &rows);
    if s.gpus.is_empty() {
        page.paragraph(&format!(
            "No GPU on this host; compiling for {}.",
            if s.default_target.is_empty() { "the targets requests name" } else { &s.default_target }
        ));
    }

    page.heading("Fleet leases");
    let rows: Vec<Row> = LeaseResult::ALL
        .map(|result| {
            let (name, n) = (result.as_str(), m.leases_of(result));
            Row::new(vec![name.into(), Cell::from(n).id(format!("lease-{name}"))])
        })
        .into();
    page.table("leases", &["outcome", "count"], &rows);

    torch_graphs(&mut page, s.torch_graphs.as_ref());

    page.heading("Latest misses");
    let mut misses: Vec<_> = s.recent_misses.iter().collect();
    misses.sort_by_key(|m| std::cmp::Reverse(m.unix_millis));
    let rows: Vec<Row> = misses
        .iter()
        .take(PAGE_MISSES)
        .map(|m| {
            Row::new(vec![
                ago(now, m.unix_millis).into(),
                super::report::identity(m).into(),
                m.toolchain.as_str().into(),
                m.reason.as_str().into(),
                m.detail.as_str().into(),
            ])
        })
        .collect();
    page.table("misses", &["when", "kernel", "toolchain", "reason", "detail"], &rows);
    page.finish()
}

/// The torch.compile section: how kilnd answered graph requests, the in-process compiles that
/// client processes fell back to (so an operator sees why jobs did not use kilnd), and whether
/// each job's compile paid for itself. Job names and verdicts come from clients, so they reach
/// the page only as cell text, which the builder escapes. `None` is a stats answer that carries
/// no graph counts (a kilnd from before torch graph compiles), said so rather than shown as zeros.
fn torch_graphs(page: &mut Page, graphs: Option<&pb::TorchGraphStats>) {
    page.heading("torch.compile graphs");
    let Some(g) = graphs else {
        page.paragraph("torch.compile graph counts not reported.");
        return;
    };
    let rows = [("compiled", g.compiled), ("failed", g.failed), ("hits", g.hits)].map(|(outcome, n)| {
        Row::new(vec![outcome.into(), Cell::from(n).id(format!("torch-graphs-{outcome}"))]).key(outcome)
    });
    page.table("torch-graphs", &["outcome", "count"], &rows);
    page.paragraph("Hits were answered from a cache tier or from another request's compile.");

    // Sorted, so the rows keep their places between reloads.
    let mut fallbacks: Vec<_> = g.fallbacks.iter().filter(|(_, n)| **n > 0).collect();
    fallbacks.sort();
    if fallbacks.is_empty() {
        page.paragraph("No process has reported falling back to an in-process compile.");
    } else {
        let rows: Vec<Row> = fallbacks
            .iter()
            .map(|(reason, n)| {
                Row::new(vec![reason.as_str().into(), Cell::from(n).id(format!("torch-fallback-{reason}"))])
                    .key(reason.as_str())
            })
            .collect();
        page.table("torch-fallbacks", &["fallback to an in-process compile", "count"], &rows);
    }

    if g.jobs.is_empty() {
        page.paragraph("No job has reported its graphs' costs yet.");
        return;
    }
    kiln_serve::torch_jobs::table(page, "torch-jobs", &g.jobs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_proto::pb;

    #[test]
    fn the_host_page_shows_tiers_and_escapes_names() {
        let stats = StatsResponse {
            version: "0.1.0".into(),
            gpus: vec![pb::Gpu { index: 0, name: "<b>H100</b>".into(), target: "sm_90".into() }],
            tiers: vec![pb::TierStats {
                tier: "memory".into(),
                hits: 3,
                misses: 1,
                bytes: 1536,
                capacity_bytes: 1 << 30,
                ..Default::default()
            }],
            recent_misses: vec![pb::RecentMiss { unix_millis: 1_000, reason: "new".into(), ..Default::default() }],
            remote: "http://cache:7171".into(),
            remote_up: true,
            ..Default::default()
        };
        let html = render_at(&stats, &Metrics::new(), 91_000);
        assert!(html.contains("<td id=\"tier-hits-memory\" class=\"n\">3</td>"), "{html}");
        assert!(html.contains(">1.5 KiB<") && html.contains(">1.0 GiB<"), "sizes for a person: {html}");
        assert!(html.contains(">90 s ago<"), "a miss's time for a person: {html}");
        assert!(html.contains("&lt;b&gt;H100&lt;/b&gt;") && !html.contains("<b>H100"));
        assert!(html.contains(">reachable<"));
        assert!(html.contains("75.0%"));
    }

    #[test]
    fn the_host_page_shows_torch_graphs_and_escapes_job_names() {
        let mut graphs = kiln_proto::fixtures::torch_graph_stats("train<script>alert(1)</script>");
        graphs.jobs[0].verdict.push_str(" <b>");
        let stats = StatsResponse { torch_graphs: Some(graphs), ..Default::default() };
        let html = render(&stats, &Metrics::new());
        assert!(html.contains("<h2>torch.compile graphs</h2>"), "{html}");
        for needle in [
            "<td id=\"torch-graphs-compiled\" class=\"n\">3</td>",
            "<td id=\"torch-graphs-failed\" class=\"n\">1</td>",
            "<td id=\"torch-graphs-hits\" class=\"n\">5</td>",
            "<td>not_reused</td><td id=\"torch-fallback-not_reused\" class=\"n\">2</td>",
            "<tr data-key=\"train&lt;script&gt;alert(1)&lt;/script&gt;\"><td>train&lt;script&gt;alert(1)&lt;/script&gt;</td>\
             <td id=\"torch-job-0-eager\" class=\"n\">15.00</td><td id=\"torch-job-0-compiled\" class=\"n\">9.00</td>\
             <td id=\"torch-job-0-speedup\">1.67×</td><td id=\"torch-job-0-compile-paid\" class=\"n\">20.0</td>",
            "<td id=\"torch-job-0-steps\" class=\"n\">120</td><td id=\"torch-job-0-break-even\">4,000</td>",
            "the compile has not paid for itself yet: 120 steps of the 4000 it needs &lt;b&gt;</td>",
        ] {
            assert!(html.contains(needle), "missing {needle:?} in\n{html}");
        }
        // The page's own script is the only one; a reason never taken is left out.
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        assert!(!html.contains("unserializable"), "{html}");

        let no_jobs = pb::TorchGraphStats::default();
        let html = render(&StatsResponse { torch_graphs: Some(no_jobs), ..Default::default() }, &Metrics::new());
        assert!(html.contains("No job has reported") && !html.contains("id=\"torch-jobs\""), "{html}");
        assert!(html.contains("No process has reported falling back"), "{html}");

        let html = render(&StatsResponse { torch_graphs: None, ..Default::default() }, &Metrics::new());
        assert!(html.contains("<h2>torch.compile graphs</h2>") && html.contains("not reported"), "{html}");
        assert!(!html.contains("torch-graphs-compiled"), "{html}");
    }
}
