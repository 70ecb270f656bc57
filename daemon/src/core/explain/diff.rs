//! Compares two recipes of one kernel identity and says, in words, which key inputs differ:
//! "header `common.cuh`: content differs", "target sm_90a vs sm_90", "options: -O3 added". The
//! first recipe is this request's (or the key being explained), the second a stored one.

use super::misses::MissReason;
use crate::runtime::toolchain::Toolchain;
use kiln_proto::key::recipe::is_digest;
use kiln_proto::pb::KeyRecipe;
use std::collections::{BTreeMap, BTreeSet};

/// One input that differs, and the miss reason it counts under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub reason: MissReason,
    pub text: String,
}

fn diff(reason: MissReason, text: String) -> Difference {
    Difference { reason, text }
}

/// The first hex digits of a digest or fingerprint, as a person compares them: `1f19…`.
fn short_hex(value: &str) -> String {
    let hex = value.strip_prefix(kiln_proto::key::recipe::DIGEST_PREFIX).unwrap_or(value);
    format!("{}…", hex.get(..4).unwrap_or(hex))
}

/// A recorded value as a person reads it: itself, or `(long value 1f19…)` for a digest.
fn shown(value: &str) -> String {
    if is_digest(value) { format!("(long value {})", short_hex(value)) } else { value.replace('\0', " ") }
}

/// What was added to and removed from a list, as multisets (order aside).
fn added_removed<'a>(now: &'a [String], before: &'a [String]) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut pool: Vec<&str> = before.iter().map(String::as_str).collect();
    let mut added = Vec::new();
    for v in now {
        match pool.iter().position(|b| b == v) {
            Some(i) => {
                pool.remove(i);
            }
            None => added.push(v.as_str()),
        }
    }
    (added, pool)
}

/// `what: a added, b removed`, or `what: same values, another order`, or nothing.
fn list_change(what: &str, now: &[String], before: &[String]) -> Option<String> {
    if now == before {
        return None;
    }
    let (added, removed) = added_removed(now, before);
    let mut parts: Vec<String> = added.iter().map(|v| format!("{} added", shown(v))).collect();
    parts.extend(removed.iter().map(|v| format!("{} removed", shown(v))));
    if parts.is_empty() {
        return Some(format!("{what}: the same values in another order"));
    }
    Some(format!("{what}: {}", parts.join(", ")))
}

/// Which part of a Triton request a canonical key option holds (see
/// `domain::source::triton_key_options`): its kind, before the first NUL.
fn triton_kind(option: &str) -> MissReason {
    match option.split('\0').next() {
        Some("sig") => MissReason::TritonSignature,
        Some("attr") => MissReason::TritonAttributes,
        Some("options") => MissReason::TritonOptions,
        // `constexpr`, and a value long enough to be kept as a digest (only a string constexpr
        // can be that long).
        _ => MissReason::TritonConstexprs,
    }
}

/// A Triton constexpr as `(name, "type value")`, floats shown as numbers again.
fn constexpr(option: &str) -> (String, String) {
    if is_digest(option) {
        return (format!("(long value {})", short_hex(option)), "(long value)".into());
    }
    let parts: Vec<&str> = option.split('\0').collect();
    let name = parts.get(1).copied().unwrap_or_default().to_string();
    let value = match (parts.get(2), parts.get(3)) {
        (Some(&"float"), Some(bits)) => {
            let v = u64::from_str_radix(bits, 16).map(f64::from_bits).unwrap_or(f64::NAN);
            format!("float {v:?}")
        }
        (Some(kind), Some(v)) => format!("{kind} {v}"),
        (Some(kind), None) => kind.to_string(),
        _ => String::new(),
    };
    (name, value)
}

/// Named values compared by name: `what NAME: a vs b`, `what NAME added`, `what NAME removed`.
fn named_change(
    reason: MissReason,
    what: &str,
    now: BTreeMap<String, String>,
    before: BTreeMap<String, String>,
) -> Vec<Difference> {
    let mut out = Vec::new();
    for (name, v) in &now {
        match before.get(name) {
            Some(b) if b != v => out.push(diff(reason, format!("{what} {name}: {v} vs {b}"))),
            Some(_) => {}
            None => out.push(diff(reason, format!("{what} {name} = {v} added"))),
        }
    }
    for (name, b) in &before {
        if !now.contains_key(name) {
            out.push(diff(reason, format!("{what} {name} = {b} removed")));
        }
    }
    out
}

/// Triton's signature, constexprs, attributes and options, each compared in its own terms.
fn triton_differences(now: &[String], before: &[String]) -> Vec<Difference> {
    let part = |list: &[String], kind: MissReason| -> Vec<String> {
        list.iter().filter(|o| triton_kind(o) == kind).cloned().collect()
    };
    let mut out = Vec::new();
    let (sig_now, sig_before) = (part(now, MissReason::TritonSignature), part(before, MissReason::TritonSignature));
    if sig_now != sig_before {
        let show = |sig: &[String]| {
            sig.iter().map(|s| s.split('\0').skip(1).collect::<Vec<_>>().join(": ")).collect::<Vec<_>>().join(", ")
        };
        out.push(diff(
            MissReason::TritonSignature,
            format!("triton signature: ({}) vs ({})", show(&sig_now), show(&sig_before)),
        ));
    }
    let consts = |list: &[String]| part(list, MissReason::TritonConstexprs).iter().map(|c| constexpr(c)).collect();
    out.extend(named_change(MissReason::TritonConstexprs, "constexpr", consts(now), consts(before)));
    let attrs = |list: &[String]| -> Vec<String> {
        part(list, MissReason::TritonAttributes)
            .iter()
            .map(|a| {
                let p: Vec<&str> = a.split('\0').collect();
                format!(
                    "{}={} on argument {}",
                    p.get(2).unwrap_or(&""),
                    p.get(3).unwrap_or(&""),
                    p.get(1).unwrap_or(&"")
                )
            })
            .collect()
    };
    if let Some(text) = list_change("triton attributes", &attrs(now), &attrs(before)) {
        out.push(diff(MissReason::TritonAttributes, text));
    }
    let options = |list: &[String]| -> BTreeMap<String, String> {
        part(list, MissReason::TritonOptions)
            .iter()
            .flat_map(|o| o.split('\0').skip(1).map(str::to_string).collect::<Vec<_>>())
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect()
    };
    out.extend(named_change(MissReason::TritonOptions, "triton option", options(now), options(before)));
    out
}

/// Why the toolchain's fingerprint differs, as far as the recipes tell.
fn fingerprint_cause(now: &KeyRecipe, before: &KeyRecipe) -> String {
    if !now.toolchain_version.is_empty()
        && !before.toolchain_version.is_empty()
        && now.toolchain_version != before.toolchain_version
    {
        return format!("version {} vs {}", now.toolchain_version, before.toolchain_version);
    }
    match Toolchain::from_name(&now.toolchain) {
        Some(Toolchain::Nvrtc) => "another libnvrtc build, or other default headers".into(),
        Some(Toolchain::Ptxas) => "another ptxas binary".into(),
        Some(Toolchain::Triton) => "another Triton installation, Python or environment".into(),
        None => format!("another {} build", now.toolchain),
    }
}

/// Every input in which `now` differs from `before`, in the order of [`MissReason::ALL`].
pub fn differences(now: &KeyRecipe, before: &KeyRecipe) -> Vec<Difference> {
    let mut out = Vec::new();
    if now.toolchain != before.toolchain {
        out.push(diff(MissReason::Toolchain, format!("toolchain {} vs {}", now.toolchain, before.toolchain)));
    } else if now.fingerprint != before.fingerprint {
        let where_ = if before.host.is_empty() { String::new() } else { format!(" on {}", before.host) };
        out.push(diff(
            MissReason::Toolchain,
            format!(
                "{} fingerprint: this host {} vs {}{where_} ({})",
                now.toolchain,
                short_hex(&now.fingerprint),
                short_hex(&before.fingerprint),
                fingerprint_cause(now, before)
            ),
        ));
    }
    if now.target != before.target {
        out.push(diff(MissReason::Target, format!("target {} vs {}", now.target, before.target)));
    }
    let triton = now.toolchain == Toolchain::Triton.as_str() && before.toolchain == now.toolchain;
    if triton {
        out.extend(triton_differences(&now.options, &before.options));
        if let Some(text) = list_change("kernel name", &now.entries, &before.entries) {
            out.push(diff(MissReason::Source, text));
        }
    } else {
        if let Some(text) = list_change("options", &now.options, &before.options) {
            out.push(diff(MissReason::Options, text));
        }
        if let Some(text) = list_change("name expressions", &now.entries, &before.entries) {
            out.push(diff(MissReason::NameExpressions, text));
        }
    }
    if now.source != before.source {
        out.push(diff(MissReason::Source, "source: content differs".into()));
    }
    let headers = |r: &KeyRecipe| -> BTreeMap<String, String> {
        r.headers.iter().map(|h| (h.name.clone(), h.digest.clone())).collect()
    };
    let (h_now, h_before) = (headers(now), headers(before));
    let names: BTreeSet<&String> = h_now.keys().chain(h_before.keys()).collect();
    for name in names {
        let text = match (h_now.get(name), h_before.get(name)) {
            (Some(a), Some(b)) if a != b => "content differs",
            (Some(_), None) => "added",
            (None, Some(_)) => "removed",
            _ => continue,
        };
        out.push(diff(MissReason::Header, format!("header `{}`: {text}", shown(name))));
    }
    out.sort_by_key(|d| MissReason::ALL.iter().position(|r| *r == d.reason));
    out
}

/// At most this many differences go into a one-line summary; the rest are counted.
const SUMMARY_ITEMS: usize = 3;

/// The differences as one line: `target sm_90a vs sm_90; options: -O3 added; and 2 more`.
pub fn summary(differences: &[Difference]) -> String {
    let mut parts: Vec<String> = differences.iter().take(SUMMARY_ITEMS).map(|d| d.text.clone()).collect();
    if differences.len() > SUMMARY_ITEMS {
        parts.push(format!("and {} more", differences.len() - SUMMARY_ITEMS));
    }
    parts.join("; ")
}

/// The nearest of `stored` to `now` among recipes of *other* keys: the fewest differences,
/// ties to the first listed (books list the newest first). Returns its index and differences.
pub fn nearest<'a>(
    now: &KeyRecipe,
    stored: impl IntoIterator<Item = &'a KeyRecipe>,
) -> Option<(usize, Vec<Difference>)> {
    stored
        .into_iter()
        .enumerate()
        .filter(|(_, r)| r.key != now.key)
        .map(|(i, r)| (i, differences(now, r)))
        .min_by_key(|(_, d)| d.len())
}

/// A miss's reason and its one-line detail, against the recipes stored for its identity.
pub fn miss_reason(now: &KeyRecipe, stored: &[KeyRecipe]) -> (MissReason, String) {
    if let Some(same) = stored.iter().find(|r| r.key == now.key) {
        let host = if same.host.is_empty() { String::new() } else { format!(" on {}", same.host) };
        return (
            MissReason::Evicted,
            format!(
                "the same inputs were compiled before{host}; the artifact was no longer cached (evicted, or a cache was cleared)"
            ),
        );
    }
    match nearest(now, stored) {
        Some((_, d)) if !d.is_empty() => (d[0].reason, summary(&d)),
        _ => (MissReason::New, "never compiled under this identity".into()),
    }
}

#[cfg(test)]
mod tests;
