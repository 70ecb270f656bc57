//! Cache keys, schema `kiln-key-v1`.
//!
//! A key is blake3 over a canonical encoding of every input that can change a compile's output.
//! Each field is written as a one-byte tag, a u64 little-endian length and the bytes, in a fixed
//! field order, so the encoding is injective: no two different input sets share a byte string.
//! Protobuf bytes are never hashed, because protobuf encoding is not canonical. Nothing
//! host-specific (paths, hostnames, device index, time) goes in.

use crate::target::Target;
use std::fmt;
use std::str::FromStr;

/// Schema tag of per-kernel keys.
pub const KEY_SCHEMA: &str = "kiln-key-v1";
/// Schema tag of graph-manifest keys.
pub const GRAPH_SCHEMA: &str = "kiln-graph-v1";
/// Schema tag of keys for blobs that integrations bring with their own keys.
pub const BLOB_SCHEMA: &str = "kiln-blob-v1";
/// Schema of a job snapshot's file: content-addressed, shared by every snapshot that holds it.
pub const SNAPSHOT_FILE_SCHEMA: &str = "kiln-snapshot-file-v1";
/// Schema of a job snapshot's manifest.
pub const SNAPSHOT_SCHEMA: &str = "kiln-snapshot-v1";
/// Schema of the list of one job's snapshots, and of the list of jobs (no job field).
pub const SNAPSHOT_INDEX_SCHEMA: &str = "kiln-snapshot-index-v1";
/// Schema of the recipes of one kernel identity's latest keys.
pub const RECIPE_BOOK_SCHEMA: &str = "kiln-recipe-book-v1";
/// Schema of the recipe of one key, which names its identity.
pub const KEY_RECIPE_SCHEMA: &str = "kiln-key-recipe-v1";

/// Field tags, in the order they are written.
mod tag {
    pub const SCHEMA: u8 = 0x01;
    pub const TOOLCHAIN: u8 = 0x02;
    pub const FINGERPRINT: u8 = 0x03;
    pub const TARGET: u8 = 0x04;
    pub const SOURCE: u8 = 0x05;
    pub const OPTION: u8 = 0x06;
    pub const HEADER_NAME: u8 = 0x07;
    pub const HEADER_CONTENT: u8 = 0x08;
    pub const ENTRY: u8 = 0x09;
    pub const KERNEL_ID: u8 = 0x0a;
    pub const KERNEL_KEY: u8 = 0x0b;
    pub const NAMESPACE: u8 = 0x0c;
    pub const TOOL_VERSION: u8 = 0x0d;
    pub const CALLER_KEY: u8 = 0x0e;
    pub const DIGEST: u8 = 0x0f;
    pub const JOB: u8 = 0x10;
    pub const PART_NAME: u8 = 0x11;
    pub const PART_VALUE: u8 = 0x12;
    pub const GRAPH: u8 = 0x13;
    pub const KERNEL_NAME: u8 = 0x14;
}

macro_rules! digest_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; 32]);

        impl $name {
            pub const fn from_bytes(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }
            /// 64 lowercase hex characters.
            /// Lowercase hex. A table lookup per nibble: every answer carries a key as hex, and
            /// the char-by-char encoders cost a measurable share of a warm hit.
            pub fn to_hex(&self) -> String {
                const DIGITS: &[u8; 16] = b"0123456789abcdef";
                let mut out = String::with_capacity(64);
                for b in self.0 {
                    out.push(DIGITS[usize::from(b >> 4)] as char);
                    out.push(DIGITS[usize::from(b & 15)] as char);
                }
                out
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }

        impl FromStr for $name {
            type Err = HexDigestError;
            /// Only 64 lowercase hex characters parse, so a key string is safe as a path piece.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let lower_hex = s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                if !lower_hex {
                    return Err(HexDigestError);
                }
                let mut out = [0u8; 32];
                hex::decode_to_slice(s, &mut out).map_err(|_| HexDigestError)?;
                Ok(Self(out))
            }
        }
    };
}

digest_type!(
    /// The key of one cached artifact.
    CacheKey
);
digest_type!(
    /// A toolchain's identity: its reported version plus a blake3 of the files it actually loads.
    /// Hosts share artifacts only when their fingerprints match.
    Fingerprint
);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("expected 64 lowercase hex characters")]
pub struct HexDigestError;

/// Where a key's fields go: the hasher that makes the key, or a recipe that records them
/// ([`recipe`]). [`KeyInputs::write`] is the one walk over the fields both take, so a recipe
/// cannot drift from the key it describes.
trait Fields {
    fn field(&mut self, tag: u8, bytes: &[u8]);
}

/// Writes tagged, length-prefixed fields into a blake3 hasher.
struct Encoder(blake3::Hasher);

impl Encoder {
    fn new(schema: &str) -> Self {
        let mut e = Encoder(blake3::Hasher::new());
        e.field(tag::SCHEMA, schema.as_bytes());
        e
    }

    fn field(&mut self, tag: u8, bytes: &[u8]) {
        self.0.update(&[tag]);
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    fn finish(self) -> CacheKey {
        CacheKey(*self.0.finalize().as_bytes())
    }
}

/// Everything that goes into one kernel's key.
#[derive(Debug, Clone)]
pub struct KeyInputs<'a> {
    /// `nvrtc`, `ptxas` or `triton`.
    pub toolchain: &'a str,
    pub fingerprint: &'a Fingerprint,
    pub target: &'a Target,
    pub source: &'a [u8],
    /// In the order given: option order can change the output.
    pub options: &'a [String],
    /// `(name, content)`; sorted by name here, since the order a client lists them in does not
    /// change what the preprocessor reads.
    pub headers: &'a [(&'a str, &'a [u8])],
    /// Entry names or name expressions.
    pub entries: &'a [String],
}

impl Fields for Encoder {
    fn field(&mut self, tag: u8, bytes: &[u8]) {
        Encoder::field(self, tag, bytes);
    }
}

impl KeyInputs<'_> {
    pub fn derive(&self) -> CacheKey {
        let mut e = Encoder::new(KEY_SCHEMA);
        self.write(&mut e);
        e.finish()
    }

    /// The key and its recipe: every field as a short value or a digest, for explaining a miss
    /// later. Only a compile asks for one; a hit derives the key alone.
    pub fn recipe(&self) -> crate::pb::KeyRecipe {
        let mut r = recipe::Recorder::default();
        self.write(&mut r);
        r.finish(self.derive())
    }

    /// Every field after the schema, in key order.
    fn write(&self, e: &mut impl Fields) {
        e.field(tag::TOOLCHAIN, self.toolchain.as_bytes());
        e.field(tag::FINGERPRINT, self.fingerprint.as_bytes());
        e.field(tag::TARGET, self.target.to_string().as_bytes());
        e.field(tag::SOURCE, self.source);
        for option in self.options {
            e.field(tag::OPTION, option.as_bytes());
        }
        let mut headers = self.headers.to_vec();
        headers.sort();
        for (name, content) in headers {
            e.field(tag::HEADER_NAME, name.as_bytes());
            e.field(tag::HEADER_CONTENT, content);
        }
        for entry in self.entries {
            e.field(tag::ENTRY, entry.as_bytes());
        }
    }
}

pub mod recipe;

/// The key of a graph manifest: the target and each kernel's id and key, in graph order.
pub fn graph_key<'a>(target: &Target, kernels: impl IntoIterator<Item = (&'a str, &'a CacheKey)>) -> CacheKey {
    let mut e = Encoder::new(GRAPH_SCHEMA);
    e.field(tag::TARGET, target.to_string().as_bytes());
    for (id, key) in kernels {
        e.field(tag::KERNEL_ID, id.as_bytes());
        e.field(tag::KERNEL_KEY, key.as_bytes());
    }
    e.finish()
}

/// The key under which a blob with a caller-chosen key is stored, so that no caller string ever
/// becomes a path or a Redis key.
pub fn blob_key(namespace: &str, tool_version: &str, caller_key: &[u8]) -> CacheKey {
    let mut e = Encoder::new(BLOB_SCHEMA);
    e.field(tag::NAMESPACE, namespace.as_bytes());
    e.field(tag::TOOL_VERSION, tool_version.as_bytes());
    e.field(tag::CALLER_KEY, caller_key);
    e.finish()
}

#[cfg(test)]
mod tests;

/// The key of a snapshot file whose bytes hash (blake3) to `digest`.
pub fn snapshot_file_key(digest: &[u8; 32]) -> CacheKey {
    let mut e = Encoder::new(SNAPSHOT_FILE_SCHEMA);
    e.field(tag::DIGEST, digest);
    e.finish()
}

/// The key of a job's snapshot manifest for one environment: the job and every key part, sorted
/// by name, so the order a client lists them in does not matter.
pub fn snapshot_key<'a>(job: &str, parts: impl IntoIterator<Item = (&'a str, &'a str)>) -> CacheKey {
    let mut parts: Vec<_> = parts.into_iter().collect();
    parts.sort();
    let mut e = Encoder::new(SNAPSHOT_SCHEMA);
    e.field(tag::JOB, job.as_bytes());
    for (name, value) in parts {
        e.field(tag::PART_NAME, name.as_bytes());
        e.field(tag::PART_VALUE, value.as_bytes());
    }
    e.finish()
}

/// The key under which the recipes of one kernel identity's latest keys are kept: the graph's
/// name, the kernel's id and (Triton) its function name.
pub fn recipe_book_key(graph: &str, kernel_id: &str, kernel_name: &str) -> CacheKey {
    let mut e = Encoder::new(RECIPE_BOOK_SCHEMA);
    e.field(tag::GRAPH, graph.as_bytes());
    e.field(tag::KERNEL_ID, kernel_id.as_bytes());
    e.field(tag::KERNEL_NAME, kernel_name.as_bytes());
    e.finish()
}

/// The key under which the recipe of `key` itself is kept, so a key alone can be explained.
pub fn key_recipe_key(key: &CacheKey) -> CacheKey {
    let mut e = Encoder::new(KEY_RECIPE_SCHEMA);
    e.field(tag::KERNEL_KEY, key.as_bytes());
    e.finish()
}

/// The key of the list of `job`'s snapshots, or with `None` of the list of jobs.
pub fn snapshot_index_key(job: Option<&str>) -> CacheKey {
    let mut e = Encoder::new(SNAPSHOT_INDEX_SCHEMA);
    if let Some(job) = job {
        e.field(tag::JOB, job.as_bytes());
    }
    e.finish()
}
