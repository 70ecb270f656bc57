//! The artifact envelope: the one format every tier stores and every tier verifies on read.
//!
//! ```text
//! magic "KILNART\0" | version u16 LE | key [32] | meta_len u32 LE | ArtifactMeta (protobuf)
//!   | payload_len u64 LE | zstd payload | blake3 [32] over every byte before it
//! ```
//!
//! The digest covers header, metadata and payload, and the envelope carries its own key, so a
//! flipped byte anywhere and a valid envelope stored under the wrong key are both caught. The
//! metadata is protobuf, which is fine here: it is verified by the digest, not hashed into a key.

use crate::key::CacheKey;
use crate::pb::ArtifactMeta;
use prost::Message;

const MAGIC: &[u8; 8] = b"KILNART\0";
const VERSION: u16 = 1;
const DIGEST_LEN: usize = 32;
/// magic + version + key + meta_len.
const FIXED_HEAD: usize = 8 + 2 + 32 + 4;

/// Why an envelope was refused. Every variant means: evict, count, refetch or recompile.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IntegrityError {
    #[error("envelope truncated")]
    Truncated,
    #[error("bad magic")]
    BadMagic,
    #[error("unsupported envelope version {0}")]
    Version(u16),
    #[error("digest mismatch")]
    Digest,
    #[error("envelope holds key {found}, expected {expected}")]
    WrongKey { expected: CacheKey, found: CacheKey },
    #[error("metadata does not decode")]
    Meta,
    #[error("payload does not decompress to its recorded size")]
    Payload,
    #[error("payload of {0} bytes exceeds the limit")]
    TooLarge(u64),
}

/// A verified artifact: metadata and the raw (decompressed) bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub meta: ArtifactMeta,
    /// Shared, not copied, by every answer that serves it.
    pub bytes: bytes::Bytes,
}

/// Frames `bytes` under `key`. The payload is zstd-compressed: cubins compress about 3-5x.
pub fn seal(key: &CacheKey, mut meta: ArtifactMeta, bytes: &[u8]) -> Vec<u8> {
    meta.raw_bytes = bytes.len() as u64;
    let meta_bytes = meta.encode_to_vec();
    // Level 3 is zstd's default: compresses a cubin in well under a millisecond.
    let payload = compress(bytes);
    let mut out = Vec::with_capacity(FIXED_HEAD + meta_bytes.len() + 8 + payload.len() + DIGEST_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta_bytes);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    let digest = blake3::hash(&out);
    out.extend_from_slice(digest.as_bytes());
    out
}

thread_local! {
    /// One zstd compression context per thread, at level 3 (zstd's default): making a context
    /// costs about as much as compressing a cubin.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Compresses with the thread's context; falls back to a one-off context if it cannot be had.
fn compress(bytes: &[u8]) -> Vec<u8> {
    let reused = COMPRESSOR.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = zstd::bulk::Compressor::new(3).ok();
        }
        slot.as_mut()?.compress(bytes).ok()
    });
    // In-memory compression fails only when allocation fails, which aborts anyway.
    reused.or_else(|| zstd::bulk::compress(bytes, 3).ok()).unwrap_or_default()
}

thread_local! {
    /// One zstd decompression context per thread: creating a context costs more than
    /// decompressing a typical cubin, and every cache hit decompresses one.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn decompress(payload: &[u8], capacity: usize) -> Option<Vec<u8>> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = zstd::bulk::Decompressor::new().ok();
        }
        slot.as_mut()?.decompress(payload, capacity).ok()
    })
}

/// The start of the toolchain an envelope names when it holds kiln's own records (a recipe
/// book, `kiln/recipe-book`) rather than a kernel or a named blob (`blob/<namespace>`): status
/// pages show these apart from the classes users compile.
pub const INTERNAL_TOOLCHAIN_PREFIX: &str = "kiln/";

/// The blob namespace (`blob/snapshot`) of a job's snapshot manifests, which kilnd rewrites
/// under their key with every save. Snapshot files are not among kilnd's changing records: their
/// key is their content.
pub const SNAPSHOT_MANIFEST_NAMESPACE: &str = "snapshot";
/// The blob namespace (`blob/snapshot-index`) of the listings of snapshots, which kilnd
/// rewrites under their key with every save.
pub const SNAPSHOT_INDEX_NAMESPACE: &str = "snapshot-index";

/// What the status page needs of an envelope: its toolchain (`blob/<namespace>` for a blob) and
/// what it cost to compile. Read from the metadata in place, without the digest or the payload
/// (kiln-cache counts every hit it serves, and the artifact was verified when it was stored).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Summary {
    #[prost(string, tag = "1")]
    pub toolchain: String,
    #[prost(uint64, tag = "3")]
    pub compile_micros: u64,
}

/// The [`Summary`] of an envelope's metadata, or `None` when the frame is not an envelope's.
/// Decoding skips the fields it does not name (logs, PTX), so it allocates only the toolchain.
pub fn summary(envelope: &[u8]) -> Option<Summary> {
    if envelope.get(..8)? != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(envelope.get(FIXED_HEAD - 4..FIXED_HEAD)?.try_into().ok()?) as usize;
    let meta = envelope.get(FIXED_HEAD..FIXED_HEAD.checked_add(len)?)?;
    Summary::decode(meta).ok()
}

/// Checks an envelope's frame, digest and key without unpacking it; returns the part the digest
/// covers. Enough for a tier that already holds the unpacked artifact beside its envelope.
pub fn verify<'a>(envelope: &'a [u8], expected: &CacheKey) -> Result<&'a [u8], IntegrityError> {
    if envelope.len() < FIXED_HEAD + 8 + DIGEST_LEN {
        return Err(IntegrityError::Truncated);
    }
    let (body, digest) = envelope.split_at(envelope.len() - DIGEST_LEN);
    if &body[..8] != MAGIC {
        return Err(IntegrityError::BadMagic);
    }
    let version = u16::from_le_bytes([body[8], body[9]]);
    if version != VERSION {
        return Err(IntegrityError::Version(version));
    }
    if blake3::hash(body).as_bytes() != digest {
        return Err(IntegrityError::Digest);
    }
    check_key(envelope, expected)?;
    Ok(body)
}

/// Checks that an envelope is filed under `expected` (magic, version and the key it records)
/// without hashing it: for envelopes verified whole when they entered this process and read back
/// from its memory, where the failure to guard against is an entry under the wrong key.
pub fn check_key(envelope: &[u8], expected: &CacheKey) -> Result<(), IntegrityError> {
    if envelope.len() < FIXED_HEAD + 8 + DIGEST_LEN {
        return Err(IntegrityError::Truncated);
    }
    if &envelope[..8] != MAGIC {
        return Err(IntegrityError::BadMagic);
    }
    let version = u16::from_le_bytes([envelope[8], envelope[9]]);
    if version != VERSION {
        return Err(IntegrityError::Version(version));
    }
    let mut found = [0u8; 32];
    found.copy_from_slice(&envelope[10..42]);
    let found = CacheKey::from_bytes(found);
    if &found != expected {
        return Err(IntegrityError::WrongKey { expected: *expected, found });
    }
    Ok(())
}

/// Verifies and unpacks an envelope that must hold `expected`, refusing a payload larger than
/// `max_raw_bytes` before allocating it.
pub fn open(envelope: &[u8], expected: &CacheKey, max_raw_bytes: u64) -> Result<Artifact, IntegrityError> {
    let body = verify(envelope, expected)?;
    let meta_len = u32::from_le_bytes(body[42..46].try_into().map_err(|_| IntegrityError::Truncated)?) as usize;
    let rest = &body[FIXED_HEAD..];
    if rest.len() < meta_len + 8 {
        return Err(IntegrityError::Truncated);
    }
    let meta = ArtifactMeta::decode(&rest[..meta_len]).map_err(|_| IntegrityError::Meta)?;
    let payload_len =
        u64::from_le_bytes(rest[meta_len..meta_len + 8].try_into().map_err(|_| IntegrityError::Truncated)?);
    let payload = &rest[meta_len + 8..];
    if payload.len() as u64 != payload_len {
        return Err(IntegrityError::Truncated);
    }
    if meta.raw_bytes > max_raw_bytes {
        return Err(IntegrityError::TooLarge(meta.raw_bytes));
    }
    let bytes = decompress(payload, meta.raw_bytes as usize).ok_or(IntegrityError::Payload)?;
    if bytes.len() as u64 != meta.raw_bytes {
        return Err(IntegrityError::Payload);
    }
    Ok(Artifact { meta, bytes: bytes.into() })
}

/// Byte ranges of an envelope's parts, for tests that corrupt one part at a time.
#[derive(Debug, Clone)]
pub struct Layout {
    pub header: std::ops::Range<usize>,
    pub meta: std::ops::Range<usize>,
    pub payload: std::ops::Range<usize>,
}

/// Where the parts of a well-formed envelope lie; `None` if it is too short to say.
pub fn layout(envelope: &[u8]) -> Option<Layout> {
    let meta_len = u32::from_le_bytes(envelope.get(42..46)?.try_into().ok()?) as usize;
    let meta = FIXED_HEAD..FIXED_HEAD + meta_len;
    let payload_start = meta.end + 8;
    let payload_end = envelope.len().checked_sub(DIGEST_LEN)?;
    (payload_start <= payload_end).then_some(Layout {
        header: 0..FIXED_HEAD,
        meta,
        payload: payload_start..payload_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> CacheKey {
        CacheKey::from_bytes([b; 32])
    }

    fn sample() -> Vec<u8> {
        let meta =
            ArtifactMeta { toolchain: "nvrtc".into(), target: "sm_90".into(), log: "ok".into(), ..Default::default() };
        seal(&key(1), meta, &b"cubin bytes ".repeat(100))
    }

    #[test]
    fn round_trips() {
        let a = open(&sample(), &key(1), 1 << 20).unwrap();
        assert_eq!(a.bytes, b"cubin bytes ".repeat(100));
        assert_eq!(a.meta.toolchain, "nvrtc");
        assert_eq!(a.meta.raw_bytes, 1200);
    }

    #[test]
    fn any_flipped_byte_is_refused() {
        let env = sample();
        for i in 0..env.len() {
            let mut bad = env.clone();
            bad[i] ^= 0x40;
            assert!(open(&bad, &key(1), 1 << 20).is_err(), "flip at byte {i} was accepted");
        }
    }

    #[test]
    fn wrong_key_and_truncation_are_refused() {
        let env = sample();
        assert!(matches!(open(&env, &key(2), 1 << 20), Err(IntegrityError::WrongKey { .. })));
        for cut in [0, 10, 50, env.len() - 1] {
            assert!(open(&env[..cut], &key(1), 1 << 20).is_err());
        }
        assert_eq!(open(&env, &key(1), 10), Err(IntegrityError::TooLarge(1200)));
    }

    #[test]
    fn layout_names_the_parts() {
        let env = sample();
        let l = layout(&env).unwrap();
        assert_eq!(&env[l.header.start..8], MAGIC);
        assert!(l.meta.end < l.payload.start && l.payload.end == env.len() - DIGEST_LEN);
    }

    #[test]
    fn summary_reads_toolchain_and_compile_time_only() {
        let key = CacheKey::from_bytes([9; 32]);
        let meta = ArtifactMeta {
            toolchain: "nvrtc".into(),
            compile_micros: 1234,
            log: "long log".into(),
            ptx: "ptx".into(),
            ..Default::default()
        };
        let sealed = seal(&key, meta, b"cubin");
        assert_eq!(summary(&sealed), Some(Summary { toolchain: "nvrtc".into(), compile_micros: 1234 }));
        assert_eq!(summary(b"not an envelope"), None);
        assert_eq!(summary(&sealed[..FIXED_HEAD + 2]), None);
    }
}
