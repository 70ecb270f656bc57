//! Host reports (`ReportHost`): their validation, how one is stored, and which hosts' toolchain
//! fingerprints split them from the fleet.
//!
//! Reports come from kilnd hosts holding a write token, but a status page is read by people, so
//! every field is bounded and checked here before it reaches Redis, and escaped again when the
//! page is drawn.

use crate::error::Error;
use crate::validate::{bad, text};
use kiln_proto::pb::{HostMiss, HostReport};
use prost::Message;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long a report stays without a newer one. kilnd reports every 10 s, so a host drops off
/// after missing four reports in a row.
pub const HOST_TTL: Duration = Duration::from_secs(45);

/// Hosts a page lists at most (the most recently reporting first).
pub const MAX_HOSTS: usize = 1000;

const MAX_GPUS: usize = 64;
const MAX_TOOLCHAINS: usize = 16;
pub const MAX_MISSES: usize = 32;
const MAX_INSTANCE: usize = 256;

/// Which kilnd a report is from, as the page lists and Redis keeps it: the host's name, then the
/// instance (its socket) when it names one. A host name has no space, so the two stay apart;
/// two kilnds on one machine are two entries, one kilnd restarted stays one.
pub fn daemon_id(r: &HostReport) -> String {
    if r.instance.is_empty() { r.host.clone() } else { format!("{} {}", r.host, r.instance) }
}

/// Checks every field of a report, naming the first bad one.
pub fn validate(r: &HostReport) -> Result<(), Error> {
    crate::validate::host("host", &r.host)?;
    text("instance", &r.instance, 0, MAX_INSTANCE)?;
    text("version", &r.version, 1, 64)?;
    text("default_target", &r.default_target, 0, 16)?;
    if r.gpus.len() > MAX_GPUS {
        return Err(Error::TooMany { field: "gpus", count: r.gpus.len(), limit: MAX_GPUS });
    }
    for (i, g) in r.gpus.iter().enumerate() {
        text(&format!("gpus[{i}].name"), &g.name, 1, 128)?;
        text(&format!("gpus[{i}].target"), &g.target, 0, 16)?;
    }
    if r.toolchains.len() > MAX_TOOLCHAINS {
        return Err(Error::TooMany { field: "toolchains", count: r.toolchains.len(), limit: MAX_TOOLCHAINS });
    }
    let mut names = BTreeSet::new();
    for (i, t) in r.toolchains.iter().enumerate() {
        let name_ok = (1..=32).contains(&t.name.len())
            && t.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
        if !name_ok {
            return Err(bad(&format!("toolchains[{i}].name"), "expected 1 to 32 characters of [a-z0-9_-]"));
        }
        if !names.insert(t.name.as_str()) {
            return Err(bad(&format!("toolchains[{i}].name"), "named twice"));
        }
        text(&format!("toolchains[{i}].version"), &t.version, 0, 128)?;
        crate::validate::key(&format!("toolchains[{i}].fingerprint"), &t.fingerprint)?;
    }
    if !r.compile_seconds_saved.is_finite() || r.compile_seconds_saved < 0.0 {
        return Err(bad("compile_seconds_saved", "expected a finite number >= 0"));
    }
    if r.recent_misses.len() > MAX_MISSES {
        return Err(Error::TooMany { field: "recent_misses", count: r.recent_misses.len(), limit: MAX_MISSES });
    }
    for (i, m) in r.recent_misses.iter().enumerate() {
        text(&format!("recent_misses[{i}].identity"), &m.identity, 1, 256)?;
        text(&format!("recent_misses[{i}].toolchain"), &m.toolchain, 0, 32)?;
        text(&format!("recent_misses[{i}].reason"), &m.reason, 1, 64)?;
        text(&format!("recent_misses[{i}].detail"), &m.detail, 0, 512)?;
    }
    Ok(())
}

/// A report as stored: the time kiln-cache received it (ms since the epoch, u64 LE), then the
/// report's protobuf bytes. The receiver's clock, not the host's, decides what is stale.
pub fn encode(received_ms: u64, r: &HostReport) -> Vec<u8> {
    let mut out = received_ms.to_le_bytes().to_vec();
    r.encode(&mut out).unwrap_or_default();
    out
}

pub fn decode(value: &[u8]) -> Option<(u64, HostReport)> {
    let (time, body) = value.split_at_checked(8)?;
    let received = u64::from_le_bytes(time.try_into().ok()?);
    Some((received, HostReport::decode(body).ok()?))
}

/// One toolchain's fingerprints across the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Split {
    /// The fingerprint more hosts report than any other; `None` on a tie at the top.
    pub majority: Option<String>,
    /// kilnds ([`daemon_id`]) by fingerprint.
    pub hosts: BTreeMap<String, Vec<String>>,
}

impl Split {
    /// Whether `fingerprint` differs from the fleet's majority (or there is none), so a host
    /// holding it shares artifacts with only part of the fleet.
    pub fn flags(&self, fingerprint: &str) -> bool {
        self.majority.as_deref() != Some(fingerprint)
    }
}

/// For each toolchain any host reports: its fingerprints, the majority among them, and so which
/// hosts are split off.
pub fn splits<'a>(reports: impl IntoIterator<Item = &'a HostReport>) -> BTreeMap<String, Split> {
    let mut by_toolchain: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for r in reports {
        for t in &r.toolchains {
            by_toolchain
                .entry(t.name.clone())
                .or_default()
                .entry(t.fingerprint.clone())
                .or_default()
                .push(daemon_id(r));
        }
    }
    by_toolchain
        .into_iter()
        .map(|(name, hosts)| {
            let top = hosts.values().map(Vec::len).max().unwrap_or(0);
            let mut leaders = hosts.iter().filter(|(_, h)| h.len() == top);
            let majority = match (leaders.next(), leaders.next()) {
                (Some((fp, _)), None) => Some(fp.clone()),
                _ => None,
            };
            (name, Split { majority, hosts })
        })
        .collect()
}

/// Every kilnd's recent misses ([`daemon_id`], miss), newest first, at most `limit`.
pub fn recent_misses<'a>(reports: impl IntoIterator<Item = &'a HostReport>, limit: usize) -> Vec<(String, HostMiss)> {
    let mut all: Vec<(String, HostMiss)> =
        reports.into_iter().flat_map(|r| r.recent_misses.iter().map(|m| (daemon_id(r), m.clone()))).collect();
    all.sort_by_key(|m| std::cmp::Reverse(m.1.unix_ms));
    all.truncate(limit);
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_proto::pb::{HostGpu, HostToolchain};

    fn fp(b: char) -> String {
        b.to_string().repeat(64)
    }

    fn report(host: &str, toolchains: &[(&str, char)]) -> HostReport {
        HostReport {
            host: host.into(),
            version: "0.1.0".into(),
            toolchains: toolchains
                .iter()
                .map(|(n, f)| HostToolchain { name: (*n).into(), version: "13.0".into(), fingerprint: fp(*f) })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_minority_is_flagged() {
        let reports = [
            report("a", &[("nvrtc", 'a'), ("triton", 'c')]),
            report("b", &[("nvrtc", 'a'), ("triton", 'c')]),
            report("c", &[("nvrtc", 'b'), ("triton", 'c')]),
        ];
        let s = splits(&reports);
        assert_eq!(s["nvrtc"].majority, Some(fp('a')));
        assert!(!s["nvrtc"].flags(&fp('a')));
        assert!(s["nvrtc"].flags(&fp('b')));
        assert_eq!(s["nvrtc"].hosts[&fp('b')], vec!["c".to_owned()]);
        assert!(!s["triton"].flags(&fp('c')), "everyone agrees on triton");
    }

    #[test]
    fn a_tie_has_no_majority_and_a_lone_host_is_its_own() {
        let tie = [report("a", &[("nvrtc", 'a')]), report("b", &[("nvrtc", 'b')])];
        let s = splits(&tie);
        assert_eq!(s["nvrtc"].majority, None);
        assert!(s["nvrtc"].flags(&fp('a')) && s["nvrtc"].flags(&fp('b')));
        let alone = [report("a", &[("ptxas", 'a')])];
        assert!(!splits(&alone)["ptxas"].flags(&fp('a')));
        assert!(splits(&[]).is_empty());
    }

    #[test]
    fn validation_names_the_field() {
        let good = HostReport {
            gpus: vec![HostGpu { name: "NVIDIA H100 <80GB>".into(), target: "sm_90".into() }],
            recent_misses: vec![HostMiss {
                unix_ms: 1,
                identity: "saxpy<float>".into(),
                toolchain: "nvrtc".into(),
                reason: "source".into(),
                detail: String::new(),
            }],
            ..report("gpu-1.example", &[("nvrtc", 'a')])
        };
        assert!(validate(&good).is_ok());
        let field = |r: HostReport| validate(&r).unwrap_err().to_string();
        assert!(field(HostReport { host: "<b>".into(), ..good.clone() }).starts_with("host:"));
        assert!(field(HostReport { host: String::new(), ..good.clone() }).starts_with("host:"));
        assert!(field(HostReport { version: String::new(), ..good.clone() }).starts_with("version:"));
        assert!(field(HostReport { instance: "/run/\u{1b}[2J".into(), ..good.clone() }).starts_with("instance:"));
        assert!(field(HostReport { instance: "/".repeat(257), ..good.clone() }).starts_with("instance:"));
        assert!(field(HostReport { version: "a\u{1b}[2J".into(), ..good.clone() }).starts_with("version:"));
        let mut r = good.clone();
        r.gpus[0].name = "x".repeat(129);
        assert!(field(r).starts_with("gpus[0].name:"));
        let mut r = good.clone();
        r.toolchains[0].fingerprint = "nope".into();
        assert!(field(r).starts_with("toolchains[0].fingerprint:"));
        let r = report("h", &[("nvrtc", 'a'), ("nvrtc", 'b')]);
        assert!(field(r).starts_with("toolchains[1].name:"));
        let mut r = good.clone();
        r.recent_misses[0].detail = "d".repeat(513);
        assert!(field(r).starts_with("recent_misses[0].detail:"));
        let mut r = good.clone();
        r.recent_misses = vec![r.recent_misses[0].clone(); MAX_MISSES + 1];
        assert!(field(r).starts_with("recent_misses:"));
        assert!(
            field(HostReport { compile_seconds_saved: f64::NAN, ..good.clone() }).starts_with("compile_seconds_saved:")
        );
    }

    #[test]
    fn two_kilnds_of_one_machine_are_two_daemons() {
        let one = HostReport { instance: "/run/kiln/a.sock".into(), ..report("gpu-1", &[("nvrtc", 'a')]) };
        let two = HostReport { instance: "/run/kiln/b.sock".into(), ..report("gpu-1", &[("nvrtc", 'b')]) };
        assert_eq!(daemon_id(&one), "gpu-1 /run/kiln/a.sock");
        assert_eq!(daemon_id(&report("gpu-2", &[])), "gpu-2", "a report without an instance is its host");
        let s = splits([&one, &two]);
        assert_eq!(s["nvrtc"].hosts[&fp('a')], vec!["gpu-1 /run/kiln/a.sock".to_owned()]);
        assert_eq!(s["nvrtc"].hosts[&fp('b')], vec!["gpu-1 /run/kiln/b.sock".to_owned()]);
    }

    #[test]
    fn stored_reports_round_trip_and_misses_merge_newest_first() {
        let mut a = report("a", &[]);
        let miss = |t| HostMiss { unix_ms: t, identity: format!("k{t}"), reason: "new".into(), ..Default::default() };
        a.recent_misses = vec![miss(5), miss(1)];
        let mut b = report("b", &[]);
        b.recent_misses = vec![miss(3)];
        assert_eq!(decode(&encode(42, &a)), Some((42, a.clone())));
        assert_eq!(decode(b"short"), None);
        let merged: Vec<_> = recent_misses([&a, &b], 2).into_iter().map(|(h, m)| (h, m.unix_ms)).collect();
        assert_eq!(merged, vec![("a".to_owned(), 5), ("b".to_owned(), 3)]);
    }
}
