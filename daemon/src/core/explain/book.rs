//! Recipe books on the wire and at rest: a `RecipeBook` (an identity and its latest recipes,
//! newest first) sealed in the artifact envelope, and the checks a book read back must pass. A
//! book from the fleet cache was written by another host, so it is untrusted input: its
//! envelope is verified, its size bounded before decoding, and every field checked.

use super::identity::Identity;
use crate::runtime::toolchain::Toolchain;
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::key::recipe::{MAX_VALUE_BYTES, is_digest};
use kiln_proto::key::{key_recipe_key, recipe_book_key};
use kiln_proto::pb::{ArtifactMeta, KernelIdentity, KeyRecipe, RecipeBook};
use kiln_proto::{Fingerprint, Target};
use prost::Message;

/// Recipes kept per identity: the latest few keys, enough to find what changed last.
pub const RECIPES_PER_IDENTITY: usize = 4;
/// Largest encoded book: older recipes are dropped to fit; a single recipe over it (thousands
/// of headers) is not kept.
pub const MAX_BOOK_BYTES: usize = 256 << 10;
/// Options, headers or entries in one recipe, at most.
const MAX_ITEMS: usize = 4096;
/// Longest graph name, kernel id, host or version kept.
const MAX_NAME_BYTES: usize = 1024;
/// The envelope's `toolchain` field for a book, so a book is never read as a cubin or a blob;
/// under [`envelope::INTERNAL_TOOLCHAIN_PREFIX`], so the fleet page shows books apart from kernels.
const LABEL: &str = "kiln/recipe-book";
/// Length of a digest value (`blake3:` and 64 hex), which a long value is recorded as.
const DIGEST_BYTES: usize = 71;

/// Where a book is kept for `identity`.
pub fn book_key(identity: &Identity) -> CacheKey {
    recipe_book_key(&identity.graph, &identity.kernel_id, &identity.kernel_name)
}

/// Where the recipe of `key` itself is kept (a book of one), so a key alone can be explained.
pub fn pointer_key(key: &CacheKey) -> CacheKey {
    key_recipe_key(key)
}

pub fn to_pb(identity: &Identity) -> KernelIdentity {
    KernelIdentity {
        graph: identity.graph.clone(),
        kernel_id: identity.kernel_id.clone(),
        kernel_name: identity.kernel_name.clone(),
    }
}

pub fn from_pb(identity: &KernelIdentity) -> Identity {
    Identity::new(&identity.graph, &identity.kernel_id, &identity.kernel_name)
}

/// `newest` first, then the `older` recipes of other keys, bounded in count and bytes.
pub fn merge(identity: &Identity, newest: KeyRecipe, older: &[KeyRecipe]) -> RecipeBook {
    let mut recipes = vec![newest];
    for r in older {
        if recipes.len() < RECIPES_PER_IDENTITY && recipes.iter().all(|kept| kept.key != r.key) {
            recipes.push(r.clone());
        }
    }
    let mut book = RecipeBook { identity: Some(to_pb(identity)), recipes };
    while book.encoded_len() > MAX_BOOK_BYTES && book.recipes.len() > 1 {
        book.recipes.pop();
    }
    book
}

/// The book sealed under `key`, or `None` when even one recipe is over [`MAX_BOOK_BYTES`].
pub fn seal(key: &CacheKey, book: &RecipeBook) -> Option<Vec<u8>> {
    let bytes = book.encode_to_vec();
    if bytes.len() > MAX_BOOK_BYTES {
        return None;
    }
    Some(envelope::seal(key, ArtifactMeta { toolchain: LABEL.into(), ..Default::default() }, &bytes))
}

/// The books a miss of `kernel` keeps, sealed: the identity's, with `recipe` newest among the
/// `earlier` ones, and the key's own book of one, so a key alone can be explained. A book over
/// [`MAX_BOOK_BYTES`] is left out.
pub fn after_miss(
    identity: &Identity,
    kernel: &CacheKey,
    recipe: KeyRecipe,
    earlier: &[KeyRecipe],
) -> Vec<(CacheKey, Vec<u8>)> {
    let pointer = RecipeBook { identity: Some(to_pb(identity)), recipes: vec![recipe.clone()] };
    let books = [(book_key(identity), merge(identity, recipe, earlier)), (pointer_key(kernel), pointer)];
    books
        .into_iter()
        .filter_map(|(key, book)| match seal(&key, &book) {
            Some(sealed) => Some((key, sealed)),
            None => {
                tracing::debug!(%key, "recipe book over its size bound; not kept");
                None
            }
        })
        .collect()
}

/// What a book read back must be.
#[derive(Debug, Clone, Copy)]
pub enum Expect<'a> {
    /// The book of this identity (stored under its [`book_key`]).
    BookOf(&'a Identity),
    /// The one recipe of this key (stored under its [`pointer_key`]).
    RecipeOf(&'a CacheKey),
}

/// A book read back from a tier or the fleet: the envelope verified against `key`, every field
/// checked, and the book the one `expect` says `key` holds (a writer to the fleet cannot file
/// one identity's recipes under another's key).
pub fn open(key: &CacheKey, sealed: &[u8], expect: Expect<'_>) -> Result<RecipeBook, String> {
    let artifact = envelope::open(sealed, key, MAX_BOOK_BYTES as u64).map_err(|e| e.to_string())?;
    if artifact.meta.toolchain != LABEL {
        return Err(format!("not a recipe book: `{}`", artifact.meta.toolchain.escape_default()));
    }
    let book = RecipeBook::decode(&artifact.bytes[..]).map_err(|e| format!("undecodable recipe book: {e}"))?;
    check(&book)?;
    let matches = match expect {
        Expect::BookOf(identity) => book.identity.as_ref().map(from_pb).as_ref() == Some(identity),
        Expect::RecipeOf(asked) => book.recipes.len() == 1 && book.recipes[0].key == asked.to_hex(),
    };
    if !matches {
        return Err("the recipe book is not the one its key names".into());
    }
    Ok(book)
}

fn bounded(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        return Err(format!("{field}: {} bytes, more than {max}", value.len()));
    }
    Ok(())
}

/// Every field of a book within the bounds and forms kilnd writes.
pub fn check(book: &RecipeBook) -> Result<(), String> {
    let identity = book.identity.as_ref().ok_or("identity: missing")?;
    for (field, value) in
        [("graph", &identity.graph), ("kernel_id", &identity.kernel_id), ("kernel_name", &identity.kernel_name)]
    {
        bounded(&format!("identity.{field}"), value, MAX_NAME_BYTES)?;
    }
    if book.recipes.is_empty() || book.recipes.len() > RECIPES_PER_IDENTITY {
        return Err(format!("recipes: {} of them, expected 1 to {RECIPES_PER_IDENTITY}", book.recipes.len()));
    }
    for (i, r) in book.recipes.iter().enumerate() {
        check_recipe(r).map_err(|e| format!("recipes[{i}].{e}"))?;
    }
    Ok(())
}

fn check_recipe(r: &KeyRecipe) -> Result<(), String> {
    r.key.parse::<CacheKey>().map_err(|e| format!("key: {e}"))?;
    if Toolchain::from_name(&r.toolchain).is_none() {
        return Err(format!("toolchain: unknown `{}`", r.toolchain.escape_default()));
    }
    r.fingerprint.parse::<Fingerprint>().map_err(|e| format!("fingerprint: {e}"))?;
    r.target.parse::<Target>().map_err(|e| format!("target: {e}"))?;
    if !is_digest(&r.source) {
        return Err("source: not a digest".into());
    }
    for (field, list) in [("options", &r.options), ("entries", &r.entries)] {
        if list.len() > MAX_ITEMS {
            return Err(format!("{field}: more than {MAX_ITEMS}"));
        }
        for (j, v) in list.iter().enumerate() {
            bounded(&format!("{field}[{j}]"), v, MAX_VALUE_BYTES.max(DIGEST_BYTES))?;
        }
    }
    if r.headers.len() > MAX_ITEMS {
        return Err(format!("headers: more than {MAX_ITEMS}"));
    }
    for (j, h) in r.headers.iter().enumerate() {
        bounded(&format!("headers[{j}].name"), &h.name, MAX_VALUE_BYTES.max(DIGEST_BYTES))?;
        if h.name.is_empty() || !is_digest(&h.digest) {
            return Err(format!("headers[{j}]: an empty name or a digest of the wrong form"));
        }
    }
    bounded("toolchain_version", &r.toolchain_version, MAX_NAME_BYTES)?;
    bounded("host", &r.host, MAX_NAME_BYTES)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// kiln-cache's fleet page tells kiln's own records from users' kernels by this prefix.
    #[test]
    fn a_book_is_labelled_as_kilns_own_record() {
        assert!(super::LABEL.starts_with(kiln_proto::envelope::INTERNAL_TOOLCHAIN_PREFIX));
    }
}
