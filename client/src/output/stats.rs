//! The daemon's `StatsResponse` for humans: `kiln stats` prints all of it, `kiln doctor` the
//! parts that say whether this host can compile and share.

use super::{format_bytes, plural};
use kiln_proto::pb;
use std::fmt::Write as _;

/// Why fingerprints are shown in full: they decide which hosts share cache entries.
pub const FINGERPRINT_NOTE: &str =
    "hosts share artifacts only when toolchain fingerprints match (same compiler build, same libraries)";

/// Everything `kiln stats` shows.
pub fn stats_text(stats: &pb::StatsResponse) -> String {
    let mut text = identity_text(stats);
    let _ = writeln!(text, "concurrency     {}", stats.concurrency);
    let _ = writeln!(text, "fleet cache     {}", fleet_text(stats));
    let _ = writeln!(
        text,
        "jobs            {} total, {} queued, {} compiling now",
        stats.jobs_total, stats.queue_depth, stats.inflight_compiles
    );
    let _ = writeln!(
        text,
        "compiles        {} ok, {} failed; {:.1} s of compile time saved by the caches",
        stats.compiles_ok, stats.compiles_failed, stats.compile_seconds_saved
    );
    text.push_str(&snapshots_text(stats.snapshots.as_ref()));
    text.push_str(&torch_graphs_text(stats.torch_graphs.as_ref()));
    text.push_str(&misses_text(&stats.recent_misses));
    text.push_str(&details_text(stats));
    text
}

/// How many recent misses `kiln stats` prints; `--json` has all that kilnd keeps.
const MISSES_SHOWN: usize = 5;

/// Why the latest compiles missed, newest first: the counts by reason, then the last few with
/// their detail. Without it the reasons were only in `--json`.
pub fn misses_text(misses: &[pb::RecentMiss]) -> String {
    if misses.is_empty() {
        return "recent misses   none since kilnd started\n".to_owned();
    }
    let mut by_reason: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for m in misses {
        *by_reason.entry(m.reason.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = by_reason.iter().map(|(reason, n)| format!("{reason} {n}")).collect();
    let mut text = format!("recent misses   {} ({}); newest first:\n", misses.len(), counts.join(", "));
    for m in misses.iter().take(MISSES_SHOWN) {
        let graph = if m.graph.is_empty() { String::new() } else { format!("{}/", m.graph) };
        let _ = writeln!(text, "  {graph}{} ({}): {}: {}", m.kernel_id, m.toolchain, m.reason, m.detail);
    }
    if misses.len() > MISSES_SHOWN {
        let _ = writeln!(text, "  ... {} more in `kiln stats --json`", misses.len() - MISSES_SHOWN);
    }
    text
}

/// The fleet cache in one line: its URI, its state and, when it is not usable, why.
pub fn fleet_text(stats: &pb::StatsResponse) -> String {
    let uri = stats.remote.as_str();
    if uri.is_empty() {
        return "none (local tiers only: kilnd has no --remote)".to_owned();
    }
    let reason = &stats.remote_reason;
    match stats.remote_state.as_str() {
        "up" if reason.is_empty() => format!("{uri} (up)"),
        "up" => format!("{uri} (up; {reason})"),
        "refused" => format!("{uri} (REFUSED TOKEN: serving from local tiers): {reason}"),
        "starting" => format!("{uri} (not answered yet: serving from local tiers)"),
        "down" => format!("{uri} (DOWN: serving from local tiers): {reason}"),
        // A kilnd from before `remote_state` says only up or down.
        _ if stats.remote_up => format!("{uri} (up)"),
        _ => format!("{uri} (DOWN: serving from local tiers)"),
    }
}

/// What is wrong with the fleet cache, with the fix, for `kiln doctor`; `None` when there is
/// none configured, it is up, or it has not answered yet.
pub fn fleet_problem(stats: &pb::StatsResponse) -> Option<String> {
    let uri = &stats.remote;
    match stats.remote_state.as_str() {
        _ if uri.is_empty() => None,
        "refused" => Some(format!(
            "the fleet cache at {uri} refused kilnd's token: give kilnd (--remote-token or remote.token in its config) a \
             token kiln-cache accepts, then restart kilnd"
        )),
        "down" => Some(format!(
            "the fleet cache at {uri} is unreachable ({}): start kiln-cache (and its Redis) or fix kilnd's --remote; \
             kilnd compiles from local tiers meanwhile",
            stats.remote_reason
        )),
        "" if !stats.remote_up => Some(format!("the fleet cache at {uri} is down")),
        _ => None,
    }
}

/// Job snapshots: saves and restores, then the files of restores and the bytes they moved.
/// `None` is a kilnd from before snapshots, which reports none: said so, never shown as zeros.
pub fn snapshots_text(snapshots: Option<&pb::SnapshotStats>) -> String {
    let Some(s) = snapshots else {
        return "snapshots       not reported (this kilnd predates job snapshots)\n".to_owned();
    };
    format!(
        "snapshots       {} save{} ({} changed, {} unchanged); {} restore{} ({} found, {} with no snapshot for this \
         host)\nsnapshot files  {} fetched ({}), {} already present, {} missing; {} stored\n",
        s.saves_changed + s.saves_unchanged,
        plural((s.saves_changed + s.saves_unchanged) as usize),
        s.saves_changed,
        s.saves_unchanged,
        s.restores_found + s.restores_missing,
        plural((s.restores_found + s.restores_missing) as usize),
        s.restores_found,
        s.restores_missing,
        s.files_fetched,
        format_bytes(s.bytes_fetched),
        s.files_present,
        s.files_missing,
        format_bytes(s.bytes_stored),
    )
}

/// torch.compile graphs: what kilnd's torch workers answered, the fallbacks processes reported,
/// and each job's return (does its compile pay?), newest first. `None` is a kilnd from before
/// graphs, said so.
pub fn torch_graphs_text(graphs: Option<&pb::TorchGraphStats>) -> String {
    let Some(g) = graphs else {
        return "torch graphs    not reported (this kilnd predates torch graph compiles)\n".to_owned();
    };
    let mut text = format!(
        "torch graphs    {} compiled, {} failed, {} from a tier or another's compile\n",
        g.compiled, g.failed, g.hits
    );
    let mut fallbacks: Vec<_> = g.fallbacks.iter().filter(|(_, n)| **n > 0).collect();
    fallbacks.sort();
    if !fallbacks.is_empty() {
        let list: Vec<String> = fallbacks.iter().map(|(reason, n)| format!("{reason} {n}")).collect();
        let _ = writeln!(text, "graph fallbacks {} (compiled in the process instead)", list.join(", "));
    }
    for job in &g.jobs {
        text.push_str(&super::roi::job_text(job, "  "));
    }
    text
}

/// Toolchains, GPUs and tiers, each after a blank line: shared by `stats` and `doctor`.
pub fn details_text(stats: &pb::StatsResponse) -> String {
    let mut text = String::new();
    for part in [toolchains_text(&stats.toolchains), gpus_text(&stats.gpus), tiers_text(&stats.tiers)] {
        text.push('\n');
        text.push_str(&part);
    }
    text
}

/// Version and default target: the first lines of both `stats` and `doctor`.
pub fn identity_text(stats: &pb::StatsResponse) -> String {
    let target = if stats.default_target.is_empty() {
        "none (no --target and no local GPU: every graph must name its target)"
    } else {
        &stats.default_target
    };
    format!("kilnd version   {}\ndefault target  {target}\n", or_unknown(&stats.version))
}

/// Each toolchain with its full fingerprint, where it was loaded from, and what it can target.
pub fn toolchains_text(toolchains: &[pb::ToolchainInfo]) -> String {
    let mut text = format!("{} toolchain{}\n", toolchains.len(), plural(toolchains.len()));
    for t in toolchains {
        let _ = writeln!(text, "  {} {}", t.name, or_unknown(&t.version));
        let _ = writeln!(text, "    fingerprint   {}", or_unknown(&t.fingerprint));
        let _ = writeln!(text, "    location      {}", or_unknown(&t.location));
        let _ = writeln!(text, "    targets       {}", list_or_none(&t.supported_targets));
        let _ = writeln!(text, "    include dirs  {}", list_or_none(&t.include_dirs));
    }
    text
}

pub fn gpus_text(gpus: &[pb::Gpu]) -> String {
    let mut text = format!("{} GPU{}\n", gpus.len(), plural(gpus.len()));
    for gpu in gpus {
        let _ = writeln!(text, "  {}  {}  {}", gpu.index, gpu.name, gpu.target);
    }
    text
}

/// One row per tier. The hit rate is over lookups that reached the tier.
pub fn tiers_text(tiers: &[pb::TierStats]) -> String {
    let mut text = format!(
        "{:<8}  {:>9}  {:>10}  {:>10}  {:>9}  {:>9}  {:>8}  {:>9}\n",
        "tier", "entries", "size", "capacity", "hits", "misses", "hit rate", "corrupt"
    );
    for tier in tiers {
        let lookups = tier.hits + tier.misses;
        let rate =
            if lookups == 0 { "-".to_owned() } else { format!("{:.1}%", 100.0 * tier.hits as f64 / lookups as f64) };
        let capacity = if tier.capacity_bytes == 0 { "-".to_owned() } else { format_bytes(tier.capacity_bytes) };
        let _ = writeln!(
            text,
            "{:<8}  {:>9}  {:>10}  {:>10}  {:>9}  {:>9}  {:>8}  {:>9}",
            tier.tier,
            tier.entries,
            format_bytes(tier.bytes),
            capacity,
            tier.hits,
            tier.misses,
            rate,
            tier.integrity_failures
        );
    }
    text
}

fn or_unknown(value: &str) -> &str {
    if value.is_empty() { "(unknown)" } else { value }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "(none)".to_owned() } else { items.join(" ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails naming the first of `needles` that `text` lacks, with the whole text to read.
    fn assert_contains_all(text: &str, needles: &[&str]) {
        for needle in needles {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    fn sample() -> pb::StatsResponse {
        pb::StatsResponse {
            version: "0.1.0".into(),
            toolchains: vec![pb::ToolchainInfo {
                name: "nvrtc".into(),
                version: "13.0".into(),
                fingerprint: "f0".repeat(32),
                location: "/usr/local/cuda/lib64/libnvrtc.so.13".into(),
                include_dirs: vec!["/usr/local/cuda/include".into()],
                supported_targets: vec!["sm_80".into(), "sm_90".into(), "sm_90a".into()],
            }],
            gpus: vec![pb::Gpu { index: 0, name: "NVIDIA H100".into(), target: "sm_90".into() }],
            default_target: "sm_90".into(),
            tiers: vec![pb::TierStats {
                tier: "memory".into(),
                entries: 3,
                bytes: 40_000,
                capacity_bytes: 1 << 30,
                hits: 3,
                misses: 1,
                integrity_failures: 0,
            }],
            compiles_ok: 4,
            compile_seconds_saved: 2.5,
            concurrency: 16,
            snapshots: Some(pb::SnapshotStats {
                saves_changed: 2,
                saves_unchanged: 1,
                restores_found: 1,
                restores_missing: 1,
                files_fetched: 7,
                files_present: 3,
                files_missing: 1,
                bytes_fetched: 5 << 20,
                bytes_stored: 3 << 20,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn recent_misses_are_shown_with_their_reasons() {
        assert_eq!(misses_text(&[]), "recent misses   none since kilnd started\n");
        let miss = |id: &str, reason: &str| pb::RecentMiss {
            kernel_id: id.into(),
            toolchain: "nvrtc".into(),
            reason: reason.into(),
            detail: format!("{reason} detail"),
            ..Default::default()
        };
        let misses: Vec<pb::RecentMiss> =
            (0..7).map(|i| miss(&format!("k{i}"), if i == 0 { "header" } else { "new" })).collect();
        let text = misses_text(&misses);
        assert!(text.starts_with("recent misses   7 (header 1, new 6); newest first:\n"), "{text}");
        assert!(text.contains("  k0 (nvrtc): header: header detail\n"), "{text}");
        assert!(!text.contains("k5") && text.contains("... 2 more in `kiln stats --json`"), "{text}");
    }

    #[test]
    fn the_fleet_line_says_why_it_is_not_used() {
        let with = |state: &str, reason: &str| pb::StatsResponse {
            remote: "http://cache:7171".into(),
            remote_state: state.into(),
            remote_reason: reason.into(),
            remote_up: state == "up",
            ..Default::default()
        };
        assert_eq!(fleet_text(&pb::StatsResponse::default()), "none (local tiers only: kilnd has no --remote)");
        assert_eq!(fleet_text(&with("up", "")), "http://cache:7171 (up)");
        assert!(fleet_problem(&with("up", "")).is_none());
        let refused = with("refused", "the fleet refused kilnd's token");
        assert!(
            fleet_text(&refused).contains("REFUSED TOKEN") && fleet_text(&refused).contains("refused kilnd's token")
        );
        assert!(
            fleet_problem(&refused)
                .is_some_and(|p| p.contains("refused kilnd's token") && p.contains("--remote-token"))
        );
        let down = with("down", "kiln-cache at http://cache:7171 is unreachable: connection refused");
        assert!(fleet_text(&down).contains("DOWN") && fleet_text(&down).contains("connection refused"));
        assert!(fleet_problem(&down).is_some_and(|p| p.contains("start kiln-cache")));
        // A kilnd from before remote_state.
        assert_eq!(fleet_text(&with("", "")), "http://cache:7171 (DOWN: serving from local tiers)");
    }

    #[test]
    fn stats_show_toolchains_gpus_and_tiers() {
        let text = stats_text(&sample());
        assert_contains_all(
            &text,
            &[
                "kilnd version   0.1.0",
                "default target  sm_90",
                &"f0".repeat(32),
                "targets       sm_80 sm_90 sm_90a",
                "include dirs  /usr/local/cuda/include",
                "0  NVIDIA H100  sm_90",
                "75.0%",
                "1.0 GiB",
                "2.5 s of compile time saved",
            ],
        );
    }

    #[test]
    fn stats_show_snapshot_saves_restores_and_files() {
        let text = stats_text(&sample());
        assert_contains_all(
            &text,
            &[
                "snapshots       3 saves (2 changed, 1 unchanged); 2 restores (1 found, 1 with no snapshot for this host)\n",
                "snapshot files  7 fetched (5.0 MiB), 3 already present, 1 missing; 3.0 MiB stored\n",
            ],
        );
        // Before the toolchains, with the other counters.
        assert!(text.find("snapshot files").unwrap() < text.find("toolchain").unwrap(), "{text}");
    }

    #[test]
    fn stats_from_a_kilnd_without_snapshots_say_so_instead_of_zeros() {
        let text = stats_text(&pb::StatsResponse { snapshots: None, ..sample() });
        assert!(text.contains("snapshots       not reported"), "{text}");
        assert!(!text.contains("snapshot files"), "{text}");
        let quiet = stats_text(&pb::StatsResponse { snapshots: Some(pb::SnapshotStats::default()), ..sample() });
        assert!(quiet.contains("snapshots       0 saves (0 changed, 0 unchanged); 0 restores"), "{quiet}");
    }

    #[test]
    fn stats_json_carries_the_snapshot_counts() {
        // `kiln stats --json` is the proto3 JSON mapping of the whole response (as `run` prints
        // it): camelCase names, 64-bit counts as strings, zero counts left out.
        let json = serde_json::to_value(sample()).unwrap();
        let snapshots = &json["snapshots"];
        assert_eq!(snapshots["restoresFound"], "1", "{json}");
        assert_eq!(snapshots["filesFetched"], "7", "{json}");
        assert_eq!(snapshots["bytesStored"], (3u64 << 20).to_string(), "{json}");
        let quiet = pb::StatsResponse { snapshots: Some(pb::SnapshotStats::default()), ..sample() };
        assert_eq!(serde_json::to_value(quiet).unwrap()["snapshots"], serde_json::json!({}));
    }

    #[test]
    fn stats_show_torch_graphs_fallbacks_and_each_jobs_return() {
        let graphs = kiln_proto::fixtures::torch_graph_stats("train-gpt2");
        let text = stats_text(&pb::StatsResponse { torch_graphs: Some(graphs), ..sample() });
        assert_contains_all(
            &text,
            &[
                "torch graphs    3 compiled, 1 failed, 5 from a tier or another's compile\n",
                "graph fallbacks not_reused 2 (compiled in the process instead)\n",
                "  job train-gpt2: the compile has not paid for itself yet: 120 steps of the 4000 it needs\n",
                "    step 15.00 ms eager, 9.00 ms compiled (1.67x)\n",
                "    compile 24.0 s: 20.0 s cold (once per graph), 4.0 s the processes' own; the caches saved 0.0 s\n",
                "    120 steps by 1 process; pays after 4,000\n",
            ],
        );
        assert!(!text.contains("unserializable"), "a reason never taken is left out: {text}");
        let old = stats_text(&pb::StatsResponse { torch_graphs: None, ..sample() });
        assert!(old.contains("torch graphs    not reported"), "{old}");
    }

    #[test]
    fn an_empty_default_target_is_explained() {
        let stats = pb::StatsResponse { default_target: String::new(), ..sample() };
        assert!(identity_text(&stats).contains("every graph must name its target"));
    }
}
