//! What a compile records: its key's recipe, diffed against the recipes kept for its identity
//! to count the miss under a reason, then kept in this host's recipe store and published to
//! the fleet cache beside the artifact. Runs on the compile path only, beside the compile
//! (see `Engine::lead`), so a miss answers no later for it and a hit never reaches it.
//!
//! The fleet's recipes are not read here: kilnd reads each key from kiln-cache at most once per
//! request, and a miss has had its read. So a host's first miss of an identity counts as `new`
//! even when another host compiled it; `Explain` reads the fleet's recipes and says more.

use super::book::{self, Expect};
use super::diff;
use super::identity::Identity;
use crate::domain::{KernelJob, KernelSource};
use crate::engine::Engine;
use bytes::Bytes;
use kiln_proto::pb::{KeyRecipe, RecipeBook};
use kiln_proto::{CacheKey, Fingerprint, Target};
use std::time::{SystemTime, UNIX_EPOCH};

/// The fingerprint and version of `source`'s toolchain on this daemon; `None` for a toolchain
/// that is not running (validation refuses its kernels before they get here).
fn toolchain(engine: &Engine, source: &KernelSource) -> Option<(Fingerprint, String)> {
    let t = &engine.toolchains;
    match source {
        KernelSource::Cuda(_) => Some((t.nvrtc.fingerprint, t.nvrtc.version.clone())),
        KernelSource::Ptx(_) => t.ptxas.as_ref().ok().map(|p| (p.fingerprint, p.version.clone())),
        KernelSource::Triton(_) => t.triton_started().map(|p| (p.fingerprint, p.version.clone())),
    }
}

/// The recipe of `source` for `target` on this host, stamped with the toolchain's version, the
/// time and the host.
pub fn recipe(engine: &Engine, source: &KernelSource, target: &Target) -> Option<KeyRecipe> {
    let (fingerprint, version) = toolchain(engine, source)?;
    let recipe = source.with_key_inputs(target, &fingerprint, |k| k.recipe());
    Some(KeyRecipe {
        toolchain_version: version,
        unix_millis: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        host: engine.recipes().host().to_string(),
        ..recipe
    })
}

/// Records a miss of `kernel` (about to be compiled) under `identity`.
pub async fn miss(engine: &Engine, identity: Identity, kernel: &KernelJob, target: &Target) {
    let Some(recipe) = recipe(engine, &kernel.source, target) else { return };
    if recipe.key != kernel.key.to_hex() {
        // The toolchain's fingerprint changed since validation (a Triton pool restarted on
        // another installation): this recipe would describe another key.
        tracing::warn!(key = %kernel.key, recipe = %recipe.key, "recipe not recorded: it derives another key");
        return;
    }
    let key = book::book_key(&identity);
    let earlier = engine.recipes().get(&key, Expect::BookOf(&identity)).await.map(|b| b.recipes).unwrap_or_default();
    let (reason, detail) = diff::miss_reason(&recipe, &earlier);
    engine.misses().record(identity.clone(), kernel.key, kernel.source.toolchain(), reason, detail);
    let pointer = RecipeBook { identity: Some(book::to_pb(&identity)), recipes: vec![recipe.clone()] };
    keep(engine, &key, &book::merge(&identity, recipe, &earlier)).await;
    keep(engine, &book::pointer_key(&kernel.key), &pointer).await;
}

/// Keeps a book on this host and publishes it to the fleet cache (last writer wins: the fleet
/// holds the recipes of the host that compiled the identity last). The publish runs beside the
/// compile and is waited for at most `PUBLISH_WAIT`, so a kiln-cache that stopped answering does
/// not hold up the answer (it goes on in the background).
async fn keep(engine: &Engine, key: &CacheKey, recipes: &RecipeBook) {
    let Some(sealed) = book::seal(key, recipes) else {
        tracing::debug!(%key, "recipe book over its size bound; not kept");
        return;
    };
    let sealed = Bytes::from(sealed);
    engine.recipes().put(key, sealed.clone()).await;
    let Some(fleet) = engine.fleet_up() else { return };
    let (tier, key) = (std::sync::Arc::clone(&fleet.tier), *key);
    engine
        .write_to_fleet("recipe-publish", async move {
            if let Err(e) = tier.put(&key, sealed.to_vec()).await {
                tracing::debug!(%key, error = %e, "could not publish a recipe book to the fleet");
            }
        })
        .await;
}
