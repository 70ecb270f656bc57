//! Key recipes: the inputs of a kernel key as short values and digests, recorded by the same
//! walk over the fields that derives the key ([`super::KeyInputs::recipe`]). A recipe says
//! *what* went into a key without the bytes (a source or header is a digest), so it is small
//! enough to keep for every kernel and to share through the fleet cache, and two recipes of one
//! kernel can be compared to say why its key changed.

use super::{CacheKey, Fields, tag};
use crate::pb::{KeyRecipe, RecipeHeader};

/// Option and entry values longer than this are recorded as their digest: a recipe stays small
/// whatever a client sends, and a long value is still told apart from another.
pub const MAX_VALUE_BYTES: usize = 200;

/// Prefix of a digest value: `blake3:` and 64 hex characters.
pub const DIGEST_PREFIX: &str = "blake3:";

/// `blake3:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("{DIGEST_PREFIX}{}", blake3::hash(bytes).to_hex())
}

/// Whether `value` has the form [`digest`] writes.
pub fn is_digest(value: &str) -> bool {
    value
        .strip_prefix(DIGEST_PREFIX)
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The value itself when it is short text, else its digest.
fn short(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if bytes.len() <= MAX_VALUE_BYTES && !is_digest(text) => text.to_string(),
        _ => digest(bytes),
    }
}

/// Collects the fields of one key into a [`KeyRecipe`].
#[derive(Default)]
pub(super) struct Recorder(KeyRecipe);

impl Fields for Recorder {
    fn field(&mut self, field: u8, bytes: &[u8]) {
        let r = &mut self.0;
        match field {
            tag::TOOLCHAIN => r.toolchain = String::from_utf8_lossy(bytes).into_owned(),
            tag::FINGERPRINT => r.fingerprint = hex::encode(bytes),
            tag::TARGET => r.target = String::from_utf8_lossy(bytes).into_owned(),
            tag::SOURCE => r.source = digest(bytes),
            tag::OPTION => r.options.push(short(bytes)),
            tag::HEADER_NAME => r.headers.push(RecipeHeader { name: short(bytes), digest: String::new() }),
            tag::HEADER_CONTENT => {
                if let Some(h) = r.headers.last_mut() {
                    h.digest = digest(bytes);
                }
            }
            tag::ENTRY => r.entries.push(short(bytes)),
            // Every field KeyInputs writes is handled above; the recipe test keeps it so.
            _ => {}
        }
    }
}

impl Recorder {
    pub(super) fn finish(self, key: CacheKey) -> KeyRecipe {
        KeyRecipe { key: key.to_hex(), ..self.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Fingerprint, KeyInputs};
    use super::*;

    #[test]
    fn a_recipe_records_every_field_of_its_key() {
        let fp = Fingerprint::from_bytes([7; 32]);
        let target = "sm_90a".parse().unwrap();
        let long = "-D".to_string() + &"X".repeat(300);
        let options = vec!["-O3".to_string(), long.clone()];
        let entries = vec!["saxpy<float>".to_string()];
        let inputs = KeyInputs {
            toolchain: "nvrtc",
            fingerprint: &fp,
            target: &target,
            source: b"src",
            options: &options,
            headers: &[("b.h", b"B"), ("a.h", b"A")],
            entries: &entries,
        };
        let r = inputs.recipe();
        assert_eq!(r.key, inputs.derive().to_hex());
        assert_eq!(r.toolchain, "nvrtc");
        assert_eq!(r.fingerprint, fp.to_hex());
        assert_eq!(r.target, "sm_90a");
        assert_eq!(r.source, digest(b"src"));
        assert_eq!(r.options, vec!["-O3".to_string(), digest(long.as_bytes())], "a long option is a digest");
        let headers: Vec<_> = r.headers.iter().map(|h| (h.name.as_str(), h.digest.clone())).collect();
        assert_eq!(headers, vec![("a.h", digest(b"A")), ("b.h", digest(b"B"))], "sorted, as keyed");
        assert_eq!(r.entries, entries);
        assert!(is_digest(&r.source) && !is_digest("-O3"));
    }

    /// A value that looks like a digest is recorded as the digest of itself, so a client cannot
    /// make an option read as another one's digest.
    #[test]
    fn a_value_shaped_like_a_digest_is_digested() {
        let d = digest(b"x");
        assert_ne!(short(d.as_bytes()), d);
    }
}
