//! `kiln audit`'s lines: one per audited kernel, one per quarantine record, and one per
//! conflicting write.

use super::snapshot::ago;
use kiln_proto::pb;

/// `mismatch  k0  1a2b3c4d5e6f  published by gpu-7 (tok-…) 3 min ago: cubin: … [quarantined]`.
pub fn result_text(r: &pb::AuditResult, now_ms: u64) -> String {
    let mut text = format!("{:<8}  {}  {}", r.verdict, if r.id.is_empty() { "-" } else { &r.id }, short(&r.key));
    if let Some(p) = &r.publisher {
        text.push_str(&format!("  {}", publisher_text(p, now_ms)));
    }
    if !r.detail.is_empty() {
        text.push_str(&format!(": {}", r.detail));
    }
    if r.quarantined {
        text.push_str(" [quarantined in the fleet]");
    }
    text
}

/// One quarantine record: when, which key, whose bytes, who found them and what differed.
pub fn record_text(r: &pb::QuarantineRecord, now_ms: u64) -> String {
    let publisher =
        r.publisher.as_ref().map_or("published by an unknown host".to_string(), |p| publisher_text(p, now_ms));
    format!(
        "{}  {}  {publisher}; reported by {} ({}){}",
        short(&r.key),
        ago(now_ms as i64 - r.unix_ms as i64),
        or_unknown(&r.reporter_host),
        or_unknown(&r.reporter_token),
        if r.detail.is_empty() { String::new() } else { format!(": {}", r.detail) },
    )
}

/// One conflicting write: when, which key, whose bytes it held, who offered others, what
/// became of them and what differed.
pub fn conflict_text(c: &pb::ConflictRecord, now_ms: u64) -> String {
    let who = |p: Option<&pb::Provenance>| {
        p.map_or("an unknown host".to_string(), |p| format!("{} ({})", or_unknown(&p.host), or_unknown(&p.token)))
    };
    format!(
        "{}  {}  held {} published by {}; {} offered by {} {}: {}",
        short(&c.key),
        ago(now_ms as i64 - c.unix_ms as i64),
        short(&c.held_digest),
        who(c.held.as_ref()),
        short(&c.offered_digest),
        who(c.offered.as_ref()),
        if c.refused { "[refused]" } else { "[replaced it]" },
        c.detail,
    )
}

/// `published by gpu-7 (tok-0123456789ab) 3 min ago`.
pub fn publisher_text(p: &pb::Provenance, now_ms: u64) -> String {
    format!("published by {} ({}) {}", or_unknown(&p.host), or_unknown(&p.token), ago(now_ms as i64 - p.unix_ms as i64))
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown" } else { s }
}

/// The first 12 hex characters of a key: enough to tell keys apart on a screen.
fn short(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance() -> pb::Provenance {
        pb::Provenance { host: "gpu-7".into(), token: "tok-0123456789ab".into(), unix_ms: 1_000, ..Default::default() }
    }

    #[test]
    fn results_say_verdict_kernel_publisher_and_what_differed() {
        let r = pb::AuditResult {
            id: "k0".into(),
            key: "ab".repeat(32),
            verdict: "mismatch".into(),
            publisher: Some(provenance()),
            detail: "cubin: 4 bytes served, 4 compiled here; first difference at byte 2".into(),
            quarantined: true,
        };
        assert_eq!(
            result_text(&r, 181_000),
            "mismatch  k0  abababababab  published by gpu-7 (tok-0123456789ab) 3 min ago: cubin: 4 bytes served, 4 \
             compiled here; first difference at byte 2 [quarantined in the fleet]"
        );
        let clean =
            pb::AuditResult { id: "k1".into(), key: "cd".repeat(32), verdict: "clean".into(), ..Default::default() };
        assert_eq!(result_text(&clean, 0), "clean     k1  cdcdcdcdcdcd");
    }

    #[test]
    fn records_name_publisher_and_reporter() {
        let r = pb::QuarantineRecord {
            key: "ef".repeat(32),
            publisher: Some(provenance()),
            reporter_host: "gpu-2".into(),
            reporter_token: "tok-ffffffffffff".into(),
            unix_ms: 61_000,
            detail: "PTX differs".into(),
            ..Default::default()
        };
        assert_eq!(
            record_text(&r, 121_000),
            "efefefefefef  1 min ago  published by gpu-7 (tok-0123456789ab) 2 min ago; reported by gpu-2 \
             (tok-ffffffffffff): PTX differs"
        );
    }
}
