//! Why a torch graph missed: what went into its key, part by part, against the last graph of the
//! same job and name that kilnd saw. A graph's key hashes the client's environment, the host's
//! GPUs and the payload's bytes, so a miss says only "these bytes are new"; the parts say which
//! of them changed: the torch, Triton, Python or CUDA version, the GPU, one Inductor or
//! functorch setting, the graph's inputs, or the graph itself.

use crate::runtime::toolchain::torch::Environment;
use kiln_proto::CacheKey;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Graphs (job and name) and keys whose recipe and explanation are kept: a bound on memory that
/// a client inventing names cannot grow.
pub const KEPT: usize = 2048;
/// A setting's value as shown, at most this long: longer ones are shown by their hash.
const SHOWN: usize = 80;

/// What a graph's key was made of, as named parts in a fixed order (the broad causes first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    parts: Vec<(String, String)>,
}

impl Recipe {
    /// The recipe of `payload` (a u32 length, a JSON header, the pickled graph) under the
    /// client's environment and this host's GPUs. A payload whose header does not parse is one
    /// part: the worker refuses it anyway, and the explanation must not.
    pub fn of(environment: &Environment, gpus: &str, payload: &[u8]) -> Recipe {
        let mut parts = vec![
            ("torch".to_string(), environment.torch.clone()),
            ("triton".to_string(), environment.triton.clone()),
            ("python".to_string(), environment.python.clone()),
            ("cuda".to_string(), environment.cuda.clone()),
            ("gpu".to_string(), gpus.to_string()),
        ];
        match split(payload) {
            Some((header, graph)) => {
                let mut settings = Vec::new();
                let mut inputs = String::new();
                for (name, value) in header {
                    match (name.as_str(), value) {
                        ("inputs", v) => inputs = digest(v.to_string().as_bytes()),
                        (_, serde_json::Value::Object(entries)) => {
                            settings.extend(entries.into_iter().map(|(k, v)| (format!("{name}.{k}"), shown(&v))))
                        }
                        (_, v) => settings.push((name, shown(&v))),
                    }
                }
                settings.sort();
                parts.extend(settings);
                parts.push(("inputs".to_string(), inputs));
                parts.push(("graph".to_string(), digest(graph)));
            }
            None => parts.push(("payload".to_string(), digest(payload))),
        }
        Recipe { parts }
    }

    /// What differs from `before`, broad causes first: (a `kiln_misses_total` reason label, one
    /// line for a person). Empty when nothing does.
    pub fn differences(&self, before: &Recipe) -> Vec<(&'static str, String)> {
        let old: HashMap<&str, &str> = before.parts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let new: HashMap<&str, &str> = self.parts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut out = Vec::new();
        for (name, value) in &self.parts {
            match old.get(name.as_str()) {
                Some(was) if *was == value => {}
                Some(was) => out.push((reason(name), describe(name, was, value))),
                None => out.push((reason(name), format!("{name} set to {value} (not set before)"))),
            }
        }
        for (name, was) in &before.parts {
            if !new.contains_key(name.as_str()) {
                out.push((reason(name), format!("{name} no longer set (was {was})")));
            }
        }
        out
    }
}

/// The header's entries and the graph's bytes, or None when the payload is not one.
fn split(payload: &[u8]) -> Option<(serde_json::Map<String, serde_json::Value>, &[u8])> {
    let len = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    let header = payload.get(4..4 + len)?;
    match serde_json::from_slice(header).ok()? {
        serde_json::Value::Object(entries) => Some((entries, &payload[4 + len..])),
        _ => None,
    }
}

fn digest(bytes: &[u8]) -> String {
    format!("#{}", &blake3::hash(bytes).to_hex()[..12])
}

fn shown(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.len() <= SHOWN { text } else { digest(text.as_bytes()) }
}

/// The miss reason a part's change counts as, in the labels kernels' misses use.
fn reason(part: &str) -> &'static str {
    match part {
        "torch" | "triton" | "python" | "cuda" => "toolchain",
        "gpu" => "target",
        "graph" | "inputs" | "payload" => "source",
        _ => "options",
    }
}

fn describe(part: &str, was: &str, now: &str) -> String {
    match part {
        "graph" => "the graph itself differs (its operations or their arguments)".to_string(),
        "inputs" => "the graph's inputs differ (shapes, strides, dtypes or devices)".to_string(),
        "payload" => "the payload differs (it has no header kilnd could read)".to_string(),
        _ => format!("{part} {now} here, {was} before"),
    }
}

/// Why one graph's key missed: kept by key for `kiln explain`.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    pub job: String,
    pub name: String,
    /// The `kiln_misses_total` label of the first difference, or `new`.
    pub reason: &'static str,
    /// Each difference, broad causes first; one "new" line when there was nothing to compare.
    pub differences: Vec<(&'static str, String)>,
}

impl Explanation {
    /// One line for a person: the first difference, and how many more.
    pub fn line(&self) -> String {
        let first = self.differences.first().map_or("", |(_, text)| text.as_str());
        match self.differences.len() {
            0 | 1 => first.to_string(),
            n => format!("{first} (and {} more)", n - 1),
        }
    }
}

#[derive(Debug, Default)]
struct Kept {
    /// The last recipe seen for each (job, name), and the key it made.
    last: HashMap<(String, String), (Recipe, CacheKey)>,
    /// Insertion order of `last`, to drop the oldest past [`KEPT`].
    order: VecDeque<(String, String)>,
    explained: HashMap<CacheKey, Explanation>,
    explained_order: VecDeque<CacheKey>,
}

/// The recipes kilnd saw, per job and graph name, and the explanation of each miss, per key.
#[derive(Debug, Default)]
pub struct RecipeBook {
    /// A std Mutex: a lookup or an insert, never held across an await.
    kept: Mutex<Kept>,
}

impl RecipeBook {
    /// Records that `job`'s graph `name` was asked for with `recipe`; on a miss (`missed`), also
    /// why, against the last recipe of that graph, and keeps it under `key`.
    pub fn saw(&self, job: &str, name: &str, key: &CacheKey, recipe: Recipe, missed: bool) -> Option<Explanation> {
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = (job.to_string(), name.to_string());
        let explanation = missed.then(|| {
            let differences = match kept.last.get(&id) {
                Some((before, _)) => recipe.differences(before),
                None => vec![("new", format!("no graph named {name:?} of job {job:?} was seen here before"))],
            };
            let differences = if differences.is_empty() {
                vec![("evicted", "the same graph was compiled before: its answer is no longer stored".to_string())]
            } else {
                differences
            };
            Explanation { job: job.to_string(), name: name.to_string(), reason: differences[0].0, differences }
        });
        if kept.last.insert(id.clone(), (recipe, *key)).is_none() {
            kept.order.push_back(id);
            if kept.order.len() > KEPT
                && let Some(oldest) = kept.order.pop_front()
            {
                kept.last.remove(&oldest);
            }
        }
        if let Some(explanation) = &explanation
            && kept.explained.insert(*key, explanation.clone()).is_none()
        {
            kept.explained_order.push_back(*key);
            if kept.explained_order.len() > KEPT
                && let Some(oldest) = kept.explained_order.pop_front()
            {
                kept.explained.remove(&oldest);
            }
        }
        explanation
    }

    /// Why the graph of `key` missed, when kilnd compiled it lately.
    pub fn explained(&self, key: &CacheKey) -> Option<Explanation> {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.explained.get(key).cloned()
    }

    /// The key of the latest ask for `job`'s graph `name`, when kilnd saw one lately: what a user
    /// who knows a graph by its name (a process's report, `kiln stats`) asks about.
    pub fn latest(&self, job: &str, name: &str) -> Option<CacheKey> {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.last.get(&(job.to_string(), name.to_string())).map(|(_, key)| *key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(torch: &str) -> Environment {
        Environment { torch: torch.into(), triton: "3.6.0".into(), python: "3.12.3".into(), cuda: "13.0".into() }
    }

    fn payload(header: serde_json::Value, graph: &[u8]) -> Vec<u8> {
        let head = header.to_string().into_bytes();
        let mut out = (head.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&head);
        out.extend_from_slice(graph);
        out
    }

    fn header(max_autotune: bool) -> serde_json::Value {
        serde_json::json!({"version": 1, "inputs": [{"kind": "int", "value": 1}], "grad_enabled": true,
                           "inductor_config": {"max_autotune": max_autotune, "cpp.cxx": ["g++"]}})
    }

    #[test]
    fn names_the_first_part_that_changed_broad_causes_first() {
        let before = Recipe::of(&env("2.11.0"), "H100", &payload(header(false), b"graph"));
        let same = Recipe::of(&env("2.11.0"), "H100", &payload(header(false), b"graph"));
        assert!(same.differences(&before).is_empty());
        let setting = Recipe::of(&env("2.11.0"), "H100", &payload(header(true), b"graph"));
        assert_eq!(
            setting.differences(&before),
            vec![("options", "inductor_config.max_autotune true here, false before".to_string())]
        );
        let graph = Recipe::of(&env("2.11.0"), "H100", &payload(header(false), b"other"));
        assert_eq!(graph.differences(&before)[0].0, "source");
        let all = Recipe::of(&env("2.12.0"), "H200", &payload(header(true), b"other"));
        let reasons: Vec<_> = all.differences(&before).into_iter().map(|(r, _)| r).collect();
        assert_eq!(reasons, ["toolchain", "target", "options", "source"]);
        assert_eq!(all.differences(&before)[0].1, "torch 2.12.0 here, 2.11.0 before");
    }

    #[test]
    fn a_payload_without_a_header_is_one_part_and_never_fails() {
        let a = Recipe::of(&env("2.11.0"), "H100", b"\xff\xff\xff\xffjunk");
        let b = Recipe::of(&env("2.11.0"), "H100", b"");
        assert_eq!(
            a.differences(&b),
            vec![("source", "the payload differs (it has no header kilnd could read)".to_string())]
        );
    }

    #[test]
    fn the_book_explains_misses_by_key_and_stays_bounded() {
        let book = RecipeBook::default();
        let key = |n: u8| CacheKey::from_bytes([n; 32]);
        let first = book.saw("job", "forward:0/0", &key(1), Recipe::of(&env("2.11.0"), "H100", b""), true).unwrap();
        assert_eq!(first.reason, "new");
        // A hit is remembered as the graph's latest recipe, not explained.
        assert!(book.saw("job", "forward:0/0", &key(1), Recipe::of(&env("2.11.0"), "H100", b""), false).is_none());
        let upgrade = book.saw("job", "forward:0/0", &key(2), Recipe::of(&env("2.12.0"), "H100", b""), true).unwrap();
        assert_eq!((upgrade.reason, upgrade.line().as_str()), ("toolchain", "torch 2.12.0 here, 2.11.0 before"));
        assert_eq!(book.explained(&key(2)), Some(upgrade));
        // By name: the latest ask's key, whatever came of it.
        assert_eq!(book.latest("job", "forward:0/0"), Some(key(2)));
        assert_eq!(book.latest("job", "backward:0/0"), None);
        assert_eq!(book.latest("other", "forward:0/0"), None);
        let again = book.saw("job", "forward:0/0", &key(2), Recipe::of(&env("2.12.0"), "H100", b""), true).unwrap();
        assert_eq!(again.reason, "evicted");
        for n in 0..(KEPT + 10) {
            book.saw("job", &format!("g{n}"), &CacheKey::from_bytes([0; 32]), Recipe::of(&env("x"), "", b""), false);
        }
        assert_eq!(book.latest("job", "g0"), None, "the oldest name is dropped past KEPT");
        let kept = book.kept.lock().unwrap();
        assert!(kept.last.len() <= KEPT && kept.order.len() <= KEPT);
    }
}
