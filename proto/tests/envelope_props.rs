//! Property tests of the artifact envelope, the format every tier reads back from disk, from
//! another host's kiln-cache or from Redis: bytes an attacker or a failing disk may have written.
//! `cargo test` runs a bounded number of cases; `scripts/fuzz` runs many more, and a failure is
//! kept in `proto/proptest-regressions/` and replayed first by every later run.
#![allow(clippy::unwrap_used)]

use kiln_proto::envelope::{self, IntegrityError};
use kiln_proto::pb::ArtifactMeta;
use kiln_proto::{CacheKey, envelope::layout};
use proptest::prelude::*;

#[path = "support/props.rs"]
mod support;
use support::config;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/envelope_props.txt");

/// The payload limit every open uses: small, so a forged `raw_bytes` is refused before allocation.
const MAX_RAW: u64 = 1 << 20;

fn key() -> impl Strategy<Value = CacheKey> {
    any::<[u8; 32]>().prop_map(CacheKey::from_bytes)
}

fn meta() -> impl Strategy<Value = ArtifactMeta> {
    (".{0,40}", ".{0,12}", any::<u64>(), ".{0,200}", any::<u64>()).prop_map(
        |(toolchain, target, compile_micros, log, raw_bytes)| ArtifactMeta {
            toolchain,
            target,
            compile_micros,
            log,
            raw_bytes,
            ..Default::default()
        },
    )
}

/// Payloads both incompressible and highly repetitive (cubins are the latter).
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..4096),
        (prop::collection::vec(any::<u8>(), 1..16), 0usize..2000).prop_map(|(unit, n)| unit.repeat(n)),
    ]
}

fn sealed() -> impl Strategy<Value = (CacheKey, Vec<u8>, Vec<u8>)> {
    (key(), meta(), payload()).prop_map(|(k, m, p)| {
        let env = envelope::seal(&k, m, &p);
        (k, p, env)
    })
}

/// Whatever `open` makes of `bytes`, it must not panic, and what it returns must be consistent.
fn open_is_sound(bytes: &[u8], k: &CacheKey) -> Result<Vec<u8>, IntegrityError> {
    let opened = envelope::open(bytes, k, MAX_RAW)?;
    assert_eq!(opened.bytes.len() as u64, opened.meta.raw_bytes);
    assert!(opened.meta.raw_bytes <= MAX_RAW);
    assert!(envelope::verify(bytes, k).is_ok() && envelope::check_key(bytes, k).is_ok());
    Ok(opened.bytes.to_vec())
}

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// `open(seal(x))` gives back the bytes and metadata, and `verify` and `check_key` agree.
    #[test]
    fn seal_then_open_round_trips(k in key(), m in meta(), p in payload()) {
        let env = envelope::seal(&k, m.clone(), &p);
        let a = envelope::open(&env, &k, MAX_RAW).unwrap();
        prop_assert_eq!(&a.bytes[..], &p[..]);
        prop_assert_eq!(a.meta, ArtifactMeta { raw_bytes: p.len() as u64, ..m });
        prop_assert_eq!(envelope::verify(&env, &k).unwrap().len(), env.len() - 32);
        prop_assert!(envelope::check_key(&env, &k).is_ok());
        let l = layout(&env).unwrap();
        prop_assert!(l.header.end == l.meta.start && l.meta.end + 8 == l.payload.start);
    }

    /// An envelope is only ever opened under the key it was sealed with.
    #[test]
    fn another_key_is_refused((k, _, env) in sealed(), other in key()) {
        prop_assume!(other != k);
        let wrong_key = matches!(envelope::open(&env, &other, MAX_RAW), Err(IntegrityError::WrongKey { .. }));
        prop_assert!(wrong_key);
        prop_assert!(envelope::verify(&env, &other).is_err());
        prop_assert!(envelope::check_key(&env, &other).is_err());
    }

    /// Any single flipped bit, anywhere, is refused by both `open` and `verify`.
    #[test]
    fn any_flipped_bit_is_refused((k, _, env) in sealed(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bad = env.clone();
        bad[at.index(env.len())] ^= 1 << bit;
        prop_assert!(open_is_sound(&bad, &k).is_err());
        prop_assert!(envelope::verify(&bad, &k).is_err());
    }

    /// Any truncation, and any bytes appended, are refused.
    #[test]
    fn truncated_or_extended_is_refused((k, _, env) in sealed(), at in any::<prop::sample::Index>(), tail in prop::collection::vec(any::<u8>(), 1..64)) {
        let cut = &env[..at.index(env.len())];
        prop_assert!(open_is_sound(cut, &k).is_err());
        prop_assert!(envelope::verify(cut, &k).is_err());
        let mut longer = env.clone();
        longer.extend_from_slice(&tail);
        prop_assert!(open_is_sound(&longer, &k).is_err());
    }

    /// Random bytes never panic and never open.
    #[test]
    fn random_bytes_never_open(k in key(), bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(open_is_sound(&bytes, &k).is_err());
        // check_key reads the key field only: it may pass on random bytes, but only where they
        // carry the key.
        if envelope::check_key(&bytes, &k).is_ok() {
            prop_assert_eq!(&bytes[10..42], &k.as_bytes()[..]);
        }
    }

    /// Forged envelopes: a valid magic, version and key and a correct digest over garbage, the
    /// case only a writer of the digest (a faulty kilnd, a hostile peer) can make. The inner
    /// lengths are then all the parser has: lying meta and payload lengths, a huge `raw_bytes`,
    /// a zstd frame that claims more or less than recorded. Nothing panics or allocates past the
    /// limit; whatever opens is consistent.
    #[test]
    fn forged_digests_never_panic(
        k in key(),
        meta_len in prop_oneof![0u32..64, any::<u32>()],
        meta_bytes in prop::collection::vec(any::<u8>(), 0..64),
        m in meta().prop_map(|m| ArtifactMeta { raw_bytes: m.raw_bytes % (2 * MAX_RAW), ..m }),
        payload_len in prop_oneof![0u64..256, any::<u64>()],
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            prop::collection::vec(any::<u8>(), 0..2048).prop_map(|d| zstd::bulk::compress(&d, 1).unwrap()),
        ],
        honest_meta in any::<bool>(),
        honest_payload_len in any::<bool>(),
    ) {
        let mut env = b"KILNART\0".to_vec();
        env.extend_from_slice(&1u16.to_le_bytes());
        env.extend_from_slice(k.as_bytes());
        let meta_bytes = if honest_meta { prost::Message::encode_to_vec(&m) } else { meta_bytes };
        let meta_len = if honest_meta { meta_bytes.len() as u32 } else { meta_len };
        env.extend_from_slice(&meta_len.to_le_bytes());
        env.extend_from_slice(&meta_bytes);
        let payload_len = if honest_payload_len { body.len() as u64 } else { payload_len };
        env.extend_from_slice(&payload_len.to_le_bytes());
        env.extend_from_slice(&body);
        let digest = blake3::hash(&env);
        env.extend_from_slice(digest.as_bytes());
        let _ = open_is_sound(&env, &k);
        prop_assert!(envelope::verify(&env, &k).is_ok());
    }
}
