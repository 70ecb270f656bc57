//! The fleet page's HTML, drawn from a [`FleetStatus`] with kiln-proto's escaping builder: every
//! host name, version, GPU name and miss detail arrives as text and is escaped there.

use super::redis_info::human_bytes;
use super::{ClassRow, FleetStatus};
use kiln_serve::html::{Cell, Page, Row, ago, percent};

/// The page reloads itself this often (a meta refresh, so it needs no script).
const REFRESH_SECS: u32 = 10;

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "–".to_owned(), |r| format!("{:.1}%", r * 100.0))
}

fn seconds(s: f64) -> String {
    format!("{s:.1}")
}

fn class_rows(classes: &[ClassRow]) -> Vec<Row> {
    classes
        .iter()
        .map(|c| {
            Row::new(vec![
                c.name.as_str().into(),
                Cell::from(c.hits).id(format!("class-hits-{}", c.name)),
                c.published.into(),
                rate(c.hit_rate).into(),
                seconds(c.seconds_saved).into(),
            ])
            .key(c.name.as_str())
        })
        .collect()
}

pub fn render(s: &FleetStatus) -> String {
    let mut page = Page::new(
        "kiln fleet",
        &format!(
            "kiln-cache {} · last {} minutes · reloads every {REFRESH_SECS} s",
            env!("CARGO_PKG_VERSION"),
            s.window_minutes
        ),
        REFRESH_SECS,
    );
    if let Some(e) = &s.redis_error {
        page.heading("Redis is unreachable");
        page.paragraph(e);
    }
    if let Some(warning) = &s.vet_warning {
        page.heading("Publishers cannot be vetted");
        page.paragraph(warning);
    }
    let w = &s.lookups;
    page.figures(&[
        ("fleet hit rate", rate(s.hit_rate), "hit-rate"),
        ("hits", w.hits.to_string(), "fleet-hits"),
        ("misses", w.misses.to_string(), "fleet-misses"),
        ("compile seconds saved", seconds(w.seconds_saved), "seconds-saved"),
        ("compiles running", s.compiles_running.to_string(), "compiles-running"),
        ("leases held", s.leases_held.to_string(), "leases-held"),
        ("hosts", s.host_count.to_string(), "host-count"),
        ("kilnds", s.hosts.len().to_string(), "kilnd-count"),
    ]);

    page.heading("Hit rate by toolchain and blob namespace");
    page.paragraph(
        "A key is a digest and names no toolchain, so a class's rate is its hits against its hits \
         plus the compiles of it the fleet stored; the fleet's rate above counts misses.",
    );
    page.table(
        "classes",
        &["class", "hits", "compiled and stored", "hit rate", "seconds saved"],
        &class_rows(&s.classes),
    );
    if !s.internal_classes.is_empty() {
        page.paragraph(
            "kiln's own records, stored beside the artifacts (recipe books, which kiln explain \
             reads): not kernels, so not in the table above.",
        );
        page.table(
            "internal-classes",
            &["record", "read back", "stored", "read-back rate", "seconds saved"],
            &class_rows(&s.internal_classes),
        );
    }

    page.heading("torch.compile jobs: does the compile pay?");
    page.paragraph(
        "Per job, merged across its processes, ranks, hosts and restarts. Compile paid: each graph's cold \
         compile once, whichever host compiled it. Processes' own: serialization, round trips and loads (a \
         warm hit's whole cost). Saved by the caches: the stored compile time of every graph a process took \
         warm. Steps: every process's, added up. Eager steps are those timed while no compile of the job ran \
         on the host, where there are any.",
    );
    if s.torch_jobs.is_empty() {
        page.paragraph("No torch.compile job has reported yet (kiln.torch reports through kilnd).");
    } else {
        kiln_serve::torch_jobs::table(&mut page, "torch-jobs", &s.torch_jobs);
    }

    page.heading("Hosts");
    page.paragraph("One row per kilnd: a machine that runs several has a row for each, told apart by socket.");
    let rows: Vec<Row> = s
        .hosts
        .iter()
        .map(|h| {
            let r = &h.report;
            let gpus = if r.gpus.is_empty() {
                "none".to_owned()
            } else {
                r.gpus.iter().map(|g| format!("{} ({})", g.name, g.target)).collect::<Vec<_>>().join(", ")
            };
            let toolchains = r
                .toolchains
                .iter()
                .map(|t| format!("{} {} {}", t.name, t.version, &t.fingerprint[..t.fingerprint.len().min(12)]))
                .collect::<Vec<_>>()
                .join("; ");
            let split = if h.split.is_empty() {
                "matches the fleet".to_owned()
            } else {
                format!("differs from the fleet: {}", h.split.join(", "))
            };
            Row::new(vec![
                r.host.as_str().into(),
                r.instance.as_str().into(),
                r.version.as_str().into(),
                gpus.into(),
                toolchains.into(),
                Cell::from(split).flagged(!h.split.is_empty()),
                r.inflight_compiles.into(),
                percent(r.local_hits, r.local_hits + r.local_misses).into(),
                seconds(r.compile_seconds_saved).into(),
                ago(s.generated_unix_ms, h.received_unix_ms).into(),
            ])
            .key(h.daemon.as_str())
            .flagged(!h.split.is_empty())
        })
        .collect();
    page.table(
        "hosts",
        &[
            "host",
            "kilnd socket",
            "kiln",
            "GPUs",
            "toolchains (fingerprint prefix)",
            "fingerprints",
            "compiling",
            "local hit rate",
            "seconds saved (kilnd)",
            "reported",
        ],
        &rows,
    );

    page.heading("Toolchain fingerprints");
    let rows: Vec<Row> = s
        .toolchains
        .iter()
        .flat_map(|(name, split)| {
            split.hosts.iter().map(move |(fingerprint, hosts)| {
                let flagged = split.flags(fingerprint);
                let verdict = match (&split.majority, flagged) {
                    (Some(_), false) => "majority",
                    (Some(_), true) => "differs: shares nothing with the majority",
                    (None, _) => "no majority",
                };
                Row::new(vec![
                    name.as_str().into(),
                    fingerprint.as_str().into(),
                    hosts.len().into(),
                    hosts.join(", ").into(),
                    Cell::from(verdict).flagged(flagged),
                ])
                .flagged(flagged)
            })
        })
        .collect();
    page.table("fingerprints", &["toolchain", "fingerprint", "kilnds", "which", ""], &rows);

    page.heading("Latest misses");
    let rows: Vec<Row> = s
        .recent_misses
        .iter()
        .map(|m| {
            Row::new(vec![
                ago(s.generated_unix_ms, m.miss.unix_ms).into(),
                m.daemon.as_str().into(),
                m.miss.identity.as_str().into(),
                m.miss.toolchain.as_str().into(),
                m.miss.reason.as_str().into(),
                m.miss.detail.as_str().into(),
            ])
        })
        .collect();
    page.table("misses", &["when", "kilnd", "what", "toolchain", "reason", "detail"], &rows);

    page.heading("Quarantined by the fleet audit");
    page.paragraph(
        "Keys whose artifact a host recompiled and found different: kiln-cache serves those bytes no more \
         and refuses them if published again. The publisher is the host name it gave and its token's id \
         (revoke that token); `kiln audit --quarantined` lists them all.",
    );
    let rows: Vec<Row> = s
        .quarantines
        .iter()
        .map(|q| {
            let (host, token) = q.publisher.as_ref().map_or(("unknown", ""), |p| (p.host.as_str(), p.token.as_str()));
            Row::new(vec![
                ago(s.generated_unix_ms, q.unix_ms).into(),
                q.key.get(..16).unwrap_or(&q.key).into(),
                Cell::from(host).flagged(true),
                token.into(),
                q.reporter_host.as_str().into(),
                q.detail.as_str().into(),
            ])
            .flagged(true)
        })
        .collect();
    page.table("quarantines", &["when", "key", "published by", "token", "reported by", "what differed"], &rows);

    page.heading("Conflicting writes");
    page.paragraph(
        "Puts that offered other bytes under a key than it held. A kernel's key has one right answer: \
         such a Put is refused, and the held kernel is audited by the next host that fetches it. Blobs \
         and snapshot files are replaced as before. kiln's own records that kilnd rewrites as they \
         change (recipe books, snapshot manifests and listings) are updates, not conflicts. \
         `kiln audit --conflicts` lists every conflict.",
    );
    let rows: Vec<Row> = s
        .conflicts
        .iter()
        .map(|c| {
            let who = |p: Option<&kiln_proto::pb::Provenance>| {
                p.map_or_else(|| "unknown".to_owned(), |p| format!("{} ({})", p.host, p.token))
            };
            Row::new(vec![
                ago(s.generated_unix_ms, c.unix_ms).into(),
                c.key.get(..16).unwrap_or(&c.key).into(),
                who(c.held.as_ref()).into(),
                Cell::from(who(c.offered.as_ref())).flagged(true),
                if c.refused { "refused" } else { "replaced" }.into(),
                c.detail.as_str().into(),
            ])
            .flagged(c.refused)
        })
        .collect();
    page.table("conflicts", &["when", "key", "held, published by", "offered by", "outcome", "what differed"], &rows);

    page.heading("Redis");
    match &s.redis {
        Some(r) => {
            let max = if r.maxmemory == 0 { "no limit".to_owned() } else { human_bytes(r.maxmemory) };
            let row = Row::new(vec![
                r.nodes.into(),
                Cell::from(human_bytes(r.used_memory)).id("redis-used"),
                max.into(),
                r.maxmemory_policy.as_str().into(),
                Cell::from(r.evicted_keys).id("redis-evicted"),
                r.expired_keys.into(),
            ]);
            page.table(
                "redis",
                &["nodes", "used memory", "max memory", "policy", "evicted keys", "expired keys"],
                &[row],
            );
        }
        None => page.paragraph("INFO could not be read."),
    }

    page.heading("Per minute");
    let rows: Vec<Row> = w
        .minutes
        .iter()
        .rev()
        .filter(|m| m.hits + m.misses > 0)
        .map(|m| Row::new(vec![ago(s.generated_unix_ms, m.minute * 60_000).into(), m.hits.into(), m.misses.into()]))
        .collect();
    page.table("minutes", &["minute began", "hits", "misses"], &rows);
    page.finish()
}

#[cfg(test)]
mod tests {
    use super::super::store::Read;
    use super::*;
    use kiln_proto::pb::{HostGpu, HostMiss, HostReport, HostToolchain};

    #[test]
    fn hostile_report_text_is_shown_not_run() {
        let evil = "<script>alert(1)</script>";
        let report = HostReport {
            host: "gpu-1".into(),
            version: evil.into(),
            gpus: vec![HostGpu { name: format!("<img src=x onerror=alert(2)>{evil}"), target: "sm_90".into() }],
            toolchains: vec![HostToolchain { name: "nvrtc".into(), version: evil.into(), fingerprint: "a".repeat(64) }],
            recent_misses: vec![HostMiss {
                unix_ms: 1,
                identity: evil.into(),
                toolchain: "nvrtc".into(),
                reason: evil.into(),
                detail: evil.into(),
            }],
            ..Default::default()
        };
        let read = Read { hosts: vec![(1, report)], ..Default::default() };
        let html = render(&FleetStatus::new(read, None, 5_000));
        assert_eq!(html.matches("<script").count(), 1, "only the page's own script:\n{html}");
        assert!(!html.contains("<img"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("data-key=\"gpu-1\""));
    }

    #[test]
    fn two_kilnds_of_one_machine_are_two_rows_of_one_host_and_recipe_books_stand_apart() {
        use super::super::buckets::{ClassCounts, Window};
        let kilnd = |socket: &str| HostReport {
            host: "gpu-1".into(),
            instance: socket.into(),
            version: "0.1.0".into(),
            ..Default::default()
        };
        let mut window = Window::default();
        for (class, hits) in [("nvrtc", 5), ("kiln/recipe-book", 9), ("blob/inductor", 1)] {
            window.classes.insert(class.into(), ClassCounts { hits, ..Default::default() });
        }
        let read = Read {
            hosts: vec![(1, kilnd("/run/kiln/a.sock")), (1, kilnd("/run/kiln/b.sock"))],
            window,
            ..Default::default()
        };
        let status = FleetStatus::new(read, None, 5_000);
        assert_eq!((status.host_count, status.hosts.len()), (1, 2));
        let names = |rows: &[ClassRow]| rows.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&status.classes), ["nvrtc", "blob/inductor"]);
        assert_eq!(names(&status.internal_classes), ["kiln/recipe-book"]);
        let html = render(&status);
        assert!(html.contains("data-key=\"gpu-1 /run/kiln/a.sock\""), "{html}");
        assert!(html.contains("data-key=\"gpu-1 /run/kiln/b.sock\""), "{html}");
        let classes = &html[html.find("id=\"classes\"").unwrap()..html.find("id=\"internal-classes\"").unwrap()];
        assert!(!classes.contains("recipe-book"), "an internal class among users' classes: {classes}");
    }

    #[test]
    fn the_torch_job_table_shows_the_fleet_ledger() {
        let job = kiln_proto::pb::TorchJobReturn {
            job: "llama<i>".into(),
            eager_step_s: 0.017,
            compiled_step_s: 0.006,
            speedup: 17.0 / 6.0,
            cold_compile_s: 18.3,
            saved_s: 18.3,
            steps: 1500,
            break_even_steps: 1656.0,
            processes: 3,
            verdict: "the compile has not paid for itself yet".into(),
            ..Default::default()
        };
        let status = FleetStatus { torch_jobs: vec![job], ..Default::default() };
        let html = render(&status);
        assert!(html.contains("<tr data-key=\"llama&lt;i&gt;\"><td>llama&lt;i&gt;</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-0-saved\" class=\"n\">18.3</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-0-break-even\">1,656</td>"), "{html}");
        let html = render(&FleetStatus::default());
        assert!(html.contains("No torch.compile job has reported yet"), "{html}");
    }

    #[test]
    fn a_split_host_is_flagged() {
        let host = |name: &str, fp: char| HostReport {
            host: name.into(),
            version: "0.1.0".into(),
            toolchains: vec![HostToolchain {
                name: "nvrtc".into(),
                version: "13.0".into(),
                fingerprint: fp.to_string().repeat(64),
            }],
            ..Default::default()
        };
        let read =
            Read { hosts: vec![(1, host("a", 'a')), (1, host("b", 'a')), (1, host("odd", 'b'))], ..Default::default() };
        let status = FleetStatus::new(read, None, 5_000);
        let split: Vec<_> = status.hosts.iter().map(|h| (h.report.host.as_str(), h.split.len())).collect();
        assert_eq!(split, vec![("a", 0), ("b", 0), ("odd", 1)]);
        let html = render(&status);
        assert!(html.contains("<tr data-key=\"odd\" class=\"flag\">"), "{html}");
        assert!(!html.contains("<tr data-key=\"a\" class=\"flag\">"));
    }
}
