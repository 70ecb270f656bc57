//! The host page's HTML, from this host's `Stats` answer and its metrics.

use crate::metrics::{LeaseLabels, Metrics};
use crate::store::TierName;
use kiln_proto::html::{Cell, Page, Row, percent};
use kiln_proto::pb::StatsResponse;

/// The page reloads itself this often (a meta refresh, so it needs no script).
const REFRESH_SECS: u32 = 5;

/// Misses listed (kilnd keeps more; `kiln explain` and `/status.json` have them all).
const PAGE_MISSES: usize = 50;

/// Fleet lease outcomes, as `kiln_lease_total` labels them.
const LEASE_RESULTS: [&str; 6] = ["acquired", "waited", "takeover", "present", "timeout", "error"];

pub fn render(s: &StatsResponse, m: &Metrics) -> String {
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
                t.bytes.into(),
                t.capacity_bytes.into(),
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
    let rows: Vec<Row> = LEASE_RESULTS
        .iter()
        .map(|&result| {
            let n = m.leases.get_or_create(&LeaseLabels { result }).get();
            Row::new(vec![result.into(), Cell::from(n).id(format!("lease-{result}"))])
        })
        .collect();
    page.table("leases", &["outcome", "count"], &rows);

    page.heading("Latest misses");
    let mut misses: Vec<_> = s.recent_misses.iter().collect();
    misses.sort_by_key(|m| std::cmp::Reverse(m.unix_millis));
    let rows: Vec<Row> = misses
        .iter()
        .take(PAGE_MISSES)
        .map(|m| {
            Row::new(vec![
                m.unix_millis.into(),
                super::report::identity(m).into(),
                m.toolchain.as_str().into(),
                m.reason.as_str().into(),
                m.detail.as_str().into(),
            ])
        })
        .collect();
    page.table("misses", &["unix ms", "kernel", "toolchain", "reason", "detail"], &rows);
    page.finish()
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
            tiers: vec![pb::TierStats { tier: "memory".into(), hits: 3, misses: 1, ..Default::default() }],
            remote: "http://cache:7171".into(),
            remote_up: true,
            ..Default::default()
        };
        let html = render(&stats, &Metrics::new());
        assert!(html.contains("<td id=\"tier-hits-memory\" class=\"n\">3</td>"), "{html}");
        assert!(html.contains("&lt;b&gt;H100&lt;/b&gt;") && !html.contains("<b>H100"));
        assert!(html.contains(">reachable<"));
        assert!(html.contains("75.0%"));
    }
}
