//! The `Explain` RPC: for each kernel of a graph (validated and keyed as `Compile` would, never
//! compiled) or each key, whether a cache holds it, and how its recipe differs from the nearest
//! recipe kept for the same identity, on this host or in the fleet cache.

use super::book::{self, Expect};
use super::diff::{self, Difference};
use super::identity::Identity;
use crate::cache::Cache;
use crate::domain::Priority;
use crate::engine::Engine;
use crate::error::{Error, invalid};
use crate::state::State;
use kiln_proto::CacheKey;
use kiln_proto::pb::{self, KeyRecipe, RecipeBook};

/// Where a kept recipe was found.
const LOCAL: &str = "local";
const FLEET: &str = "fleet";

pub async fn explain(state: &State, req: &pb::ExplainRequest) -> Result<pb::ExplainResponse, Error> {
    match (&req.graph, req.keys.is_empty()) {
        (Some(_), false) => Err(invalid("keys", "give a graph or keys, not both")),
        (None, true) => Err(invalid("graph", "required: give a graph (what Compile takes) or keys")),
        (Some(graph), true) => by_graph(state, graph).await,
        (None, false) => by_keys(state, &req.keys).await,
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
        let mut answer = explanation(engine.cache(), &kernel.key, recipe, &kept).await;
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
        let expect = Expect::RecipeOf(&key);
        let own = match kept_book(engine, &book::pointer_key(&key), expect).await.into_iter().next() {
            Some((found, _)) => found,
            None => {
                let mut answer = explanation(engine.cache(), &key, None, &[]).await;
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
        let mut answer = explanation(engine.cache(), &key, own.recipes.into_iter().next(), &kept).await;
        answer.identity = identity.as_ref().map(book::to_pb);
        kernels.push(answer);
    }
    Ok(pb::ExplainResponse { kernels })
}

/// The books under `key` on this host and in the fleet (each at most once).
async fn kept_book(engine: &Engine, key: &CacheKey, expect: Expect<'_>) -> Vec<(RecipeBook, &'static str)> {
    let mut out = Vec::new();
    if let Some(found) = engine.recorder().recipes().get(key, expect).await {
        out.push((found, LOCAL));
    }
    if let Some(fleet) = engine.cache().fleet_up()
        && let Ok(kiln_cache_client::Lookup::Hit(sealed, _)) = fleet.tier.get(key).await
    {
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

/// Whether a cache holds `key`: a remembered failure, this host's tiers, or the fleet's.
async fn cached(cache: &Cache, key: &CacheKey) -> Option<(pb::Tier, &'static str)> {
    if cache.failed_recently(key) {
        return Some((pb::Tier::Memory, "a failed compile, remembered"));
    }
    if let Some(hit) = cache.local(key).await {
        return Some((hit.tier.to_pb(), hit.tier.as_str()));
    }
    let fleet = cache.fleet_up()?;
    match fleet.tier.contains(std::slice::from_ref(key)).await {
        Ok(found) if found.first() == Some(&true) => Some((pb::Tier::Remote, "the fleet cache")),
        _ => None,
    }
}

fn differences_pb(d: &[Difference]) -> Vec<pb::Difference> {
    d.iter().map(|d| pb::Difference { reason: d.reason.label().into(), text: d.text.clone() }).collect()
}

/// The answer for one key with its `recipe` (when known) against the `kept` recipes of its
/// identity.
async fn explanation(
    cache: &Cache,
    key: &CacheKey,
    recipe: Option<KeyRecipe>,
    kept: &[(KeyRecipe, &'static str)],
) -> pb::KernelExplanation {
    let cached = cached(cache, key).await;
    let mut answer = pb::KernelExplanation {
        key: key.to_hex(),
        cached: cached.is_some(),
        tier: cached.map_or(pb::Tier::Unspecified, |(t, _)| t) as i32,
        publisher: cache.fleet().and_then(|f| f.audit.publisher(key)).map(|p| (*p).clone()),
        ..Default::default()
    };
    let Some(recipe) = recipe else {
        answer.verdict = match cached {
            Some((_, what)) => format!("hit ({what})"),
            None => "miss".into(),
        };
        return answer;
    };
    let recipes: Vec<KeyRecipe> = kept.iter().map(|(r, _)| r.clone()).collect();
    if let Some((i, d)) = diff::nearest(&recipe, &recipes) {
        answer.nearest = Some(kept[i].0.clone());
        answer.nearest_from = kept[i].1.into();
        answer.differences = differences_pb(&d);
    }
    match cached {
        Some((_, what)) => {
            answer.reason = answer.differences.first().map(|d| d.reason.clone()).unwrap_or_default();
            answer.verdict = format!("hit ({what})");
        }
        None => {
            let (reason, detail) = diff::miss_reason(&recipe, &recipes);
            answer.reason = reason.label().into();
            answer.verdict = format!("miss: {detail}");
        }
    }
    answer.recipe = Some(recipe);
    answer
}
