//! What a compile records: its key's recipe, diffed against the recipes kept for its identity
//! to count the miss under a reason, then kept in this host's recipe store and published to
//! the fleet cache beside the artifact. Runs on the compile path only, beside the compile
//! (see `Engine::lead`, whose [`Recorder`] this is), so a miss answers no later for it and a hit
//! never reaches it.
//!
//! The fleet's recipes are not read here: kilnd reads each key from kiln-cache at most once per
//! request, and a miss has had its read. So a host's first miss of an identity counts as `new`
//! even when another host compiled it; `Explain` reads the fleet's recipes and says more.

use super::book::{self, Expect};
use super::diff;
use super::identity::Identity;
use super::misses::MissLog;
use super::store::RecipeStore;
use crate::core::cache::Cache;
use crate::domain::{KernelJob, KernelSource};
use crate::metrics::Metrics;
use bytes::Bytes;
use kiln_proto::pb::KeyRecipe;
use kiln_proto::{CacheKey, Fingerprint, Target};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The engine's recorder of misses: this host's recipe books, the recent misses, and the cache
/// whose fleet tier the books are published to.
#[derive(Debug)]
pub struct Recorder {
    recipes: RecipeStore,
    misses: MissLog,
    cache: Arc<Cache>,
}

impl Recorder {
    /// A recorder keeping books in `recipes`, counting misses into `metrics`.
    pub fn new(recipes: RecipeStore, metrics: &Metrics, cache: Arc<Cache>) -> Self {
        Recorder { recipes, misses: MissLog::new(metrics), cache }
    }

    /// This host's recipe books.
    pub fn recipes(&self) -> &RecipeStore {
        &self.recipes
    }

    /// The most recent misses that led to a compile, with their reasons (and
    /// `kiln_misses_total`): for `Stats` and status pages.
    pub fn misses(&self) -> &MissLog {
        &self.misses
    }

    /// The recipe of `source` for `target` on this host, made by the toolchain `build` (its
    /// fingerprint and version), stamped with the version, the time and the host.
    pub fn recipe(
        &self,
        (fingerprint, version): (Fingerprint, String),
        source: &KernelSource,
        target: &Target,
    ) -> KeyRecipe {
        let recipe = source.with_key_inputs(target, &fingerprint, |k| k.recipe());
        KeyRecipe {
            toolchain_version: version,
            unix_millis: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            host: self.recipes.host().to_string(),
            ..recipe
        }
    }

    /// Records a miss of `kernel` (about to be compiled) under `identity`, with its `recipe`.
    pub async fn miss(&self, recipe: KeyRecipe, identity: Identity, kernel: &KernelJob) {
        if recipe.key != kernel.key.to_hex() {
            // The toolchain's fingerprint changed since validation (a Triton pool restarted on
            // another installation): this recipe would describe another key.
            tracing::warn!(key = %kernel.key, recipe = %recipe.key, "recipe not recorded: it derives another key");
            return;
        }
        let key = book::book_key(&identity);
        let earlier = self.recipes.get(&key, Expect::BookOf(&identity)).await.map(|b| b.recipes).unwrap_or_default();
        let (reason, detail) = diff::miss_reason(&recipe, &earlier);
        self.misses.record(identity.clone(), kernel.key, kernel.source.toolchain(), reason, detail);
        for (key, sealed) in book::after_miss(&identity, &kernel.key, recipe, &earlier) {
            self.keep(key, Bytes::from(sealed)).await;
        }
    }

    /// Keeps a sealed book on this host and publishes it to the fleet cache (last writer wins: the fleet
    /// holds the recipes of the host that compiled the identity last). The publish runs beside the
    /// compile and is waited for at most `PUBLISH_WAIT`, so a kiln-cache that stopped answering
    /// does not hold up the answer (it goes on in the background).
    async fn keep(&self, key: CacheKey, sealed: Bytes) {
        self.recipes.put(&key, sealed.clone()).await;
        let Some(fleet) = self.cache.fleet_up() else { return };
        let fleet = fleet.clone();
        self.cache
            .write_to_fleet("recipe-publish", async move {
                if let Err(e) = fleet.put_raw(&key, sealed.to_vec()).await {
                    tracing::debug!(%key, error = %e, "could not publish a recipe book to the fleet");
                }
            })
            .await;
    }
}
