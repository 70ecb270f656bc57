//! The `Explain` RPC: for each kernel of a graph (validated and keyed as `Compile` would, never
//! compiled) or each key, whether a cache holds it, and how its recipe differs from the nearest
//! recipe kept for the same identity, on this host or in the fleet cache.

use crate::core::cache::Cache;
use crate::core::engine::Engine;
use crate::core::explain::book::{self, Expect};
use crate::core::explain::diff::{self, Difference};
use crate::core::explain::identity::Identity;
use crate::core::torch::recipe::Explanation;
use crate::domain::Priority;
use crate::error::{Error, invalid};
use crate::rpc::state::State;
use kiln_proto::CacheKey;
use kiln_proto::pb::{self, KeyRecipe, RecipeBook};

/// Where a kept recipe was found.
const LOCAL: &str = "local";
const FLEET: &str = "fleet";

pub async fn explain(state: &State, req: &pb::ExplainRequest) -> Result<pb::ExplainResponse, Error> {
    match (&req.graph, req.keys.is_empty(), req.torch_graphs.is_empty()) {
        (Some(graph), true, true) => by_graph(state, graph).await,
        (None, false, true) => by_keys(state, &req.keys).await,
        (None, true, false) => by_torch_names(state, &req.torch_graphs).await,
        (None, true, true) => {
            Err(invalid("graph", "required: give a graph (what Compile takes), keys or torch_graphs"))
        }
        (Some(_), false, _) => Err(invalid("keys", "give a graph, keys or torch_graphs: one of them")),
        (_, _, false) => Err(invalid("torch_graphs", "give a graph, keys or torch_graphs: one of them")),
    }
}

async fn by_graph(state: &State, graph: &pb::CompileGraph) -> Result<pb::ExplainResponse, Error> {
    let compile = pb::CompileRequest { graph: Some(graph.clone()), ..Default::default() };
    let job = state.validate(&compile, Priority::Interactive).await?;
    let engine = &state.engine;
    let mut kernels = Vec::with_capacity(job.kernels.len());
    for kernel in &job.kernels {
        let identity = Identity::new(&job.name, &kernel.id, kernel.source.kernel_name());
        let recipe = engine.recipe(&kernel.source, &job.target);
        let kept = kept_recipes(engine, &identity).await;
        let mut answer = explanation(engine, &kernel.key, recipe, &kept).await;
        answer.id = kernel.id.clone();
        answer.identity = Some(book::to_pb(&identity));
        kernels.push(answer);
    }
    Ok(pb::ExplainResponse { kernels })
}

async fn by_keys(state: &State, keys: &[String]) -> Result<pb::ExplainResponse, Error> {
    let max = state.config.limits.max_kernels;
    if keys.len() > max {
        return Err(invalid("keys", format!("{} keys exceeds the limit of {max}", keys.len())));
    }
    let keys = keys
        .iter()
        .enumerate()
        .map(|(i, k)| k.parse::<CacheKey>().map_err(|e| invalid(format!("keys[{i}]"), e)))
        .collect::<Result<Vec<_>, _>>()?;
    let engine = &state.engine;
    let mut kernels = Vec::with_capacity(keys.len());
    for key in keys {
        if let Some(why) = state.torch_graphs.recipes.explained(&key) {
            let (job, name) = (why.job.clone(), why.name.clone());
            kernels.push(torch_graph(engine, &key, &job, &name, Some(why)).await);
            continue;
        }
        let expect = Expect::RecipeOf(&key);
        let own = match kept_book(engine, &book::pointer_key(&key), expect).await.into_iter().next() {
            Some((found, _)) => found,
            None => {
                let mut answer = explanation(engine, &key, None, &[]).await;
                if !answer.cached {
                    answer.verdict = "miss: no recipe of this key is kept on this host or in the fleet".into();
                }
                kernels.push(answer);
                continue;
            }
        };
        let identity = own.identity.as_ref().map(book::from_pb);
        let kept = match &identity {
            Some(identity) => kept_recipes(engine, identity).await,
            None => Vec::new(),
        };
        let mut answer = explanation(engine, &key, own.recipes.into_iter().next(), &kept).await;
        answer.identity = identity.as_ref().map(book::to_pb);
        kernels.push(answer);
    }
    Ok(pb::ExplainResponse { kernels })
}

/// torch.compile graphs by job and name: the latest ask for each on this kilnd, explained as
/// its key would be; a graph this kilnd has not seen lately says so.
async fn by_torch_names(state: &State, names: &[pb::TorchGraphName]) -> Result<pb::ExplainResponse, Error> {
    let max = state.config.limits.max_kernels;
    if names.len() > max {
        return Err(invalid("torch_graphs", format!("{} graphs exceeds the limit of {max}", names.len())));
    }
    for (i, name) in names.iter().enumerate() {
        crate::rpc::graph::validate::graph_name(&format!("torch_graphs[{i}]"), name)?;
    }
    let (engine, recipes) = (&state.engine, &state.torch_graphs.recipes);
    let mut kernels = Vec::with_capacity(names.len());
    for graph in names {
        let mut answer = match recipes.latest(&graph.job, &graph.name) {
            Some(key) => torch_graph(engine, &key, &graph.job, &graph.name, recipes.explained(&key)).await,
            None => unasked(state, graph),
        };
        // The name the user asked by, as a graph's kernel id is printed.
        answer.id = graph.name.clone();
        kernels.push(answer);
    }
    Ok(pb::ExplainResponse { kernels })
}

/// A torch graph no process asked kilnd for lately: where the job's processes reported running
/// it themselves, that it stayed in the process (and how, as the README's fallbacks say why);
/// otherwise unknown.
fn unasked(state: &State, graph: &pb::TorchGraphName) -> pb::KernelExplanation {
    let (verdict, reason) = match state.torch_graphs.stayed_home(&graph.job, &graph.name) {
        Some((how, processes)) => (
            format!(
                "torch graph: stayed in the process: {processes} process(es) of job {:?} ran graph {:?} {}, never asking kilnd \
                 (a fallback counted by reason in `kiln stats`, or KILN_TORCH_GRAPHS leaving its layout out)",
                graph.job,
                graph.name,
                if how == "eager" { "eagerly" } else { "compiled in the process, as torch would" },
            ),
            "in_process",
        ),
        None => (
            format!(
                "torch graph: unknown: no graph named {:?} of job {:?} was asked for on this kilnd lately",
                graph.name, graph.job
            ),
            "unknown",
        ),
    };
    pb::KernelExplanation {
        identity: Some(pb::KernelIdentity {
            graph: graph.job.clone(),
            kernel_id: graph.name.clone(),
            kernel_name: String::new(),
        }),
        verdict,
        reason: reason.into(),
        ..Default::default()
    }
}

/// A torch graph's key that kilnd saw lately, as `job`'s graph `name`: whether a cache holds it,
/// and, when that ask missed (`why`), why, part by part (the job as the identity's graph, the
/// graph's name as its kernel).
async fn torch_graph(
    engine: &Engine,
    key: &CacheKey,
    job: &str,
    name: &str,
    why: Option<Explanation>,
) -> pb::KernelExplanation {
    let held = cached(engine.cache(), key).await;
    let mut answer = pb::KernelExplanation {
        identity: Some(pb::KernelIdentity { graph: job.into(), kernel_id: name.into(), kernel_name: String::new() }),
        key: key.to_hex(),
        cached: held.is_some(),
        tier: held.map_or(pb::Tier::Unspecified, |h| h.tier) as i32,
        ..Default::default()
    };
    match why {
        Some(why) => {
            answer.verdict = format!("torch graph: missed: {}", why.line());
            answer.reason = why.reason.into();
            answer.differences = why
                .differences
                .into_iter()
                .map(|(reason, text)| pb::Difference { reason: reason.into(), text })
                .collect();
        }
        None if answer.cached => {
            answer.verdict = "torch graph: hit: its latest ask was answered from the caches".into()
        }
        None => {
            answer.verdict = "torch graph: its latest ask was answered from the caches, which no longer hold it".into();
        }
    }
    answer
}

/// The books under `key` on this host and in the fleet (each at most once).
async fn kept_book(engine: &Engine, key: &CacheKey, expect: Expect<'_>) -> Vec<(RecipeBook, &'static str)> {
    let mut out = Vec::new();
    if let Some(found) = engine.recorder().recipes().get(key, expect).await {
        out.push((found, LOCAL));
    }
    if let Some(sealed) = engine.cache().fleet_raw(key).await {
        match book::open(key, &sealed, expect) {
            Ok(found) => out.push((found, FLEET)),
            Err(e) => tracing::warn!(%key, error = %e, "a fleet recipe book was refused"),
        }
    }
    out
}

/// Every recipe kept for `identity`, this host's first, each key once.
async fn kept_recipes(engine: &Engine, identity: &Identity) -> Vec<(KeyRecipe, &'static str)> {
    let mut out: Vec<(KeyRecipe, &'static str)> = Vec::new();
    for (found, from) in kept_book(engine, &book::book_key(identity), Expect::BookOf(identity)).await {
        for r in found.recipes {
            if out.iter().all(|(kept, _)| kept.key != r.key) {
                out.push((r, from));
            }
        }
    }
    out
}

/// What a cache holds for a key, and which cache.
#[derive(Debug, Clone, Copy)]
struct Held {
    tier: pb::Tier,
    /// The cache, in words: `memory`, `disk`, `the fleet cache`, `a failed compile, remembered`.
    what: &'static str,
    /// A remembered failure rather than an artifact.
    failure: bool,
}

/// Whether a cache holds `key`: a remembered failure, this host's tiers, or the fleet's.
async fn cached(cache: &Cache, key: &CacheKey) -> Option<Held> {
    if cache.failed_recently(key) {
        return Some(Held { tier: pb::Tier::Memory, what: "a failed compile, remembered", failure: true });
    }
    if let Some(hit) = cache.local(key).await {
        return Some(Held { tier: hit.tier.to_pb(), what: hit.tier.as_str(), failure: false });
    }
    let held = cache.fleet_holds(key).await == Some(true);
    held.then_some(Held { tier: pb::Tier::Remote, what: "the fleet cache", failure: false })
}

/// The recipe `key` was compiled from, as kept when it was compiled (its host and time say
/// where a hit came from), on this host or in the fleet.
async fn origin(engine: &Engine, key: &CacheKey) -> Option<KeyRecipe> {
    let books = kept_book(engine, &book::pointer_key(key), Expect::RecipeOf(key)).await;
    books.into_iter().next().and_then(|(found, _)| found.recipes.into_iter().next())
}

fn differences_pb(d: &[Difference]) -> Vec<pb::Difference> {
    d.iter().map(|d| pb::Difference { reason: d.reason.label().into(), text: d.text.clone() }).collect()
}

/// The answer for one key with its `recipe` (when known) against the `kept` recipes of its
/// identity. A hit of an artifact is described by where it came from (the cache, and the recipe
/// kept when it was compiled), not compared: the inputs that differ from an earlier attempt at
/// the same kernel (a failed compile, say) say nothing about a hit. A remembered failure is
/// compared, since what changed since the nearest other attempt is what may have broken it.
async fn explanation(
    engine: &Engine,
    key: &CacheKey,
    recipe: Option<KeyRecipe>,
    kept: &[(KeyRecipe, &'static str)],
) -> pb::KernelExplanation {
    let cache = engine.cache();
    let held = cached(cache, key).await;
    let mut answer = pb::KernelExplanation {
        key: key.to_hex(),
        cached: held.is_some(),
        tier: held.map_or(pb::Tier::Unspecified, |h| h.tier) as i32,
        publisher: cache.publisher_of(key),
        ..Default::default()
    };
    if let Some(held) = held {
        answer.verdict = format!("hit ({})", held.what);
        answer.recipe = origin(engine, key).await.or(recipe);
        if held.failure
            && let Some(own) = &answer.recipe
            && let Some((i, d)) = diff::nearest(own, kept.iter().map(|(r, _)| r))
        {
            answer.nearest = Some(kept[i].0.clone());
            answer.nearest_from = kept[i].1.into();
            answer.reason = d.first().map(|d| d.reason.label().to_string()).unwrap_or_default();
            answer.differences = differences_pb(&d);
        }
        return answer;
    }
    let Some(recipe) = recipe else {
        answer.verdict = "miss".into();
        return answer;
    };
    let recipes: Vec<KeyRecipe> = kept.iter().map(|(r, _)| r.clone()).collect();
    if let Some((i, d)) = diff::nearest(&recipe, &recipes) {
        answer.nearest = Some(kept[i].0.clone());
        answer.nearest_from = kept[i].1.into();
        answer.differences = differences_pb(&d);
    }
    let (reason, detail) = diff::miss_reason(&recipe, &recipes);
    answer.reason = reason.label().into();
    answer.verdict = format!("miss: {detail}");
    answer.recipe = Some(recipe);
    answer
}
