//! `kiln explain` for humans: a verdict line per kernel, then what was compared and each input
//! that differs.

use kiln_proto::pb;
use std::fmt::Write as _;

/// `2026-11-22 18:27 UTC` from milliseconds since the epoch (no time-zone database needed).
fn utc(unix_millis: u64) -> String {
    let secs = unix_millis / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

/// What the nearest recipe is: its key, where it was found, and when and where it was compiled.
fn compared_with(e: &pb::KernelExplanation) -> Option<String> {
    let n = e.nearest.as_ref()?;
    let mut line = format!("  compared with {}… ({}", n.key.get(..12).unwrap_or(&n.key), e.nearest_from);
    if !n.host.is_empty() {
        let _ = write!(line, ", compiled on {}", n.host);
    }
    if n.unix_millis > 0 {
        let _ = write!(line, " at {}", utc(n.unix_millis));
    }
    line.push(')');
    Some(line)
}

/// Where a hit came from: the host and time of the compile whose recipe was kept for its key.
fn origin(e: &pb::KernelExplanation) -> Option<String> {
    let r = e.recipe.as_ref().filter(|_| e.cached)?;
    let mut line = "  compiled".to_string();
    if !r.host.is_empty() {
        let _ = write!(line, " on {}", r.host);
    }
    if r.unix_millis > 0 {
        let _ = write!(line, " at {}", utc(r.unix_millis));
    }
    (line.len() > "  compiled".len()).then_some(line)
}

/// One kernel's explanation, several lines.
pub fn explanation_text(e: &pb::KernelExplanation) -> String {
    let name = if e.id.is_empty() { e.key.get(..16).unwrap_or(&e.key).to_string() } else { e.id.clone() };
    let mut out = format!("{name}: {}\n", e.verdict);
    if let Some(line) = origin(e) {
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(p) = &e.publisher {
        let _ = writeln!(out, "  published by {} ({}) at {}", p.host, p.token, utc(p.unix_ms));
    }
    if let Some(line) = compared_with(e) {
        out.push_str(&line);
        out.push('\n');
        if e.differences.is_empty() {
            out.push_str("  no input differs\n");
        }
        for d in &e.differences {
            let _ = writeln!(out, "  - {} [{}]", d.text, d.reason);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_lists_its_differences_under_what_it_was_compared_with() {
        let e = pb::KernelExplanation {
            id: "saxpy".into(),
            key: "ab".repeat(32),
            verdict: "miss: header `common.cuh`: content differs".into(),
            reason: "header".into(),
            nearest: Some(pb::KeyRecipe {
                key: "cd".repeat(32),
                host: "gpu-7".into(),
                unix_millis: 1_795_000_000_000,
                ..Default::default()
            }),
            nearest_from: "fleet".into(),
            differences: vec![pb::Difference {
                reason: "header".into(),
                text: "header `common.cuh`: content differs".into(),
            }],
            ..Default::default()
        };
        assert_eq!(
            explanation_text(&e),
            "saxpy: miss: header `common.cuh`: content differs\n  compared with cdcdcdcdcdcd… (fleet, compiled on gpu-7 at 2026-11-18 11:06 UTC)\n  - header `common.cuh`: content differs [header]\n"
        );
    }

    #[test]
    fn a_hit_says_where_it_was_compiled_and_compares_nothing() {
        let e = pb::KernelExplanation {
            id: "saxpy".into(),
            key: "ab".repeat(32),
            cached: true,
            verdict: "hit (disk)".into(),
            recipe: Some(pb::KeyRecipe { host: "gpu-7".into(), unix_millis: 1_795_000_000_000, ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(explanation_text(&e), "saxpy: hit (disk)\n  compiled on gpu-7 at 2026-11-18 11:06 UTC\n");
        let unknown = pb::KernelExplanation { recipe: Some(pb::KeyRecipe::default()), ..e };
        assert_eq!(explanation_text(&unknown), "saxpy: hit (disk)\n", "no origin kept, no line");
    }

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00 UTC");
    }
}
